"""Properties of the grayscale transform and the Gaussian filter ([0077]-[0081], [0205]-[0211])."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from refseg.backend import BACKENDS
from refseg.errors import InputError
from refseg.claim1.preprocess import GRAY_WEIGHTS, gaussian_blur, gaussian_kernel, to_gray
from strategies import SYMMETRIES, gray_images, rgb_images, transformed

SIGMAS = st.floats(0.05, 20)


@pytest.mark.claim("claim1.step2.gray")
@pytest.mark.parametrize("backend", BACKENDS)
@given(gray=hnp.arrays(np.uint8, st.tuples(st.integers(1, 20), st.integers(1, 20))))
def test_gray_of_a_gray_rgb_image_is_itself(backend, gray):
    """R = G = B = v gives v exactly: (299 + 587 + 114) v / 1000 is computed without rounding."""
    rgb = np.repeat(gray[..., None], 3, axis=2)
    assert np.array_equal(to_gray(rgb, backend=backend), gray.astype(np.float64))


@pytest.mark.claim("claim1.step2.gray")
@given(rgb_images(min_side=1))
def test_gray_is_the_weighted_average(rgb):
    """Each pixel is 0.299 R + 0.587 G + 0.114 B (known answer, computed per pixel)."""
    gray = to_gray(rgb)
    r, c = rgb.shape[0] // 2, rgb.shape[1] // 2
    expected = sum(w * float(v) for w, v in zip(GRAY_WEIGHTS, rgb[r, c]))
    assert gray[r, c] == pytest.approx(expected, abs=1e-12)
    assert gray.min() >= rgb.min() - 1e-9 and gray.max() <= rgb.max() + 1e-9


@pytest.mark.claim("claim1.step2.gray")
@given(rgb_images(min_side=1))
def test_float_input_matches_uint8_input(rgb):
    """The float path (16-bit sources) computes the same expression as the uint8 kernel."""
    assert np.array_equal(to_gray(rgb), to_gray(rgb.astype(np.float64)))


@pytest.mark.claim("claim1.step2.gray")
def test_gray_rejects_bad_input():
    with pytest.raises(InputError, match=r"shape \(rows, cols, 3\)"):
        to_gray(np.zeros((4, 4, 4), np.uint8))
    with pytest.raises(InputError, match="NaN"):
        to_gray(np.full((4, 4, 3), np.nan))
    with pytest.raises(InputError, match="dtype"):
        to_gray(np.full((4, 4, 3), "a"))


@pytest.mark.claim("claim1.step2.gauss")
@given(SIGMAS)
def test_kernel_is_symmetric_positive_and_sums_to_one(sigma):
    k = gaussian_kernel(sigma)
    assert k.shape == (3, 3) and (k > 0).all()
    assert k.sum() == pytest.approx(1.0, abs=1e-15)
    assert np.array_equal(k, k.T) and np.array_equal(k, k[::-1]) and np.array_equal(k, k[:, ::-1])
    assert k[1, 1] == k.max()


@pytest.mark.claim("claim1.step2.gauss")
@given(SIGMAS)
def test_kernel_is_the_sampled_normal_density(sigma):
    """Known answer: exp(-(x^2+y^2)/(2 sigma^2)) normalised, i.e. outer(g, g) of the 1-D kernel."""
    g = np.exp(-np.array([1.0, 0.0, 1.0]) / (2 * sigma * sigma))
    g /= g.sum()
    np.testing.assert_allclose(gaussian_kernel(sigma), np.outer(g, g), rtol=1e-13, atol=1e-300)


@pytest.mark.claim("claim1.step2.gauss")
def test_kernel_flattens_as_sigma_grows():
    centres = [gaussian_kernel(s)[1, 1] for s in (0.3, 0.5, 0.8, 1, 2, 10)]
    assert all(a > b for a, b in zip(centres, centres[1:])) and centres[-1] > 1 / 9


@pytest.mark.claim("claim1.step2.gauss")
@pytest.mark.parametrize("sigma", [0, -1, np.nan, np.inf, 1e308, 1e-300, 0.0099, 1000.1, "x"])
def test_kernel_rejects_sigma_outside_its_range(sigma):
    """The stated range [0.01, 1000]; 1e308 and 1e-300 made a NaN kernel before."""
    with pytest.raises(InputError, match="sigma"):
        gaussian_kernel(sigma)


@pytest.mark.claim("claim1.step2.gauss")
@pytest.mark.parametrize("sigma", [0.01, 1000.0])
def test_kernel_at_the_ends_of_its_range_is_finite_and_normalised(sigma):
    k = gaussian_kernel(sigma)
    assert np.isfinite(k).all() and abs(k.sum() - 1) < 1e-15


@pytest.mark.claim("claim1.step2.gauss")
@pytest.mark.parametrize("backend", BACKENDS)
@given(img=gray_images(), sigma=SIGMAS)
def test_blur_stays_within_the_image_range(backend, img, sigma):
    """A convex combination of neighbours: never outside [min, max]; a constant stays."""
    out = gaussian_blur(img, sigma, backend=backend)
    assert out.shape == img.shape and out.dtype == np.float64
    assert out.min() >= img.min() - 1e-9 and out.max() <= img.max() + 1e-9


@pytest.mark.claim("claim1.step2.gauss")
@pytest.mark.parametrize("backend", BACKENDS)
@given(gray_images(), SIGMAS)
def test_blur_commutes_exactly_with_the_eight_flips_and_transposes(backend, img, sigma):
    """The kernel and the reflect-101 border are symmetric, and the sum adds the products in
    pairs that each flip or transpose maps onto pairs, so the filter commutes bit for bit."""
    out = gaussian_blur(img, sigma, backend=backend)
    for symmetry in SYMMETRIES:
        assert np.array_equal(gaussian_blur(transformed(img, symmetry), sigma, backend=backend),
                              transformed(out, symmetry)), symmetry


@pytest.mark.claim("claim1.step2.gauss")
def test_blur_border_is_reflect101():
    """Known answer at a corner: reflect-101 mirrors without repeating the edge pixel."""
    img = np.arange(12.0).reshape(3, 4)
    k = gaussian_kernel(0.8)
    padded = np.pad(img, 1, mode="reflect")
    assert gaussian_blur(img)[0, 0] == pytest.approx((padded[:3, :3] * k).sum(), abs=1e-12)


@pytest.mark.claim("claim1.step2.gauss")
def test_blur_rejects_images_below_3x3():
    with pytest.raises(InputError, match="at least 3x3"):
        gaussian_blur(np.zeros((1, 1)))
