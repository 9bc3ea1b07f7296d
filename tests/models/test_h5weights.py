"""Keras HDF5 weights -> refseg .npz, and the inspection of .npz weight files.

Files are written by Keras itself (its legacy HDF5 writer, ``model.save("x.h5")`` and
``model.save_weights("x.weights.h5")``) and, for the layout of the distributed Keras 2 files, by
h5py. Every converted array must equal its Keras variable exactly. The expected keys and shapes
of the two backbones are derived here, independently of refseg.models, from the layer graph in
``spec/keras_backbones_224.txt``.
"""
import re

import numpy as np
import pytest

from refseg.models import h5
from refseg.models import weights as weight_files
from refseg.cli import main
from refseg.errors import InputError
from refseg.models.h5 import convert_h5
from refseg.models.weights import (STATUS_IGNORED, STATUS_MISSHAPED, STATUS_OK,
                                   STATUS_UNEXPECTED, inspect_npz)
from anchors import require
from checkout import SPEC, run_refseg

# the converter is a tool; the two tests of the backbones' shapes also cite claim 2
pytestmark = pytest.mark.infrastructure

# the layer graph Keras 3.15.1 gives the two backbones, shipped with the spec
REFERENCE = SPEC / "keras_backbones_224.txt"
#: Parameter counts of the two backbones (include_top=False), as keras.applications reports them.
PARAMETERS = {"resnet50v2": 23_564_800, "mobilenetv2": 2_257_984}
LEGACY_LAYOUTS = ("legacy-weights", "legacy-model")


def reference_shapes():
    """{part: {key: shape}} of both backbones, from the reference layer graph: Conv2D kernel
    (kh, kw, in, filters) and bias; DepthwiseConv2D kernel (kh, kw, in, multiplier) and bias;
    BatchNormalization gamma, beta, moving_mean, moving_variance."""
    line = re.compile(r"^(\S+) (\S+) (.*)<- (\S*)\s+out=\((.*)\)$")
    parts, channels, part = {}, {}, None
    for text in REFERENCE.read_text().splitlines():
        if text.startswith("# ResNet50V2") or text.startswith("# MobileNetV2"):
            part = text[2:].lower()
            parts[part] = {}
            continue
        if not text or text.startswith("#"):
            continue
        name, kind, config, inbound, out = line.match(text).groups()
        channels[name] = int(out.split(",")[-1])
        cfg = dict(re.findall(r"(\w+)=(\([^)]*\)|\S+)", config))
        cin = channels[inbound.split(",")[0]] if inbound else None
        keys = parts[part]
        if kind in ("Conv2D", "DepthwiseConv2D"):
            kh, kw = (int(n) for n in cfg["kernel_size"].strip("()").split(","))
            last = int(cfg["filters"]) if kind == "Conv2D" else int(cfg["depth_multiplier"])
            keys[f"{name}/kernel"] = (kh, kw, cin, last)
            if cfg["use_bias"] == "True":
                keys[f"{name}/bias"] = (channels[name],)
        elif kind == "BatchNormalization":
            for w in ("gamma", "beta", "moving_mean", "moving_variance"):
                keys[f"{name}/{w}"] = (channels[name],)
    return parts


EXPECTED = reference_shapes()


def keras_arrays(keras, model):
    """{Keras weight path: array} of a model."""
    return {v.path: keras.ops.convert_to_numpy(v) for v in model.weights}


def randomise(model, seed=0):
    """Random weights everywhere (biases, BN statistics included), variances positive."""
    rng = np.random.default_rng(seed)
    model.set_weights([np.abs(rng.standard_normal(w.shape)).astype(np.float32) + 0.5
                       if i % 4 == 3 else rng.standard_normal(w.shape).astype(np.float32)
                       for i, w in enumerate(model.get_weights())])


