"""refseg's autograd ops against the real Keras 3 layers (forward, float32, torch backend).

Each case builds the Keras layer, gives it refseg's weights with ``set_weights`` (refseg uses
Keras' weight layouts, so no conversion), runs both on the same float32 NHWC input and compares.
This is the authority for the geometry rules that ``tests/autograd/test_autograd_torch.py`` re-expresses
in torch: "same" padding of convolution and pooling (odd pixel at the bottom/right, pooling
windows padded with -inf), and where Conv2DTranspose's "same" output starts inside the full
transposed convolution: at max(k - s, 0) // 2, so for kernel < stride at 0, zero-filled at the
end (refseg's first version started at (k - s) // 2 < 0, i.e. shifted by one pixel).

Tolerances are derived from the accumulation length (see TOL below); the measured differences
are printed with ``-s`` (lines starting ``crosscheck``).
"""
import functools

import numpy as np
import pytest

from refseg import autograd as ag
import compare
from anchors import require

#: Unit roundoff of float32 (2^-24).
U32 = 2.0 ** -24

# ---------------------------------------------------------------------------------------------
# Tolerances. Keras (on torch) and refseg compute in float32 with different summation orders.
# For a dot product of L terms, each side's rounding error is at most gamma_L * sum|x_i w_i|
# ~ L * U32 * sum|x_i w_i| (Higham, Accuracy and Stability, eq. 3.5), plus one rounding for the
# bias; the two sides together differ by at most twice that. With S a bound on sum|x_i w_i|
# (L * max|x| * max|w| + max|b|), the worst-case atol is 2 * (L + 1) * U32 * S, rtol 0:
#   op                 L (terms per output element)             S
#   Conv2D             kh * kw * Cin                            L * max|x| * max|w| + max|b|
#   Conv2DTranspose    kh * kw * Cin (at most; fewer overlap)   same
#   DepthwiseConv2D    kh * kw                                  same
#   BatchNormalization no sum: ~6 roundings per element on each side; S = the largest
#                      intermediate, (|x| + |mean|) * |gamma| / sqrt(var + eps) + |beta|
#   softmax + CCE      a sum of C exponentials, then a mean over P pixels: L = C + P,
#                      S = max|log p| (the terms of the mean)
#   MaxPooling2D, ZeroPadding2D, ReLU(6): they copy input values, so exact (atol 0).
# The measured differences are 10-1000x below these bounds (see the -s output); a geometry
# error, by contrast, moves whole rows of O(1) values.

MEASURED = {}


def accumulation_atol(terms, magnitude):
    """Worst-case |refseg - Keras| for outputs that are sums of ``terms`` float32 products whose
    absolute values sum to at most ``magnitude`` (one extra rounding for the bias)."""
    return 2 * (terms + 1) * U32 * magnitude


assert_close = functools.partial(compare.assert_close, measured=MEASURED, key_depth=1)


@pytest.fixture(scope="module")
def keras():
    """The anchor (KERAS_BACKEND=torch, set by conftest); ``require`` fails when missing."""
    return require("keras")


def rand(rng, shape, low=-1.0, high=1.0):
    return rng.uniform(low, high, size=shape).astype(np.float32)


def run_layer(keras, layer, x, weights=None):
    """Build ``layer`` for x's shape, load ``weights`` (Keras order), return its float32 output."""
    layer.build(x.shape)
    if weights is not None:
        layer.set_weights([np.asarray(w, dtype=np.float32) for w in weights])
    y = keras.ops.convert_to_numpy(layer(x))
    assert y.dtype == np.float32
    return y


def forward(op, **kwargs):
    """refseg's forward of ``op`` on float32 arrays (no gradient recorded)."""
    with ag.no_grad():
        return op(**kwargs).data


# ---------------------------------------------------------------------------------------------
# Convolutions

# (H, W, Cin, Cout, kernel, stride, padding)
CONV_CASES = [
    (7, 7, 3, 4, 3, 1, "same"),
    (8, 8, 3, 4, 3, 1, "same"),
    (7, 7, 3, 4, 3, 2, "same"),   # odd side, stride 2: 1 + 1 padding
    (8, 6, 3, 4, 3, 2, "same"),   # even side, stride 2: 0 + 1 (the odd pixel at the end)
    (9, 9, 2, 3, 7, 2, "same"),   # ResNet-like 7x7 stride 2
    (6, 7, 2, 3, 4, 2, "same"),   # even kernel
    (7, 7, 3, 2, 1, 2, "same"),   # 1x1 stride 2 (projection shortcut)
    (1, 1, 3, 2, 3, 2, "same"),   # 1x1 image
    (7, 8, 3, 2, 3, 2, "valid"),
]


