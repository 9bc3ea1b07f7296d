"""Exact properties of the four edge operators, their directional gradients and ``extract``,
on both backends: no edge on a constant image at any threshold, the eight flips and
transposes, adding a constant, thresholds, and a drawn disk.

Equalities here are exact (``np.array_equal``): the 3x3 sums are grouped so that equal
neighbours cancel and symmetric positions pair up (``claim1/_kernels.pxi``), so each property
holds bit for bit wherever its arithmetic is exact, and each test says why it is.
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import ndimage

from refseg.backend import BACKENDS
from refseg.claim1 import operators as ops
from refseg.claim1.features import extract
from refseg.claim1.preprocess import gaussian_blur
from strategies import (SYMMETRIES, disk_images, dyadic_images, gray_images, transformed,
                        untied_images)

ALL_OPERATORS = ("claim1.step2.edges.canny", "claim1.step2.edges.sobel",
                 "claim1.step2.edges.prewitt", "claim1.step2.edges.log")
GRADIENTS = {"sobel": ops.sobel_gradient, "prewitt": ops.prewitt_gradient}

def transformed_gradient(gx, gy, symmetry):
    """Where gx, gy go when the image is transformed: a transpose swaps them, reversing the
    rows negates gy, reversing the columns negates gx."""
    transpose, flip_rows, flip_cols = symmetry
    if transpose:
        gx, gy = gy.T, gx.T
    if flip_rows:
        gx, gy = gx[::-1], -gy[::-1]
    if flip_cols:
        gx, gy = -gx[:, ::-1], gy[:, ::-1]
    return gx, gy


def run(name, image, threshold, backend):
    """Operator ``name`` at one threshold (None: automatic); Canny gets (t, 2 t)."""
    if name == "canny":
        low, high = (None, None) if threshold is None else (threshold, 2 * threshold)
        return ops.canny(image, low, high, backend=backend)
    function = {"sobel": ops.sobel, "prewitt": ops.prewitt,
                "log": ops.laplacian_of_gaussian}[name]
    return function(image, threshold, backend=backend)


def gray_rgb(image):
    """An RGB image with three equal channels, which to_gray returns unchanged."""
    return np.repeat(image[:, :, None], 3, axis=2)


thresholds = st.none() | st.just(0.0) | st.floats(0, 300)


@pytest.mark.claim(*ALL_OPERATORS)
@pytest.mark.parametrize("name", ops.OPERATORS)
@pytest.mark.parametrize("backend", BACKENDS)
@given(rows=st.integers(3, 20), cols=st.integers(3, 20), value=st.floats(0, 255),
       blurred=st.booleans(), threshold=thresholds)
def test_a_constant_image_has_no_response_and_no_edge_at_any_threshold(
        name, backend, rows, cols, value, blurred, threshold):
    """Every response is a sum of differences of equal values (Sobel, Prewitt, Canny) or
    (2v + 2v) - 4v (LoG): exactly 0.0. A blurred constant is again one value everywhere."""
    image = np.full((rows, cols), value)
    if blurred:
        image = gaussian_blur(image, backend=backend)
        assert np.unique(image).size == 1
    result = run(name, image, threshold, backend)
    assert not result.response.any() and not result.edges.any()


@pytest.mark.claim("claim1.step2.extract")
@pytest.mark.parametrize("backend", BACKENDS)
@given(value=st.integers(0, 255), threshold=st.floats(0, 300))
def test_extract_finds_no_edge_in_a_constant_image(backend, value, threshold):
    rgb = np.full((7, 9, 3), value, dtype=np.uint8)
    for given_thresholds in (False, True):
        t = threshold if given_thresholds else None
        r = extract(rgb, canny_thresholds=None if t is None else (t, 2 * t), sobel_threshold=t,
                    prewitt_threshold=t, log_threshold=t, backend=backend)
        assert not any(r.responses[k].any() or r.edges[k].any() for k in ops.OPERATORS)
        assert not r.feature_map.any()


@pytest.mark.claim("claim1.step2.edges.sobel", "claim1.step2.edges.prewitt")
@pytest.mark.parametrize("name", sorted(GRADIENTS))
@pytest.mark.parametrize("backend", BACKENDS)
@given(image=gray_images())
def test_directional_gradients_follow_the_eight_flips_and_transposes(name, backend, image):
    gx, gy = GRADIENTS[name](image, backend=backend)
    for symmetry in SYMMETRIES:
        expected = transformed_gradient(gx, gy, symmetry)
        got = GRADIENTS[name](transformed(image, symmetry), backend=backend)
        assert all(np.array_equal(a, b) for a, b in zip(got, expected)), symmetry


@pytest.mark.claim("claim1.step2.edges.sobel", "claim1.step2.edges.prewitt",
                   "claim1.step2.edges.log")
@pytest.mark.parametrize("name", ["sobel", "prewitt", "log"])
@pytest.mark.parametrize("backend", BACKENDS)
@given(image=gray_images(), threshold=thresholds)
def test_responses_and_edges_follow_the_eight_flips_and_transposes(name, backend, image,
                                                                    threshold):
    """The magnitude and the LoG are symmetric expressions of the neighbourhood, Otsu's
    threshold depends on the values alone, and the rules (> T; a sign change between
    4-neighbours) are symmetric: every output moves with the image."""
    result = run(name, image, threshold, backend)
    for symmetry in SYMMETRIES:
        moved = run(name, transformed(image, symmetry), threshold, backend)
        assert np.array_equal(moved.response, transformed(result.response, symmetry))
        assert np.array_equal(moved.edges, transformed(result.edges, symmetry))
        assert moved.thresholds == result.thresholds


@pytest.mark.claim("claim1.step2.edges.canny")
@pytest.mark.parametrize("backend", BACKENDS)
@given(image=untied_images(), threshold=thresholds)
def test_canny_follows_the_eight_flips_and_transposes_where_no_magnitudes_tie(
        backend, image, threshold):
    """Canny's suppression keeps a tie on one side only ('>' before, '>=' after along the axis
    directions, spec R-canny), so a flip can move the kept pixel of a tied pair; with no
    ties among the magnitudes every map moves with the image."""
    result = run("canny", image, threshold, backend)
    for symmetry in SYMMETRIES:
        moved = run("canny", transformed(image, symmetry), threshold, backend)
        assert np.array_equal(moved.response, transformed(result.response, symmetry))
        assert np.array_equal(moved.edges, transformed(result.edges, symmetry)), symmetry


@pytest.mark.claim("claim1.step2.edges.canny")
@pytest.mark.parametrize("backend", BACKENDS)
@given(image=gray_images(), threshold=thresholds)
def test_canny_follows_a_transpose_even_with_ties(backend, image, threshold):
    """A transpose maps left to up and right to down, so the tie rule maps onto itself."""
    result = run("canny", image, threshold, backend)
    moved = run("canny", np.ascontiguousarray(image.T), threshold, backend)
    assert np.array_equal(moved.edges, result.edges.T)


@pytest.mark.claim("claim1.step2.extract")
@pytest.mark.parametrize("backend", BACKENDS)
@given(image=untied_images(max_side=16))
def test_extract_follows_the_eight_flips_and_transposes(backend, image):
    """Gray is per pixel, the blur and operators move with the image, and the weights come
    from counts of edge pixels, which do not depend on where the pixels are."""
    result = extract(gray_rgb(image), backend=backend)
    for symmetry in SYMMETRIES:
        moved = extract(gray_rgb(transformed(image, symmetry)), backend=backend)
        assert np.array_equal(moved.feature_map, transformed(result.feature_map, symmetry))
        assert np.array_equal(moved.final_weight, transformed(result.final_weight, symmetry))
        assert moved.weights == result.weights


@pytest.mark.claim(*ALL_OPERATORS)
@pytest.mark.parametrize("name", ops.OPERATORS)
@pytest.mark.parametrize("backend", BACKENDS)
@given(image=dyadic_images(), offset=st.integers(-255, 255), threshold=thresholds)
def test_adding_a_constant_changes_nothing(name, backend, image, offset, threshold):
    """On multiples of 1/64 below 2**9 adding an integer is exact, and so is each difference
    of two neighbours, so gx, gy and the LoG are the same numbers and so is every map."""
    result = run(name, image, threshold, backend)
    shifted = run(name, image + offset, threshold, backend)
    assert np.array_equal(shifted.response, result.response)
    assert np.array_equal(shifted.edges, result.edges)
    if name in GRADIENTS:
        assert all(np.array_equal(a, b) for a, b in
                   zip(GRADIENTS[name](image + offset, backend=backend),
                       GRADIENTS[name](image, backend=backend)))


@pytest.mark.claim("claim1.step2.extract")
@pytest.mark.parametrize("backend", BACKENDS)
@given(image=untied_images(max_side=16), offset=st.integers(-100, 100),
       threshold=st.floats(1, 100))
def test_extract_with_given_thresholds_ignores_a_constant_added(backend, image, offset,
                                                                threshold):
    """The blur rounds image + offset differently from the image, so its values move by a
    few units in the last place (<= 1e-12 here); on untied images no response lies that close
    to a threshold, a neighbour's magnitude or zero, so every map and the vote are unchanged."""
    kwargs = dict(canny_thresholds=(threshold, 2 * threshold), sobel_threshold=threshold,
                  prewitt_threshold=threshold, log_threshold=threshold, backend=backend)
    result = extract(gray_rgb(image + 100.0), **kwargs)
    shifted = extract(gray_rgb(image + 100.0 + offset), **kwargs)
    for k in ops.OPERATORS:
        np.testing.assert_allclose(shifted.responses[k], result.responses[k], rtol=0,
                                   atol=1e-12)
        assert np.array_equal(shifted.edges[k], result.edges[k]), k
    assert np.array_equal(shifted.feature_map, result.feature_map)


