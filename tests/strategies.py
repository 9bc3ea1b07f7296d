"""Shared hypothesis strategies: bounded finite images, including the edge shapes; and the
eight symmetries of the square that image properties are tested under."""
import itertools

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from refseg.claim1.operators import OPERATORS

#: The eight symmetries of the square as (transpose, flip rows, flip columns), applied in
#: that order.
SYMMETRIES = list(itertools.product((False, True), repeat=3))


def transformed(image, symmetry):
    """``image`` transposed, then its rows reversed, then its columns, as ``symmetry`` says."""
    transpose, flip_rows, flip_cols = symmetry
    a = image.T if transpose else image
    a = a[::-1] if flip_rows else a
    return np.ascontiguousarray(a[:, ::-1] if flip_cols else a)


#: Image sides drawn by the strategies: the 3x3 minimum and a few odd and even sizes.
SIDES = st.integers(min_value=3, max_value=24)


@st.composite
def rgb_images(draw, min_side=3, max_side=24):
    """uint8 RGB images of shape (M, N, 3)."""
    shape = (draw(st.integers(min_side, max_side)), draw(st.integers(min_side, max_side)), 3)
    return draw(hnp.arrays(np.uint8, shape, elements=st.integers(0, 255)))


@st.composite
def gray_images(draw, min_side=3, max_side=24, smooth=False):
    """float64 gray images on the 0-255 scale: random, piecewise constant, or constant."""
    rows, cols = draw(st.integers(min_side, max_side)), draw(st.integers(min_side, max_side))
    kind = draw(st.sampled_from(["random", "blocks", "constant"]))
    if kind == "constant":
        return np.full((rows, cols), draw(st.floats(0, 255)))
    if kind == "blocks":
        levels = draw(hnp.arrays(np.float64, (2, 2), elements=st.floats(0, 255)))
        r = draw(st.integers(1, rows)); c = draw(st.integers(1, cols))
        img = np.empty((rows, cols))
        img[:r, :c], img[:r, c:], img[r:, :c], img[r:, c:] = levels.ravel()
        return img
    return draw(hnp.arrays(np.float64, (rows, cols), elements=st.floats(0, 255)))


@st.composite
def edge_maps(draw, min_side=1, max_side=16, binary=True):
    """A dict of four same-shape edge images keyed by operator (binary uint8 or >= 0 float)."""
    shape = (draw(st.integers(min_side, max_side)), draw(st.integers(min_side, max_side)))
    if binary:
        elements = st.integers(0, 1)
        return {k: draw(hnp.arrays(np.uint8, shape, elements=elements)) for k in OPERATORS}
    elements = st.floats(0, 255)
    return {k: draw(hnp.arrays(np.float64, shape, elements=elements)) for k in OPERATORS}


def positive_weights():
    """Operator weights: non-negative, summing to 1."""
    return st.lists(st.floats(0, 1), min_size=4, max_size=4).filter(lambda w: sum(w) > 1e-6) \
        .map(lambda w: {k: v / sum(w) for k, v in zip(OPERATORS, w)})


def _class_map(draw, shape, classes, dtype):
    """One class map of ``shape``: random per pixel, horizontal bands (as the weld images:
    outside, contour, inside, ...), or one class."""
    kind = draw(st.sampled_from(["random", "bands", "constant"]))
    if kind == "constant":
        return np.full(shape, draw(st.integers(0, classes - 1)), dtype=dtype)
    if kind == "bands":
        rows = shape[-2]
        cuts = sorted(draw(st.lists(st.integers(0, rows), max_size=4)))
        values = draw(st.lists(st.integers(0, classes - 1), min_size=len(cuts) + 1,
                               max_size=len(cuts) + 1))
        row_class = np.repeat(values, np.diff([0, *cuts, rows]))
        return np.broadcast_to(row_class[:, None], shape).astype(dtype)
    return draw(hnp.arrays(dtype, shape, elements=st.integers(0, classes - 1)))