@pytest.mark.claim("claim4.propagation", "claim2.fusion")
@pytest.mark.parametrize("h,w,cin,cout,k,s,padding", CONV_CASES)
def test_conv2d(keras, h, w, cin, cout, k, s, padding):
    rng = np.random.default_rng(h * 1000 + w * 100 + k * 10 + s)
    x, kernel, bias = rand(rng, (2, h, w, cin)), rand(rng, (k, k, cin, cout)), rand(rng, (cout,))
    theirs = run_layer(keras, keras.layers.Conv2D(cout, k, strides=s, padding=padding), x,
                       [kernel, bias])
    ours = forward(ag.conv2d, x=x, kernel=kernel, bias=bias, strides=s, padding=padding)
    terms = k * k * cin
    assert_close(f"Conv2D/k{k}s{s}{padding}/{h}x{w}", ours, theirs, 0.0,
                 accumulation_atol(terms, terms + 1.0))  # |x|, |w|, |b| <= 1


# (H, W, Cin, Cout, kernel, stride, padding)
TRANSPOSE_CASES = [
    (4, 4, 3, 2, 3, 2, "same"),   # the decoder's case
    (5, 3, 3, 2, 3, 2, "same"),   # odd sides
    (5, 5, 3, 2, 3, 1, "same"),   # stride 1: crop 1 on both sides
    (4, 3, 2, 2, 4, 2, "same"),   # crop (4 - 2) // 2 = 1
    (4, 4, 2, 2, 2, 2, "same"),
    (3, 3, 2, 2, 1, 2, "same"),   # kernel < stride: see test_conv2d_transpose_kernel_below_stride
    (3, 4, 2, 2, 2, 3, "same"),
    (3, 3, 2, 2, 3, 2, "valid"),
    (3, 3, 2, 2, 1, 2, "valid"),  # kernel < stride, "valid": in * s, zeros at the end
]


@pytest.mark.claim("claim4.propagation", "claim2.fusion")
@pytest.mark.parametrize("h,w,cin,cout,k,s,padding", TRANSPOSE_CASES)
def test_conv2d_transpose(keras, h, w, cin, cout, k, s, padding):
    rng = np.random.default_rng(h * 1000 + w * 100 + k * 10 + s)
    x, kernel, bias = rand(rng, (2, h, w, cin)), rand(rng, (k, k, cout, cin)), rand(rng, (cout,))
    theirs = run_layer(keras, keras.layers.Conv2DTranspose(cout, k, strides=s, padding=padding),
                       x, [kernel, bias])
    ours = forward(ag.conv2d_transpose, x=x, kernel=kernel, bias=bias, strides=s,
                   padding=padding)
    terms = k * k * cin
    assert_close(f"Conv2DTranspose/k{k}s{s}{padding}/{h}x{w}", ours, theirs, 0.0,
                 accumulation_atol(terms, terms + 1.0))


@pytest.mark.claim("claim4.propagation", "claim2.fusion")
@pytest.mark.parametrize("k,s", [(1, 2), (2, 3), (1, 3)])
def test_conv2d_transpose_kernel_below_stride(keras, k, s):
    """Where Keras puts the data when kernel < stride with padding "same".

    The full transposed convolution has (in - 1) * s + k < in * s values per axis; Keras 3
    returns in * s values starting at index max(k - s, 0) // 2 = 0 and fills the rest with
    zeros at the END (as TensorFlow's conv2d_transpose with SAME padding, whose forward
    convolution needs no padding here). A delta kernel makes this visible: input pixel (i, j)
    lands at (i * s, j * s).
    """
    h = 3
    x = np.arange(1, h * h + 1, dtype=np.float32).reshape(1, h, h, 1)
    kernel = np.zeros((k, k, 1, 1), np.float32)
    kernel[0, 0] = 1.0
    theirs = run_layer(keras, keras.layers.Conv2DTranspose(1, k, strides=s, padding="same",
                                                           use_bias=False), x, [kernel])
    want = np.zeros((1, h * s, h * s, 1), np.float32)
    want[0, ::s, ::s, 0] = x[0, :, :, 0]
    assert_close(f"Conv2DTranspose/k{k}s{s}same/delta (Keras vs rule)", theirs, want, 0.0, 0.0)
    ours = forward(ag.conv2d_transpose, x=x, kernel=kernel, strides=s, padding="same")
    assert_close(f"Conv2DTranspose/k{k}s{s}same/delta", ours, theirs, 0.0, 0.0)


