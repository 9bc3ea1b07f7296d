"""refseg's autograd engine against PyTorch: forward values and every gradient, op by op.

Each refseg op (NHWC, Keras weight layouts) is compared with an independent PyTorch expression
of the same Keras semantics (NCHW: the torch side permutes in and out, and transposes the
kernels, inside the differentiated expression, so torch's gradients come back directly in
refseg's layouts). Keras' "same" padding is applied on the torch side as an explicit, possibly
asymmetric ``F.pad`` (odd pixel at the bottom/right), and Keras' Conv2DTranspose "same" as a
crop of torch's full transposed convolution; ``tests/autograd/test_autograd_keras.py`` checks those
Keras rules against Keras itself.

Both sides get the same inputs and the same upstream gradient ``g`` (random, so that every
output element is weighted differently); refseg runs ``y.backward(g)``, torch
``y.backward(g)``. Exactness checks run in float64 on both sides; float32 checks run the same
cases in float32 on both sides. Every op with a ``backend`` argument runs on both backends.

Section C compares ``refseg.autograd.optim.Adam`` with ``torch.optim.Adam`` and ``keras.optimizers.Adam``
over 100 steps.

Run with ``-s`` to see the measured differences (lines starting ``crosscheck``).
"""
import functools
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refseg import autograd as ag
import compare
from anchors import require

BACKENDS = ("cython", "numpy")
DTYPES = ("float64", "float32")

# ---------------------------------------------------------------------------------------------
# Tolerances. U64 = 2^-53 ~ 1.1e-16 and U32 = 2^-24 ~ 6.0e-8 are the unit roundoffs. All inputs
# below are drawn from U(-1, 1) (so every product term has |term| <= 1), images have at most
# N = 2, sides <= 9, channels <= 4, kernels <= 4 x 4. The longest reductions are therefore
#   forward conv:           L = kh*kw*Cin          <= 4*4*4  = 64 terms,
#   dW, db, BN sums:        L = N*Ho*Wo (or N*H*W) <= 2*9*9  = 162 terms,
#   dx of conv:             L = kh*kw*Cout         <= 64 terms.
# refseg and torch add these terms in different orders (BLAS GEMM vs torch's conv kernels),
# so each side carries its own rounding error. Higham's worst-case bound for a sum of L terms is
# gamma_L * sum|t| ~ L * u * sum|t| <= L^2 * u, i.e. for L = 162: 2.9e-12 (float64) and 1.6e-3
# (float32) per side. That is the float64 atol (x2 sides, rounded up: 1e-11). In float32 the
# worst case is far from typical: rounding errors of a long sum behave like a random walk,
# ~ sqrt(L) * u * sum|t| <= 13 * 6e-8 * 162 ~ 1.3e-4, which is the float32 atol (2e-4 for two
# sides). rtol is set to the same order so that large outputs are not held to an absolute bound.
# Ops that only select or copy values (relu, relu6, max pool, zero pad) are exact, and add is
# one correctly rounded addition of the same two numbers on both sides: tolerance 0.
TOL = {
    #  op                  float64 (rtol, atol)   float32 (rtol, atol)
    "conv2d":           {"float64": (1e-11, 1e-11), "float32": (2e-4, 2e-4)},
    "conv2d_transpose": {"float64": (1e-11, 1e-11), "float32": (2e-4, 2e-4)},
    "depthwise":        {"float64": (1e-11, 1e-11), "float32": (2e-4, 2e-4)},
    # BN: a sum of L <= 162 terms, then a division by sqrt(var + eps) with var ~ 1/3 (U(-1,1)):
    # 1/std ~ 1.7 amplifies the sum's error; the backward formula subtracts two such sums
    # (sum g, sum g*xhat) from m*g and multiplies by gamma/std/m: same order as conv, x2.
    "batch_norm":       {"float64": (1e-11, 2e-11), "float32": (2e-4, 4e-4)},
    # softmax/CCE: exp/log are correctly rounded to ~1 ulp on both sides; the loss is a mean over
    # N*H*W <= 162 pixels of terms ~ log(C) <= 1.4; its gradient is (p - y)/pixels per element.
    "softmax_cce":      {"float64": (1e-12, 1e-13), "float32": (1e-5, 1e-6)},
    # MSE: a mean of <= 162 squares of |d| <= 2 (sum <= 648); gradient 2d/n is one rounding.
    "mse":              {"float64": (1e-12, 1e-13), "float32": (1e-5, 1e-6)},
    # A small network chains conv -> BN -> relu -> transposed conv -> add -> softmax -> CCE:
    # errors of each stage propagate through the next (gains ~ |W| * fan-in ~ a few), so it gets
    # ten times the single-op tolerance.
    "network":          {"float64": (1e-10, 1e-10), "float32": (2e-3, 2e-3)},
    # Selection, masking, one addition: both sides give the same bits; any difference is a bug.
    "max_pool2d":       {"float64": (0.0, 0.0), "float32": (0.0, 0.0)},
    "zero_pad2d":       {"float64": (0.0, 0.0), "float32": (0.0, 0.0)},
    "relu":             {"float64": (0.0, 0.0), "float32": (0.0, 0.0)},
    "relu6":            {"float64": (0.0, 0.0), "float32": (0.0, 0.0)},
    "add":              {"float64": (0.0, 0.0), "float32": (0.0, 0.0)},
}

#: Largest differences seen per (op, dtype): (max |ours - theirs|, max relative difference,
#: smallest atol), filled by assert_close.
MEASURED = {}


