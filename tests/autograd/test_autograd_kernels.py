"""Each autograd kernel (the ``.pxi`` files of ``refseg/autograd/``) against its NumPy twin:
equal bit for bit on drawn inputs.

Equality is exact (``np.array_equal``), not approximate: both sides add the same terms in the
same order, and the build disables floating-point contraction (setup.py), so any difference is
a bug in one of them.
"""
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from twins import PARALLEL_ROWS, assert_same, both, elementwise_cases, fast, twin


WINDOW = st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 3),
                   st.integers(-1, 2), st.integers(-1, 2))  # kh, kw, sh, sw, pad top, pad left


def _geometry(h, w, kh, kw, sh, sw, pt, pl):
    ho = max(1, (h + 2 * max(pt, 0) - kh) // sh + 1)
    wo = max(1, (w + 2 * max(pl, 0) - kw) // sw + 1)
    return ho, wo


@pytest.mark.claim("claim4.propagation")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@given(x=hnp.arrays(np.float64, st.tuples(st.integers(1, 2), st.integers(1, 6), st.integers(1, 6),
                                          st.integers(1, 3)), elements=st.floats(-10, 10)),
       window=WINDOW)
def test_im2col_and_col2im(dtype, x, window):
    """Pure copies and fixed-order sums: bit for bit in both precisions."""
    x = x.astype(dtype)
    kh, kw, sh, sw, pt, pl = window
    ho, wo = _geometry(x.shape[1], x.shape[2], *window)
    n, c = x.shape[0], x.shape[3]
    assert_same(both("im2col", x, kh, kw, sh, sw, pt, pl, ho, wo, 0,
                     outputs=[((n * ho * wo, kh * kw * c), dtype)]))
    last_rows = max(1, n * ho // 2)  # a block of rows from the middle to the end
    assert_same(both("im2col", x, kh, kw, sh, sw, pt, pl, ho, wo, n * ho - last_rows,
                     outputs=[((last_rows * wo, kh * kw * c), dtype)]))
    cols = np.random.default_rng(0).standard_normal((n * ho * wo, kh * kw * c)).astype(dtype)
    assert_same(both("col2im", cols, kh, kw, sh, sw, pt, pl, ho, wo, outputs=[(x.shape, dtype)]))


@pytest.mark.claim("claim4.propagation")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@given(shape=st.tuples(st.integers(1, 2), st.integers(1, 6), st.integers(1, 6),
                       st.integers(1, 40)), window=WINDOW, seed=st.integers(0, 2**16))
def test_col2im_of_the_transposed_columns(dtype, shape, window, seed):
    """col2im_transposed(cols.T) is col2im(cols), bit for bit (the same sums in the same
    order), and both backends agree; channels up to 40 cross the blocks of 16."""
    kh, kw, sh, sw, pt, pl = window
    n, h, w, c = shape
    ho, wo = _geometry(h, w, *window)
    cols = np.random.default_rng(seed).standard_normal((n * ho * wo, kh * kw * c)).astype(dtype)
    cols_t = np.ascontiguousarray(cols.T)
    pair = both("col2im_transposed", cols_t, kh, kw, sh, sw, pt, pl, ho, wo,
                outputs=[(shape, dtype)])
    assert_same(pair)
    expected = np.full(shape, np.nan, dtype=dtype)
    fast.col2im(cols, kh, kw, sh, sw, pt, pl, ho, wo, expected)
    assert_same(([expected], pair[0]))


@pytest.mark.claim("claim4.propagation")
def test_col2im_of_the_transposed_columns_on_all_threads():
    """x1's geometry (3x3, stride 2, 7x7 columns to 14x14) at 720 channels and batch 4:
    enough values for every thread."""
    rng = np.random.default_rng(1)
    cols = rng.standard_normal((4 * 7 * 7, 9 * 720)).astype(np.float32)
    expected = np.empty((4, 14, 14, 720), np.float32)
    fast.col2im(cols, 3, 3, 2, 2, 0, 0, 7, 7, expected)
    pair = both("col2im_transposed", np.ascontiguousarray(cols.T), 3, 3, 2, 2, 0, 0, 7, 7,
                outputs=[(expected.shape, np.float32)])
    assert_same(pair)
    assert_same(([expected], pair[0]))


@pytest.mark.claim("claim4.propagation", "claim2.backbones")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@given(x=hnp.arrays(np.float64, st.tuples(st.integers(1, 2), st.integers(1, 6), st.integers(1, 6),
                                          st.integers(1, 3)), elements=st.floats(-10, 10)),
       window=WINDOW)
def test_depthwise_kernels(dtype, x, window):
    """Forward and input gradient: fixed-order sums, bit for bit. Weight gradient: a reduction
    the twin sums in another order (NumPy pairwise), in float64: equal to 1e-12 relative."""
    x = x.astype(dtype)
    kh, kw, sh, sw, pt, pl = window
    ho, wo = _geometry(x.shape[1], x.shape[2], *window)
    rng = np.random.default_rng(1)
    w = rng.standard_normal((kh * kw, x.shape[3])).astype(dtype)
    g = rng.standard_normal((x.shape[0], ho, wo, x.shape[3])).astype(dtype)
    assert_same(both("depthwise_forward", x, w, kh, kw, sh, sw, pt, pl,
                     outputs=[(g.shape, dtype)]))
    assert_same(both("depthwise_backward_input", g, w, kh, kw, sh, sw, pt, pl,
                     outputs=[(x.shape, dtype)]))
    fast_dw, slow_dw = both("depthwise_backward_weight", x, g, kh, kw, sh, sw, pt, pl,
                            outputs=[(w.shape, np.float64)])
    np.testing.assert_allclose(fast_dw[0], slow_dw[0], rtol=1e-12, atol=1e-12)


@pytest.mark.claim("claim4.propagation", "claim2.backbones")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@given(x=hnp.arrays(np.float64, st.tuples(st.integers(1, 2), st.integers(1, 6), st.integers(1, 6),
                                          st.integers(1, 3)),
                    elements=st.sampled_from([0.0, 1.0, 1.0, 2.0, -3.0]) | st.floats(-5, 5)),
       window=WINDOW)
def test_max_pool_kernels(dtype, x, window):
    """Ties included: both take the first maximum in row-major window order."""
    x = x.astype(dtype)
    kh, kw, sh, sw, pt, pl = window
    ho, wo = _geometry(x.shape[1], x.shape[2], *window)
    shape = (x.shape[0], ho, wo, x.shape[3])
    pair = both("max_pool_forward", x, kh, kw, sh, sw, pt, pl,
                outputs=[(shape, dtype), (shape, np.int_)])
    assert_same(pair)
    g = np.random.default_rng(2).standard_normal(shape).astype(dtype)
    fast_dx, slow_dx = both("max_pool_backward", g, pair[0][1], outputs=[(x.size, dtype)])
    # overlapping windows add into one pixel in different orders: rounding-level differences
    np.testing.assert_allclose(fast_dx[0], slow_dx[0], rtol=1e-6 if dtype == np.float32 else 1e-14,
                               atol=1e-6 if dtype == np.float32 else 1e-14)


def _same_bits(pair):
    """Equal to the bit: -0.0 against 0.0 and NaN against NaN compared as stored."""
    for a, b in zip(*pair):
        unsigned = np.uint32 if a.dtype == np.float32 else np.uint64
        assert a.dtype == b.dtype and np.array_equal(a.view(unsigned), b.view(unsigned))


@pytest.mark.claim("claim2.backbones")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@given(x=hnp.arrays(np.float64, st.tuples(st.integers(1, 2), st.integers(1, 6), st.integers(1, 6),
                                          st.integers(1, 3)),
                    elements=st.sampled_from([0.0, -0.0, 1.0, -np.inf, np.inf, np.nan])
                    | st.floats(-5, 5)),
       window=WINDOW)
def test_window_maximum(dtype, x, window):
    """Inference max pooling: np.maximum's rule tap by tap (NaN wins, the earlier of equal
    values stays: -0.0 before 0.0 stays -0.0), -inf where a window holds no input pixel."""
    x = x.astype(dtype)
    kh, kw, sh, sw, pt, pl = window
    ho, wo = _geometry(x.shape[1], x.shape[2], *window)
    _same_bits(both("window_maximum", x, kh, kw, sh, sw, pt, pl,
                    outputs=[((x.shape[0], ho, wo, x.shape[3]), dtype)]))


@pytest.mark.claim("claim2.backbones")
def test_window_maximum_on_all_threads_equals_the_recording_path():
    """ResNet50V2's first pooling (3x3, stride 2, on the padded 114x114x64) at batch 2: enough
    values for every thread; with finite values and no ties its maxima are the training
    path's."""
    x = np.random.default_rng(3).standard_normal((2, 114, 114, 64)).astype(np.float32)
    shape = (2, 56, 56, 64)
    pair = both("window_maximum", x, 3, 3, 2, 2, 0, 0, outputs=[(shape, np.float32)])
    _same_bits(pair)
    recorded = np.empty(shape, np.float32)
    fast.max_pool_forward(x, 3, 3, 2, 2, 0, 0, recorded, np.empty(shape, np.int_))
    assert np.array_equal(pair[0][0], recorded)


def check_inference_elementwise(x, dtype, rng):
    """Batch-norm multiply-add (alone, and with the ReLU / ReLU6 clamp in the same pass), ReLU /
    ReLU6 clamps and the sum, with NaN, infinities and signed zeros: bit for bit (NaN where the
    twin has NaN)."""
    c = x.shape[1]
    scale, shift = (rng.uniform(-3, 3, c).astype(dtype) for _ in range(2))
    for low, high in ((-np.inf, np.inf), (0.0, np.inf), (0.0, 6.0)):
        pair = both("channel_affine", x, scale, shift, low, high, outputs=[(x.shape, dtype)])
        np.testing.assert_array_equal(*pair[0] + pair[1])
        # the fused clamp is the clamp kernel after the unclamped multiply-add, bit for bit
        unclamped, clamped = np.empty_like(x), np.empty_like(x)
        fast.channel_affine(x, scale, shift, -np.inf, np.inf, unclamped)
        fast.clamp(unclamped.reshape(-1), low, high, clamped.reshape(-1))
        np.testing.assert_array_equal(pair[0][0], clamped)
    np.testing.assert_array_equal(unclamped, (x * scale) + shift)  # no clamp: NumPy's two steps
    flat, other = x.reshape(-1), rng.uniform(-10, 10, x.size).astype(dtype)
    for high in (np.inf, 6.0):
        pair = both("clamp", flat, 0.0, high, outputs=[(flat.shape, dtype)])
        np.testing.assert_array_equal(*pair[0] + pair[1])
        assert not np.signbit(pair[0][0][flat == 0]).any()  # -0.0 clamps to +0.0 as np.maximum
    pair = both("add_arrays", flat, other, outputs=[(flat.shape, dtype)])
    np.testing.assert_array_equal(*pair[0] + pair[1])


test_inference_elementwise, test_inference_elementwise_on_all_threads = (
    elementwise_cases(4, "claim2.backbones", "claim2.fusion")(
        check_inference_elementwise))


def check_relu_mask_and_masked_gradient(x, dtype, rng):
    """The ReLU's mask (ReLU and ReLU6) and its backward, g times the mask, with NaN,
    infinities and signed zeros in x and in g: bit for bit the twins', and NumPy's comparisons
    and product with the bool mask (the signs of the zeros included)."""
    flat = x.reshape(-1)
    g = rng.uniform(-10, 10, flat.size).astype(dtype)
    g[::5] = -g[::5]
    g[:4] = np.array([np.nan, -np.inf, -0.0, np.inf], dtype=dtype)[:g.size]
    unsigned = np.uint32 if dtype == np.float32 else np.uint64
    for high in (np.inf, 6.0):
        pair = both("relu_mask", flat, 0.0, high, outputs=[(flat.shape, np.uint8)])
        assert_same(pair)
        mask = (flat > 0) & (flat < high) if high < np.inf else flat > 0
        np.testing.assert_array_equal(pair[0][0], mask)
        grads = both("masked_gradient", g, pair[0][0], outputs=[(flat.shape, dtype)])
        with np.errstate(invalid="ignore"):  # inf * 0 is NaN, on purpose
            expected = g * mask
        for (out,) in grads:
            np.testing.assert_array_equal(out.view(unsigned), expected.view(unsigned))


test_relu_mask_and_masked_gradient, test_relu_mask_and_masked_gradient_on_all_threads = (
    elementwise_cases(4, "claim4.propagation")(check_relu_mask_and_masked_gradient))


def check_bias_padding_and_softmax_kernels(x, dtype, rng):
    """The bias sum (also in place; with a ReLU / ReLU6 clamp, and without), zero padding and
    softmax's row shift and normalisation, with NaN, infinities and signed zeros: bit for bit.
    Softmax's kernels run on rows of up to 7 values (SOFTMAX_ROW_KERNEL_MAX), which NumPy sums
    left to right as they do."""
    c = x.shape[1]
    shift = rng.uniform(-3, 3, c).astype(dtype)
    for low, high in ((0.0, np.inf), (0.0, 6.0), (-np.inf, np.inf)):
        pair = both("channel_add", x, shift, low, high, outputs=[(x.shape, dtype)])
        np.testing.assert_array_equal(*pair[0] + pair[1])
        in_place = x.copy()
        fast.channel_add(in_place, shift, low, high, in_place)
        np.testing.assert_array_equal(in_place, pair[1][0])
    np.testing.assert_array_equal(in_place, x + shift)  # no clamp: NumPy's sum
    pair = both("subtract_row_max", x, outputs=[(x.shape, dtype)])
    np.testing.assert_array_equal(*pair[0] + pair[1])
    ties = np.where(rng.random(x.shape) < 0.5, -0.0, 0.0).astype(dtype)  # the later one wins
    pair = both("subtract_row_max", ties, outputs=[(x.shape, dtype)])
    np.testing.assert_array_equal(*(np.signbit(a) for a in pair[0] + pair[1]))
    e = np.abs(x) + rng.uniform(0, 1, x.shape).astype(dtype)
    pair = both("divide_by_row_sum", e, outputs=[(x.shape, dtype)])
    np.testing.assert_array_equal(*pair[0] + pair[1])
    n = 2 if x.shape[0] == PARALLEL_ROWS else 1
    images = x[:x.shape[0] // n * n].reshape(n, -1, 1, c)
    t, b, l, r = rng.integers(0, 4, 4)
    out_shape = (n, images.shape[1] + t + b, 1 + l + r, c)
    pair = both("zero_pad", images, t, l, outputs=[(out_shape, dtype)])
    np.testing.assert_array_equal(*pair[0] + pair[1])


test_bias_padding_and_softmax_kernels, test_bias_padding_and_softmax_kernels_on_all_threads = (
    elementwise_cases(7, "claim2.fusion", "claim2.backbones")(
        check_bias_padding_and_softmax_kernels))


@pytest.mark.claim("claim2.fusion", "claim4.propagation")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_twins_make_their_nans_without_a_warning(dtype):
    """inf * 0 (the ReLU's backward), inf - inf (softmax's row shift) and inf / inf (its
    normalisation) are NaN in the kernels and in their twins alike: the twins make them on
    purpose, so NumPy's "invalid value" RuntimeWarning is not raised (it would be noise in every
    run of the suite), and the NaNs are still made."""
    x = np.array([[np.inf, 1.0, np.inf], [2.0, -np.inf, 0.5]], dtype=dtype)
    passes = np.array([0, 1, 1, 0, 1, 0], dtype=np.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        masked = np.empty(6, dtype)
        twin.masked_gradient(x.reshape(-1), passes, masked)
        shifted = np.empty_like(x)
        twin.subtract_row_max(x, shifted)
        divided = np.empty_like(x)
        twin.divide_by_row_sum(np.abs(x), divided)
    assert np.isnan(masked[0]) and np.isnan(shifted[0, 0]) and np.isnan(divided[0, 0])
    assert masked[1] == 1.0 and shifted[0, 1] == -np.inf and divided[1, 0] == 0.0


@pytest.mark.claim("claim2.fusion")
@settings(deadline=None)
@given(shape=st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(1, 5),
                       st.integers(1, 12)), seed=st.integers(0, 2**16))
def test_softmax_on_the_row_kernels_equals_numpys_softmax(shape, seed):
    """The Softmax op's compiled route (NumPy's exp between the two row kernels, up to 7
    channels) and its NumPy route (more) give what NumPy's exp(x - max) / sum gives, bit for
    bit, in both dtypes."""
    from refseg import autograd as ag

    for dtype in (np.float32, np.float64):
        x = (np.random.default_rng(seed).standard_normal(shape) * 8).astype(dtype)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        np.testing.assert_array_equal(ag.softmax(x).data, e / e.sum(axis=-1, keepdims=True))


@pytest.mark.claim("claim2.fusion", "claim4.propagation")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@given(shape=st.tuples(st.integers(1, 40), st.integers(0, 300), st.integers(1, 600)),
       transposed=st.booleans(), seed=st.integers(0, 2**16))
def test_ordered_matmul_kernel(dtype, shape, transposed, seed):
    """The reference product: kernel and twin bit for bit (a read through a transposed view
    too), with every block of rows, terms and columns; within the rounding of a sum of K
    products of NumPy's float64 product (|error| <= K * eps * sum |a_ik b_kj|)."""
    m, k, n = shape
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((k, m) if transposed else (m, k)).astype(dtype)
    a = a.T if transposed else a
    b = rng.standard_normal((k, n)).astype(dtype)
    fast_out, twin_out = both("matmul_ordered", a, b, outputs=[((m, n), dtype)])
    assert np.array_equal(fast_out[0], twin_out[0])
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = (k + 1) * np.finfo(dtype).eps * (np.abs(a).astype(np.float64) @ np.abs(b))
    assert np.all(np.abs(fast_out[0] - exact) <= bound)


@pytest.mark.claim("claim2.fusion", "claim4.propagation")
def test_ordered_matmul_on_all_threads_is_the_one_thread_result():
    """Split over the threads, the reference product gives each element the bits of one
    thread's in-order sum (rows enough for the parallel split)."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((PARALLEL_ROWS // 8, 200)).astype(np.float32)
    b = rng.standard_normal((200, 40)).astype(np.float32)
    many = np.empty((a.shape[0], 40), np.float32)
    fast.matmul_ordered(a, b, many)
    previous = fast.openmp_threads()
    fast.set_openmp_threads(1)
    try:
        one = np.empty_like(many)
        fast.matmul_ordered(a, b, one)
    finally:
        fast.set_openmp_threads(previous)
    assert np.array_equal(many, one)
    twin_out = np.empty_like(many)
    twin.matmul_ordered(a, b, twin_out)
    assert np.array_equal(many, twin_out)
