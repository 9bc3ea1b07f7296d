"""Edge-case images of the golden bundle: small images drawn for the purpose, each exercising
a rule of claim 1 that photographs rarely put to the test (as test-vector suites ship edge
cases beside their ordinary vectors).

Each image is drawn from integers alone (no randomness), gray (R = G = B) unless its note
says otherwise, and comes with a note of what it exercises (:data:`NOTES`, in the manifest's
``inputs``).

References: claim 1; [0077]-[0119]; spec ``readings.md`` (R-binary, R-canny, R-log, R-empty,
R-gray, R-border).
"""
from __future__ import annotations

import numpy as np

INFRASTRUCTURE = "golden files: the bundle's edge-case images"

#: What each edge-case image exercises, by name (in the bundle's order).
NOTES = {
    "edge-ties": "exact gradient ties: a 3-pixel bright stripe and a 3-pixel dark stripe "
                 "on a flat ground, symmetric, so that the two neighbours of a pixel across "
                 "the suppression direction have the same true magnitude (and every pixel "
                 "along a stripe the same as its neighbours along it); refseg's rounding "
                 "decides Canny's non-maximum suppression there",
    "few-levels": "three grey levels (0, 100, 200) in flat blocks: the Sobel and Prewitt "
                  "magnitudes take a few values that sit on the Otsu histogram's bin edges, "
                  "where the manifest's binning rule (truncation of (v - min) * bins / "
                  "(max - min)) and np.histogram's differ",
    "log-zeros": "three flat vertical bands 0, 100, 200, five columns each: in the middle of "
                 "the 100 band the LoG response is exactly 0 between a negative and a "
                 "positive neighbour, so the zero-crossing rule for an exact 0 decides the "
                 "LoG edge there",
    "flat": "one grey level: every response 0, every edge map empty, the weights 1/4 each "
            "(R-empty) and an empty feature map",
    "lines": "one-pixel lines (a bright row, a dark column and a bright diagonal) on a flat "
             "ground: responses on both sides of a line, ridges for non-maximum suppression, "
             "crossings of the LoG on both sides",
    "tiny": "the smallest image claim 1 takes, 3 x 3: every pixel is on the border, so the "
            "border rule (reflect-101) shapes every response",
    "saturated": "saturated colour blocks (pure red, green, blue, yellow, white, black): the "
                 "gray weights at the ends of the range, gray values that are not integers, "
                 "and edges between blocks of equal gray but different colour",
    "tall": "a non-square image with more rows than columns (21 x 6) and a diagonal step: a "
            "transposed implementation fails on its shape",
}


def _gray(g) -> np.ndarray:
    return np.repeat(np.asarray(g, dtype=np.uint8)[:, :, None], 3, axis=2)


def _ties():
    g = np.full((24, 24), 100, np.uint8)
    g[:, 6:9] = 200
    g[15:18, :] = 0
    return _gray(g)


def _few_levels():
    g = np.zeros((20, 13), np.uint8)
    g[2:11, 4:10] = 200
    g[14:, 7:] = 100
    return _gray(g)


def _log_zeros():
    profile = [0] * 5 + [100] * 5 + [200] * 5
    return _gray(np.tile(np.array(profile, np.uint8), (12, 1)))


def _flat():
    return _gray(np.full((8, 10), 128, np.uint8))


def _lines():
    g = np.full((16, 18), 128, np.uint8)
    g[4, :] = 255
    g[:, 11] = 0
    idx = np.arange(16)
    g[idx, idx] = 255
    return _gray(g)


def _tiny():
    return _gray([[0, 100, 200], [50, 150, 250], [10, 90, 30]])


def _saturated():
    colours = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0), (255, 255, 255),
               (0, 0, 0)]
    rgb = np.zeros((12, 18, 3), np.uint8)
    for k, colour in enumerate(colours):
        r, c = divmod(k, 3)
        rgb[6 * r:6 * r + 6, 6 * c:6 * c + 6] = colour
    return rgb


def _tall():
    rows, cols = np.mgrid[0:21, 0:6]
    return _gray(np.where(rows > 3 * cols, 180, 60))


_DRAW = {"edge-ties": _ties, "few-levels": _few_levels, "log-zeros": _log_zeros,
         "flat": _flat, "lines": _lines, "tiny": _tiny, "saturated": _saturated,
         "tall": _tall}


def edge_case_images() -> tuple[dict, dict]:
    """The edge-case images {name: (rows, cols, 3) uint8} and their provenance (the note of
    what each exercises, the function that draws it, its shape)."""
    images = {name: draw() for name, draw in _DRAW.items()}
    provenance = {name: {"source": f"{__name__}.edge_case_images", "exercises": NOTES[name],
                         "shape": list(rgb.shape[:2]),
                         "license": "synthetic, drawn by refseg"}
                  for name, rgb in images.items()}
    return images, provenance
