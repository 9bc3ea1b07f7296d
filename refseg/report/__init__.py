"""refseg's HTML pages: the shared pieces (:mod:`refseg.report.html`, the stylesheet and the
embedded CJK font) and the claim-1 walkthrough of one's own image
(:mod:`refseg.report.walkthrough`)."""
