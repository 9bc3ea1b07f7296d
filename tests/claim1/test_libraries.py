"""The libraries' defaults that the golden bundle flags (refseg.claim1.libraries, built from
their documented behaviour with NumPy and SciPy only) against the real calls of
scikit-image, SciPy and OpenCV, on a photograph, a weld and an image of few grey levels."""
import numpy as np
import pytest
from scipy import ndimage

from anchors import require
from refseg.claim1 import alternatives as al
from refseg.claim1 import features, libraries, operators as ops
from refseg.data.synthetic import weld_image
from refseg.golden.bundle_images import shipped_photos, synthetic_welds
from refseg.golden.edge_cases import edge_case_images

pytestmark = pytest.mark.infrastructure


IMAGES = {"photo": shipped_photos()[0]["coffee"], "weld": weld_image(2, (48, 96)).rgb,
          "few-levels": edge_case_images()[0]["few-levels"]}
#: float64 agreement with the real call, relative to the largest value: sums in another order.
RTOL = 1e-12


def _variant(name):
    return next(a for a in al.LIBRARY_DEFAULTS if a.name == name).variant


def _close(mine, real):
    real = np.asarray(real, dtype=np.float64)
    assert mine.shape == real.shape
    assert np.abs(mine - real).max() <= RTOL * np.abs(real).max()


@pytest.mark.parametrize("image", IMAGES)
def test_rgb2gray(image):
    color = require("skimage.color")
    _close(al.extract_variant(IMAGES[image], _variant("skimage.color.rgb2gray")).gray,
           color.rgb2gray(IMAGES[image]))


@pytest.mark.parametrize("image", IMAGES)
def test_gaussian_of_skimage_and_scipy_with_their_default_truncate_and_mode(image):
    filters = require("skimage.filters")
    gray = features.extract(IMAGES[image]).gray
    _close(al.extract_variant(IMAGES[image], _variant("skimage.filters.gaussian")).blurred,
           filters.gaussian(gray, sigma=0.8))
    _close(al.extract_variant(IMAGES[image],
                              _variant("scipy.ndimage.gaussian_filter")).blurred,
           ndimage.gaussian_filter(gray, 0.8))
    # 7x7: not the 3x3 template (or the test would hold nothing)
    assert np.abs(libraries.gaussian(gray, 0.8, "skimage") - features.extract(
        IMAGES[image]).blurred).max() > 1e-6


@pytest.mark.parametrize("image", IMAGES)
def test_skimage_sobel_and_prewitt_are_normalised(image):
    filters = require("skimage.filters")
    r = al.extract_variant(IMAGES[image], _variant("skimage.filters.sobel"))
    _close(r.responses["sobel"], filters.sobel(r.blurred))
    _close(r.responses["prewitt"], filters.prewitt(r.blurred))
    inside = (slice(1, -1), slice(1, -1))
    refseg = features.extract(IMAGES[image]).responses
    ratio = r.responses["sobel"][inside] / np.where(refseg["sobel"] > 0, refseg["sobel"],
                                                    np.nan)[inside]
    assert np.nanmax(np.abs(ratio - 1 / (4 * np.sqrt(2)))) < 1e-12


@pytest.mark.parametrize("image", IMAGES)
def test_threshold_otsu_binning(image):
    filters = require("skimage.filters")
    r = al.extract_variant(IMAGES[image], _variant("skimage.filters.threshold_otsu"))
    assert r.thresholds["sobel"]["magnitude"] == filters.threshold_otsu(r.responses["sobel"])
    assert r.thresholds["prewitt"]["magnitude"] == filters.threshold_otsu(
        r.responses["prewitt"])
    assert r.thresholds["canny"]["low"] == filters.threshold_otsu(r.responses["canny"])
    assert r.thresholds["log"]["slope"] == 2 * filters.threshold_otsu(np.abs(
        r.responses["log"]))


def test_threshold_otsu_binning_differs_from_the_manifest_s_on_few_grey_levels():
    """A Prewitt magnitude of the few-levels image sits exactly on a bin edge (half the
    largest): np.histogram puts it in the upper bin, the manifest's truncation in the lower,
    and the threshold moves by one bin."""
    filters = require("skimage.filters")
    m = features.extract(IMAGES["few-levels"]).responses["prewitt"]
    width = (m.max() - m.min()) / 256
    assert filters.threshold_otsu(m) - ops.otsu_threshold(m) == pytest.approx(width, rel=1e-9)


@pytest.mark.parametrize("image", IMAGES)
@pytest.mark.parametrize("norm", ["L2", "L1"])
def test_cv2_canny_on_int16_gradients(image, norm):
    cv2 = require("cv2")
    r = al.extract_variant(IMAGES[image], _variant(f"cv2.Canny-{norm}"))
    gx, gy, _ = ops._gradient(r.blurred, ops.SOBEL_SMOOTH, "cython")
    dx, dy = (np.round(g * 32).astype(np.int16) for g in (gx, gy))
    low, high = r.thresholds["canny"]["low"], r.thresholds["canny"]["high"]
    real = cv2.Canny(dx, dy, low * 32, high * 32, L2gradient=norm == "L2") > 0
    assert real.any() or image == "few-levels"  # no Canny edge there, in refseg's map either
    np.testing.assert_array_equal(r.edges["canny"], real.astype(np.uint8))