def save(keras, model, folder, layout):
    """Write ``model`` in one of the layouts with Keras; return the path."""
    h5py = require("h5py")
    if layout == "legacy-weights":
        from keras.src.legacy.saving import legacy_h5_format

        path = folder / f"{model.name}.h5"
        with h5py.File(path, "w") as f:
            legacy_h5_format.save_weights_to_hdf5_group(f, model)
    elif layout == "legacy-model":
        path = folder / f"{model.name}_model.h5"
        model.save(path)
    else:
        path = folder / f"{model.name}.weights.h5"
        model.save_weights(path)
    return path


def load(path):
    with np.load(path, allow_pickle=False) as npz:
        return {k: npz[k] for k in npz.files}


@pytest.fixture(scope="module")
def keras():
    require("torch")
    require("h5py")
    return require("keras")


@pytest.fixture(scope="module")
def small_model(keras):
    """Layers named like the backbones', nested in an outer model, with random weights."""
    L = keras.layers
    inner_in = keras.Input((12, 12, 3))
    x = L.Conv2D(8, 3, name="conv1_conv")(inner_in)
    x = L.BatchNormalization(name="conv2_block1_preact_bn")(x)
    x = L.DepthwiseConv2D(3, name="expanded_conv_depthwise", use_bias=False)(x)
    inner = keras.Model(inner_in, x, name="backbone")
    outer_in = keras.Input((12, 12, 3))
    y = inner(outer_in)
    y = L.Conv2D(16, 1, use_bias=False, name="block_1_expand")(y)
    y = L.DepthwiseConv2D(3, name="block_1_depthwise")(y)
    y = L.Conv2DTranspose(4, 3, strides=2, name="x7a")(y)
    model = keras.Model(outer_in, y, name="small")
    randomise(model)
    return model


@pytest.fixture(scope="module")
def trained_model(keras):
    """A compiled model after one training step: its files hold optimizer state too."""
    L = keras.layers
    inp = keras.Input((6, 6, 3))
    x = L.Conv2D(4, 3, name="conv1_conv")(inp)
    x = L.BatchNormalization(name="bn_Conv1")(x)
    model = keras.Model(inp, x, name="trained")
    model.compile(optimizer="adam", loss="mse")
    model.fit(np.ones((2, 6, 6, 3), np.float32), np.zeros((2, 4, 4, 4), np.float32), verbose=0)
    return model


#: The layouts each backbone is saved in: MobileNetV2 in every one; ResNet50V2 (94 MB a file) in
#: the layout of the files keras.applications distributes, the layouts' differences being
#: those of its layer kinds, which MobileNetV2 and the small model already have.
BACKBONE_LAYOUTS = {"mobilenetv2": (*LEGACY_LAYOUTS, "keras3"), "resnet50v2": ("legacy-weights",)}


@pytest.fixture(scope="module")
def backbones(keras, tmp_path_factory):
    """Both keras.applications backbones (random weights), saved in the layouts of
    :data:`BACKBONE_LAYOUTS`."""
    folder = tmp_path_factory.mktemp("backbones")
    models = {
        "mobilenetv2": keras.applications.MobileNetV2(weights=None, include_top=False,
                                                      input_shape=(96, 96, 3)),
        "resnet50v2": keras.applications.ResNet50V2(weights=None, include_top=False,
                                                    input_shape=(64, 64, 3)),
    }
    out = {}
    for i, (part, model) in enumerate(models.items()):
        randomise(model, seed=i + 1)
        out[part] = (keras_arrays(keras, model),
                     {layout: save(keras, model, folder, layout)
                      for layout in BACKBONE_LAYOUTS[part]})
    return out


# ------------------------------------------------------------------------- the reference table
@pytest.mark.claim("claim2.backbones")
def test_reference_table_counts_the_backbones_parameters():
    for part, count in PARAMETERS.items():
        assert sum(int(np.prod(s)) for s in EXPECTED[part].values()) == count
    assert not {k.split("/")[0] for k in EXPECTED["resnet50v2"]} & \
        {k.split("/")[0] for k in EXPECTED["mobilenetv2"]}


@pytest.mark.claim("claim2.backbones")
def test_known_weight_shapes_agree_with_the_reference_graph():
    from refseg.models import known_weight_shapes

    known = known_weight_shapes()
    for part in ("resnet50v2", "mobilenetv2"):
        assert known[part] == EXPECTED[part], part


