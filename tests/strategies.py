"""Shared hypothesis strategies: bounded finite images, including the edge shapes."""
import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from refseg.operators import OPERATORS

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
