"""Properties of the four edge operators and their automatic thresholds ([0082]-[0083])."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from refseg.claim1 import operators as ops
from refseg.errors import InputError
from strategies import gray_images

OPERATOR_FUNCTIONS = {
    "canny": ops.canny, "sobel": ops.sobel, "prewitt": ops.prewitt,
    "log": ops.laplacian_of_gaussian,
}


def step_image(rows=12, cols=12, at=6, low=10.0, high=200.0, vertical=True):
    img = np.full((rows, cols), low)
    if vertical:
        img[:, at:] = high
    else:
        img[at:, :] = high
    return img


@pytest.mark.claim("claim1.step2.edges.canny", "claim1.step2.edges.sobel",
                   "claim1.step2.edges.prewitt", "claim1.step2.edges.log")
@pytest.mark.parametrize("name", sorted(OPERATOR_FUNCTIONS))
@given(img=gray_images())
def test_edges_are_binary_and_shaped_like_the_input(name, img):
    result = OPERATOR_FUNCTIONS[name](img)
    assert result.edges.shape == img.shape and set(np.unique(result.edges)) <= {0, 1}
    assert result.response.shape == img.shape and np.isfinite(result.response).all()
    assert result.automatic and all(np.isfinite(v) and v >= 0 for v in result.thresholds.values())


@pytest.mark.claim("claim1.step2.edges.sobel", "claim1.step2.edges.prewitt")
@pytest.mark.parametrize("name", ["sobel", "prewitt"])
@given(img=gray_images(), t=st.floats(0, 500))
def test_gradient_edges_are_the_magnitude_above_threshold(name, img, t):
    result = OPERATOR_FUNCTIONS[name](img, t)
    assert np.array_equal(result.edges, (result.response > t).astype(np.uint8))
    assert result.thresholds == {"magnitude": t} and not result.automatic


@pytest.mark.claim("claim1.step2.edges.sobel", "claim1.step2.edges.prewitt")
def test_sobel_known_answer_on_a_step():
    """A vertical step 10 -> 200 gives |gx| = 4 * 190 (Sobel) or 3 * 190 (Prewitt) beside it."""
    img = step_image()
    assert ops.sobel(img).response[5, 5] == pytest.approx(760)
    assert ops.prewitt(img).response[5, 5] == pytest.approx(570)
    assert ops.sobel(img).edges[:, 5:7].all() and not ops.sobel(img).edges[:, :4].any()


@pytest.mark.claim("claim1.step2.edges.sobel", "claim1.step2.edges.prewitt")
@pytest.mark.parametrize("vertical", [True, False])
def test_directional_gradients_known_answer_on_a_step(vertical):
    """A step 10 -> 200 rising rightwards (downwards) gives gx (gy) = 4 * 190 (Sobel) or
    3 * 190 (Prewitt) on the two columns (rows) beside it, the other component exactly 0."""
    img = step_image(vertical=vertical)
    for function, weight in ((ops.sobel_gradient, 4), (ops.prewitt_gradient, 3)):
        gx, gy = function(img)
        along, across = (gx, gy) if vertical else (gy.T, gx.T)
        expected = np.zeros(img.shape)
        expected[:, 5:7] = weight * 190.0
        assert np.array_equal(along, expected) and not across.any()


@pytest.mark.claim("claim1.step2.edges.canny")
@pytest.mark.parametrize("vertical", [True, False])
def test_canny_marks_a_step_with_a_one_pixel_line(vertical):
    img = step_image(vertical=vertical)
    edges = ops.canny(img).edges
    line = edges[:, 5] if vertical else edges[5, :]
    assert line.all() and edges.sum() == line.size  # exactly one column (row): column 5's tie rule


@pytest.mark.claim("claim1.step2.edges.canny")
@given(img=gray_images(), low=st.floats(0, 300), extra=st.floats(0, 300))
def test_canny_edges_lie_above_low_and_connect_to_a_strong_pixel(img, low, extra):
    result = ops.canny(img, low, low + extra)
    edges = result.edges.astype(bool)
    assert (result.response[edges] > low).all()
    if edges.any():
        assert (result.response[edges] > low + extra).any()


@pytest.mark.claim("claim1.step2.edges.canny")
def test_canny_threshold_errors():
    img = step_image()
    with pytest.raises(InputError, match="both low and high"):
        ops.canny(img, low=1.0)
    with pytest.raises(InputError, match="above high"):
        ops.canny(img, 5.0, 1.0)
    with pytest.raises(InputError, match=">= 0"):
        ops.canny(img, -1.0, 1.0)


@pytest.mark.claim("claim1.step2.edges.canny")
@given(img=gray_images())
def test_canny_automatic_thresholds_are_otsu_and_twice(img):
    result = ops.canny(img)
    low = ops.otsu_threshold(ops.sobel(img).response)
    assert result.thresholds == {"low": low, "high": 2 * low}


@pytest.mark.claim("claim1.step2.edges.log")
def test_log_marks_the_negative_side_of_a_step():
    """On a rising step the Laplacian is positive on the dark side and negative on the bright
    side: the bright column next to the step is marked."""
    result = ops.laplacian_of_gaussian(step_image())
    assert result.response[5, 5] > 0 > result.response[5, 6]
    assert result.edges[:, 6].all() and result.edges.sum() == 12


@pytest.mark.claim("claim1.step2.edges.log")
@given(img=gray_images(), t=st.floats(0, 100))
def test_log_edges_sit_on_sign_changes(img, t):
    result = ops.laplacian_of_gaussian(img, t)
    r = result.response
    padded = np.pad(r, 1, constant_values=np.nan)
    rows, cols = r.shape
    neighbours = [padded[1 + dr:1 + dr + rows, 1 + dc:1 + dc + cols]
                  for dr, dc in ((0, 1), (0, -1), (1, 0), (-1, 0))]
    has_opposite = np.zeros(r.shape, bool)
    for n in neighbours:
        has_opposite |= (np.sign(n) * np.sign(r) < 0) | ((r == 0) & (n != 0))  # no underflow
    assert not (result.edges.astype(bool) & ~has_opposite).any()
    assert (r[result.edges.astype(bool)] <= 0).all()


@pytest.mark.claim("claim1.step2.edges.sobel", "claim1.step2.edges.canny")
@given(img=gray_images())
def test_otsu_threshold_lies_within_the_values(img):
    t = ops.otsu_threshold(img)
    assert img.min() <= t <= img.max()


@pytest.mark.claim("claim1.step2.edges.sobel")
@given(low=st.floats(0, 100), gap=st.floats(1, 100), n_low=st.integers(1, 50),
       n_high=st.integers(1, 50))
def test_otsu_separates_two_values(low, gap, n_low, n_high):
    values = np.array([[low] * n_low + [low + gap] * n_high])
    t = ops.otsu_threshold(values)
    assert low <= t < low + gap


@pytest.mark.claim("claim1.step2.edges.sobel")
def test_otsu_rejects_bad_input():
    with pytest.raises(InputError, match="bins"):
        ops.otsu_threshold(np.eye(3), bins=1)
    with pytest.raises(InputError, match="NaN"):
        ops.otsu_threshold(np.full((3, 3), np.nan))