assert_close = functools.partial(compare.assert_close, measured=MEASURED, key_depth=2)


def check(op, dtype, ours, theirs, labels):
    """Compare (output, [gradients]) pairs with the tolerance of ``op`` in ``dtype``."""
    rtol, atol = TOL[op][dtype]
    (y1, g1), (y2, g2) = ours, theirs
    assert_close(f"{op}/{dtype}/forward", y1, y2, rtol, atol)
    assert len(g1) == len(g2) == len(labels)
    for label, a, b in zip(labels, g1, g2):
        assert a is not None, f"{op}: refseg gave no gradient for {label}"
        assert_close(f"{op}/{dtype}/d{label}", a, b, rtol, atol)


# ---------------------------------------------------------------------------------------------
# Running both sides

@pytest.fixture(scope="module")
def torch():
    """The anchor; ``require`` fails (never skips) when it is missing."""
    return require("torch")


def rand(rng, shape, dtype):
    return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)


def seed_of(*params):
    """A reproducible seed per parametrised case (hash() of a str varies between runs)."""
    return zlib.crc32(repr(params).encode())


def run_refseg(fn, inputs, upstream):
    """fn(*tensors) -> Tensor; returns (output, [grad of each input]).

    ``upstream`` is the gradient of the output, or a function of the output's shape and dtype
    returning it (None for a scalar loss); returns the upstream used as a third item.
    """
    tensors = [ag.Tensor(a.copy(), requires_grad=True) for a in inputs]
    y = fn(*tensors)
    g = upstream(y.shape, y.dtype) if callable(upstream) else upstream
    y.backward(None if g is None else g.astype(y.dtype))
    return (y.data, [t.grad for t in tensors]), g


def run_torch(torch, fn, inputs, upstream):
    """fn(*torch tensors) -> NHWC torch tensor; returns (output, [grad of each input])."""
    tensors = [torch.tensor(a, requires_grad=True) for a in inputs]
    y = fn(*tensors)
    y.backward(None if upstream is None else torch.tensor(upstream))
    return y.detach().numpy(), [t.grad.numpy() for t in tensors]


def both(torch, ours_fn, torch_fn, inputs, rng):
    """Run refseg and torch on the same inputs with the same random upstream gradient."""
    draw = lambda shape, dtype: rand(rng, shape, dtype) if len(shape) else None
    ours, g = run_refseg(ours_fn, inputs, draw)
    return ours, run_torch(torch, torch_fn, inputs, g)


def nchw(t):
    return t.permute(0, 3, 1, 2)


def nhwc(t):
    return t.permute(0, 2, 3, 1)


