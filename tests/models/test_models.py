"""The fusion network without anchors: tap shapes, input checks, seeded initialisation, weight
files (strict and not, bad files leave the model as it was), frozen backbones, and a
finite-difference check of the decoder's gradients through the whole decoder."""

import numpy as np
import pytest

from refseg import autograd as ag
from refseg.errors import InputError
from refseg.models import ResMobileNet, known_weight_shapes, mobilenetv2, preprocess_input
from refseg.autograd.optim import Adam

# Keras' tap shapes at 224x224 (spec/measurements.md, M-keras-shapes)
TAPS_224 = {
    "post_relu": (7, 7, 2048), "conv4_block6_1_relu": (14, 14, 256),
    "conv3_block4_1_relu": (28, 28, 128), "conv2_block3_1_relu": (56, 56, 64),
    "conv1_conv": (112, 112, 64), "block_16_project": (7, 7, 320),
    "block_13_expand_relu": (14, 14, 576), "block_6_expand_relu": (28, 28, 192),
    "block_3_expand_relu": (56, 56, 144), "block_1_expand_relu": (112, 112, 96)}


@pytest.fixture(scope="module")
def model():
    return ResMobileNet((64, 96), seed=5)


#: The weight-file tests save and load the MobileNetV2 branch alone: what a file round trip
#: keeps and what a strict load refuses do not depend on the branches, and each file takes 33
#: MB instead of the fusion network's 193 MB (a fusion network's file makes the round trip in
#: tests/golden: ``refseg golden weights``, loaded strictly).
MOBILE = ("mobilenetv2",)


@pytest.fixture(scope="module")
def saved_mobile(tmp_path_factory):
    path = tmp_path_factory.mktemp("weights") / "mobile.npz"
    ResMobileNet((64, 96), branches=MOBILE, seed=5).save_weights(path)
    return path