@pytest.mark.claim(*ALL_OPERATORS)
@pytest.mark.parametrize("name", ops.OPERATORS)
@pytest.mark.parametrize("backend", BACKENDS)
@given(image=gray_images(), low=st.floats(0, 300), extra=st.floats(0, 300))
def test_edges_shrink_as_the_threshold_rises(name, backend, image, low, extra):
    """A higher threshold (Canny: both) keeps a subset of the edges."""
    loose = run(name, image, low, backend).edges.astype(bool)
    strict = run(name, image, low + extra, backend).edges.astype(bool)
    assert not (strict & ~loose).any()


@pytest.mark.claim("claim1.step2.extract")
@pytest.mark.parametrize("backend", BACKENDS)
@given(image=gray_images(max_side=12), low=st.floats(0, 300), extra=st.floats(0, 300))
def test_extract_edges_shrink_as_the_thresholds_rise(backend, image, low, extra):
    def edges(t):
        return extract(gray_rgb(image), canny_thresholds=(t, 2 * t), sobel_threshold=t,
                       prewitt_threshold=t, log_threshold=t, backend=backend).edges

    loose, strict = edges(low), edges(low + extra)
    assert not any((strict[k].astype(bool) & ~loose[k].astype(bool)).any()
                   for k in ops.OPERATORS)