def keras_same_pads(size, kernel, stride):
    """Keras/TensorFlow "same": ceil(size/stride) outputs, odd padding pixel at the end."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def torch_pad_same(torch, xc, kernel, strides, value=0.0):
    (kh, kw), (sh, sw) = kernel, strides
    top, bottom = keras_same_pads(xc.shape[2], kh, sh)
    left, right = keras_same_pads(xc.shape[3], kw, sw)
    return torch.nn.functional.pad(xc, (left, right, top, bottom), value=value)


def torch_conv2d(torch, x, w, b, strides, padding):
    """Keras Conv2D in torch: kernel HWIO -> OIHW."""
    F = torch.nn.functional
    xc = nchw(x)
    if padding == "same":
        xc = torch_pad_same(torch, xc, w.shape[:2], strides)
    return nhwc(F.conv2d(xc, w.permute(3, 2, 0, 1).contiguous(), b, stride=strides))


def torch_conv2d_transpose(torch, x, w, b, strides, padding):
    """Keras Conv2DTranspose in torch: kernel (kh, kw, out, in) -> (in, out, kh, kw).

    torch gives the full transposed convolution, length (in - 1) * s + k per axis. Keras keeps
    in * s + max(k - s, 0) of it ("valid", zero-extended at the end when k < s) or in * s
    starting at max(k - s, 0) // 2 ("same"; checked against Keras in test_autograd_keras.py).
    """
    F = torch.nn.functional
    kernel = w.permute(3, 2, 0, 1).contiguous()
    full = F.conv_transpose2d(nchw(x), kernel, None, stride=strides)
    crops = []
    for axis, (size, k, s) in enumerate(zip(x.shape[1:3], w.shape[:2], strides)):
        out = size * s + (max(k - s, 0) if padding == "valid" else 0)
        start = 0 if padding == "valid" else max(k - s, 0) // 2
        crops.append((start, out))
    (t0, ho), (l0, wo) = crops
    extra_h = max(t0 + ho - full.shape[2], 0)
    extra_w = max(l0 + wo - full.shape[3], 0)
    full = F.pad(full, (0, extra_w, 0, extra_h))
    y = nhwc(full[:, :, t0:t0 + ho, l0:l0 + wo])
    return y if b is None else y + b


def torch_depthwise(torch, x, w, b, strides, padding):
    """Keras DepthwiseConv2D (multiplier 1) in torch: groups = C, kernel (kh, kw, C, 1) becomes
    (C, 1, kh, kw)."""
    F = torch.nn.functional
    xc = nchw(x)
    if padding == "same":
        xc = torch_pad_same(torch, xc, w.shape[:2], strides)
    kernel = w.permute(2, 3, 0, 1).contiguous()
    return nhwc(F.conv2d(xc, kernel, b, stride=strides, groups=x.shape[3]))


# ---------------------------------------------------------------------------------------------
# A. Single ops, forward and backward

# (N, H, W, Cin, Cout, kernel, stride, padding): odd and even sides, stride 2 on odd sides, 1x1
# images (valid only where the kernel fits: kernel 1, or "same"), single channels.
CONV_CASES = [
    (2, 7, 7, 3, 4, 3, 1, "same"),
    (2, 7, 7, 3, 4, 3, 2, "same"),     # odd side, stride 2: padding 1 + 1
    (1, 8, 6, 2, 3, 3, 2, "same"),     # even side, stride 2: padding 0 + 1 (odd pixel at end)
    (2, 9, 5, 1, 1, 3, 1, "valid"),
    (1, 9, 7, 4, 2, 3, 2, "valid"),
    (2, 5, 6, 3, 2, 1, 1, "valid"),    # 1x1 convolution (refseg's no-copy im2col path)
    (1, 5, 5, 3, 2, 1, 2, "same"),     # 1x1 stride 2 (ResNet projection shortcuts)
    (2, 1, 1, 2, 3, 1, 1, "valid"),    # 1x1 image
    (1, 1, 1, 2, 3, 3, 1, "same"),     # 1x1 image, 3x3 kernel: only the centre tap is used
    (1, 6, 6, 2, 2, 4, 2, "same"),     # even kernel: padding 1 + 1
    (1, 4, 7, 2, 3, (3, 1), (2, 1), "same"),  # rectangular kernel and strides
]


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


@pytest.mark.claim("claim4.propagation", "claim2.fusion")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,h,w,cin,cout,k,s,padding", CONV_CASES)
def test_conv2d(torch, n, h, w, cin, cout, k, s, padding, dtype, backend):
    rng = np.random.default_rng(seed_of(n, h, w, cin, cout, str(k), str(s), padding))
    kh, kw = _pair(k)
    inputs = [rand(rng, (n, h, w, cin), dtype), rand(rng, (kh, kw, cin, cout), dtype),
              rand(rng, (cout,), dtype)]
    strides = _pair(s)
    ours = lambda x, kern, b: ag.conv2d(x, kern, b, strides=s, padding=padding, backend=backend)
    theirs = lambda x, kern, b: torch_conv2d(torch, x, kern, b, strides, padding)
    check("conv2d", dtype, *both(torch, ours, theirs, inputs, rng), ["x", "kernel", "bias"])


@pytest.mark.claim("claim4.propagation", "claim2.fusion")
@given(st.integers(1, 2), st.integers(1, 7), st.integers(1, 7), st.integers(1, 3),
       st.integers(1, 3), st.integers(1, 3), st.integers(1, 2),
       st.sampled_from(["valid", "same"]), st.integers(0, 2**32 - 1))
@settings(max_examples=25)
def test_conv2d_drawn_geometry(n, h, w, cin, cout, k, s, padding, seed):
    """Drawn sizes, kernels and strides (float64, cython): geometry and gradients."""
    torch = require("torch")
    if padding == "valid" and min(h, w) < k:
        h, w = max(h, k), max(w, k)  # "valid" needs the window to fit
    rng = np.random.default_rng(seed)
    inputs = [rand(rng, (n, h, w, cin), "float64"), rand(rng, (k, k, cin, cout), "float64"),
              rand(rng, (cout,), "float64")]
    ours = lambda x, kern, b: ag.conv2d(x, kern, b, strides=s, padding=padding)
    theirs = lambda x, kern, b: torch_conv2d(torch, x, kern, b, (s, s), padding)
    check("conv2d", "float64", *both(torch, ours, theirs, inputs, rng), ["x", "kernel", "bias"])


# (N, H, W, Cin, Cout, kernel, stride, padding)
TRANSPOSE_CASES = [
    (2, 4, 4, 3, 2, 3, 2, "same"),     # the decoder's case: 3x3, stride 2, "same" (crop 0)
    (1, 5, 3, 2, 3, 3, 2, "same"),     # odd sides
    (1, 1, 1, 2, 2, 3, 2, "same"),     # 1x1 image
    (2, 5, 5, 2, 2, 3, 1, "same"),     # stride 1 "same": crop 1 each side
    (1, 4, 3, 2, 3, 2, 2, "same"),     # k = s: no overlap, no crop
    (1, 3, 4, 3, 2, 4, 2, "same"),     # crop (4 - 2) // 2 = 1
    (1, 3, 3, 2, 2, 3, 2, "valid"),    # 7x7
    (2, 3, 2, 1, 2, 4, 2, "valid"),
    (1, 3, 3, 2, 1, 2, 2, "valid"),
    (1, 3, 3, 2, 2, 1, 2, "valid"),    # k < s "valid": zero row/column at the end
    (1, 2, 3, 2, 2, 3, 1, "valid"),
    (1, 3, 3, 2, 2, 1, 2, "same"),     # k < s "same": crop from max(k - s, 0) // 2 = 0, and
    (1, 3, 2, 2, 1, 2, 3, "same"),     # zero-extended at the end (Keras; see the Keras tests)
]


@pytest.mark.claim("claim4.propagation", "claim2.fusion")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,h,w,cin,cout,k,s,padding", TRANSPOSE_CASES)
def test_conv2d_transpose(torch, n, h, w, cin, cout, k, s, padding, dtype, backend):
    rng = np.random.default_rng(seed_of(n, h, w, cin, cout, k, s, padding))
    inputs = [rand(rng, (n, h, w, cin), dtype), rand(rng, (k, k, cout, cin), dtype),
              rand(rng, (cout,), dtype)]
    ours = lambda x, kern, b: ag.conv2d_transpose(x, kern, b, strides=s, padding=padding,
                                                  backend=backend)
    theirs = lambda x, kern, b: torch_conv2d_transpose(torch, x, kern, b, (s, s), padding)
    check("conv2d_transpose", dtype, *both(torch, ours, theirs, inputs, rng),
          ["x", "kernel", "bias"])


# (N, H, W, C, kernel, stride, padding)
DEPTHWISE_CASES = [
    (2, 7, 7, 3, 3, 1, "same"),        # MobileNetV2's stride-1 depthwise
    (1, 7, 5, 4, 3, 2, "same"),
    (1, 6, 6, 2, 3, 2, "same"),
    (2, 5, 6, 1, 3, 1, "valid"),       # one channel
    (1, 8, 8, 3, 3, 2, "valid"),
    (1, 1, 1, 3, 3, 1, "same"),        # 1x1 image
]


@pytest.mark.claim("claim4.propagation", "claim2.backbones")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n,h,w,c,k,s,padding", DEPTHWISE_CASES)
def test_depthwise_conv2d(torch, n, h, w, c, k, s, padding, dtype, backend):
    rng = np.random.default_rng(seed_of(n, h, w, c, k, s, padding))
    inputs = [rand(rng, (n, h, w, c), dtype), rand(rng, (k, k, c, 1), dtype),
              rand(rng, (c,), dtype)]
    ours = lambda x, kern, b: ag.depthwise_conv2d(x, kern, b, strides=s, padding=padding,
                                                  backend=backend)
    theirs = lambda x, kern, b: torch_depthwise(torch, x, kern, b, (s, s), padding)
    check("depthwise", dtype, *both(torch, ours, theirs, inputs, rng), ["x", "kernel", "bias"])


@pytest.mark.claim("claim4.propagation", "claim2.backbones")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("side", [8, 6, 7])
def test_mobilenetv2_stride2_block(torch, side, dtype, backend):
    """MobileNetV2's downsampling: ZeroPadding2D(((0, 1), (0, 1))) then depthwise 3x3 "valid"
    stride 2 (Keras' correct_pad for even sides); also on an odd side."""
    rng = np.random.default_rng(side)
    inputs = [rand(rng, (2, side, side, 3), dtype), rand(rng, (3, 3, 3, 1), dtype)]

    def ours(x, kern):
        padded = ag.zero_pad2d(x, ((0, 1), (0, 1)))
        return ag.depthwise_conv2d(padded, kern, strides=2, padding="valid", backend=backend)

    def theirs(x, kern):
        xc = torch.nn.functional.pad(nchw(x), (0, 1, 0, 1))
        kernel = kern.permute(2, 3, 0, 1).contiguous()
        return nhwc(torch.nn.functional.conv2d(xc, kernel, stride=2, groups=3))

    check("depthwise", dtype, *both(torch, ours, theirs, inputs, rng), ["x", "kernel"])


@pytest.mark.claim("claim4.propagation", "claim2.backbones")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("padding", [((0, 1), (0, 1)), ((1, 1), (1, 1)), ((3, 0), (2, 1))])
def test_zero_pad2d(torch, padding, dtype):
    rng = np.random.default_rng(3)
    (t, b), (l, r) = padding
    ours = lambda x: ag.zero_pad2d(x, padding)
    theirs = lambda x: nhwc(torch.nn.functional.pad(nchw(x), (l, r, t, b)))
    check("zero_pad2d", dtype, *both(torch, ours, theirs, [rand(rng, (2, 5, 4, 3), dtype)], rng),
          ["x"])


def distinct(rng, shape, dtype):
    """Values without ties (a random permutation of a grid), so the window maximum is unique
    and the routing of the gradient does not depend on tie-breaking."""
    n = int(np.prod(shape))
    return ((rng.permutation(n) - n / 2) / n).reshape(shape).astype(dtype)


# (H, W, pool, stride, padding): ResNet50's pool1 (3, 2 after a 1-pixel zero pad), the 1x1
# stride-2 shortcut pooling, overlapping and "same" windows on odd sides.
POOL_CASES = [
    (7, 7, 2, None, "valid"),
    (9, 8, 3, 2, "valid"),
    (7, 7, 1, 2, "valid"),
    (7, 6, 3, 2, "same"),
    (5, 5, 2, None, "same"),
    (6, 6, 3, 1, "same"),
    (1, 1, 2, 2, "same"),
]


@pytest.mark.claim("claim4.propagation", "claim2.backbones")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("h,w,pool,stride,padding", POOL_CASES)
def test_max_pool2d(torch, h, w, pool, stride, padding, dtype, backend):
    rng = np.random.default_rng(h * 100 + w * 10 + pool)
    x = distinct(rng, (2, h, w, 3), dtype)
    s = pool if stride is None else stride
    ours = lambda t: ag.max_pool2d(t, pool, stride, padding, backend=backend)

    def theirs(t):
        xc = nchw(t)
        if padding == "same":  # Keras pads the window with -inf (padding never wins)
            xc = torch_pad_same(torch, xc, (pool, pool), (s, s), value=-np.inf)
        return nhwc(torch.nn.functional.max_pool2d(xc, pool, s))

    check("max_pool2d", dtype, *both(torch, ours, theirs, [x], rng), ["x"])


@pytest.mark.claim("claim4.propagation", "claim2.backbones")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("epsilon", [1e-3, 1.001e-5])
def test_batch_norm_inference(torch, epsilon, dtype, backend):
    rng = np.random.default_rng(11)
    c = 4
    x, gamma, beta = rand(rng, (2, 5, 3, c), dtype), rand(rng, (c,), dtype), rand(rng, (c,), dtype)
    mean = rng.uniform(-0.5, 0.5, c).astype(dtype)
    var = rng.uniform(0.2, 2.0, c).astype(dtype)
    mean0, var0 = mean.copy(), var.copy()
    ours = lambda t, g, b: ag.batch_norm(t, g, b, mean, var, training=False, epsilon=epsilon,
                                         backend=backend)
    theirs = lambda t, g, b: nhwc(torch.nn.functional.batch_norm(
        nchw(t), torch.tensor(mean0), torch.tensor(var0), g, b, training=False, eps=epsilon))
    check("batch_norm", dtype, *both(torch, ours, theirs, [x, gamma, beta], rng),
          ["x", "gamma", "beta"])
    # Inference leaves the moving statistics alone (three forward passes ran above).
    assert np.array_equal(mean, mean0) and np.array_equal(var, var0)


@pytest.mark.claim("claim4.propagation", "claim2.backbones")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 5, 3, 4), (1, 9, 9, 1), (3, 1, 1, 2)])
def test_batch_norm_training(torch, shape, dtype, backend):
    """Batch statistics: output and gradients of x, gamma, beta as torch's training mode.

    The moving statistics differ by convention: torch keeps
    ``running = (1 - m) * running + m * batch`` with the UNBIASED batch variance, Keras (and
    refseg) ``moving = moving * momentum + batch * (1 - momentum)`` with the BIASED one. refseg's
    update is checked against the Keras formula computed here by hand, and against torch's
    running statistics (with m = 1 - momentum) after undoing the Bessel correction.
    """
    rng = np.random.default_rng(shape[1] * 7 + shape[0])
    c, momentum, eps = shape[3], 0.99, 1e-3
    x, gamma, beta = rand(rng, shape, dtype), rand(rng, (c,), dtype), rand(rng, (c,), dtype)
    start_mean = rng.uniform(-0.5, 0.5, c).astype(dtype)
    start_var = rng.uniform(0.2, 2.0, c).astype(dtype)

    mean, var = start_mean.copy(), start_var.copy()
    upstream = rand(rng, shape, dtype)
    ours, _ = run_refseg(lambda t, g, b: ag.batch_norm(t, g, b, mean, var, training=True,
                                                       epsilon=eps, momentum=momentum,
                                                       backend=backend),
                         [x, gamma, beta], upstream)
    running_mean, running_var = torch.tensor(start_mean), torch.tensor(start_var)
    theirs = run_torch(torch, lambda t, g, b: nhwc(torch.nn.functional.batch_norm(
        nchw(t), running_mean, running_var, g, b, training=True, momentum=1 - momentum,
        eps=eps)), [x, gamma, beta], upstream)
    check("batch_norm", dtype, ours, theirs, ["x", "gamma", "beta"])

    # Moving statistics after one training step, the Keras formula by hand (float64 moments).
    rtol, atol = TOL["batch_norm"][dtype]
    flat = x.astype(np.float64).reshape(-1, c)
    batch_mean, batch_var = flat.mean(axis=0), flat.var(axis=0)  # biased (ddof=0), as Keras
    want_mean = start_mean * momentum + batch_mean * (1 - momentum)
    want_var = start_var * momentum + batch_var * (1 - momentum)
    assert_close(f"batch_norm/{dtype}/moving_mean", mean, want_mean.astype(dtype), rtol, atol)
    assert_close(f"batch_norm/{dtype}/moving_variance", var, want_var.astype(dtype), rtol, atol)
    # torch's running mean is the same formula; its running variance used var * m / (m - 1).
    m = flat.shape[0]
    assert_close(f"batch_norm/{dtype}/running_mean(torch)", mean, running_mean.numpy(),
                 rtol, atol)
    if m > 1:
        bessel = (1 - momentum) * batch_var * (1 / (m - 1))  # unbiased minus biased, weighted
        assert_close(f"batch_norm/{dtype}/running_var(torch)-bessel", var,
                     (running_var.numpy() - bessel).astype(dtype), rtol, atol)