@st.composite
def class_map_pairs(draw, min_side=1, max_side=12, classes=3, batch=0):
    """(true, predicted): integer class maps of the same shape (*lead, H, W), values in
    0..classes-1, where ``lead`` is up to ``batch`` axes of length 1-3. The prediction is drawn
    on its own or is the truth with some pixels changed."""
    lead = tuple(draw(st.lists(st.integers(1, 3), max_size=batch)))
    shape = lead + (draw(st.integers(min_side, max_side)), draw(st.integers(min_side, max_side)))
    dtype = draw(st.sampled_from([np.uint8, np.int32, np.int64]))
    true = _class_map(draw, shape, classes, dtype)
    if draw(st.booleans()):
        return true, _class_map(draw, shape, classes, dtype)
    flips = draw(hnp.arrays(np.bool_, shape))
    other = draw(hnp.arrays(dtype, shape, elements=st.integers(0, classes - 1)))
    return true, np.where(flips, other, true)


#: The label colours of [0263] (contour, inside, outside), as tuples.
LABEL_PALETTE = ((255, 0, 0), (0, 255, 0), (0, 0, 255))


@st.composite
def label_maps(draw, min_side=1, max_side=12):
    """uint8 class maps (H, W) of a data set label: 0 contour, 1 inside, 2 outside; random,
    banded like a weld, or one class."""
    shape = (draw(st.integers(min_side, max_side)), draw(st.integers(min_side, max_side)))
    return _class_map(draw, shape, 3, np.uint8)


def off_palette_colours():
    """RGB colours that are not one of the three label colours, biased towards near misses
    (one channel off by a little, as an antialiasing brush or a lossy save leaves them)."""
    near = st.tuples(st.sampled_from(LABEL_PALETTE), st.integers(0, 2),
                     st.integers(-3, 3).filter(bool)) \
        .map(lambda t: tuple(min(max(v + (t[2] if i == t[1] else 0), 0), 255)
                             for i, v in enumerate(t[0])))
    anything = st.tuples(st.integers(0, 255), st.integers(0, 255), st.integers(0, 255))
    return st.one_of(near, anything).filter(lambda c: c not in LABEL_PALETTE)


@st.composite
def dyadic_images(draw, min_side=3, max_side=16):
    """float64 gray images whose values are multiples of 1/64 in [0, 255]: adding an integer
    to them, and every difference of two of them, is exact in float64."""
    shape = (draw(st.integers(min_side, max_side)), draw(st.integers(min_side, max_side)))
    steps = draw(hnp.arrays(np.int64, shape, elements=st.integers(0, 255 * 64)))
    return steps / 64.0


@st.composite
def untied_images(draw, min_side=3, max_side=24):
    """float64 gray images of independent uniform values in [0, 255) from a drawn seed: no two
    gradient magnitudes are equal, so no tie rule is ever consulted."""
    shape = (draw(st.integers(min_side, max_side)), draw(st.integers(min_side, max_side)))
    return np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1))).random(shape) * 255.0


@st.composite
def disk_images(draw, min_radius=2.5, max_radius=9.0):
    """(image, disk): a disk of two gray levels at least 1 apart, its centre anywhere that
    keeps 3 pixels of background between it and the border; ``disk`` is the bool mask of the
    pixels whose centre lies within the radius."""
    r = draw(st.floats(min_radius, max_radius))
    rows, cols = (draw(st.integers(int(2 * r) + 8, 32)) for _ in range(2))
    cy = draw(st.floats(r + 3, rows - r - 4))
    cx = draw(st.floats(r + 3, cols - r - 4))
    inside, outside = draw(st.floats(0, 255)), draw(st.floats(0, 255))
    if abs(inside - outside) < 1:
        inside = outside + 1 if outside < 128 else outside - 1
    yy, xx = np.mgrid[:rows, :cols]
    disk = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
    return np.where(disk, inside, outside), disk
