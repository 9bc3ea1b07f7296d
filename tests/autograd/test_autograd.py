"""Gradient checks of every op and parameter, the conv/transposed-conv adjoint, and the engine.

Each check draws shapes, strides and paddings with hypothesis (1x1 images, odd sizes, stride 2
on odd sizes, one channel) and holds the analytic gradient of every element of every input to
central differences of L = <op(inputs), R> for a fixed random R in float64
(``refseg.autograd.gradcheck.check_gradients``, whose docstring derives the bound: only a wrong
gradient breaks it).
"""
import contextlib

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from refseg import autograd as ag
from refseg.engine.training.conv import forced_route
from refseg.engine.training.conv_routes import conv_route
from refseg.autograd.geometry import conv_output
from refseg.autograd.gradcheck import check_gradients
from refseg.backend import BACKENDS
from refseg.errors import InputError

pytestmark = pytest.mark.claim("claim4.propagation")


@st.composite
def window_cases(draw, transposed=False):
    """(N, H, W, C), kernel (kh, kw), strides, padding with a valid output."""
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 3))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    sh, sw = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    padding = draw(st.sampled_from(["valid", "same"]))
    low_h, low_w = (1, 1) if (padding == "same" or transposed) else (kh, kw)
    h, w = draw(st.integers(low_h, 6)), draw(st.integers(low_w, 6))
    return (n, h, w, c), (kh, kw), (sh, sw), padding, draw(st.integers(0, 2**16))


@pytest.mark.claim("claim2.fusion")
@pytest.mark.parametrize("backend", BACKENDS)
@given(case=window_cases(), cout=st.integers(1, 3), bias=st.booleans())
def test_conv2d_gradients(backend, case, cout, bias):
    shape, (kh, kw), strides, padding, seed = case
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(shape), rng.standard_normal((kh, kw, shape[3], cout))]
    if bias:
        arrays.append(rng.standard_normal(cout))
    check_gradients(lambda *t: ag.conv2d(*t, strides=strides, padding=padding, backend=backend),
                    arrays, seed)


@contextlib.contextmanager
def column_layout(layout):
    """Strided transposed convolutions inside take the training engine's route and compute
    their column matrix input-first (input x kernel^T, then col2im) or kernel-first (kernel x
    input^T, then col2im_transposed), whatever their size; "reference": the reference route.
    ``MonkeyPatch.context`` rather than the fixture: the test that uses it draws its examples
    with hypothesis."""
    from refseg.engine.training import conv_routes

    if layout == "reference":
        yield
        return
    limit = {"input-first": -1, "kernel-first": 1 << 62}[layout]
    with pytest.MonkeyPatch.context() as monkeypatch, forced_route(None):
        monkeypatch.setattr(conv_routes, "TRANSPOSED_COLUMNS_MAX_ROWS", limit)
        yield


@pytest.mark.claim("claim2.fusion")
@pytest.mark.parametrize("layout", ["reference", "input-first", "kernel-first"])
@pytest.mark.parametrize("backend", BACKENDS)
@given(case=window_cases(transposed=True), cout=st.integers(1, 3), bias=st.booleans())
def test_conv2d_transpose_gradients(backend, layout, case, cout, bias):
    shape, (kh, kw), strides, padding, seed = case
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(shape), rng.standard_normal((kh, kw, cout, shape[3]))]
    if bias:
        arrays.append(rng.standard_normal(cout))
    with column_layout(layout):
        check_gradients(lambda *t: ag.conv2d_transpose(*t, strides=strides, padding=padding,
                                                       backend=backend), arrays, seed)


ROUTES = ["im2col", "direct", "winograd", "winograd4"]


@pytest.mark.claim("claim2.fusion")
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("backend", BACKENDS)
@given(n=st.integers(1, 2), h=st.integers(1, 6), w=st.integers(1, 6), cin=st.integers(1, 3),
       cout=st.integers(1, 3), kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       padding=st.sampled_from(["valid", "same"]), bias=st.booleans(),
       seed=st.integers(0, 2**16))
def test_stride1_conv_routes(route, backend, n, h, w, cin, cout, kernel, padding, bias, seed):
    """Each stride-1 route of conv2d and of the transposed convolution forced on drawn shapes:
    the same values as im2col to rounding, and gradient checks. On the routes that go through
    BLAS the twins' backend ("numpy") is instead held to the compiled backend's values and
    gradients, which the same draws gradient-check there (its own central differences took
    most of this test's time), within 1e-12: not bit for bit, since float64 products with one
    output column can round 1 ulp apart through SciPy's two BLAS entry points (see
    ``test_tile_loop_equals_its_twin_bit_for_bit``). On the direct route the kernel gradient's
    twin agrees to a rounding bound only (``conv_small_weight`` sums in another order; see its
    kernel test), so the twins are gradient-checked there as the compiled kernels are.
    Winograd F(2x2, 3x3) and F(4x4, 3x3) compute 3x3 kernels only (a forced Winograd route
    sends other kernels to im2col): their draws use 3x3."""
    kh, kw = (3, 3) if route.startswith("winograd") else kernel
    if padding == "valid":
        h, w = max(h, kh), max(w, kw)
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal((n, h, w, cin)), rng.standard_normal((kh, kw, cin, cout))]
    if bias:
        arrays.append(rng.standard_normal(cout))
    ho, wo = (conv_output(size, k, 1, padding, "t")[0] for size, k in ((h, kh), (w, kw)))
    projection = rng.standard_normal((n, ho, wo, cout))
    def values_and_gradients(name, on, op=ag.conv2d, inputs=arrays, seed_grad=projection):
        with forced_route(name):
            assert conv_route((kh, kw, cin, cout), (1, 1), np.float64) == name
            tensors = [ag.Tensor(a.copy(), requires_grad=True) for a in inputs]
            y = op(*tensors, padding=padding, backend=on)
            if seed_grad is None:
                seed_grad = np.random.default_rng(seed + 1).standard_normal(y.shape)
            y.backward(seed_grad)
            return [y.data] + [t.grad for t in tensors]

    for a, b in zip(values_and_gradients(route, backend), values_and_gradients("im2col", backend)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    transposed = [arrays[0], arrays[1].transpose(0, 1, 3, 2).copy(), *arrays[2:]]
    if backend == "numpy" and route != "direct":
        for op, inputs, g in ((ag.conv2d, arrays, projection),
                              (ag.conv2d_transpose, transposed, None)):
            for a, b in zip(values_and_gradients(route, "numpy", op, inputs, g),
                            values_and_gradients(route, "cython", op, inputs, g)):
                np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
        return
    with forced_route(route):
        check_gradients(lambda *t: ag.conv2d(*t, padding=padding, backend=backend), arrays,
                        seed)
        check_gradients(lambda *t: ag.conv2d_transpose(*t, padding=padding, backend=backend),
                        transposed, seed)


@pytest.mark.claim("claim2.backbones")
@pytest.mark.parametrize("backend", BACKENDS)
@given(case=window_cases(), bias=st.booleans())
def test_depthwise_conv2d_gradients(backend, case, bias):
    shape, (kh, kw), strides, padding, seed = case
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(shape), rng.standard_normal((kh, kw, shape[3], 1))]
    if bias:
        arrays.append(rng.standard_normal(shape[3]))
    check_gradients(lambda *t: ag.depthwise_conv2d(*t, strides=strides, padding=padding,
                                                   backend=backend), arrays, seed)


