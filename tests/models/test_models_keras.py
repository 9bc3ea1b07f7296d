"""The fusion network against Keras itself (torch backend): the same random weights, BN moving
statistics randomised too, loaded into Keras' ResNet50V2 and MobileNetV2 applications plus a
Keras build of the decoder (written out here by hand from R-decoder, independently of
``refseg.models.decoder``), and into refseg: the ten taps and the prediction must agree.

Tolerance: float32 rounding only. Both sides sum the same products in different orders
(im2col + OpenBLAS here, oneDNN/ATen there); over ResNet50V2's 50 layers the difference grows
to a few 1e-6 of the tap's largest value (measured at most 3.4e-6, ResNet50V2's post_relu at
160x544, on an AMD EPYC Zen 1; 2.6e-6 on an earlier machine; ``-s`` prints every tap). The
bound is 1e-5 of the largest value per tap, and 1e-5 absolute on the probabilities (measured
at most 2.7e-6; 1.6e-6 earlier).
"""
import numpy as np
import pytest

from refseg.models import ResMobileNet
from anchors import require

MEASURED = {}
TRANSPOSED = {"x1", "x4", "x7a", "x8", "x11", "x12", "x15", "x17", "x20", "x22", "prediction"}
DECODER = TRANSPOSED | {"x2", "x5", "x7b", "x9", "x13", "x18", "x21"}


def keras_fusion_network(keras, input_hw):
    """Keras' applications and a hand-written Keras decoder on one input."""
    L = keras.layers
    image = keras.Input((*input_hw, 3))
    res = keras.applications.ResNet50V2(include_top=False, weights=None, input_tensor=image)
    mob = keras.applications.MobileNetV2(include_top=False, weights=None, input_tensor=image)
    tap = {name: res.get_layer(name).output for name in (
        "post_relu", "conv4_block6_1_relu", "conv3_block4_1_relu", "conv2_block3_1_relu",
        "conv1_conv")}
    tap.update({name: mob.get_layer(name).output for name in (
        "block_16_project", "block_13_expand_relu", "block_6_expand_relu",
        "block_3_expand_relu", "block_1_expand_relu")})

    def up(name, filters, strides=2, activation="relu"):
        return L.Conv2DTranspose(filters, 3, strides=strides, padding="same",
                                 activation=activation, name=name)

    def conv(name, filters):
        return L.Conv2D(filters, 3, padding="same", activation="relu", name=name)

    x = conv("x2", 256)(up("x1", 720)(tap["post_relu"]))
    x = L.Add(name="x3")([x, tap["conv4_block6_1_relu"]])
    x = conv("x5", 128)(up("x4", 256)(x))
    x = L.Add(name="x6")([x, tap["conv3_block4_1_relu"]])
    x = conv("x7b", 256)(up("x7a", 144)(x))
    x = conv("x9", 64)(up("x8", 96)(x))
    x = L.Add(name="x10")([x, tap["conv1_conv"]])
    x11 = up("x11", 3)(x)
    y = conv("x13", 576)(up("x12", 576)(tap["block_16_project"]))
    y = L.Add(name="x14")([y, tap["block_13_expand_relu"]])
    y = L.Add(name="x16")([up("x15", 192)(y), tap["block_6_expand_relu"]])
    y = conv("x18", 144)(up("x17", 144)(y))
    y = L.Add(name="x19")([y, tap["block_3_expand_relu"]])
    y = conv("x21", 96)(up("x20", 96)(y))
    x22 = up("x22", 3)(y)
    prediction = up("prediction", 3, strides=1, activation="softmax")(
        L.Add(name="x23")([x22, x11]))
    # the applications' weights include layers no tap uses (MobileNetV2's Conv_1, ...)
    variables = {v.path: v for model in (res, mob) for v in model.weights}
    net = keras.Model(image, [*tap.values(), prediction])
    variables.update({v.path: v for v in net.weights})
    return net, list(tap), list(variables.values())


def randomise(variables, rng):
    """Random weights that keep activations in range, BN statistics included."""
    weights = {}
    for v in variables:
        shape, leaf = tuple(v.shape), v.path.split("/")[-1]
        if leaf in ("kernel", "depthwise_kernel"):
            # He scale over the inputs a unit sums: (kh, kw, in) for kernels (kh, kw, in, out);
            # (kh, kw) for depthwise (kh, kw, C, 1); (kh, kw, in) of transposed (kh, kw, out, in)
            transposed = v.path.split("/")[0] in TRANSPOSED
            fan_in = (shape[0] * shape[1] * (shape[3] if transposed else shape[2])
                      if leaf == "kernel" else shape[0] * shape[1])
            # the decoder at half the He variance, so that the logits stay moderate (~1-10) and
            # the probabilities are not saturated 0/1, where differences would hide
            gain = 1.0 if v.path.split("/")[0] in DECODER else 2.0
            value = rng.normal(0, np.sqrt(gain / fan_in), shape)
        elif leaf == "gamma":
            value = rng.uniform(0.5, 1.5, shape)
        elif leaf in ("beta", "bias"):
            value = rng.normal(0, 0.1, shape)
        elif leaf == "moving_mean":
            value = rng.normal(0, 0.2, shape)
        elif leaf == "moving_variance":
            value = rng.uniform(0.5, 2.0, shape)
        else:
            raise AssertionError(f"unexpected Keras variable {v.path}")
        value = value.astype(np.float32)
        v.assign(value)
        weights[v.path] = value
    return weights


@pytest.fixture(scope="module")
def keras():
    return require("keras")


@pytest.mark.claim("claim2.backbones", "claim2.taps", "claim2.fusion", "claim3.formula")
@pytest.mark.parametrize("input_hw", [(224, 224), (160, 544)])
def test_taps_and_prediction_match_keras(keras, input_hw):
    require("torch")
    rng = np.random.default_rng(sum(input_hw))
    net, tap_names, variables = keras_fusion_network(keras, input_hw)
    weights = randomise(variables, rng)
    ours = ResMobileNet(input_hw, seed=1)
    report = ours.set_weights(weights, strict=True, source="keras")
    # MobileNetV2's layers after block_16_project feed no tap: ignored, everything else loaded
    assert sorted({k.split("/")[0] for k in report.ignored}) == [
        "Conv_1", "Conv_1_bn", "block_16_project_BN"]
    assert len(report.loaded) == len(ours.weights())
    x = rng.uniform(-1, 1, (2, *input_hw, 3)).astype(np.float32)
    expected = [np.asarray(keras.ops.convert_to_numpy(a)) for a in net(x, training=False)]
    taps = ours.taps(x)
    for name, theirs in zip(tap_names, expected):
        scale = float(np.abs(theirs).max())
        worst = float(np.abs(taps[name] - theirs).max())
        MEASURED[(input_hw, name)] = worst / scale
        print(f"{input_hw} {name}: max abs diff {worst:.3g}, relative to max {worst / scale:.3g}")
        assert taps[name].shape == theirs.shape
        assert worst <= 1e-5 * scale, name
    probabilities = ours.predict(x)
    print(f"{input_hw} prediction: probabilities span {expected[-1].min():.3g} to "
          f"{expected[-1].max():.3g}")
    worst = float(np.abs(probabilities - expected[-1]).max())
    print(f"{input_hw} prediction: max abs diff {worst:.3g}")
    assert probabilities.shape == (2, *input_hw, 3)
    assert worst <= 1e-5