@pytest.mark.claim("claim4.propagation", "claim2.backbones", "claim2.fusion")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", ["relu", "relu6", "add"])
def test_elementwise(torch, op, dtype):
    """relu, relu6 (torch hardtanh(0, 6)) and add. Values avoid the kinks 0 and 6 (both
    libraries give gradient 0 there, but a tie is not what is being checked)."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-8, 8, (2, 4, 5, 3))
    x[np.abs(x) < 1e-3] = 0.5
    x[np.abs(x - 6) < 1e-3] = 5.5
    x = x.astype(dtype)
    if op == "add":
        # y + x with y = relu(x): x feeds two branches, so refseg must accumulate its gradient.
        ours = lambda t, u: ag.add(ag.add(t, u), ag.relu(t))
        theirs = lambda t, u: t + u + torch.relu(t)
        inputs, labels = [x, rand(rng, x.shape, dtype)], ["x", "y"]
    else:
        ours = getattr(ag, op)
        theirs = (torch.relu if op == "relu"
                  else lambda t: torch.nn.functional.hardtanh(t, 0.0, 6.0))
        inputs, labels = [x], ["x"]
    check(op, dtype, *both(torch, ours, theirs, inputs, rng), labels)


def torch_cce(torch, p, y):
    """Keras categorical cross-entropy per pixel, averaged: -(y log clip(p)).sum(-1).mean()."""
    return -(y * torch.log(torch.clamp(p, 1e-7, 1 - 1e-7))).sum(-1).mean()


@pytest.mark.claim("claim4.update", "claim2.fusion")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("labels", ["one_hot", "integer"])
@pytest.mark.parametrize("shape", [(2, 5, 3, 2), (1, 9, 9, 3), (2, 1, 1, 4)])
def test_softmax_cross_entropy(torch, shape, labels, dtype):
    """Softmax over channels then the per-pixel cross-entropy: loss and d loss / d logits."""
    rng = np.random.default_rng(shape[1])
    logits = rng.uniform(-3, 3, shape).astype(dtype)  # probabilities stay inside the clip
    classes = rng.integers(0, shape[3], shape[:3])
    target = classes if labels == "integer" else np.eye(shape[3], dtype=dtype)[classes]
    y = torch.tensor(np.eye(shape[3], dtype=dtype)[classes])
    ours = lambda t: ag.categorical_crossentropy(ag.softmax(t), target)
    theirs = lambda t: torch_cce(torch, torch.softmax(t, dim=-1), y)
    check("softmax_cce", dtype, *both(torch, ours, theirs, [logits], rng), ["logits"])


@pytest.mark.claim("claim4.update")
@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_clipping(torch, dtype):
    """Probabilities beyond [1e-7, 1 - 1e-7] are clipped: value log(1e-7) and zero gradient
    there (torch's clamp has the same rule away from the exact bounds)."""
    p = np.array([[[[1e-9, 1 - 1e-9], [0.3, 0.7]], [[0.5, 0.5], [1e-12, 1.0]]]], dtype=dtype)
    y = np.array([[[[1, 0], [0, 1]], [[1, 0], [1, 0]]]], dtype=dtype)
    ours = lambda t: ag.categorical_crossentropy(t, y)
    theirs = lambda t: torch_cce(torch, t, torch.tensor(y))
    check("softmax_cce", dtype, *both(torch, ours, theirs, [p], np.random.default_rng(0)),
          ["p"])


@pytest.mark.claim("claim4.update")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 5, 3, 2), (1, 9, 9, 1)])
def test_mean_squared_error(torch, shape, dtype):
    rng = np.random.default_rng(shape[1])
    pred, target = rand(rng, shape, dtype), rand(rng, shape, dtype)
    ours = lambda t: ag.mean_squared_error(t, target)
    theirs = lambda t: torch.nn.functional.mse_loss(t, torch.tensor(target))
    check("mse", dtype, *both(torch, ours, theirs, [pred], rng), ["prediction"])