@pytest.mark.claim("claim2.backbones")
@pytest.mark.parametrize("backend", BACKENDS)
@given(case=window_cases())
def test_max_pool2d_gradients(backend, case):
    """Values are a shuffled arithmetic sequence with gaps of 0.01 >> h: no ties, no kinks
    within a step."""
    shape, pool, strides, padding, seed = case
    rng = np.random.default_rng(seed)
    x = rng.permutation(np.arange(np.prod(shape), dtype=np.float64)).reshape(shape) * 0.01
    check_gradients(lambda t: ag.max_pool2d(t, pool, strides, padding, backend=backend), [x],
                    seed)


@pytest.mark.claim("claim2.backbones")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("training", [False, True])
@given(n=st.integers(1, 2), h=st.integers(1, 4), w=st.integers(1, 4), c=st.integers(1, 3),
       seed=st.integers(0, 2**16))
@example(n=1, h=1, w=2, c=2, seed=140)  # two samples per channel: the x gradient is rounding-sized
def test_batch_norm_gradients(backend, training, n, h, w, c, seed):
    if training and n * h * w == 1:
        return  # one value per channel: the batch variance is 0 and xhat is 0 for any x
    rng = np.random.default_rng(seed)
    mean, var = rng.standard_normal(c), rng.uniform(0.5, 2, c)

    def op(x, gamma, beta):
        return ag.batch_norm(x, gamma, beta, mean.copy(), var.copy(), training=training,
                             epsilon=1e-3, backend=backend)
    check_gradients(op, [rng.standard_normal((n, h, w, c)), rng.uniform(0.5, 2, c),
                         rng.standard_normal(c)], seed)


@pytest.mark.claim("claim2.backbones")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("cap", [None, 6.0])
@given(shape=st.tuples(st.integers(1, 2), st.integers(1, 4), st.integers(1, 4),
                       st.integers(1, 4)), seed=st.integers(0, 2**16))
def test_batch_norm_with_relu_is_relu_of_batch_norm_to_the_bit(backend, training, cap, shape,
                                                               seed):
    """batch_norm(relu=True) is relu(batch_norm(x)) (relu6 with cap 6): the output without a
    graph and with one, the gradients of x, gamma and beta, and the moving statistics, bit for
    bit. Inputs spread over [-40, 40] so that values fall below 0, between, and above 6."""
    rng = np.random.default_rng(seed)
    c = shape[3]
    x = (rng.standard_normal(shape) * 20).astype(np.float32)
    x.reshape(-1)[::3] = 0.0  # on the kink when mean is 0 and beta is 0 below
    gamma = rng.uniform(0.5, 2, c).astype(np.float32)
    beta = np.where(rng.random(c) < 0.5, 0, rng.standard_normal(c) * 3).astype(np.float32)
    mean = np.where(rng.random(c) < 0.5, 0, rng.standard_normal(c)).astype(np.float32)
    var = rng.uniform(0.5, 2, c).astype(np.float32)
    grad = rng.standard_normal(shape).astype(np.float32)
    relu = ag.relu if cap is None else ag.relu6

    def run(fused, record):
        moving = (mean.copy(), var.copy())
        xt, gt, bt = (ag.Tensor(a.copy(), requires_grad=record) for a in (x, gamma, beta))
        if fused:
            y = ag.batch_norm(xt, gt, bt, *moving, training=training, backend=backend,
                              relu=True, cap=cap)
        else:
            y = relu(ag.batch_norm(xt, gt, bt, *moving, training=training, backend=backend),
                     backend=backend)
        if record:
            y.backward(grad)
        return [y.data, *moving] + ([xt.grad, gt.grad, bt.grad] if record else [])

    for record in (False, True):
        for a, b in zip(run(True, record), run(False, record)):
            np.testing.assert_array_equal(a, b)
            assert np.array_equal(np.signbit(a), np.signbit(b))


@pytest.mark.claim("claim2.fusion")
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("cap", [None, 6.0])
@given(n=st.integers(1, 2), h=st.integers(1, 5), w=st.integers(1, 5), cin=st.integers(1, 3),
       cout=st.integers(1, 4), stride=st.integers(1, 2), bias=st.booleans(),
       seed=st.integers(0, 2**16))
