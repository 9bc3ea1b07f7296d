"""Each claim-1 kernel (``refseg/claim1/_kernels.pxi``) against its NumPy twin: equal bit for
bit on drawn inputs.

Equality is exact (``np.array_equal``), not approximate: both sides add the same terms in the
same order, and the build disables floating-point contraction (setup.py), so any difference is
a bug in one of them.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from refseg.claim1.operators import (LAPLACE_4, PREWITT_SMOOTH, SOBEL_SMOOTH, TAN_22_5,
                                     TAN_67_5)
from refseg.claim1.preprocess import gaussian_kernel
from refseg.data.synthetic import weld_image
from strategies import gray_images
from twins import assert_same, both, fast, twin


@pytest.mark.claim("claim1.step2.gray")
@given(hnp.arrays(np.uint8, hnp.array_shapes(min_dims=3, max_dims=3, min_side=1, max_side=20)
                  .map(lambda s: (s[0], s[1], 3))))
def test_rgb_to_gray(rgb):
    assert_same(both("rgb_to_gray", rgb, 299.0, 587.0, 114.0, 1000.0,
                     outputs=[(rgb.shape[:2], np.float64)]))


@pytest.mark.claim("claim1.step2.gauss", "claim1.step2.edges.log")
@given(gray_images(min_side=1), st.sampled_from(["gauss", "laplace", "random"]),
       st.floats(0.1, 5))
def test_correlate3x3(img, which, sigma):
    kernel = {"gauss": gaussian_kernel(sigma), "laplace": LAPLACE_4,
              "random": np.arange(9.0).reshape(3, 3) - 4.2}[which]
    assert_same(both("correlate3x3", img, kernel, outputs=[(img.shape, np.float64)]))


#: Smoothing weights the gradient kernels are tested with: Sobel's, Prewitt's, and an
#: asymmetric triple that would expose a swapped pair of terms.
SMOOTHINGS = {"sobel": SOBEL_SMOOTH, "prewitt": PREWITT_SMOOTH,
              "asymmetric": np.array([0.3, -1.7, 2.9])}


@pytest.mark.claim("claim1.step2.edges.sobel", "claim1.step2.edges.prewitt")
@given(gray_images(min_side=1), st.sampled_from(sorted(SMOOTHINGS)))
def test_gradient3x3(img, smoothing):
    assert_same(both("gradient3x3", img, SMOOTHINGS[smoothing],
                     outputs=[(img.shape, np.float64)] * 3))


@pytest.mark.claim("claim1.step2.edges.sobel", "claim1.step2.edges.prewitt")
@given(gray_images(min_side=1), st.sampled_from(sorted(SMOOTHINGS)))
def test_gradient_magnitude3x3(img, smoothing):
    smooth = SMOOTHINGS[smoothing]
    ours, theirs = both("gradient_magnitude3x3", img, smooth, outputs=[(img.shape, np.float64)])
    assert_same((ours, theirs))
    full = both("gradient3x3", img, smooth, outputs=[(img.shape, np.float64)] * 3)[0]
    assert np.array_equal(ours[0], full[2])  # the magnitude gradient3x3 gives


@pytest.mark.claim("claim1.step2.edges.sobel")
@given(gray_images(min_side=1), st.floats(0, 300))
def test_threshold_above(img, t):
    assert_same(both("threshold_above", img, t, outputs=[(img.shape, np.uint8)]))


@pytest.mark.claim("claim1.step2.edges.canny")
@given(gray_images(), st.floats(0, 200), st.floats(0, 400))
def test_non_maximum_suppression(img, low, extra):
    gx, gy, mag = (np.zeros(img.shape) for _ in range(3))
    fast.gradient3x3(img, SOBEL_SMOOTH, gx, gy, mag)
    assert_same(both("non_maximum_suppression", gx, gy, mag, low, low + extra, TAN_22_5,
                     TAN_67_5, outputs=[(img.shape, np.uint8)]))


@pytest.mark.claim("claim1.step2.edges.canny")
@given(gray_images(min_side=1), st.floats(0, 200), st.floats(0, 400),
       st.sampled_from(sorted(SMOOTHINGS)))
def test_non_maximum_suppression3x3(img, low, extra, smoothing):
    """Equal to its twin, and to non_maximum_suppression on the whole gx and gy it forms row
    by row."""
    smooth = SMOOTHINGS[smoothing]
    gx, gy, mag = (np.zeros(img.shape) for _ in range(3))
    fast.gradient3x3(img, smooth, gx, gy, mag)
    args = (low, low + extra, TAN_22_5, TAN_67_5)
    ours, theirs = both("non_maximum_suppression3x3", img, smooth, mag, *args,
                        outputs=[(img.shape, np.uint8)])
    assert_same((ours, theirs))
    whole = np.zeros(img.shape, dtype=np.uint8)
    fast.non_maximum_suppression(gx, gy, mag, *args, whole)
    assert np.array_equal(ours[0], whole)


@pytest.mark.claim("claim1.step2.edges.canny")
@given(hnp.arrays(np.uint8, hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=30),
                  elements=st.sampled_from([0, 0, 0, 1, 1, 2])))
def test_hysteresis(candidates):
    assert_same(both("hysteresis", candidates, outputs=[(candidates.shape, np.uint8)]))


@pytest.mark.claim("claim1.step2.edges.log")
@given(hnp.arrays(np.float64, hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=20),
                  elements=st.sampled_from([-3.0, -1.0, 0.0, 0.0, 1.0, 2.5])
                  | st.floats(-100, 100)), st.floats(0, 5))
def test_zero_crossings(response, t):
    assert_same(both("zero_crossings", response, t, outputs=[(response.shape, np.uint8)]))


@pytest.mark.claim("claim1.step2.final_weight")
@given(hnp.arrays(np.uint8, st.tuples(st.just(4), st.integers(1, 12), st.integers(1, 12)),
                  elements=st.integers(0, 1)),
       hnp.arrays(np.float64, 4, elements=st.floats(0, 1)))
def test_weighted_vote(edges, weights):
    assert_same(both("weighted_vote", edges, weights, 1.5,
                     outputs=[(edges.shape[1:], np.float64)]))


@pytest.mark.claim("claim1.step2.mean_image", "claim1.step2.std", "claim1.step2.cv")
@given(hnp.arrays(np.uint8, st.tuples(st.just(4), st.integers(1, 12), st.integers(1, 12)),
                  elements=st.integers(0, 3)))
def test_edge_statistics(edges):
    assert_same(both("edge_statistics", edges,
                     outputs=[(edges.shape[1:], np.float64), (4, np.float64), (4, np.float64)]))


@pytest.mark.claim("claim1.step2.edges.sobel", "claim1.step2.edges.log")
@given(gray_images(min_side=1), st.integers(2, 300), st.booleans(), st.booleans())
def test_histogram(img, bins, signed, absolute):
    if signed:
        img = img - 127.5
    v = np.abs(img) if absolute else img
    low, high = float(v.min()), float(v.max())
    if low == high:
        high = low + 1.0
    outs = []
    for module in (fast, twin):
        counts = np.zeros(bins, dtype=np.int_)
        module.histogram(img, low, high, absolute, counts)
        outs.append(counts)
    assert np.array_equal(*outs) and outs[0].sum() == img.size


@pytest.mark.claim("claim1.step2.edges.sobel", "claim1.step2.edges.log")
@given(gray_images(min_side=1), st.booleans(), st.booleans())
def test_value_range(img, signed, absolute):
    if signed:
        img = img - 127.5
    ours, theirs = both("value_range", img, absolute, outputs=[(2, np.float64)])
    assert_same((ours, theirs))
    v = np.abs(img) if absolute else img
    assert list(ours[0]) == [v.min(), v.max()]


def _pipeline_arrays(rows):
    """The arrays claim 1's kernels see on a synthetic weld image of ``rows`` x 640 pixels."""
    rgb = np.ascontiguousarray(weld_image(3, shape=(rows, 640)).rgb)
    gray = np.empty(rgb.shape[:2])
    fast.rgb_to_gray(rgb, 299.0, 587.0, 114.0, 1000.0, gray)
    blurred = np.empty_like(gray)
    fast.correlate3x3(gray, gaussian_kernel(0.8), blurred)
    gx, gy, mag = (np.empty_like(gray) for _ in range(3))
    fast.gradient3x3(blurred, SOBEL_SMOOTH, gx, gy, mag)
    log = np.empty_like(gray)
    fast.correlate3x3(blurred, LAPLACE_4, log)
    return rgb, blurred, gx, gy, mag, log