@pytest.mark.claim("claim4.propagation", "claim4.update", "claim2.fusion", "claim2.backbones")
@pytest.mark.parametrize("dtype", DTYPES)
def test_small_network(torch, dtype):
    """A decoder-like chain, one backward pass: every parameter's gradient against torch.

    conv 3x3 s2 same -> BN (training) -> relu -> conv-transpose 3x3 s2 same -> add skip (1x1
    conv of the input) -> relu6 -> max pool 2 -> depthwise 3x3 same -> softmax -> CCE.
    """
    rng = np.random.default_rng(2024)
    n, h, w, c, k = 2, 6, 6, 3, 4
    names = ["x", "w1", "b1", "gamma", "beta", "w2", "b2", "w3", "w4", "b4"]
    shapes = [(n, h, w, c), (3, 3, c, k), (k,), (k,), (k,), (3, 3, k, k), (k,), (1, 1, c, k),
              (3, 3, k, 1), (k,)]
    inputs = [rand(rng, s, dtype) for s in shapes]
    inputs[3] = (1 + 0.5 * inputs[3]).astype(dtype)  # gamma around 1
    labels = rng.integers(0, k, (n, h // 2, w // 2))
    stats = (np.zeros(k, dtype), np.ones(k, dtype))

    def ours(x, w1, b1, gamma, beta, w2, b2, w3, w4, b4):
        y = ag.conv2d(x, w1, b1, strides=2, padding="same")
        y = ag.relu(ag.batch_norm(y, gamma, beta, *stats, training=True))
        y = ag.conv2d_transpose(y, w2, b2, strides=2, padding="same")
        y = ag.relu6(ag.add(y, ag.conv2d(x, w3)))
        y = ag.max_pool2d(y, 2)
        y = ag.softmax(ag.depthwise_conv2d(y, w4, b4, padding="same"))
        return ag.categorical_crossentropy(y, labels)

    def theirs(x, w1, b1, gamma, beta, w2, b2, w3, w4, b4):
        F = torch.nn.functional
        y = torch_conv2d(torch, x, w1, b1, (2, 2), "same")
        y = nhwc(F.batch_norm(nchw(y), None, None, gamma, beta, training=True, eps=1e-3))
        y = torch.relu(y)
        y = torch_conv2d_transpose(torch, y, w2, b2, (2, 2), "same")
        y = F.hardtanh(y + torch_conv2d(torch, x, w3, None, (1, 1), "valid"), 0.0, 6.0)
        y = nhwc(F.max_pool2d(nchw(y), 2))
        y = torch.softmax(torch_depthwise(torch, y, w4, b4, (1, 1), "same"), dim=-1)
        return torch_cce(torch, y, torch.tensor(np.eye(k, dtype=dtype)[labels]))

    check("network", dtype, *both(torch, ours, theirs, inputs, rng), names)


# ---------------------------------------------------------------------------------------------
# C. Adam: 100 steps of a small least-squares problem whose gradients refseg's backward computes.
#
# Every optimiser below is fed, at its own current parameters, the gradient that refseg computes
# for the same loss (``ls_gradients``), so trajectories differ only through the optimisers.
# The learning rate 2^-7 is exactly representable in float32: Keras keeps the learning rate in
# a float32 variable even for float64 parameters, and 0.001 would be rounded there (relative
# 5e-8), a difference that has nothing to do with the update rule.

ADAM_LR, ADAM_EPS, ADAM_STEPS = 2.0 ** -7, 1e-7, 100


def ls_problem():
    """Inputs, targets and the start of a 1x1-convolution least-squares fit (float64)."""
    rng = np.random.default_rng(99)
    x = rng.uniform(-1, 1, (2, 4, 4, 3))
    true_kernel, true_bias = rng.uniform(-1, 1, (1, 1, 3, 2)), rng.uniform(-1, 1, 2)
    target = x @ true_kernel[0, 0] + true_bias + 0.05 * rng.standard_normal((2, 4, 4, 2))
    start = [rng.uniform(-1, 1, (1, 1, 3, 2)), np.zeros(2)]
    return x, target, start


def ls_loss(x, target, kernel, bias):
    return ag.mean_squared_error(ag.conv2d(x, kernel, bias), target)


def ls_gradients(params):
    """refseg's gradient of the least-squares loss at the given parameter arrays."""
    x, target, _ = ls_problem()
    kernel, bias = (ag.Tensor(np.array(p, dtype=np.float64), requires_grad=True) for p in params)
    ls_loss(x, target, kernel, bias).backward()
    return [kernel.grad, bias.grad]


def flat(arrays):
    return np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in arrays])


