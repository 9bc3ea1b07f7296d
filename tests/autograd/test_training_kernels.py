"""The training kernels (``autograd/_norm.pxi``: batch norm in training; ``autograd/_optim.pxi``:
Adam and its check of the gradients) against their NumPy twins (``autograd/_twins_training.py``):
equal bit for bit on drawn inputs, except the float64 column reductions, which the twins sum
pairwise and the kernels in row order (held to the sequential sums themselves).
"""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from twins import PARALLEL_ROWS, with_specials, assert_same, both, elementwise_cases, fast, twin


@pytest.mark.claim("claim4.propagation", "claim2.backbones")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@given(x=hnp.arrays(np.float64, st.tuples(st.integers(1, 30), st.integers(1, 4)),
                    elements=st.floats(-100, 100)))
def test_batch_norm_kernels(dtype, x):
    """Channel reductions in float64; the twin sums pairwise: equal to 1e-12 relative. The
    gradient sums with and without the ReLU's mask."""
    x = x.astype(dtype)
    c = x.shape[1]
    fast, slow = both("channel_moments", x, outputs=[(c, np.float64), (c, np.float64)])
    for a, b in zip(fast, slow):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-9)
    g = (x[::-1] * 0.5).copy()
    mean, inv_std = x[0].copy(), (1 + np.abs(x[-1])).astype(dtype)
    for passes in (None, (x > 0).view(np.uint8)):
        fast, slow = both("batch_norm_gradient_sums", x, mean, inv_std, g, passes,
                          outputs=[(c, np.float64), (c, np.float64)])
        for a, b in zip(fast, slow):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-9)


def check_batch_norm_training_kernels(x, dtype, rng):
    """Training-mode batch norm, forward (output, clamped by no ReLU, a ReLU or ReLU6, and the
    ReLU's mask) and input gradient (with and without the mask), with NaN, infinities and
    signed zeros: bit for bit, on one thread and on all."""
    c = x.shape[1]
    mean, inv_std, gamma, beta, coef, sum_g, sum_gx = (
        rng.uniform(-3, 3, c).astype(dtype) for _ in range(7))
    g = rng.uniform(-10, 10, x.shape).astype(dtype)
    for bounds in ((-np.inf, np.inf), (0.0, np.inf), (0.0, 6.0)):
        masked = bounds[0] == 0
        pair = [[np.zeros(x.shape, dtype), np.zeros(x.shape, np.uint8) if masked else None]
                for _ in range(2)]
        for module, outs in zip((fast, twin), pair):
            module.batch_norm_forward(x, mean, inv_std, gamma, beta, *bounds, *outs)
        for a, b in zip(*pair):
            np.testing.assert_array_equal(a, b)
        passes = pair[0][1]
        pair = both("batch_norm_backward", g, passes, x, mean, inv_std, coef, sum_g, sum_gx,
                    dtype(x.shape[0]), outputs=[(x.shape, dtype)])
        np.testing.assert_array_equal(*pair[0] + pair[1])


test_batch_norm_training_kernels, test_batch_norm_training_kernels_on_all_threads = (
    elementwise_cases(20, "claim2.backbones", "claim4.propagation")(
        check_batch_norm_training_kernels))


@pytest.mark.claim("claim2.backbones", "claim4.propagation")
@pytest.mark.parametrize("channels", [1, 8, 9, 16, 17, 20, 33, 64])
def test_channel_reductions_sum_each_column_in_row_order(channels):
    """Each column's sums are the sequential float64 sums over the rows, in row order
    (np.cumsum adds in order), on an input as large as a training batch's layer, whose
    blocks of columns run on all threads."""
    rng = np.random.default_rng(channels)
    x = rng.uniform(-5, 5, (PARALLEL_ROWS, channels)).astype(np.float32)
    g = rng.uniform(-5, 5, x.shape).astype(np.float32)
    mean, variance = np.empty(channels), np.empty(channels)
    fast.channel_moments(x, mean, variance)
    x64 = x.astype(np.float64)
    expected_mean = np.cumsum(x64, axis=0)[-1] / x.shape[0]
    np.testing.assert_array_equal(mean, expected_mean)
    np.testing.assert_array_equal(
        variance, np.cumsum((x64 - expected_mean) ** 2, axis=0)[-1] / x.shape[0])
    # xhat = (x - 0) * 1 = x
    zeros, ones = np.zeros(channels, np.float32), np.ones(channels, np.float32)
    for passes in (None, (x > 1).view(np.uint8)):
        gm = g if passes is None else g * (x > 1)
        sum_g, sum_gx = np.empty(channels), np.empty(channels)
        fast.batch_norm_gradient_sums(x, zeros, ones, g, passes, sum_g, sum_gx)
        g64 = gm.astype(np.float64)
        np.testing.assert_array_equal(sum_g, np.cumsum(g64, axis=0)[-1])
        np.testing.assert_array_equal(sum_gx, np.cumsum(g64 * x64, axis=0)[-1])


@pytest.mark.claim("claim4.update")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@given(values=hnp.arrays(np.float64, st.tuples(st.just(4), st.integers(1, 50)),
                         elements=st.floats(-10, 10)), t=st.integers(1, 1000))
def test_adam_update(dtype, values, t):
    """Elementwise, same expression in float64, rounded to the parameter's type: bit for bit."""
    p0, g, m0, v0 = (values[i].astype(dtype) for i in range(4))
    v0 = np.abs(v0)
    results = []
    for module in (fast, twin):
        p, m, v = p0.copy(), m0.copy(), v0.copy()
        module.adam_update(p, g, m, v, 1e-3, 0.9, 0.999, 1e-7, 1 - 0.9 ** t, 1 - 0.999 ** t)
        results.append((p, m, v))
    for a, b in zip(*results):
        assert np.array_equal(a, b)


@pytest.mark.claim("claim4.update")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adam_update_on_all_threads(dtype):
    """Enough elements for Adam's split across the threads (an eighth of
    PARALLEL_MIN_ELEMENTS): still bit for bit the twin's."""
    rng = np.random.default_rng(7)
    n = fast.PARALLEL_MIN_ELEMENTS // 8 + 7
    p0, g, m0 = (rng.uniform(-10, 10, n).astype(dtype) for _ in range(3))
    v0 = rng.uniform(0, 10, n).astype(dtype)
    results = []
    for module in (fast, twin):
        p, m, v = p0.copy(), m0.copy(), v0.copy()
        module.adam_update(p, g, m, v, 1e-3, 0.9, 0.999, 1e-7, 1 - 0.9 ** 3, 1 - 0.999 ** 3)
        results.append((p, m, v))
    for a, b in zip(*results):
        assert np.array_equal(a, b)


@pytest.mark.claim("claim4.update")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size", [0, 1, 50, PARALLEL_ROWS * 4])
def test_nonfinite_count(dtype, size):
    """The count of NaN and infinite values, on one thread and (the largest size) on all, with
    NaN, infinities, the largest finite values and signed zeros planted: the twin's."""
    rng = np.random.default_rng(size)
    x = rng.uniform(-1, 1, size).astype(dtype)
    for values in (x, with_specials(x, dtype)):
        values = values.copy()
        values[size // 2:size // 2 + 1] = np.finfo(dtype).max
        values[-1:] = np.inf if size > 10 else values[-1:]
        pair = both("nonfinite_count", values, outputs=[((1,), np.int64)])
        assert_same(pair)
        assert pair[0][0][0] == np.count_nonzero(~np.isfinite(values))
