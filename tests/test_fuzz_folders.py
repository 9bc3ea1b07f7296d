"""Hypothesis-made report folders, run folders and weight files through the real command line
(``refseg.cli.main`` in this process, so that many examples stay quick): each ends in exit 0
or in one line ``refseg: error: ...`` with exit 2, never a traceback, and leaves every file it
was given byte-identical."""
import hashlib
import io
import json
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refseg.cli import main

pytestmark = pytest.mark.infrastructure

FUZZ = settings(max_examples=30, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

scalars = (st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)


def row_like(keys):
    """Objects with some of the keys refseg writes, holding any values."""
    return st.fixed_dictionaries({}, optional={k: values | scalars for k in keys})


SCORE_KEYS = ("run", "pixel_accuracy", "mean_iou", "seconds_per_image", "class_iou",
              "boundary_f1")
EPOCH_KEYS = ("epoch", "train_loss", "train_pixel_accuracy", "val_loss",
              "val_pixel_accuracy", "val_miou", "seconds", "learning_rate")
CONFIG_KEYS = ("epochs", "batch_size", "input_hw", "input_kind", "seed", "learning_rate",
               "learning_rate_steps", "validation_fraction", "branches", "weights")


def dump(value) -> str:
    """JSON as Python writes it (NaN and Infinity included, as a tampered file may hold)."""
    try:
        return json.dumps(value)
    except (ValueError, TypeError):
        return "null"


def digest(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def run_cli(capsys, *argv) -> tuple[int, str]:
    capsys.readouterr()
    status = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert status in (0, 2), (status, err)
    if status == 2:
        assert err.startswith("refseg: error: ") and err.count("\n") == 1, err
    return status, err


@FUZZ
@given(scores=st.lists(row_like(SCORE_KEYS), max_size=3) | values,
       lines=st.lists(row_like(EPOCH_KEYS) | values, max_size=3),
       config=row_like(CONFIG_KEYS) | values,
       demo=row_like(("runs", "settings", "claim1_images")) | values)
def test_report_on_made_up_folders(tmp_path_factory, capsys, scores, lines, config, demo):
    folder = tmp_path_factory.mktemp("report")
    (folder / "runs" / "a").mkdir(parents=True)
    (folder / "scores.json").write_text(dump(scores))
    (folder / "demo.json").write_text(dump(demo))
    (folder / "runs" / "a" / "metrics.jsonl").write_text(
        "".join(dump(line) + "\n" for line in lines))
    (folder / "runs" / "a" / "config.json").write_text(dump(config))
    before = digest(folder)
    status, _ = run_cli(capsys, "report", folder)
    after = digest(folder)
    after.pop("index.html", None)
    assert after == before


@FUZZ
@given(lines=st.lists(row_like(EPOCH_KEYS) | values, max_size=3),
       config=row_like(CONFIG_KEYS) | values)
def test_report_on_made_up_run_folders(tmp_path_factory, capsys, lines, config):
    run = tmp_path_factory.mktemp("run")
    (run / "metrics.jsonl").write_text("".join(dump(line) + "\n" for line in lines))
    (run / "config.json").write_text(dump(config))
    before = digest(run)
    run_cli(capsys, "report", run)
    after = digest(run)
    after.pop("index.html", None)
    assert after == before


def npz_bytes(members) -> bytes:
    """An archive of (name, bytes) members; a name may come twice, as in a tampered file
    (zipfile warns of each duplicate it writes: here it is the point, not a slip)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive, warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Duplicate name", UserWarning)
        for name, data in members:
            archive.writestr(name, data)
    return buffer.getvalue()


arrays = st.builds(
    lambda shape, dtype, fill: np.full(shape, fill).astype(dtype),
    st.lists(st.integers(0, 4), max_size=3).map(tuple),
    st.sampled_from(["float32", "float64", "int8", "uint16", "bool", "complex64"]),
    st.floats(allow_nan=True, allow_infinity=True, width=32))


def npy(array) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


members = st.lists(st.tuples(
    st.sampled_from(["model/conv/kernel.npy", "epoch.npy", "history.npy", "x.npy", "y.txt",
                     "optimizer/step.npy"]),
    st.one_of(arrays.map(npy), st.binary(max_size=64),
              arrays.map(lambda a: npy(a)[:-1] if a.size else npy(a)))), max_size=4)


@FUZZ
@given(content=st.one_of(st.binary(max_size=200), members.map(npz_bytes)))
def test_weights_inspect_on_made_up_npz_files(tmp_path_factory, capsys, content):
    folder = tmp_path_factory.mktemp("npz")
    (folder / "w.npz").write_bytes(content)
    before = digest(folder)
    run_cli(capsys, "weights", "inspect", folder / "w.npz")
    assert digest(folder) == before


@FUZZ
@given(config=row_like(CONFIG_KEYS) | values,
       checkpoint=st.one_of(st.binary(max_size=100), members.map(npz_bytes)))
def test_predict_with_made_up_run_folders(tmp_path_factory, capsys, config, checkpoint):
    folder = tmp_path_factory.mktemp("predict")
    run = folder / "run"
    run.mkdir()
    (run / "config.json").write_text(dump(config))
    (run / "checkpoint.npz").write_bytes(checkpoint)
    (run / "backbones.npz").write_bytes(checkpoint)
    image = folder / "x.png"
    from PIL import Image
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(image)
    before = digest(folder)
    status, _ = run_cli(capsys, "predict", run, image, "--out", folder / "out")
    assert status == 2  # no made-up run is a whole trained run
    assert digest(folder) == before and not (folder / "out").exists()