def adam_refseg(steps, optimiser=None, params=None):
    """refseg.autograd.optim.Adam on the problem; returns (trajectory (steps, P), optimiser, params)."""
    from refseg.autograd.optim import Adam

    x, target, start = ls_problem()
    if params is None:
        params = [ag.Tensor(a.copy(), requires_grad=True, name=n)
                  for a, n in zip(start, ("kernel", "bias"))]
    if optimiser is None:
        optimiser = Adam(params, learning_rate=ADAM_LR, epsilon=ADAM_EPS)
    trajectory = []
    for _ in range(steps):
        optimiser.zero_grad()
        ls_loss(x, target, *params).backward()
        optimiser.step()
        trajectory.append(flat([p.data for p in params]))
    return np.array(trajectory), optimiser, params


def adam_numpy(form, steps=ADAM_STEPS, lr=ADAM_LR, b1=0.9, b2=0.999, eps=ADAM_EPS):
    """Both published placements of epsilon, emulated in float64:

    "torch": theta -= lr * m_hat / (sqrt(v_hat) + eps)                (Kingma & Ba, torch)
    "keras": theta -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)  (Keras 3)

    Multiplying the Keras form out, it is the torch form with eps / sqrt(1 - b2^t) in place of
    eps: a larger epsilon (31.6x at t = 1, 3.2x at t = 100).
    """
    theta = [a.copy() for a in ls_problem()[2]]
    m = [np.zeros_like(a) for a in theta]
    v = [np.zeros_like(a) for a in theta]
    trajectory = []
    for t in range(1, steps + 1):
        for p, g, mi, vi in zip(theta, ls_gradients(theta), m, v):
            mi[...] = b1 * mi + (1 - b1) * g
            vi[...] = b2 * vi + (1 - b2) * g * g
            if form == "torch":
                p -= lr * (mi / (1 - b1 ** t)) / (np.sqrt(vi / (1 - b2 ** t)) + eps)
            else:
                p -= lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t) * mi / (np.sqrt(vi) + eps)
        trajectory.append(flat(theta))
    return np.array(trajectory)