def test_convolution_with_relu_is_relu_of_convolution_to_the_bit(route, backend, transposed,
                                                                 cap, n, h, w, cin, cout,
                                                                 stride, bias, seed):
    """conv2d / conv2d_transpose with ``relu`` (and ReLU6's cap) equal relu(conv(...)) on every
    route (stride 2 takes im2col): the output without a graph and with one, and the gradients
    of x, kernel and bias, bit for bit, signed zeros included."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, h, w, cin)) * 4).astype(np.float32)
    x.reshape(-1)[::4] = 0.0
    shape = (3, 3, cout, cin) if transposed else (3, 3, cin, cout)
    kernel = (rng.standard_normal(shape) * 2).astype(np.float32)
    b = (rng.standard_normal(cout) * 2).astype(np.float32) if bias else None
    op = ag.conv2d_transpose if transposed else ag.conv2d
    relu = ag.relu if cap is None else ag.relu6

    def run(fused, record):
        tensors = [ag.Tensor(a.copy(), requires_grad=record) for a in (x, kernel)]
        tensors.append(None if b is None else ag.Tensor(b.copy(), requires_grad=record))
        with forced_route(route):
            if fused:
                y = op(*tensors, strides=stride, padding="same", backend=backend, relu=True,
                       cap=cap)
            else:
                y = relu(op(*tensors, strides=stride, padding="same", backend=backend),
                         backend=backend)
        out = [y.data]
        if record:
            y.backward(rng_grad.standard_normal(y.shape).astype(np.float32))
            out += [t.grad for t in tensors if t is not None]
        return out

    for record in (False, True):
        results = []
        for fused in (True, False):
            rng_grad = np.random.default_rng(seed + 1)
            results.append(run(fused, record))
        for a, c in zip(*results):
            np.testing.assert_array_equal(a, c)
            assert np.array_equal(np.signbit(a), np.signbit(c))


@pytest.mark.claim("claim2.backbones", "claim2.fusion")
@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("cap", [None, 0.0, 6.0])
@given(n=st.integers(1, 2), h=st.integers(1, 6), w=st.integers(1, 6), cin=st.integers(1, 4),
       cout=st.integers(1, 5), kernel=st.sampled_from([1, 3]), stride=st.integers(1, 2),
       seed=st.integers(0, 2**16))
def test_convolution_with_batch_norm_is_batch_norm_of_convolution_to_the_bit(
        route, backend, dtype, cap, n, h, w, cin, cout, kernel, stride, seed):
    """conv2d(batch_norm=inference_affine(...)) equals batch_norm(conv2d(...)) at inference,
    and with ``relu`` (cap None: ReLU, 6: ReLU6; 0.0 here stands for no ReLU) their ReLU, bit
    for bit, signed zeros included, on every route (stride 2 and 1x1 kernels take im2col, the
    pointwise case one product), with the fold inside the product's tiles on im2col."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, h, w, cin)) * 4).astype(dtype)
    x.reshape(-1)[::4] = 0.0
    k = rng.standard_normal((kernel, kernel, cin, cout)).astype(dtype)
    gamma = rng.uniform(0.5, 2, cout).astype(dtype)
    beta = np.where(rng.random(cout) < 0.5, 0, rng.standard_normal(cout) * 3).astype(dtype)
    mean = np.where(rng.random(cout) < 0.5, 0, rng.standard_normal(cout)).astype(dtype)
    var = rng.uniform(0.5, 2, cout).astype(dtype)
    relu = cap != 0.0
    cap = None if cap == 0.0 else cap
    with forced_route(route), ag.no_grad():
        folded = ag.conv2d(x, k, strides=stride, padding="same", backend=backend, relu=relu,
                           cap=cap, batch_norm=ag.inference_affine(gamma, beta, mean, var,
                                                                   1e-3, dtype)).data
        apart = ag.batch_norm(ag.conv2d(x, k, strides=stride, padding="same", backend=backend),
                              gamma, beta, mean, var, epsilon=1e-3, backend=backend)
        if relu:
            apart = (ag.relu if cap is None else ag.relu6)(apart, backend=backend)
    unsigned = np.uint32 if dtype == np.float32 else np.uint64
    assert folded.dtype == dtype
    np.testing.assert_array_equal(folded.view(unsigned), apart.data.view(unsigned))


def test_a_batch_norm_folds_into_a_convolution_without_bias_at_inference_only():
    x, k = np.ones((1, 3, 3, 2), np.float32), np.ones((1, 1, 2, 2), np.float32)
    fold = ag.inference_affine(np.ones(2, np.float32), np.zeros(2, np.float32),
                               np.zeros(2, np.float32), np.ones(2, np.float32))
    with ag.no_grad(), pytest.raises(InputError, match="without bias and at inference only"):
        ag.conv2d(x, k, np.ones(2, np.float32), batch_norm=fold)
    with pytest.raises(InputError, match="without bias and at inference only"):
        ag.conv2d(x, ag.Tensor(k, requires_grad=True), batch_norm=fold)
    with ag.no_grad(), pytest.raises(InputError, match=r"batch-norm shift shape \(3,\)"):
        ag.conv2d(x, k, batch_norm=(fold[0], np.zeros(3, np.float32)))


@pytest.mark.claim("claim2.backbones")
@given(c=st.integers(1, 64), epsilon=st.sampled_from([1e-3, 1.001e-5]),
       seed=st.integers(0, 2**16))
def test_inference_affine_is_the_batch_norm_formula(c, epsilon, seed):
    """x * scale + shift against (x - mean) / sqrt(variance + epsilon) * gamma + beta in
    float64: scale within 2 float32 roundings of gamma / sqrt(variance + epsilon), and the
    normalised values within the roundings of a multiply-add on that scale."""
    rng = np.random.default_rng(seed)
    gamma, beta, mean = (rng.standard_normal(c).astype(np.float32) for _ in range(3))
    var = rng.uniform(0, 4, c).astype(np.float32)
    scale, shift = ag.inference_affine(gamma, beta, mean, var, epsilon)
    assert scale.dtype == shift.dtype == np.float32 and scale.shape == shift.shape == (c,)
    exact_scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + epsilon)
    eps = np.finfo(np.float32).eps
    assert np.all(np.abs(scale - exact_scale) <= 2 * eps * np.abs(exact_scale))
    x = rng.standard_normal((50, c)).astype(np.float32) * 5
    exact = (x - mean.astype(np.float64)) * exact_scale + beta
    got = x * scale + shift
    bound = 4 * eps * (np.abs(x * exact_scale) + np.abs(mean * exact_scale) + np.abs(beta))
    assert np.all(np.abs(got - exact) <= bound)