@pytest.mark.claim("claim1.step2.gray", "claim1.step2.gauss", "claim1.step2.edges.canny",
                   "claim1.step2.edges.sobel", "claim1.step2.edges.prewitt",
                   "claim1.step2.edges.log", "claim1.step2.final_weight",
                   "claim1.step2.mean_image", "claim1.step2.std")
def test_every_kernel_equals_its_twin_on_an_image_split_over_threads():
    rows = fast.PARALLEL_MIN_PIXELS // 640 + 3
    rgb, blurred, gx, gy, mag, log = _pipeline_arrays(rows)
    shape = blurred.shape
    assert blurred.size >= fast.PARALLEL_MIN_PIXELS
    low = float(np.median(mag))
    candidates = np.empty(shape, dtype=np.uint8)
    fast.non_maximum_suppression(gx, gy, mag, low, 2 * low, TAN_22_5, TAN_67_5, candidates)
    assert 0 < np.count_nonzero(candidates == 2) < np.count_nonzero(candidates)
    rng = np.random.default_rng(0)
    stack = (rng.random((4,) + shape) < 0.3).astype(np.uint8)
    f64, u8 = np.float64, np.uint8
    runs = [
        ("rgb_to_gray", (rgb, 299.0, 587.0, 114.0, 1000.0), [(shape, f64)]),
        ("correlate3x3", (blurred, LAPLACE_4), [(shape, f64)]),
        ("gradient3x3", (blurred, PREWITT_SMOOTH), [(shape, f64)] * 3),
        ("gradient_magnitude3x3", (blurred, PREWITT_SMOOTH), [(shape, f64)]),
        ("threshold_above", (mag, low), [(shape, u8)]),
        ("non_maximum_suppression", (gx, gy, mag, low, 2 * low, TAN_22_5, TAN_67_5),
         [(shape, u8)]),
        ("non_maximum_suppression3x3",
         (blurred, SOBEL_SMOOTH, mag, low, 2 * low, TAN_22_5, TAN_67_5), [(shape, u8)]),
        ("hysteresis", (candidates,), [(shape, u8)]),
        ("zero_crossings", (log, 1.0), [(shape, u8)]),
        ("value_range", (log, True), [(2, f64)]),
        ("histogram", (log, 0.0, float(np.abs(log).max()), True), [(256, np.int_)]),
        ("histogram", (mag, float(mag.min()), float(mag.max()), False), [(256, np.int_)]),
        ("weighted_vote", (stack, np.array([0.1, 0.2, 0.3, 0.4]), 1.5), [(shape, f64)]),
        ("edge_statistics", (stack,), [(shape, f64), (4, f64), (4, f64)]),
    ]
    for name, inputs, outputs in runs:
        ours, theirs = both(name, *inputs, outputs=outputs)
        for a, b in zip(ours, theirs):
            assert a.dtype == b.dtype and np.array_equal(a, b), name
