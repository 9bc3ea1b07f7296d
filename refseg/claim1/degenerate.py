"""Automatic thresholds that degenerate: they mark most of the image, or nothing.

Otsu's rule (R-binary) splits the histogram of an operator's response in two. On an image
without distinct edges, a smooth 16-bit ramp say, the response has no two populations and the
split falls anywhere: Sobel and Prewitt then mark nearly every pixel, Canny's thinning leaves a
hatch across the whole image, and the weights of claim 1 are formed from maps that say little
about edges. Nothing in the numbers is wrong, so nothing fails; this module says so instead, in
the ``warnings`` of ``refseg edges``' ``report.json``, on the walkthrough page and as
:attr:`refseg.claim1.features.FeatureResult.warnings`.

The rule: an automatic threshold *degenerates* when the pixels it marks are more than
:data:`DEGENERATE_SHARE` (one half) of the image's pixels, or none of them. The pixels a
threshold marks are its operator's edge pixels, except for Canny: its thinned map marks about
half of the pixels at most however low its threshold falls (a quarter on a smooth ramp), so
Canny's low threshold counts the pixels whose Sobel magnitude exceeds it. Those are Sobel's
edge pixels when the two thresholds are equal, as they are when both are automatic (Canny's low
threshold is Otsu's threshold of the Sobel magnitude, Sobel's own); otherwise Canny's own map
stands in. A threshold given by hand is the caller's choice and is not judged.

References: [0082]-[0083]; spec ``R-binary``, ``R-canny``, ``R-empty``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from refseg.claim1.operators import OPERATOR_NAMES, OPERATORS

INFRASTRUCTURE = "warnings about degenerate automatic thresholds"

#: An automatic threshold marking more than this share of the pixels (or none) degenerates.
DEGENERATE_SHARE = 0.5


@dataclass(frozen=True)
class DegenerateThreshold:
    """One operator's automatic threshold that degenerated on an image.

    Attributes
    ----------
    operator : str
        A key of :data:`OPERATORS`.
    marked : int
        The pixels the threshold marks (see the module: Sobel's for Canny's low threshold
        when the two are equal).
    pixels : int
        The image's pixels.
    counted : str
        Whose pixels ``marked`` counts: the operator's own map (always when it is empty), or
        "sobel" for Canny's low threshold.
    """

    operator: str
    marked: int
    pixels: int
    counted: str

    @property
    def share(self) -> float:
        """``marked / pixels``."""
        return self.marked / self.pixels

    @property
    def text(self) -> str:
        """The warning in one sentence."""
        name = OPERATOR_NAMES[self.operator]
        if self.marked == 0:
            return (f"{name}'s automatic threshold marks no pixel: its map is empty and its "
                    "weight 0, so the vote is left to the other operators")
        whose = ("the pixels whose Sobel magnitude exceeds its low threshold (Otsu's, as "
                 "Sobel's own is)" if self.operator != self.counted else "its edge pixels")
        return (f"{name}'s automatic threshold degenerates: {whose} are {self.share:.1%} of "
                f"the image, more than {DEGENERATE_SHARE:.0%}; Otsu's rule found no edges to "
                "set apart (a smooth gradient?), and the map says little about edges")

    def as_dict(self) -> dict:
        """JSON-ready, the text included."""
        return {"operator": self.operator, "marked": self.marked, "pixels": self.pixels,
                "share": self.share, "counted": self.counted, "text": self.text}


def degenerate_thresholds(result) -> tuple[DegenerateThreshold, ...]:
    """The automatic thresholds of an extraction that degenerated (see the module), in
    :data:`OPERATORS` order; () when none did.

    Parameters
    ----------
    result : FeatureResult
        From :func:`refseg.claim1.features.extract` (either ``keep``: only the edge maps,
        the thresholds and the rules' ``automatic`` flags are read).

    Returns
    -------
    tuple of DegenerateThreshold

    Examples
    --------
    A smooth horizontal ramp: Sobel and Prewitt mark every column but the two borders', and
    Canny's low threshold is Sobel's; LoG finds no zero crossing at all:

    >>> import numpy as np
    >>> from refseg.claim1.features import extract
    >>> from refseg.claim1.degenerate import degenerate_thresholds
    >>> ramp = np.tile(np.linspace(0.0, 255.0, 40), (30, 1))
    >>> [(d.operator, round(d.share, 2)) for d in degenerate_thresholds(extract(ramp))]
    [('canny', 0.95), ('sobel', 0.95), ('prewitt', 0.95), ('log', 0.0)]
    """
    rules = result.params["threshold_rules"]
    pixels = int(result.feature_map.size)
    found = []
    for op in OPERATORS:
        if not rules[op]["automatic"]:
            continue
        counted = op
        if int(np.count_nonzero(result.edges[op])) and op == "canny" and \
                result.thresholds["canny"]["low"] == result.thresholds["sobel"]["magnitude"]:
            counted = "sobel"
        marked = int(np.count_nonzero(result.edges[counted]))
        if marked == 0 or marked > DEGENERATE_SHARE * pixels:
            found.append(DegenerateThreshold(op, marked, pixels, counted))
    return tuple(found)