@pytest.mark.claim("claim4.propagation", "claim2.fusion", "claim2.backbones")
@given(values=st.lists(st.floats(-10, 10, width=32)
                       | st.sampled_from([0.0, -0.0, 6.0, np.nan, np.inf, -np.inf]),
                       min_size=1, max_size=40),
       cap=st.sampled_from([None, 6.0]))
def test_relu_mask_is_the_same_from_the_input_and_from_the_clamped_output(values, cap):
    """relu_passes with relu_bounds is where 0 < x (< cap; NaN: nowhere), and gives the same
    mask on the ReLU's output as on its input: the fused ops take it from their output."""
    from refseg.autograd.elementwise import UNCLAMPED, relu_bounds, relu_passes

    x = np.array(values, dtype=np.float32)
    bounds = relu_bounds(True, cap, "op")
    expected = (x > 0) if cap is None else (x > 0) & (x < cap)  # +inf passes a plain ReLU
    np.testing.assert_array_equal(relu_passes(x, bounds), expected)
    clamped = (ag.relu(x) if cap is None else ag.relu6(x)).data
    np.testing.assert_array_equal(relu_passes(clamped, bounds), expected)
    assert relu_bounds(False, None, "op") == UNCLAMPED
    with pytest.raises(InputError, match="op: a cap needs relu=True"):
        relu_bounds(False, 6.0, "op")


@pytest.mark.claim("claim2.fusion")
@given(shape=st.tuples(st.integers(1, 2), st.integers(1, 4), st.integers(1, 4),
                       st.integers(1, 4)), seed=st.integers(0, 2**16))
def test_elementwise_gradients(shape, seed):
    """relu and relu6 on values at least 0.01 from their kinks; softmax; add."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.02, 8, shape) * rng.choice([-1, 1], shape)
    x[np.abs(x - 6) < 0.01] = 5.9
    check_gradients(ag.relu, [x], seed)
    check_gradients(ag.relu6, [x], seed)
    check_gradients(ag.softmax, [rng.standard_normal(shape) * 3], seed)
    check_gradients(ag.add, [rng.standard_normal(shape), rng.standard_normal(shape)], seed)


@pytest.mark.claim("claim2.backbones")
@given(shape=st.tuples(st.integers(1, 2), st.integers(1, 4), st.integers(1, 4),
                       st.integers(1, 3)),
       pads=st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 2), st.integers(0, 2)),
       seed=st.integers(0, 2**16))
def test_zero_pad2d_gradients(shape, pads, seed):
    t, b, l, r = pads
    x = np.random.default_rng(seed).standard_normal(shape)
    check_gradients(lambda v: ag.zero_pad2d(v, ((t, b), (l, r))), [x], seed)


@pytest.mark.claim("claim4.update")
@given(shape=st.tuples(st.integers(1, 2), st.integers(1, 4), st.integers(1, 4),
                       st.integers(2, 4)), seed=st.integers(0, 2**16), integer=st.booleans())
def test_loss_gradients(shape, seed, integer):
    """Cross-entropy on softmax probabilities (inside the clip range) and MSE; labels given as
    integers or one-hot."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, shape[-1], shape[:-1])
    target = labels if integer else np.eye(shape[-1])[labels]
    logits = rng.standard_normal(shape)
    p = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    check_gradients(lambda q: ag.categorical_crossentropy(q, target), [p], seed)
    check_gradients(lambda q: ag.mean_squared_error(q, target), [p], seed)
    check_gradients(lambda z: ag.categorical_crossentropy(ag.softmax(z), target), [logits], seed)


@pytest.mark.claim("claim4.update")
def test_cross_entropy_known_answer():
    """Two pixels, probabilities (0.5, 0.5) and (0.9, 0.1), labels 0 and 1:
    L = -(log 0.5 + log 0.1) / 2."""
    p = np.array([[[[0.5, 0.5], [0.9, 0.1]]]])
    loss = ag.categorical_crossentropy(p, np.array([[[0, 1]]]))
    assert float(loss.data) == pytest.approx(-(np.log(0.5) + np.log(0.1)) / 2, rel=1e-15)


@pytest.mark.claim("claim2.fusion")
@pytest.mark.parametrize("backend", BACKENDS)
@given(n=st.integers(1, 2), ho=st.integers(1, 5), wo=st.integers(1, 5), cin=st.integers(1, 3),
       cout=st.integers(1, 3), k=st.integers(1, 4), s=st.integers(1, 3),
       padding=st.sampled_from(["valid", "same"]), seed=st.integers(0, 2**16))
def test_transposed_conv_is_the_adjoint_of_conv(backend, n, ho, wo, cin, cout, k, s, padding,
                                                seed):
    """<conv2d(x, W), y> == <x, conv2d_transpose(y, W)> with one kernel array W (conv reads it as
    (kh, kw, in, out), the transposed conv as (kh, kw, out, in)), for the input sizes that the
    transposed conv produces from the conv's output size."""
    if padding == "valid" and k < s:
        return  # conv skips input rows that the transposed conv (valid) pads: not adjoint
    h = ho * s if padding == "same" else (ho - 1) * s + k
    w = wo * s if padding == "same" else (wo - 1) * s + k
    assert conv_output(h, k, s, padding, "t")[0] == ho
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h, w, cin))
    kernel = rng.standard_normal((k, k, cin, cout))
    y = rng.standard_normal((n, ho, wo, cout))
    with ag.no_grad():
        left = (ag.conv2d(x, kernel, strides=s, padding=padding, backend=backend).data * y).sum()
        right = (x * ag.conv2d_transpose(y, kernel, strides=s, padding=padding,
                                         backend=backend).data).sum()
    assert left == pytest.approx(right, rel=1e-12, abs=1e-12)