def adam_torch(torch, steps=ADAM_STEPS):
    params = [torch.tensor(a.copy()) for a in ls_problem()[2]]
    optimiser = torch.optim.Adam(params, lr=ADAM_LR, betas=(0.9, 0.999), eps=ADAM_EPS)
    trajectory = []
    for _ in range(steps):
        for p, g in zip(params, ls_gradients([p.numpy() for p in params])):
            p.grad = torch.tensor(g)
        optimiser.step()
        trajectory.append(flat([p.numpy() for p in params]))
    return np.array(trajectory)


def adam_keras(keras, steps=ADAM_STEPS):
    variables = [keras.Variable(a.copy(), dtype="float64") for a in ls_problem()[2]]
    optimiser = keras.optimizers.Adam(learning_rate=ADAM_LR, beta_1=0.9, beta_2=0.999,
                                      epsilon=ADAM_EPS)
    trajectory = []
    for _ in range(steps):
        values = [keras.ops.convert_to_numpy(v) for v in variables]
        grads = [keras.ops.convert_to_tensor(g) for g in ls_gradients(values)]
        optimiser.apply_gradients(zip(grads, variables))
        trajectory.append(flat([keras.ops.convert_to_numpy(v) for v in variables]))
    return np.array(trajectory)


# Trajectory tolerance between two implementations of the SAME update formula in float64: per
# step they differ by a few roundings (relative ~ 4 U64 ~ 5e-16) of an update whose size is at
# most lr * (1 - b1) / sqrt(1 - b2) ~ 3.2 lr ~ 0.025 (Kingma & Ba, section 2.1), i.e. ~1e-17,
# and such differences are then carried along by the dynamics (a perturbation d of theta moves
# the next gradient by H d, H the loss's Hessian, ||H|| ~ 1 here, and Adam divides by
# sqrt(v_hat) ~ |g| ~ 0.1-1). Over 100 steps even a 10x-per-10-steps growth stays far below
# 1e-12, so 1e-12 leaves margin (measured: 1.7e-16) while being 6 orders of magnitude below the
# epsilon-placement difference measured in test_adam_against_keras (4.5e-6 over 100 steps), so
# it tells the torch form from the Keras form.
ADAM_SAME_FORM_ATOL = 1e-12