@pytest.mark.parametrize("image", IMAGES)
def test_cv2_laplacian_ksize3(image):
    cv2 = require("cv2")
    r = al.extract_variant(IMAGES[image], _variant("cv2.Laplacian-ksize3"))
    _close(r.responses["log"], cv2.Laplacian(r.blurred, cv2.CV_64F, ksize=3))
    # ksize=1, OpenCV's default, is refseg's 4-neighbour Laplacian
    _close(features.extract(IMAGES[image]).responses["log"],
           cv2.Laplacian(r.blurred, cv2.CV_64F))


@pytest.mark.parametrize("image", IMAGES)
def test_the_calls_the_notes_name_for_border_replicate_and_the_binomial_table(image):
    cv2 = require("cv2")
    gray = features.extract(IMAGES[image]).gray
    kernel = np.outer(*[cv2.getGaussianKernel(3, 0.8)[:, 0]] * 2)
    replicate = al.extract_variant(IMAGES[image], al.BY_NAME["border-replicate"].variant)
    _close(replicate.blurred, ndimage.correlate(gray, kernel))  # SciPy's default mode
    binomial = al.extract_variant(IMAGES[image], al.BY_NAME["gauss-binomial"].variant)
    _close(binomial.blurred, cv2.GaussianBlur(gray, (3, 3), 0))


def _canny_images():
    """The standard bundle's images (edge cases, shipped photographs, welds) and crops of
    three skimage.data photographs (gray, RGB and a high-contrast scan) it does not ship."""
    data = require("skimage.data")
    images = dict(edge_case_images()[0])
    images.update(shipped_photos()[0])
    images.update({name: s.rgb for name, s in synthetic_welds()[0].items()})
    images.update({"camera": data.camera()[100:260, 150:374],
                   "rocket": data.rocket()[120:280, 200:424],
                   "text": data.text()[:, :224]})
    return images


CANNY_IMAGES = _canny_images()


@pytest.mark.parametrize("image", CANNY_IMAGES)
def test_skimage_canny_pixel_for_pixel_with_the_real_call(image):
    """The flagged `skimage.feature.canny` (defaults) and `-otsu` (given refseg's Otsu
    thresholds) against the real call on the blurred image, and the function itself on the
    [0, 1] scale, where the default thresholds 0.1 and 0.2 mean 255 times more."""
    feature = require("skimage.feature")
    rgb = CANNY_IMAGES[image]
    chosen = features.extract(rgb)
    low, high = chosen.thresholds["canny"]["low"], chosen.thresholds["canny"]["high"]
    default = al.extract_variant(rgb, _variant("skimage.feature.canny"))
    otsu = al.extract_variant(rgb, _variant("skimage.feature.canny-otsu"))
    np.testing.assert_array_equal(default.edges["canny"],
                                  feature.canny(chosen.blurred).astype(np.uint8))
    np.testing.assert_array_equal(otsu.edges["canny"], feature.canny(
        chosen.blurred, low_threshold=low, high_threshold=high).astype(np.uint8))
    # the thresholds reported stay the Otsu ones: the call replaces the edges only
    assert otsu.thresholds["canny"] == chosen.thresholds["canny"]
    unit = chosen.blurred / 255.0
    np.testing.assert_array_equal(libraries.skimage_canny(unit),
                                  feature.canny(unit).astype(np.uint8))
    np.testing.assert_array_equal(
        libraries.skimage_canny(unit, low=low / 255.0, high=high / 255.0),
        feature.canny(unit, low_threshold=low / 255.0,
                      high_threshold=high / 255.0).astype(np.uint8))


def test_skimage_canny_is_not_refseg_s_canny():
    """Its second Gaussian and interpolating suppression move real edges on every
    photograph (or the tests above would hold nothing)."""
    for name in ("astronaut", "coffee", "chelsea", "camera", "rocket"):
        rgb = CANNY_IMAGES[name]
        mine = features.extract(rgb).edges["canny"]
        otsu = al.extract_variant(rgb, _variant("skimage.feature.canny-otsu")).edges["canny"]
        assert otsu.sum() > 100 and (otsu != mine).sum() > 100


@pytest.mark.parametrize("image", IMAGES)
def test_scipy_gaussian_laplace_of_the_gray_image(image):
    r = al.extract_variant(IMAGES[image], _variant("scipy.ndimage.gaussian_laplace"))
    _close(r.responses["log"], ndimage.gaussian_laplace(r.gray, 0.8))
    # a 7x7 kernel on the gray image, not the 3x3 Laplacian of the blurred image
    assert np.abs(r.responses["log"] - features.extract(IMAGES[image]).responses["log"]
                  ).max() > 1.0
    assert r.thresholds["log"]["slope"] == 2 * ops.otsu_threshold(np.abs(r.responses["log"]))


@pytest.mark.parametrize("image", IMAGES)
def test_skimage_sobel_fed_into_canny(image):
    """`skimage.filters.sobel-canny`: every magnitude is skimage's, and Canny's thresholds
    and suppression work on it."""
    filters = require("skimage.filters")
    r = al.extract_variant(IMAGES[image], _variant("skimage.filters.sobel-canny"))
    real = filters.sobel(r.blurred)
    _close(r.responses["canny"], real)
    _close(r.responses["sobel"], real)
    _close(r.responses["prewitt"], filters.prewitt(r.blurred))
    low = ops.otsu_threshold(r.responses["canny"])
    assert r.thresholds["canny"] == {"low": low, "high": 2 * low}
    gx, gy, _ = ops._gradient(r.blurred, ops.SOBEL_SMOOTH, "cython")
    mine = ops._canny_from_gradient(gx, gy, r.responses["canny"], low, 2 * low, "cython")
    np.testing.assert_array_equal(r.edges["canny"], mine.edges)