def test_gradients_accumulate_for_a_reused_tensor():
    """y = x + x: dy/dx = 2 (the two paths add); a second backward adds again."""
    x = ag.Tensor(np.array([1.0, 2.0]), requires_grad=True)
    ag.add(x, x).backward(np.ones(2))
    assert x.grad.tolist() == [2.0, 2.0]
    ag.add(x, x).backward(np.ones(2))
    assert x.grad.tolist() == [4.0, 4.0]


def test_graph_is_freed_after_backward_and_no_grad_records_nothing():
    x = ag.Tensor(np.ones((1, 2, 2, 1)), requires_grad=True)
    y = ag.relu(ag.add(x, x))
    assert y.node is not None and y.node[0].name == "relu"
    y.backward(np.ones(y.shape))
    assert y.node is None
    with ag.no_grad():
        z = ag.relu(x)
    assert z.node is None and not z.requires_grad


def test_nodes_carry_their_op_name():
    x = ag.Tensor(np.ones((1, 3, 3, 1)), requires_grad=True)
    names = {
        "conv2d": ag.conv2d(x, np.ones((1, 1, 1, 1))), "relu6": ag.relu6(x),
        "max_pool2d": ag.max_pool2d(x, 1), "softmax": ag.softmax(x),
        "zero_pad2d": ag.zero_pad2d(x, ((1, 0), (0, 1))),
    }
    for name, tensor in names.items():
        assert tensor.node[0].name == name


@pytest.mark.parametrize("call, message", [
    (lambda: ag.conv2d(np.ones((1, 4, 4, 2)), np.ones((3, 3, 3, 1))),
     r"conv2d: kernel \(3, 3, 3, 1\).*input \(1, 4, 4, 2\)"),
    (lambda: ag.conv2d(np.ones((4, 4, 2)), np.ones((3, 3, 2, 1))), r"conv2d: input must be NHWC"),
    (lambda: ag.conv2d(np.ones((1, 2, 2, 1)), np.ones((3, 3, 1, 1))), r"conv2d: input length 2"),
    (lambda: ag.conv2d(np.ones((1, 4, 4, 1)), np.ones((3, 3, 1, 2)), np.ones(3)),
     r"conv2d: bias shape \(3,\)"),
    (lambda: ag.conv2d(np.ones((1, 4, 4, 1)), np.ones((3, 3, 1, 1)), padding="full"),
     r"conv2d: padding must be one of"),
    (lambda: ag.conv2d_transpose(np.ones((1, 4, 4, 2)), np.ones((3, 3, 2, 3))),
     r"conv2d_transpose: kernel \(3, 3, 2, 3\)"),
    (lambda: ag.depthwise_conv2d(np.ones((1, 4, 4, 2)), np.ones((3, 3, 2, 2))),
     r"depthwise_conv2d: kernel"),
    (lambda: ag.add(np.ones((1, 2)), np.ones((2, 1))), r"add: shapes differ"),
    (lambda: ag.add(np.ones(2, np.float32), np.ones(2)), r"add: inputs mix dtypes"),
    (lambda: ag.Tensor(np.ones(2, np.int64)), r"dtype int64"),
    (lambda: ag.batch_norm(np.ones((1, 2, 2, 3)), np.ones(2), np.ones(3), np.zeros(3),
                           np.ones(3)), r"batch_norm: gamma shape \(2,\)"),
    (lambda: ag.categorical_crossentropy(np.ones((1, 2, 2, 3)), np.ones((1, 2, 2, 2))),
     r"target shape"),
    (lambda: ag.categorical_crossentropy(np.ones((1, 2, 2, 3)), np.full((1, 2, 2), 3)),
     r"labels: values must lie in \[0, 3\)"),
    (lambda: ag.Tensor(np.ones(3), requires_grad=True).backward(), r"not a scalar"),
])
def test_bad_input_names_the_op_and_the_shapes(call, message):
    with pytest.raises(InputError, match=message):
        call()


@pytest.mark.claim("claim2.fusion")
@pytest.mark.parametrize("strides", [1, 2])
def test_blocked_convolution_matches_one_block(monkeypatch, strides):
    """Forward, kernel gradient and input gradient with the column matrix built in blocks of
    a few rows equal the single-block result (to float64 rounding: BLAS adds in other orders),
    and pass the gradient check."""
    from refseg.engine.training import conv_im2col

    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((2, 9, 7, 3)), rng.standard_normal((3, 3, 3, 4))

    def run():
        xt, wt = ag.Tensor(x.copy(), requires_grad=True), ag.Tensor(w.copy(), requires_grad=True)
        y = ag.conv2d(xt, wt, strides=strides, padding="same")
        y.backward(np.ones(y.shape))
        return y.data, xt.grad, wt.grad

    with forced_route("im2col"):  # 3 -> 4 channels would run direct
        whole = run()
        # one image row of columns per block
        monkeypatch.setattr(conv_im2col, "BLOCK_BYTES", 8 * 27 * 7)
        assert len(conv_im2col._row_blocks(2 * 9, 7, 27, 8)) == 18
        for a, b in zip(run(), whole):
            np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)
        check_gradients(lambda *t: ag.conv2d(*t, strides=strides, padding="same"), [x, w])


def test_frozen_inputs_get_no_gradient_computed():
    """An input that does not require a gradient (a frozen backbone tap) gets none."""
    x = ag.Tensor(np.ones((1, 4, 4, 2)))
    w = ag.Tensor(np.ones((3, 3, 2, 2)), requires_grad=True)
    for op in (lambda: ag.conv2d(x, w, padding="same"),
               lambda: ag.conv2d_transpose(x, w, strides=2, padding="same")):
        y = op()
        y.backward(np.ones(y.shape))
        assert x.grad is None and w.grad is not None
        w.grad = None