@pytest.mark.claim("claim4.update")
def test_adam_against_torch(torch):
    ours, _, _ = adam_refseg(ADAM_STEPS)
    theirs = adam_torch(torch)
    assert_close("adam/float64/vs torch.optim.Adam", ours, theirs, 0.0, ADAM_SAME_FORM_ATOL)
    assert_close("adam/float64/vs the torch form in NumPy", ours, adam_numpy("torch"), 0.0,
                 ADAM_SAME_FORM_ATOL)
    assert np.abs(ours[-1] - ours[0]).max() > 0.1  # the parameters really moved


@pytest.mark.claim("claim4.update")
def test_adam_against_keras():
    """Keras 3's Adam places epsilon differently (see adam_numpy); refseg follows torch.

    Step 1 from the same start is analytic: m_hat = g, sqrt(v_hat) = |g|, so the torch form
    moves each parameter by lr * g / (|g| + eps) and Keras by lr * g / (|g| + eps / sqrt(1 -
    b2)); the difference is checked to rounding. Over 100 steps the difference depends on the
    closed-loop dynamics, so its size is obtained by running both forms in NumPy on the same
    problem (D = max |torch form - Keras form|): Keras must match its own emulated form to
    ADAM_SAME_FORM_ATOL, refseg must match the torch form to it, and refseg vs Keras must differ
    by D up to that tolerance - i.e. the whole refseg-Keras difference is epsilon's placement.
    """
    keras = require("keras")
    ours, _, _ = adam_refseg(ADAM_STEPS)
    theirs = adam_keras(keras)
    torch_form, keras_form = adam_numpy("torch"), adam_numpy("keras")

    g = flat(ls_gradients(ls_problem()[2]))
    start = flat(ls_problem()[2])
    keras_eps = ADAM_EPS / np.sqrt(1 - 0.999)
    predicted = ADAM_LR * np.abs(g) * (1 / (np.abs(g) + ADAM_EPS) - 1 / (np.abs(g) + keras_eps))
    # predicted ~ lr * eps / sqrt(1 - b2) / |g| ~ 1e-8..1e-7. Each side's step (start - theta)
    # is read back from parameters of magnitude < 2, with a rounding of <= 2 U64 each; the
    # difference of the two steps is thus exact to 4 * 2 * U64 ~ 9e-16: atol 1e-15.
    steps_apart = np.abs((start - ours[0]) - (start - theirs[0]))
    assert np.abs(start).max() < 2 and np.abs(ours[0]).max() < 2
    assert_close("adam/float64/step-1 difference", steps_apart, predicted, 0.0, 1e-15)

    assert_close("adam/float64/Keras vs its form in NumPy", theirs, keras_form, 0.0,
                 ADAM_SAME_FORM_ATOL)
    assert_close("adam/float64/refseg vs the torch form in NumPy", ours, torch_form, 0.0,
                 ADAM_SAME_FORM_ATOL)
    placement = np.abs(torch_form - keras_form)
    assert placement.max() > 1e3 * ADAM_SAME_FORM_ATOL  # the two forms are distinguishable
    assert_close("adam/float64/refseg vs Keras minus the epsilon-placement difference",
                 np.abs(ours - theirs), placement, 0.0, 2 * ADAM_SAME_FORM_ATOL)
    print(f"crosscheck adam epsilon placement: max |torch form - Keras form| over "
          f"{ADAM_STEPS} steps = {placement.max():.3g}")


@pytest.mark.claim("claim4.update")
def test_adam_state_dict_round_trip():
    """50 steps, save the state, 50 more; a fresh optimiser given the saved parameters and
    state must produce the same 50 last steps, bit for bit (same code, same inputs)."""
    from refseg.autograd.optim import Adam

    first, optimiser, params = adam_refseg(50)
    saved_params = [p.data.copy() for p in params]
    state = optimiser.state_dict()
    continued, _, _ = adam_refseg(50, optimiser, params)

    fresh_params = [ag.Tensor(a, requires_grad=True, name=n)
                    for a, n in zip(saved_params, ("kernel", "bias"))]
    fresh = Adam(fresh_params)  # default hyper-parameters: the state must restore them
    fresh.load_state_dict(state)
    resumed, _, _ = adam_refseg(50, fresh, fresh_params)
    assert np.array_equal(continued, resumed)
    # And the whole run equals an uninterrupted 100-step run.
    whole, _, _ = adam_refseg(100)
    assert np.array_equal(np.concatenate([first, continued]), whole)


@pytest.fixture(scope="session", autouse=True)
def _report_measured():
    yield
    for key in sorted(MEASURED):
        print(f"crosscheck summary {key}: max abs {MEASURED[key][0]:.3g}, "
              f"max rel {MEASURED[key][1]:.3g}")