# (H, W, C, kernel, stride, padding)
DEPTHWISE_CASES = [
    (7, 7, 3, 3, 1, "same"),
    (8, 8, 4, 3, 2, "same"),      # even side, stride 2: the odd padding pixel at the end
    (7, 5, 4, 3, 2, "same"),
    (1, 1, 2, 3, 1, "same"),
    (8, 8, 3, 3, 2, "valid"),
]


@pytest.mark.claim("claim4.propagation", "claim2.backbones")
@pytest.mark.parametrize("h,w,c,k,s,padding", DEPTHWISE_CASES)
def test_depthwise_conv2d(keras, h, w, c, k, s, padding):
    rng = np.random.default_rng(h * 1000 + w * 100 + c * 10 + s)
    x, kernel, bias = rand(rng, (2, h, w, c)), rand(rng, (k, k, c, 1)), rand(rng, (c,))
    theirs = run_layer(keras, keras.layers.DepthwiseConv2D(k, strides=s, padding=padding), x,
                       [kernel, bias])
    ours = forward(ag.depthwise_conv2d, x=x, kernel=kernel, bias=bias, strides=s,
                   padding=padding)
    terms = k * k
    assert_close(f"DepthwiseConv2D/k{k}s{s}{padding}/{h}x{w}", ours, theirs, 0.0,
                 accumulation_atol(terms, terms + 1.0))


@pytest.mark.claim("claim4.propagation", "claim2.backbones")
@pytest.mark.parametrize("side", [8, 7])
def test_mobilenetv2_downsampling(keras, side):
    """ZeroPadding2D(((0, 1), (0, 1))) + DepthwiseConv2D(3, strides=2, "valid") as a Keras model
    (MobileNetV2's stride-2 blocks; the padding is correct_pad's for even sides)."""
    rng = np.random.default_rng(side)
    x, kernel = rand(rng, (2, side, side, 3)), rand(rng, (3, 3, 3, 1))
    layer = keras.layers.DepthwiseConv2D(3, strides=2, padding="valid", use_bias=False)
    padded = run_layer(keras, keras.layers.ZeroPadding2D(((0, 1), (0, 1))), x)
    theirs = run_layer(keras, layer, padded, [kernel])
    ours = forward(lambda x: ag.depthwise_conv2d(ag.zero_pad2d(x, ((0, 1), (0, 1))), kernel,
                                                 strides=2, padding="valid"), x=x)
    assert_close(f"DepthwiseConv2D/mobilenetv2-pad/{side}", ours, theirs, 0.0,
                 accumulation_atol(9, 9.0))


# ---------------------------------------------------------------------------------------------
# Pooling, padding, batch normalisation, activations


def distinct(rng, shape):
    n = int(np.prod(shape))
    return ((rng.permutation(n) - n / 2) / n).reshape(shape).astype(np.float32)


@pytest.mark.claim("claim4.propagation", "claim2.backbones")
@pytest.mark.parametrize("side", [8, 9])
def test_resnet_pool1(keras, side):
    """ResNet50's pool1: ZeroPadding2D(1) then MaxPooling2D(3, strides=2) ("valid")."""
    x = distinct(np.random.default_rng(side), (2, side, side, 3))
    padded = run_layer(keras, keras.layers.ZeroPadding2D(1), x)
    theirs = run_layer(keras, keras.layers.MaxPooling2D(3, strides=2), padded)
    ours = forward(lambda x: ag.max_pool2d(ag.zero_pad2d(x, ((1, 1), (1, 1))), 3, 2), x=x)
    assert_close(f"MaxPooling2D/resnet-pool1/{side}", ours, theirs, 0.0, 0.0)


# (H, W, pool, strides, padding)
POOL_CASES = [
    (7, 7, 1, 2, "valid"),        # ResNet50V2's shortcut pooling MaxPooling2D(1, strides=2)
    (8, 8, 1, 2, "valid"),
    (7, 7, 2, None, "valid"),
    (7, 6, 3, 2, "same"),
    (5, 5, 2, None, "same"),
    (1, 1, 2, 2, "same"),
]