def test_leaf_gradients_never_alias_each_other_or_the_seed():
    """add hands one array to both inputs and the seed belongs to the caller: the leaves must
    get their own copies, so that accumulating into one cannot change another."""
    a = ag.Tensor(np.zeros(2), requires_grad=True)
    b = ag.Tensor(np.zeros(2), requires_grad=True)
    seed = np.ones(2)
    ag.add(a, b).backward(seed)
    a.grad += 5
    assert b.grad.tolist() == [1.0, 1.0] and seed.tolist() == [1.0, 1.0]
    c = ag.Tensor(np.ones(2), requires_grad=True)
    seed2 = np.array([2.0, 3.0])
    ag.relu(c).backward(seed2)      # relu returns a new array: taken without a copy
    c.grad += 1
    assert seed2.tolist() == [2.0, 3.0]


@pytest.mark.claim("claim2.backbones", "claim4.propagation")
@pytest.mark.parametrize("backend", BACKENDS)
@given(case=window_cases())
def test_inference_paths_equal_the_recording_paths(backend, case):
    """Under no_grad, max pooling, batch norm, the ReLUs and add take shorter paths that keep
    nothing for backward (the last four in compiled elementwise kernels); they give the
    recording paths' values (batch norm's multiply-add rounds differently: within 4 ulps of
    float64 of its largest term, |x - mean| * scale or |beta|, since the sum may cancel)."""
    shape, pool, strides, padding, seed = case
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal(shape) * 8, rng.standard_normal(shape)
    c = shape[3]
    gamma, beta = rng.uniform(0.5, 2, c), rng.standard_normal(c)
    mean, var = rng.standard_normal(c), rng.uniform(0.5, 2, c)

    def run(recording):
        t = ag.Tensor(x.copy(), requires_grad=recording)
        return [ag.max_pool2d(t, pool, strides, padding, backend=backend).data,
                ag.relu(t, backend=backend).data, ag.relu6(t, backend=backend).data,
                ag.add(t, y, backend=backend).data,
                ag.batch_norm(t, gamma, beta, mean, var, epsilon=1e-3, backend=backend).data]

    with ag.no_grad():
        fast = run(False)
    slow = run(True)
    for a, b in zip(fast[:4], slow[:4]):
        np.testing.assert_array_equal(a, b)
    scale = gamma / np.sqrt(var + 1e-3)
    terms = np.maximum(np.abs(x) * scale + np.abs(mean * scale), np.abs(beta))
    np.testing.assert_allclose(fast[4], slow[4], rtol=0,
                               atol=4 * np.finfo(float).eps * terms.max())


@pytest.mark.claim("claim4.propagation")
def test_pointwise_transposed_conv_output_survives_the_next_convolution():
    """A 1x1 stride-1 transposed convolution's output is its column matrix; it must not be a
    view of the training engine's shared im2col workspace that the next convolution
    overwrites."""
    from refseg.engine.training import training_engine

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 8, 8, 20)).astype(np.float32)
    w = rng.standard_normal((1, 1, 24, 20)).astype(np.float32)
    with training_engine():
        first = ag.conv2d_transpose(x, w, padding="same").data
        kept = first.copy()
        # a smaller column matrix than the first op's: it reuses the same workspace buffer
        # (and enough products per pixel to take the im2col route, not the direct kernels)
        ag.conv2d(rng.standard_normal((1, 4, 4, 4)).astype(np.float32),
                  rng.standard_normal((3, 3, 4, 8)).astype(np.float32), padding="same")
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_allclose(first, np.einsum("nhwc,oc->nhwo", x, w[0, 0]), rtol=1e-5,
                               atol=1e-5)


def _rms(a) -> float:
    return float(np.sqrt(np.mean(np.square(a))))


def _conv_and_gradients(arrays, projection, dtype, padding, route, transposed=False):
    """(y, dx, dw, db) of conv2d (or conv2d_transpose) in ``dtype`` on the forced ``route``,
    as float64."""
    op = ag.conv2d_transpose if transposed else ag.conv2d
    with forced_route(route):
        tensors = [ag.Tensor(a.astype(dtype), requires_grad=True) for a in arrays]
        y = op(*tensors, padding=padding)
        y.backward(projection.astype(dtype))
    return [r.astype(np.float64) for r in [y.data] + [t.grad for t in tensors]]


#: Bound on float32 Winograd error over the im2col route's (y and dx; the kernel gradient
#: takes F(2x2, 3x3) on both Winograd routes): see the accuracy test below.
WINOGRAD_ERROR_FACTOR = {"winograd": 4, "winograd4": 20}


@pytest.mark.claim("claim2.fusion")
@pytest.mark.parametrize("route", ["winograd", "winograd4"])
@pytest.mark.parametrize("padding", ["valid", "same"])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("shape", [(2, 13, 10, 40, 24), (1, 9, 7, 96, 64), (1, 6, 5, 576, 72),
                                   (1, 16, 16, 144, 256)])