# ---------------------------------------------------------------------------------- conversion
@pytest.mark.parametrize("layout", [*LEGACY_LAYOUTS, "keras3"])
def test_every_array_equals_its_keras_variable(keras, small_model, tmp_path, layout):
    src = save(keras, small_model, tmp_path, layout)
    report = convert_h5(src, tmp_path / "w.npz")
    got, want = load(tmp_path / "w.npz"), keras_arrays(keras, small_model)
    assert set(got) == set(want)  # Keras 3 paths: a depthwise kernel is <layer>/kernel
    for key, array in want.items():
        assert got[key].dtype == np.float32 and np.array_equal(got[key], array), key
    assert report.arrays == len(want) == 12 and report.layers == 6 and not report.skipped
    assert report.parameters == sum(a.size for a in want.values())
    assert sorted(report.keys) == sorted(want)


@pytest.mark.parametrize("layout", ["legacy-model", "keras3"])
def test_optimizer_state_is_skipped_and_counted(keras, trained_model, tmp_path, layout):
    src = save(keras, trained_model, tmp_path, layout)
    report = convert_h5(src, tmp_path / "w.npz")
    got, want = load(tmp_path / "w.npz"), keras_arrays(keras, trained_model)
    assert set(got) == set(want) and all(np.array_equal(got[k], want[k]) for k in want)
    # Adam: iteration, learning rate, and two moments of each of the 4 trainable variables
    assert len(report.skipped) == 10
    assert {reason for _, reason in report.skipped} <= {
        "optimizer state", "not a layer's variable (optimizer or model state)"}
    assert "skipped     10" in report.text()


def test_keras3_variable_tables_match_keras(keras):
    """The order in which Keras 3 writes ``vars/0``, ``vars/1``... is trainable then
    non-trainable variables; the names in KERAS3_VARIABLE_NAMES must follow it."""
    L = keras.layers
    layers = {"conv2d": [L.Conv2D(2, 3), L.Conv2D(2, 3, use_bias=False)],
              "conv2d_transpose": [L.Conv2DTranspose(2, 3),
                                   L.Conv2DTranspose(2, 3, use_bias=False)],
              "depthwise_conv2d": [L.DepthwiseConv2D(3), L.DepthwiseConv2D(3, use_bias=False)],
              "dense": [L.Dense(2), L.Dense(2, use_bias=False)],
              "batch_normalization": [L.BatchNormalization(),
                                      L.BatchNormalization(center=False, scale=False)]}
    assert set(layers) == set(h5.KERAS3_VARIABLE_NAMES)
    for kind, instances in layers.items():
        for layer in instances:
            layer.build((1, 5, 5, 3) if kind != "dense" else (1, 3))
            assert keras.src.utils.naming.to_snake_case(type(layer).__name__) == kind
            order = [v.path.split("/")[-1] for v in
                     layer._trainable_variables + layer._non_trainable_variables]
            assert list(h5.KERAS3_VARIABLE_NAMES[kind][len(order)]) == order, kind


def write_keras2_file(path, model_arrays, chunks=1):
    """The layout of the distributed Keras 2 files: bytes attributes, names with ``:0``, a
    depthwise kernel called ``depthwise_kernel``, ``layer_names`` split into chunks like Keras
    does when the attribute is too long."""
    h5py = require("h5py")
    layers = {}
    for key, array in model_arrays.items():
        layers.setdefault(key.split("/")[0], []).append((key, array))
    with h5py.File(path, "w") as f:
        names = np.array([n.encode() for n in ["input_1", *layers]])
        if chunks == 1:
            f.attrs["layer_names"] = names
        else:
            for i, chunk in enumerate(np.array_split(names, chunks)):
                f.attrs[f"layer_names{i}"] = chunk
        f.attrs["backend"], f.attrs["keras_version"] = b"tensorflow", b"2.2.4"
        f.create_group("input_1").attrs["weight_names"] = np.array([], dtype="S1")
        for layer, weights in layers.items():
            group = f.create_group(layer)
            depthwise = layer.endswith("depthwise")
            wnames = [(k.replace("/kernel", "/depthwise_kernel") if depthwise else k) + ":0"
                      for k, _ in weights]
            group.attrs["weight_names"] = np.array([w.encode() for w in wnames])
            for wname, (_, array) in zip(wnames, weights):
                group.create_dataset(wname, data=array)


