"""The synthetic weld generator: determinism, size, label colours ([0202], [0263])."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refseg.errors import InputError
from refseg.data.labels import CONTOUR, INSIDE, LABEL_COLOURS, OUTSIDE
from refseg.data.synthetic import WELD_SHAPE, weld_image

pytestmark = pytest.mark.claim("claim1.step1.acquire")


@settings(max_examples=10)
@given(st.integers(0, 2**32 - 1))
def test_same_seed_same_image(seed):
    a, b = weld_image(seed), weld_image(seed)
    assert np.array_equal(a.rgb, b.rgb) and np.array_equal(a.classes, b.classes)


def test_size_colours_and_classes():
    sample = weld_image(1)
    assert sample.rgb.shape == (*WELD_SHAPE, 3) and sample.rgb.dtype == np.uint8
    assert set(np.unique(sample.classes)) == {CONTOUR, INSIDE, OUTSIDE}
    colours = {tuple(c) for c in sample.label_rgb.reshape(-1, 3)}
    assert colours == {(255, 0, 0), (0, 255, 0), (0, 0, 255)}
    assert LABEL_COLOURS[CONTOUR].tolist() == [255, 0, 0]
    # every column crosses the seam: outside, contour, inside, contour, outside
    for col in (0, 275, 549):
        runs = [k for i, k in enumerate(sample.classes[:, col]) if i == 0 or k != sample.classes[i - 1, col]]
        assert runs == [OUTSIDE, CONTOUR, INSIDE, CONTOUR, OUTSIDE]


def test_different_seeds_differ():
    assert not np.array_equal(weld_image(1).rgb, weld_image(2).rgb)


def test_too_small_is_refused():
    with pytest.raises(InputError, match="32x32"):
        weld_image(0, shape=(10, 100))