def test_winograd_float32_accuracy_against_im2col(shape, transposed, padding, route):
    """float32 Winograd against a float64 reference: the output and input gradient within
    WINOGRAD_ERROR_FACTOR times the error of the im2col route, the kernel gradient within 4
    times (root-mean-square deviation over root-mean-square value; the largest deviation is a
    noisy statistic of a few elements).

    Why 4 for F(2x2, 3x3): it adds up to 4 inputs in B^T d B and 9 kernel values in G g G^T
    before the channel sums, and 4 values in A^T M A after them; each step adds rounding of
    the order of the terms it combines, a small constant factor over direct summation's
    (Lavin and Gray 2016; Barabasz et al. 2020 measure about 2 for F(2x2, 3x3)). Its channel
    sums are 9 times shorter than im2col's (Cin terms instead of 9 Cin), which works the other
    way. Measured here: 0.6-1.9 times im2col's error for y and dx, 0.9-1.6 for dw (fixed seeds:
    the same every run; the kernel gradient's sums over pixels are as long on both routes).

    Why 20 for F(4x4, 3x3): its transforms combine 6 values with weights up to 5 (B^T) and 8
    (A^T), so the terms entering the sums are larger than the result they cancel to, and the
    rounding grows with them (Barabasz et al. 2020 measure about 10 times direct summation's
    error for these points). Measured here: 3.1-13.9 times im2col's error for y, 3.7-9.2 for
    dx; about 1e-6 relative, 16 float32 ulps. The bias gradient takes the same path on every
    route: equal bit for bit. Shapes: odd sizes (partial tiles) and the decoder's channel
    counts (x9 96 -> 64, x13 576 -> 576 in part, x7b 144 -> 256)."""
    n, h, w, cin, cout = shape
    rng = np.random.default_rng(7)
    kernel_shape = (3, 3, cout, cin) if transposed else (3, 3, cin, cout)
    arrays = [rng.standard_normal((n, h, w, cin)),
              rng.standard_normal(kernel_shape) / np.sqrt(9 * cin), rng.standard_normal(cout)]
    out_hw = (h, w) if padding == "same" else ((h + 2, w + 2) if transposed else (h - 2, w - 2))
    projection = rng.standard_normal((n, *out_hw, cout))
    exact = _conv_and_gradients(arrays, projection, np.float64, padding, "im2col", transposed)
    im2col = _conv_and_gradients(arrays, projection, np.float32, padding, "im2col", transposed)
    winograd = _conv_and_gradients(arrays, projection, np.float32, padding, route, transposed)
    factors = (WINOGRAD_ERROR_FACTOR[route], WINOGRAD_ERROR_FACTOR[route], 4)
    for name, e, i, wi, factor in zip(("y", "dx", "dw"), exact, im2col, winograd, factors):
        error_i, error_w = _rms(i - e) / _rms(e), _rms(wi - e) / _rms(e)
        assert error_w <= factor * error_i, f"{name}: {route} {error_w:.2e}, im2col {error_i:.2e}"
    np.testing.assert_array_equal(winograd[3], im2col[3])


@pytest.mark.claim("claim2.fusion")
@pytest.mark.parametrize("route", ["winograd", "winograd4"])
def test_winograd_blocks_match_one_block(monkeypatch, route):
    """Forward and input gradient computed a few tiles at a time equal the single-block result
    (to float64 rounding: BLAS may add in another order for other row counts)."""
    from refseg.engine.training import conv_routes, conv_winograd

    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal((2, 9, 7, 3)), rng.standard_normal((3, 3, 3, 4)),
              rng.standard_normal(4)]
    projection = rng.standard_normal((2, 9, 7, 4))
    whole = _conv_and_gradients(arrays, projection, np.float64, "same", route)
    # 2 tiles per block (F(4x4): 3 x 2 tiles per image; F(2x2): 5 x 4): blocks end inside
    # image rows and across the two images
    planes = (conv_routes.WINOGRAD_TILE[route] + 2) ** 2
    monkeypatch.setattr(conv_winograd, "WINOGRAD_BLOCK_BYTES", planes * (3 + 4) * 8 * 2)
    for a, b in zip(_conv_and_gradients(arrays, projection, np.float64, "same", route), whole):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-13)