def test_distributed_keras2_layout(keras, backbones, tmp_path):
    want, _ = backbones["mobilenetv2"]
    src = tmp_path / "mobilenet_v2_weights_tf_dim_ordering_tf_kernels_1.0_224_no_top.h5"
    write_keras2_file(src, want, chunks=3)
    report = convert_h5(src, tmp_path / "w.npz")
    got = load(tmp_path / "w.npz")
    assert set(got) == set(want) and all(np.array_equal(got[k], want[k]) for k in want)
    assert report.keras_version == "2.2.4" and report.backend == "tensorflow"
    assert any("17 DepthwiseConv2D kernel(s) renamed" in n for n in report.notes)


@pytest.mark.parametrize("part, layout", [
    (part, layout) for part, layouts in BACKBONE_LAYOUTS.items() for layout in layouts])
def test_backbones_convert_to_the_full_expected_key_set(backbones, tmp_path, part, layout):
    want, files = backbones[part]
    report = convert_h5(files[layout], tmp_path / "w.npz")
    got = load(tmp_path / "w.npz")
    assert {k: v.shape for k, v in got.items()} == EXPECTED[part]
    assert all(np.array_equal(got[k], want[k]) for k in want)
    assert report.parameters == PARAMETERS[part] and not report.skipped


# ---------------------------------------------------------------------------------- inspection
def test_inspect_marks_every_key(backbones, tmp_path):
    _, files = backbones["mobilenetv2"]
    path = tmp_path / "w.npz"
    convert_h5(files["keras3"], path)
    arrays = load(path)
    arrays["block_1_expand/kernel"] = arrays["block_1_expand/kernel"][:, :, :, :8]
    arrays["stray/kernel"] = np.zeros((1, 1, 3, 3), np.float32)
    del arrays["block_2_project/kernel"]
    np.savez(path, **arrays)
    expected = {**EXPECTED, "decoder": {"x1/kernel": (3, 3, 720, 2048), "x1/bias": (720,)}}
    result = inspect_npz(path, expected=expected)
    status = {e.key: e.status for e in result.entries}
    assert status["block_1_expand/kernel"] == STATUS_MISSHAPED
    assert status["stray/kernel"] == STATUS_UNEXPECTED
    assert {k for k, s in status.items() if s == STATUS_IGNORED} == {
        "Conv_1/kernel", "Conv_1_bn/gamma", "Conv_1_bn/beta", "Conv_1_bn/moving_mean",
        "Conv_1_bn/moving_variance"}
    assert sum(s == STATUS_OK for s in status.values()) == 260 - 5 - 2
    totals = {t.part: t for t in result.parts}
    assert totals["mobilenetv2"].expected == 255 and totals["mobilenetv2"].misshaped == 1
    assert totals["mobilenetv2"].missing == ("block_2_project/kernel",)
    assert totals["resnet50v2"].matched == 0 and totals["decoder"].missing == ("x1/kernel",
                                                                               "x1/bias")
    text = result.text()
    assert "unexpected keys: 1" in text and "mis-shaped keys: 1" in text
    assert "block_1_expand/kernel (1, 1, 16, 8), expected (1, 1, 16, 96) (mobilenetv2)" in text
    assert "missing from mobilenetv2: block_2_project/kernel" in text
    assert re.search(f"\\n{re.escape(STATUS_IGNORED)}: .*Conv_1/kernel", text)