@pytest.mark.claim("claim4.propagation", "claim2.backbones")
@pytest.mark.parametrize("h,w,pool,strides,padding", POOL_CASES)
def test_max_pool2d(keras, h, w, pool, strides, padding):
    # All values negative: a "same" window padded with zeros instead of -inf would show.
    x = distinct(np.random.default_rng(h * 10 + w), (2, h, w, 3)) - 2.0
    theirs = run_layer(keras, keras.layers.MaxPooling2D(pool, strides=strides, padding=padding),
                       x)
    ours = forward(ag.max_pool2d, x=x, pool_size=pool, strides=strides, padding=padding)
    assert_close(f"MaxPooling2D/p{pool}s{strides}{padding}/{h}x{w}", ours, theirs, 0.0, 0.0)


@pytest.mark.claim("claim4.propagation", "claim2.backbones")
@pytest.mark.parametrize("padding", [1, ((0, 1), (0, 1)), ((3, 0), (2, 1))])
def test_zero_pad2d(keras, padding):
    x = rand(np.random.default_rng(0), (2, 5, 4, 3))
    theirs = run_layer(keras, keras.layers.ZeroPadding2D(padding), x)
    pairs = ((padding, padding), (padding, padding)) if isinstance(padding, int) else padding
    ours = forward(ag.zero_pad2d, x=x, padding=pairs)
    assert_close(f"ZeroPadding2D/{pairs}", ours, theirs, 0.0, 0.0)


def bn_atol(x, mean, var, gamma, beta, epsilon):
    """6 roundings per element on each side, of intermediates bounded as in TOL."""
    largest = ((np.abs(x).max() + np.abs(mean).max()) * np.abs(gamma).max()
               / np.sqrt(var.min() + epsilon) + np.abs(beta).max())
    return 2 * 6 * U32 * float(largest)


@pytest.mark.claim("claim4.propagation", "claim2.backbones")
@pytest.mark.parametrize("epsilon", [1.001e-5, 1e-3])  # ResNet50V2's and MobileNetV2's
def test_batch_norm_inference(keras, epsilon):
    rng = np.random.default_rng(int(epsilon * 1e5))
    c = 4
    x = rand(rng, (2, 5, 3, c), -2, 2)
    gamma, beta = rand(rng, (c,), 0.5, 1.5), rand(rng, (c,))
    mean, var = rand(rng, (c,), -0.5, 0.5), rand(rng, (c,), 0.05, 2.0)
    layer = keras.layers.BatchNormalization(epsilon=epsilon)
    theirs = run_layer(keras, layer, x, [gamma, beta, mean, var])
    moving_mean, moving_var = mean.copy(), var.copy()
    ours = forward(ag.batch_norm, x=x, gamma=gamma, beta=beta, moving_mean=moving_mean,
                   moving_variance=moving_var, training=False, epsilon=epsilon)
    assert_close(f"BatchNormalization/inference/eps{epsilon:g}", ours, theirs, 0.0,
                 bn_atol(x, mean, var, gamma, beta, epsilon))


