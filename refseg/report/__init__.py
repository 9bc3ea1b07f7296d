"""refseg's HTML pages and the demo's summary: the claim chart of a demo or run folder
(:mod:`refseg.report.chart`, read by :mod:`refseg.report.folder`, what ran shown by
:mod:`refseg.report.claim1_evidence` and :mod:`refseg.report.sections`), the results against
the patent that both the chart and the demo's ``index.md`` show (:mod:`refseg.report.results`),
the shared pieces (:mod:`refseg.report.html`, the stylesheet ``style.css`` and the embedded CJK
font) and the claim-1 walkthrough of one's own image (:mod:`refseg.report.walkthrough`)."""