def test_cli_convert_then_inspect(keras, backbones, tmp_path, capsys, monkeypatch):
    """MobileNetV2 (ResNet50V2's 94 MB file converts in the test above): 104 layers with
    weights (Conv1 and its batch norm, 4 of the first block, 6 in each of 16 blocks, Conv_1 and
    its batch norm), 260 arrays; inspected, the 5 of Conv_1 and Conv_1_bn are ignored (the
    network does not use them: 320 x 1280 + 4 x 1280 of the 2,257,984 parameters)."""
    _, files = backbones["mobilenetv2"]
    out = tmp_path / "m.npz"
    assert main(["weights", "convert", str(files["legacy-weights"]), str(out)]) == 0
    printed = capsys.readouterr().out
    for line in ("layers      104", "arrays      260", "parameters  2,257,984", "skipped     0"):
        assert line in printed
    monkeypatch.setattr(weight_files, "known_weight_shapes", lambda: EXPECTED)
    assert main(["weights", "inspect", str(out)]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"mobilenetv2 +255 +255 +0 +0 +1,843,264\n", printed), printed
    assert re.search(r"resnet50v2 +270 +0 +0 +270 +0 +\(absent\)", printed), printed
    assert re.search(r"\nConv1/kernel +\(3, 3, 3, 32\) +float32 +mobilenetv2 +ok\n", printed)
    assert "unexpected keys: 0" in printed and "mis-shaped keys: 0" in printed


# ---------------------------------------------------------------------------------- bad input


def bad_h5(kind, folder, good):
    h5py = require("h5py")
    path = folder / f"{kind}.h5"
    if kind == "truncated":
        data = good.read_bytes()
        path.write_bytes(data[:len(data) // 2])
    elif kind == "text":
        path.write_text("conv1_conv/kernel 1 2 3\n")
    elif kind == "nan":
        path.write_bytes(good.read_bytes())
        with h5py.File(path, "r+") as f:
            f["backbone/conv1_conv/kernel"][0, 0, 0, 0] = np.nan
    elif kind == "no-layout":
        with h5py.File(path, "w") as f:
            f["data"] = np.zeros(3)
    elif kind == "external-link":
        path.write_bytes(good.read_bytes())
        with h5py.File(path, "r+") as f:
            del f["backbone/conv1_conv/kernel"]
            f["backbone/conv1_conv/kernel"] = h5py.ExternalLink(str(good),
                                                                "/backbone/conv1_conv/kernel")
    elif kind == "unnamed-vars":  # a .weights.h5 of a Keras that did not record layer names
        path = folder / "unnamed.weights.h5"
        with h5py.File(path, "w") as f:
            f["layers/conv2d/vars/0"] = np.zeros((1, 1, 3, 4), np.float32)
    return path


BAD_H5 = {"truncated": "truncated or corrupt HDF5 data", "text": "not an HDF5 file",
          "nan": "/backbone/conv1_conv/kernel: 1 of 216 values are NaN or infinite",
          "no-layout": "no Keras weights layout found",
          "external-link": "/backbone/conv1_conv/kernel: an external link, refused",
          "unnamed-vars": "the layer's name is not recorded", "missing": "no such file"}


@pytest.mark.parametrize("kind", list(BAD_H5))
def test_bad_h5_one_line_exit_2_nothing_written(keras, small_model, tmp_path, capsys, kind):
    good = save(keras, small_model, tmp_path, "legacy-weights")
    path = tmp_path / "missing.h5" if kind == "missing" else bad_h5(kind, tmp_path, good)
    out = tmp_path / "out" / "w.npz"
    out.parent.mkdir()
    with pytest.raises(InputError) as info:
        convert_h5(path, out)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message and BAD_H5[kind] in message
    assert main(["weights", "convert", str(path), str(out)]) == 2
    printed = capsys.readouterr()
    assert printed.err == f"refseg: error: {message}\n" and printed.out == ""
    assert list(out.parent.iterdir()) == []


@pytest.mark.parametrize("kind", ["pickled", "text", "npy", "truncated", "missing", "not-npy"])
def test_bad_npz_one_line_exit_2(tmp_path, capsys, kind):
    path = tmp_path / f"{kind}.npz"
    if kind == "pickled":
        np.savez(path, **{"conv1_conv/kernel": np.array([{"a": 1}], dtype=object)})
    elif kind == "text":
        path.write_text("not an archive")
    elif kind == "npy":
        with open(path, "wb") as f:
            np.save(f, np.zeros(3))
    elif kind == "truncated":
        np.savez(path, **{"conv1_conv/kernel": np.zeros((7, 7, 3, 64), np.float32)})
        path.write_bytes(path.read_bytes()[:3000])
    elif kind == "not-npy":
        import zipfile

        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("notes.txt", "a zip member that is not .npy")
    with pytest.raises(InputError) as info:
        inspect_npz(path, expected=EXPECTED)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    if kind == "pickled":
        assert "pickled" in message
    if kind == "not-npy":
        assert message == f"{path}: member 'notes.txt' is not a .npy array"
    assert main(["weights", "inspect", str(path)]) == 2
    printed = capsys.readouterr()
    assert printed.err == f"refseg: error: {message}\n" and printed.out == ""


def test_console_entry_point_bad_input(keras, small_model, tmp_path):
    """Through ``python -m refseg``: exit status 2, one line, no traceback, nothing written."""
    good = save(keras, small_model, tmp_path, "legacy-weights")
    truncated = bad_h5("truncated", tmp_path, good)
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, **{"conv1_conv/kernel": np.array([None], dtype=object)})
    out = tmp_path / "out"
    out.mkdir()
    for args, name in ((("convert", str(truncated), str(out / "w.npz")), truncated),
                       (("inspect", str(pickled)), pickled)):
        result = run_refseg("weights", *args)
        assert result.returncode == 2 and result.stdout == "", result.stderr
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"refseg: error: {name}: ")
    assert list(out.iterdir()) == []