@pytest.mark.claim("claim4.propagation")
@pytest.mark.parametrize("route", ["winograd", "winograd4"])
def test_winograd_output_survives_the_next_convolution(route):
    """The Winograd path builds its tiles in the shared workspace; what it returns must be a
    new array, not a view that the next convolution overwrites."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 8, 8, 20)).astype(np.float32)
    w = rng.standard_normal((3, 3, 20, 24)).astype(np.float32)
    with forced_route(route):
        first = ag.conv2d(x, w, padding="same").data
        kept = first.copy()
        ag.conv2d(rng.standard_normal((1, 4, 4, 20)).astype(np.float32), w, padding="same")
    np.testing.assert_array_equal(first, kept)
    with forced_route("im2col"):
        np.testing.assert_allclose(first, ag.conv2d(x, w, padding="same").data, rtol=0,
                                   atol=1e-5 * np.abs(first).max())


@pytest.mark.claim("claim4.propagation")
def test_default_routes_of_stride1_convolutions():
    """Which route each kind of convolution takes by default (docs/performance.md gives the
    measurements behind each threshold): Winograd for float32 3x3 stride-1 convolutions with enough channels
    and tiles (F(4x4, 3x3) with enough 4x4 tiles, else F(2x2, 3x3)), im2col for float64 (the
    reference), other kernels and strides, few tiles or few channels, the direct kernels for
    tiny products."""
    f32, f64 = np.float32, np.float64
    assert conv_route((3, 3, 96, 64), (1, 1), f32, (1, 112, 112)) == "winograd4"  # x9: 784
    assert conv_route((3, 3, 144, 256), (1, 1), f32, (1, 56, 56)) == "winograd4"  # x7b: 196
    assert conv_route((3, 3, 256, 128), (1, 1), f32, (1, 28, 28)) == "winograd"  # x5: 49 4x4
    assert conv_route((3, 3, 256, 128), (1, 1), f32, (4, 28, 28)) == "winograd4"
    assert conv_route((3, 3, 576, 576), (1, 1), f32, (1, 14, 14)) == "winograd"  # x13: 49 tiles
    assert conv_route((3, 3, 512, 512), (1, 1), f32, (1, 7, 7)) == "im2col"  # conv5: 16 tiles
    assert conv_route((3, 3, 512, 512), (1, 1), f32, (10, 7, 7)) == "winograd"  # 160 in all
    assert conv_route((3, 3, 576, 576), (1, 1), f32, (4, 14, 14)) == "winograd"
    assert conv_route((3, 3, 512, 512), (1, 1), f32, (8, 7, 7)) == "im2col"  # conv5: 16 each
    assert conv_route((3, 3, 96, 64), (1, 1), f64, (1, 112, 112)) == "im2col"
    assert conv_route((3, 3, 96, 64), (2, 2), f32, (1, 56, 56)) == "im2col"
    assert conv_route((1, 1, 96, 64), (1, 1), f32, (1, 112, 112)) == "im2col"
    assert conv_route((3, 3, 8, 64), (1, 1), f32, (1, 112, 112)) == "im2col"
    assert conv_route((3, 3, 3, 3), (1, 1), f32, (1, 224, 224)) == "direct"
    # gradients route on their own, with fewer tiles
    grad = dict(gradient=True)
    assert conv_route((3, 3, 576, 576), (1, 1), f32, (1, 14, 14), **grad) == "winograd"  # x13
    assert conv_route((3, 3, 512, 512), (1, 1), f32, (1, 7, 7), **grad) == "im2col"  # 16
    assert conv_route((3, 3, 512, 512), (1, 1), f32, (2, 7, 7), **grad) == "winograd"  # 32
    assert conv_route((3, 3, 96, 64), (1, 1), f32, (1, 112, 112), **grad) == "winograd4"
    assert conv_route((3, 3, 96, 64), (1, 1), f64, (1, 112, 112), **grad) == "im2col"
    assert conv_route((3, 3, 3, 3), (1, 1), f32, (1, 224, 224), **grad) == "direct"


@pytest.mark.claim("claim4.propagation")
def test_gradients_take_their_own_route():
    """Two 7x7 images, 32 2x2 tiles: forward on im2col, gradients on F(2x2, 3x3). The
    output equals the im2col route's bit for bit, the gradients the Winograd route's."""
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((2, 7, 7, 24)), rng.standard_normal((3, 3, 24, 20)) / 15,
              rng.standard_normal(20)]
    projection = rng.standard_normal((2, 7, 7, 20))
    assert conv_route((3, 3, 24, 20), (1, 1), np.float32, (2, 7, 7)) == "im2col"
    assert conv_route((3, 3, 24, 20), (1, 1), np.float32, (2, 7, 7), gradient=True) == (
        "winograd")
    mixed = _conv_and_gradients(arrays, projection, np.float32, "same", None)
    im2col = _conv_and_gradients(arrays, projection, np.float32, "same", "im2col")
    winograd = _conv_and_gradients(arrays, projection, np.float32, "same", "winograd")
    np.testing.assert_array_equal(mixed[0], im2col[0])
    assert not np.array_equal(mixed[0], winograd[0])
    for name, a, b in zip(("dx", "dw", "db"), mixed[1:], winograd[1:]):
        np.testing.assert_array_equal(a, b, err_msg=name)
    assert not np.array_equal(mixed[2], im2col[2])


@pytest.mark.claim("claim2.fusion", "claim2.backbones")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", ["contiguous", "strided", "read-only"])
@given(shape=st.tuples(st.integers(1, 2), st.integers(1, 4), st.integers(1, 4),
                       st.integers(1, 4)), seed=st.integers(0, 2**16))
def test_reuse_input_writes_over_x_only_where_it_can_and_changes_no_value(backend, layout,
                                                                          shape, seed):
    """relu, relu6, add and inference batch norm (alone and with relu6) with ``reuse_input``:
    the same output, in x's own array when x is C-contiguous and writeable, else in a fresh one
    with x untouched; with a graph recorded, the same gradients, and batch norm (which keeps x)
    never writes over x."""
    rng = np.random.default_rng(seed)
    c = shape[3]
    gamma, beta = rng.uniform(0.5, 2, c).astype(np.float32), rng.standard_normal(c).astype(
        np.float32)
    mean, var = rng.standard_normal(c).astype(np.float32), rng.uniform(0.5, 2, c).astype(
        np.float32)
    ops = {
        "relu": lambda x, reuse: ag.relu(x, backend=backend, reuse_input=reuse),
        "relu6": lambda x, reuse: ag.relu6(x, backend=backend, reuse_input=reuse),
        "add": lambda x, reuse: ag.add(x, y, backend=backend, reuse_input=reuse),
        "batch_norm": lambda x, reuse: ag.batch_norm(x, gamma, beta, mean, var,
                                                     backend=backend, reuse_input=reuse),
        "batch_norm_relu6": lambda x, reuse: ag.batch_norm(
            x, gamma, beta, mean, var, backend=backend, reuse_input=reuse, relu=True, cap=6)}
    y = ag.Tensor((rng.standard_normal(shape) * 4).astype(np.float32))

    def operand():
        base = (rng.standard_normal((*shape[:3], 2 * c)) * 4).astype(np.float32)
        x = np.ascontiguousarray(base[..., :c]) if layout != "strided" else base[..., ::2]
        x.flags.writeable = layout != "read-only"
        return x

    for name, op in ops.items():
        x = operand()
        before = x.copy()
        fresh = op(ag.Tensor(before.copy()), False).data
        out = op(ag.Tensor(x), True).data
        np.testing.assert_array_equal(out, fresh, err_msg=name)
        in_place = x.flags.c_contiguous and x.flags.writeable  # a strided (..., 1) view can be
        assert in_place == (layout == "contiguous" or (layout == "strided" and x.size == 1))
        assert np.shares_memory(out, x) == in_place, name
        if not in_place:
            np.testing.assert_array_equal(x, before, err_msg=name)
    if layout != "contiguous":
        return
    seed_grad = rng.standard_normal(shape).astype(np.float32)
    for name, op in ops.items():
        grads, values = [], operand()
        for reuse in (False, True):
            x = ag.Tensor(values.copy(), requires_grad=True)
            kept = x.data.copy()
            op(x, reuse).backward(seed_grad)
            grads.append(x.grad)
            if name.startswith("batch_norm"):
                np.testing.assert_array_equal(x.data, kept)
        np.testing.assert_array_equal(grads[0], grads[1], err_msg=name)