def images(shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(dtype)


@pytest.mark.claim("claim2.taps")
def test_tap_shapes_at_224_are_keras_shapes():
    shapes = ResMobileNet((224, 224)).graph.shapes((224, 224, 3))
    assert {name: shapes[name] for name in TAPS_224} == TAPS_224
    assert shapes["prediction"] == (224, 224, 3)


@pytest.mark.claim("claim2.taps", "claim2.fusion")
def test_taps_and_prediction_at_a_non_square_size(model):
    x = images((2, 64, 96, 3))
    taps = model.taps(x)
    assert list(taps) == list(TAPS_224)
    for name, (h, w, c) in TAPS_224.items():
        scale = 224 // h
        assert taps[name].shape == (2, 64 // scale, 96 // scale, c)
        assert taps[name].dtype == np.float32
    p = model.predict(x, batch_size=1)
    assert p.shape == (2, 64, 96, 3) and p.dtype == np.float32
    np.testing.assert_allclose(p.sum(axis=-1), 1, rtol=0, atol=1e-6)
    # batching does not change the result beyond float32 rounding of a different GEMM shape
    np.testing.assert_allclose(model.predict(x, batch_size=2), p, rtol=0, atol=1e-6)


@pytest.mark.claim("claim2.backbones")
@pytest.mark.parametrize("bad, message", [
    (np.zeros((1, 64, 96)), "(N, H, W, 3)"),
    (np.zeros((1, 64, 96, 1)), "(N, H, W, 3)"),
    (np.zeros((1, 64, 96, 3), np.uint8), "floating point"),
    (np.zeros((1, 60, 96, 3)), "multiples of 32"),
    (np.full((1, 64, 96, 3), np.nan), "NaN"),
    (np.zeros((1, 96, 64, 3)), "built for 64x96"),
])
def test_bad_input_is_refused_by_name(model, bad, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        model.predict(bad)


@pytest.mark.claim("claim2.backbones")
def test_preprocess_input_scales_to_minus_one_one():
    np.testing.assert_array_equal(preprocess_input(np.array([0, 127.5, 255])), [-1, 0, 1])


@pytest.mark.claim("claim2.backbones", "claim2.fusion")
def test_initialisation_is_keras_and_seeded():
    a, b, c = ResMobileNet((32, 32), seed=1), ResMobileNet((32, 32), seed=1), ResMobileNet(
        (32, 32), seed=2)
    wa, wb, wc = a.weights(), b.weights(), c.weights()
    for key, value in wa.items():
        np.testing.assert_array_equal(value, wb[key])
        leaf = key.split("/")[1]
        if leaf == "kernel":
            # Glorot uniform: |w| <= sqrt(6 / (fan_in + fan_out)), fans over the last two axes
            rf = int(np.prod(value.shape[:-2]))
            limit = np.sqrt(6 / (rf * (value.shape[-2] + value.shape[-1])))
            # (float32 rounding of a value drawn just below the limit may land on it)
            assert np.abs(value).max() <= limit * (1 + 1e-7) and not np.array_equal(value, wc[key]), key
        else:
            expected = {"bias": 0, "beta": 0, "moving_mean": 0, "gamma": 1,
                        "moving_variance": 1}[leaf]
            assert (value == expected).all(), key


@pytest.mark.claim("claim2.fusion")
def test_known_weight_shapes_cover_the_model():
    known = known_weight_shapes()
    assert {k for k in known["mobilenetv2"] if k.startswith("Conv_1")} == {
        "Conv_1/kernel", "Conv_1_bn/gamma", "Conv_1_bn/beta", "Conv_1_bn/moving_mean",
        "Conv_1_bn/moving_variance"}
    model_keys = set(ResMobileNet((32, 32)).weight_shapes())
    every = set().union(*(set(part) for part in known.values()))
    assert model_keys <= every
    assert every - model_keys == {k for k in known["mobilenetv2"] if k.split("/")[0] in (
        "Conv_1", "Conv_1_bn", "block_16_project_BN")}
    assert set(known["decoder"]) == {f"{n}/{w}" for n in (
        "x1 x2 x4 x5 x7a x7b x8 x9 x11 x12 x13 x15 x17 x18 x20 x21 x22 prediction".split())
        for w in ("kernel", "bias")}


@pytest.mark.claim("claim2.backbones")
def test_weights_round_trip(saved_mobile):
    model = ResMobileNet((64, 96), branches=MOBILE, seed=5)
    other = ResMobileNet((64, 96), branches=MOBILE, seed=9)
    drawn = other.weights()["x12/kernel"].copy()
    report = other.load_weights(saved_mobile)
    assert not report.problems and not report.ignored
    assert not np.array_equal(other.weights()["x12/kernel"], drawn)
    for key, value in model.weights().items():
        np.testing.assert_array_equal(other.weights()[key], value)
    x = images((1, 64, 96, 3))
    np.testing.assert_array_equal(other.predict(x), model.predict(x))


def _tampered(tmp_path, saved, change):
    with np.load(saved) as npz:
        arrays = {k: npz[k] for k in npz.files}
    change(arrays)
    path = tmp_path / "tampered.npz"
    np.savez(path, **arrays)
    return path


@pytest.mark.claim("claim2.backbones")
@pytest.mark.parametrize("change, message", [
    (lambda a: a.pop("x12/kernel"), "1 missing: x12/kernel"),
    (lambda a: a.__setitem__("extra/kernel", np.zeros(3, np.float32)), "1 unexpected"),
    (lambda a: a.__setitem__("x13/bias", np.zeros(5, np.float32)), r"1 misshaped: x13/bias \(5,\)"),
    (lambda a: a["Conv1/kernel"].__setitem__((0, 0, 0, 0), np.nan), "1 non-finite"),
    (lambda a: a.__setitem__("x13/bias", np.zeros(576, np.int32)), "1 not-float"),
])
def test_strict_loading_refuses_and_leaves_the_model_as_it_was(saved_mobile, change, message):
    """The tampered arrays are handed over in memory (``set_weights``, what ``load_weights``
    calls after reading the file: a file's strict refusal is the test below's)."""
    target = ResMobileNet((64, 96), branches=MOBILE, seed=9)
    before = {k: v.copy() for k, v in target.weights().items()}
    with np.load(saved_mobile, allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    change(arrays)
    with pytest.raises(InputError, match=f"^tampered.npz: weights do not fit .*{message}"):
        target.set_weights(arrays, source="tampered.npz")
    for key, value in target.weights().items():
        np.testing.assert_array_equal(value, before[key])


@pytest.mark.claim("claim2.backbones")
def test_unreadable_files_are_refused(tmp_path, saved_mobile):
    model = ResMobileNet((32, 32), branches=MOBILE)
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(saved_mobile.read_bytes()[: saved_mobile.stat().st_size // 2])
    text = tmp_path / "text.npz"
    text.write_text("not weights")
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, **{"x1/kernel": np.array([{"a": 1}], dtype=object)})
    for path, message in ((truncated, "not a readable .npz"), (text, "not a readable .npz"),
                          (pickled, "pickled objects"), (tmp_path / "none.npz", "no such")):
        with pytest.raises(InputError, match=message) as info:
            model.load_weights(path)
        assert str(path) in str(info.value) and "\n" not in str(info.value)


@pytest.mark.claim("claim2.backbones")
def test_backbones_only_file_loads_when_not_strict(tmp_path, saved_mobile):
    decoder = [k for k in known_weight_shapes()["decoder"]
               if k in ResMobileNet((32, 32), branches=MOBILE).weights()]
    path = _tampered(tmp_path, saved_mobile, lambda a: [a.pop(k) for k in decoder])
    model = ResMobileNet((64, 96), branches=MOBILE, seed=9)
    with pytest.raises(InputError, match="18 missing"):
        model.load_weights(path)
    report = model.load_weights(path, strict=False)
    assert len(report.missing) == 18 and not report.unexpected
    assert "18 missing" in report.notices()[0]


@pytest.mark.claim("claim2.backbones")
def test_unused_mobilenet_layers_are_ignored_with_a_notice(tmp_path):
    full = mobilenetv2(seed=3)
    path = tmp_path / "mobilenetv2.npz"
    full.save_weights(path)
    model = ResMobileNet((32, 32), seed=4)
    report = model.load_weights(path, strict=False)
    assert sorted({k.split("/")[0] for k in report.ignored}) == [
        "Conv_1", "Conv_1_bn", "block_16_project_BN"]
    assert "ignored 9 arrays" in report.notices()[0]
    np.testing.assert_array_equal(model.weights()["block_1_expand/kernel"],
                                  full.weights()["block_1_expand/kernel"])


@pytest.mark.claim("claim4.propagation", "claim4.update")
def test_training_reaches_the_decoder_only():
    model = ResMobileNet((32, 64), seed=0)
    backbone = {k: v.copy() for k, v in model.weights().items()
                if k not in known_weight_shapes()["decoder"]}
    params = model.trainable_parameters()
    assert {p.name.split("/")[0] for p in params} == {
        n.name for n in model.graph.layers("decoder") if n.params}
    assert sum(p.data.size for p in params) == model.parameter_count(trainable_only=True)
    opt = Adam(params)
    labels = np.random.default_rng(1).integers(0, 3, (2, 32, 64))
    for step in range(2):
        loss = ag.categorical_crossentropy(model(images((2, 32, 64, 3), step)), labels)
        loss.backward()
        for node in model.graph.nodes.values():
            for p in node.layer.params.values():
                assert (p.grad is not None) == (node.part == "decoder"), p.name
        opt.step()
        for p in params:
            p.zero_grad()
    for key, value in backbone.items():
        np.testing.assert_array_equal(model.weights()[key], value)


@pytest.mark.claim("claim4.propagation", "claim2.fusion")
def test_decoder_gradients_hold_a_finite_difference_check():
    """Float64, 32x32, every decoder weight: the directional derivative along a random
    direction d (all elements at once) by central differences, (L(w + h d) - L(w - h d)) / 2h,
    equals <dL/dw, d> to 1e-6 relative plus a rounding allowance of 2 eps |L| / h (eps =
    2.2e-16: the two evaluations of L differ by rounding of up to an ulp or two, measured at
    most 0.5 ulp, and the quotient divides that by h).

    The quotient measures the gradient only if no ReLU input changes sign between w - h d
    and w + h d: moving every weight of a tensor at once, some may cross their kink (measured:
    x17/kernel 2% off at h = 1e-6). Every decoder ReLU's sign pattern is compared at both ends,
    and h is divided by 10 (down to 1e-9) until none crosses. Biases are drawn at random:
    with zero biases and the vanishing random MobileNetV2 taps (~1e-12) many ReLU inputs sit
    at 0. Single elements are not checked one by one: most gradients here are ~1e-7 against
    L ~ 1, below what a difference quotient resolves; the ops' element-wise checks are in
    tests/autograd/test_autograd.py."""
    model = ResMobileNet((32, 32), seed=2, dtype=np.float64)
    rng = np.random.default_rng(0)
    for p in model.trainable_parameters():
        if p.name.endswith("/bias"):
            p.data[...] = rng.normal(0, 0.1, p.data.shape)
    taps = {k: ag.Tensor(v) for k, v in model.taps(images((1, 32, 32, 3),
                                                          dtype=np.float64)).items()}
    labels = rng.integers(0, 3, (1, 32, 32))
    relus = [layer.name for layer in model.graph.layers("decoder")
             if getattr(layer, "activation", None) == "relu"]

    def evaluate():
        with ag.no_grad():
            out = model.graph.run(taps, [*relus, "prediction"])
        signs = np.concatenate([(out[name].data > 0).ravel() for name in relus])
        return float(ag.categorical_crossentropy(out["prediction"], labels).data), signs

    loss = ag.categorical_crossentropy(model.decode(taps), labels)
    loss.backward()
    params = model.trainable_parameters()
    assert len(params) == 36
    worst = 0.0
    for p in params:
        keep, direction = p.data.copy(), rng.standard_normal(p.data.shape)
        for h in (1e-6, 1e-7, 1e-8, 1e-9):
            p.data[...] = keep + h * direction
            up, signs_up = evaluate()
            p.data[...] = keep - h * direction
            down, signs_down = evaluate()
            p.data[...] = keep
            if np.array_equal(signs_up, signs_down):
                break
        else:
            pytest.fail(f"{p.name}: a ReLU kink lies within 1e-9 along the direction")
        expected = float((p.grad * direction).sum())
        error = abs((up - down) / (2 * h) - expected)
        allowance = 2 * 2.2e-16 * float(loss.data) / h
        worst = max(worst, max(error - allowance, 0) / abs(expected))
        print(f"{p.name}: h {h:.0e}, <grad, d> {expected:.6g}, error {error:.2g} "
              f"(rounding allowance {allowance:.2g})")
        assert error <= 1e-6 * abs(expected) + allowance, (p.name, h, error, expected)
    print(f"decoder directional derivatives: worst relative error beyond rounding {worst:.3g}")


@pytest.mark.claim("claim2.backbones", "claim2.fusion")
def test_summary_counts(capsys):
    from refseg.cli import main
    from refseg.models.summary import summarize

    rows = {r.name: r for r in summarize(ResMobileNet((224, 224)), (224, 224))}
    # hand counts: output pixels x kernel size (transposed: input pixels x kernel size)
    assert rows["conv1_conv"].macs == 112 * 112 * 7 * 7 * 3 * 64
    assert rows["block_1_depthwise"].macs == 56 * 56 * 3 * 3 * 96
    assert rows["x1"].macs == 7 * 7 * 3 * 3 * 720 * 2048
    assert rows["x1"].parameters == rows["x1"].trainable == 3 * 3 * 720 * 2048 + 720
    assert rows["conv2_block1_preact_bn"].parameters == 4 * 64
    assert rows["conv2_block1_preact_bn"].trainable == 0
    assert rows["prediction"].output_shape == (224, 224, 3)
    assert rows["x7b"].paragraphs == "[0160]"
    assert main(["model", "summary", "--input-size", "224x224"]) == 0
    out = capsys.readouterr().out
    # Keras' counts: ResNet50V2 23,564,800; MobileNetV2 2,257,984 less Conv_1 (409,600),
    # Conv_1_bn (5,120) and block_16_project_BN (1,280), which no tap uses
    assert "resnet50v2   layers  189  parameters   23,564,800  trainable            0" in out
    assert "mobilenetv2  layers  149  parameters    1,841,984" in out
    assert "decoder      layers   25  parameters   22,879,962  trainable   22,879,962" in out
    assert main(["model", "summary", "--input-size", "100x3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "multiples of 32" in err


@pytest.mark.claim("claim2.backbones", "claim1.step3.train")
def test_calibration_sets_moving_statistics_to_the_batch_statistics():
    model = ResMobileNet((32, 64), seed=0)
    x = images((4, 32, 64, 3), seed=3)
    before = model.taps(x)
    assert np.abs(before["block_16_project"]).mean() < 1e-6  # vanishing without calibration
    assert model.calibrate_batch_norm(x) == 99
    with ag.no_grad():
        inputs = model.graph.run({"input_layer": ag.Tensor(x)},
                                 ["Conv1", "conv2_block1_preact_relu", "post_bn"])
    # bn_Conv1 reads the first convolution: the same float32 numbers in both passes. post_bn
    # reads the end of ResNet50V2, which calibration computed with batch statistics and this
    # pass with the stored (float32) moving statistics: float32 rounding through 50 layers
    # (measured up to 1.5e-4 of the largest value)
    for bn, source, rtol in (("bn_Conv1", "Conv1", 1e-5), ("post_bn", None, 1e-3)):
        layer = model.graph.nodes[bn].layer
        if source is None:  # post_bn's input is conv5_block3_out
            with ag.no_grad():
                feed = model.graph.run({"input_layer": ag.Tensor(x)}, ["conv5_block3_out"])
            data = feed["conv5_block3_out"].data
        else:
            data = inputs[source].data
        flat = data.reshape(-1, data.shape[-1]).astype(np.float64)
        mean, var = flat.mean(axis=0), flat.var(axis=0)
        np.testing.assert_allclose(layer.state["moving_mean"], mean, rtol=0,
                                   atol=rtol * np.abs(mean).max())
        np.testing.assert_allclose(layer.state["moving_variance"], var, rtol=0,
                                   atol=2 * rtol * var.max())
        assert not layer.calibrating and not layer.trainable
    after = model.taps(x)
    assert 0.05 < np.abs(after["block_16_project"]).mean() < 5
    assert not any(p.requires_grad for layer in model.graph.layers("resnet50v2")
                   for p in layer.params.values())


@pytest.mark.claim("claim2.fusion")
@pytest.mark.parametrize("branches, taps, parameters", [
    (("resnet50v2",), ("post_relu", "conv4_block6_1_relu", "conv3_block4_1_relu",
                       "conv1_conv"), 16_592_535),
    (("mobilenetv2",), ("block_16_project", "block_13_expand_relu", "block_6_expand_relu",
                        "block_3_expand_relu"), 6_287_511)])
def test_single_branch_networks(branches, taps, parameters):
    """The branch alone: its decoder layers, the prediction reading x11 (or x22). Parameters
    by hand: the full decoder's 22,879,962 split at x11/x22; each branch keeps the prediction
    layer (84)."""
    model = ResMobileNet((32, 64), branches=branches)
    assert model.decoder_inputs == taps
    assert model.parameter_count(trainable_only=True) == parameters
    assert model.graph.nodes["prediction"].inputs == (
        {"resnet50v2": "x11", "mobilenetv2": "x22"}[branches[0]],)
    assert model.predict(images((1, 32, 64, 3))).shape == (1, 32, 64, 3)
    with pytest.raises(InputError, match="branches"):
        ResMobileNet((32, 64), branches=("vgg",))