def test_batch_norm_with_three_variables_is_refused_in_the_keras3_layout(keras, tmp_path):
    """center=False and scale=False both leave three variables: gamma or beta cannot be told."""
    inp = keras.Input((4, 4, 2))
    model = keras.Model(inp, keras.layers.BatchNormalization(name="bn", center=False)(inp))
    src = save(keras, model, tmp_path, "keras3")
    with pytest.raises(InputError, match="gamma and beta cannot be told apart"):
        convert_h5(src, tmp_path / "w.npz")
    report = convert_h5(save(keras, model, tmp_path, "legacy-model"), tmp_path / "w.npz")
    assert set(report.keys) == {"bn/gamma", "bn/moving_mean", "bn/moving_variance"}


def test_output_must_be_an_npz_beside_an_existing_folder(keras, small_model, tmp_path):
    src = save(keras, small_model, tmp_path, "keras3")
    for dst, problem in ((tmp_path / "w.h5", "ending in .npz"),
                         (tmp_path / "no" / "w.npz", "does not exist")):
        with pytest.raises(InputError, match=problem):
            convert_h5(src, dst)


def test_loading_and_inspecting_sort_keys_with_one_classifier(tmp_path):
    """match_weights (loading) and inspect_npz (inspecting) give each key the status of the
    one classifier: an expected key with its shape ok, with another shape mis-shaped, a key
    nothing expects unexpected."""
    from refseg.models.weights import key_status, match_weights

    expected = {"a/kernel": (3, 3), "b/bias": (4,)}
    arrays = {"a/kernel": np.ones((3, 3), np.float32), "b/bias": np.ones((5,), np.float32),
              "c/gamma": np.ones((2,), np.float32)}
    path = tmp_path / "w.npz"
    np.savez(path, **arrays)
    report = match_weights(path, arrays, expected)
    inspected = {e.key: e.status for e in inspect_npz(path, expected={"part": expected}).entries}
    assert inspected == {"a/kernel": STATUS_OK, "b/bias": STATUS_MISSHAPED,
                         "c/gamma": STATUS_UNEXPECTED}
    assert report.loaded == ["a/kernel"] and report.misshaped == ["b/bias (5,) != (4,)"]
    assert report.unexpected == ["c/gamma"]
    for key, array in arrays.items():
        want = [expected[key]] if key in expected else []
        assert key_status(array.shape, want, False) == inspected[key]
    assert key_status((3, 3), [(3, 3)], True) == STATUS_IGNORED