def ring_around(disk):
    """Pixels within 2 (chessboard distance) of both the disk and the background: the blur
    and a 3x3 operator each reach one pixel, so every other response sees a constant."""
    square = np.ones((5, 5), dtype=bool)
    return ndimage.binary_dilation(disk, square) & ndimage.binary_dilation(~disk, square)


def encloses(edges, disk):
    """No 4-connected path of non-edge pixels leads from the disk to the image border."""
    labels, _ = ndimage.label(~edges.astype(bool))
    border = np.concatenate([labels[0], labels[-1], labels[:, 0], labels[:, -1]])
    return not (set(labels[disk].tolist()) & set(border.tolist())) - {0}


@pytest.mark.claim(*ALL_OPERATORS)
@pytest.mark.parametrize("name", ops.OPERATORS)
@pytest.mark.parametrize("backend", BACKENDS)
@given(drawn=disk_images(), threshold=st.none() | st.just(0.0))
def test_a_disk_is_enclosed_by_edges_in_a_ring_around_it(name, backend, drawn, threshold):
    """At the automatic threshold and at 0 (where every nonzero response is an edge) the edges
    lie in the ring where the blurred image is not flat, and close around the disk."""
    image, disk = drawn
    result = run(name, gaussian_blur(image, backend=backend), threshold, backend)
    assert not (result.edges.astype(bool) & ~ring_around(disk)).any()
    assert encloses(result.edges, disk)


@pytest.mark.claim("claim1.step2.extract")
@pytest.mark.parametrize("backend", BACKENDS)
@given(drawn=disk_images())
def test_extract_encloses_a_disk_within_a_ring(backend, drawn):
    image, disk = drawn
    result = extract(gray_rgb(image), backend=backend)
    assert not (result.feature_map.astype(bool) & ~ring_around(disk)).any()
    assert encloses(result.feature_map, disk)