@pytest.mark.claim("claim4.propagation", "claim2.backbones")
def test_batch_norm_training_moving_statistics(keras):
    """One call in training mode: the output from the batch statistics, and Keras' own update of
    the moving statistics (momentum 0.99, biased batch variance) against refseg's in-place one.

    Tolerances: the batch mean and variance are means over L = N*H*W = 30 values with |x| <= 2,
    so each side's rounding is at most (L + 1) U32 * 2 (mean) and (L + 2) U32 * 16 (variance:
    terms (x - mu)^2 <= 16, or x^2 <= 4 if computed as E[x^2] - mu^2). In the output they
    enter as d_mu * |gamma| / sigma and |x - mu| * |gamma| * d_var / (2 sigma^3) (sigma =
    sqrt(var + eps), |x - mu| <= 4), on top of the 6 roundings of the normalisation itself. The
    moving statistics m' = 0.99 m + 0.01 b add two roundings of |m'| <= 2.5 (mean) or 18
    (variance) to 0.01 times the moment's error.
    """
    rng = np.random.default_rng(5)
    c, epsilon, momentum = 3, 1e-3, 0.99
    x = rand(rng, (2, 5, 3, c), -2, 2)
    gamma, beta = rand(rng, (c,), 0.5, 1.5), rand(rng, (c,))
    mean, var = rand(rng, (c,), -0.5, 0.5), rand(rng, (c,), 0.05, 2.0)
    layer = keras.layers.BatchNormalization(epsilon=epsilon, momentum=momentum)
    layer.build(x.shape)
    layer.set_weights([gamma, beta, mean, var])
    theirs = keras.ops.convert_to_numpy(layer(x, training=True))
    keras_mean, keras_var = (keras.ops.convert_to_numpy(w) for w in layer.get_weights()[2:])
    moving_mean, moving_var = mean.copy(), var.copy()
    ours = forward(ag.batch_norm, x=x, gamma=gamma, beta=beta, moving_mean=moving_mean,
                   moving_variance=moving_var, training=True, epsilon=epsilon,
                   momentum=momentum)

    L = x.shape[0] * x.shape[1] * x.shape[2]
    batch = x.astype(np.float64).reshape(-1, c)
    sigma = float(np.sqrt(batch.var(axis=0).min() + epsilon))
    g_max = float(np.abs(gamma).max())
    d_mu, d_var = 2 * (L + 1) * U32 * 2.0, 2 * (L + 2) * U32 * 16.0  # both sides
    moments = d_mu * g_max / sigma + 4.0 * g_max * d_var / (2 * sigma ** 3)
    assert_close("BatchNormalization/training/output", ours, theirs, 0.0,
                 bn_atol(x, np.abs(batch.mean(axis=0)), batch.var(axis=0), gamma, beta,
                         epsilon) + moments)
    assert_close("BatchNormalization/training/moving_mean", moving_mean, keras_mean, 0.0,
                 (1 - momentum) * d_mu + 2 * 2 * U32 * 2.5)
    assert_close("BatchNormalization/training/moving_variance", moving_var, keras_var, 0.0,
                 (1 - momentum) * d_var + 2 * 2 * U32 * 18.0)


@pytest.mark.claim("claim4.propagation", "claim2.backbones", "claim2.fusion")
@pytest.mark.parametrize("which", ["relu", "relu6"])
def test_relu(keras, which):
    x = rand(np.random.default_rng(1), (2, 4, 5, 3), -8, 8)
    layer = keras.layers.ReLU(max_value=6.0 if which == "relu6" else None)
    theirs = run_layer(keras, layer, x)
    ours = forward(getattr(ag, which), x=x)
    assert_close(f"ReLU/{which}", ours, theirs, 0.0, 0.0)


@pytest.mark.claim("claim4.update", "claim2.fusion")
def test_softmax_categorical_crossentropy(keras):
    """Softmax layer, then Keras' categorical cross-entropy averaged over pixels.

    Keras divides p by its sum over classes before clipping; for softmax output that sum is 1 to
    rounding, so the values agree (refseg does not renormalise: the gradient with respect to
    unnormalised p would differ, but through softmax the extra term cancels). Softmax: C = 3
    exponentials of |logit| <= 3 summed: L = 3, values <= 1; loss: a mean over P = 2*4*5
    pixels of -log p <= 6 + log 3 (logits in [-3, 3]).
    """
    rng = np.random.default_rng(8)
    logits = rand(rng, (2, 4, 5, 3), -3, 3)
    labels = rng.integers(0, 3, (2, 4, 5))
    onehot = np.eye(3, dtype=np.float32)[labels]
    probs_keras = run_layer(keras, keras.layers.Softmax(axis=-1), logits)
    ours_probs = forward(ag.softmax, x=logits)
    assert_close("softmax_cce/softmax", ours_probs, probs_keras, 0.0,
                 accumulation_atol(3 + 2, 1.0))  # sum of 3, exp and division: ~5 roundings
    loss_keras = keras.ops.convert_to_numpy(keras.ops.mean(
        keras.losses.categorical_crossentropy(onehot, probs_keras)))
    ours_loss = forward(ag.categorical_crossentropy, probabilities=ours_probs, target=labels)
    pixels = labels.size
    assert_close("softmax_cce/loss", ours_loss, loss_keras.astype(np.float32), 0.0,
                 accumulation_atol(pixels + 3, 6.0 + np.log(3)))


@pytest.fixture(scope="session", autouse=True)
def _report_measured():
    yield
    for key in sorted(MEASURED):
        max_abs, max_rel, atol = MEASURED[key]
        print(f"crosscheck summary {key}: max abs {max_abs:.3g}, max rel {max_rel:.3g}, "
              f"smallest atol {atol:.3g}")
