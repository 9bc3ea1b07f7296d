"""Hypothesis-made report folders, run folders, weight files and hand-edited golden reference
and candidate folders through the real command line (``refseg.cli.main`` in this process, so
that many examples stay quick): each ends in exit 0 (or 1, a comparison's verdict) or in one
line ``refseg: error: ...`` with exit 2, never a traceback, and leaves every file it was given
byte-identical; reference folders also over images around the summary threshold."""
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



# -- reference folders (`golden reference`, `golden compare`) -----------------------------------
@pytest.fixture(scope="module")
def reference_pair(tmp_path_factory):
    """A reference folder of three small images, refseg's own candidates for them, and the
    images."""
    from reference_folders import make_image, own_candidates

    root = tmp_path_factory.mktemp("reference_pair")
    (root / "images").mkdir()
    for i, (rows, cols) in enumerate([(9, 12), (16, 11), (3, 3)]):
        make_image(root / "images" / f"{'abc'[i]}.png", rows, cols, seed=i)
    assert main(["golden", "reference", str(root / "images"), "--out", str(root / "ref"),
                 "--jobs", "1"]) == 0
    own_candidates(root / "ref", root / "cand")
    return root


def _edit(folder: Path, edit, draw) -> None:
    """One hand edit of a folder: a file deleted, renamed, copied under another name,
    truncated, a byte flipped, replaced by made-up bytes, or (an .npz) an array dropped,
    replaced or added, or index.json rewritten."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    if not files:
        return
    path = files[draw(st.integers(0, len(files) - 1))]
    other = folder / draw(st.sampled_from(["a.npz", "b.npz", "c.npz", "d.npz", "x y.npz",
                                           "index.json", "notes.txt"]))
    if edit == "delete":
        path.unlink()
    elif edit == "rename" and other != path:
        path.rename(other)
    elif edit == "copy" and other != path:
        other.write_bytes(path.read_bytes())
    elif edit == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[:draw(st.integers(0, max(0, len(data) - 1)))])
    elif edit == "flip":
        data = bytearray(path.read_bytes())
        if data:
            data[draw(st.integers(0, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
            path.write_bytes(bytes(data))
    elif edit == "bytes":
        path.write_bytes(draw(st.binary(max_size=80)))
    elif edit == "index":
        index = json.loads((folder / "index.json").read_text()) if (
            folder / "index.json").is_file() else {}
        index[draw(st.sampled_from(["format", "format_version", "refseg", "images"]))] = \
            draw(values)
        if isinstance(index.get("images"), dict) and draw(st.booleans()):
            index["images"][draw(st.sampled_from(["a", "b", "d", "../a"]))] = draw(
                row_like(("file", "sha256", "source")) | values)
        (folder / "index.json").write_text(dump(index))
    elif edit in ("drop", "array", "key") and path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as npz:
                content = dict(npz)
        except Exception:  # an earlier edit made it unreadable: nothing to edit
            return
        keys = sorted(content)
        key = keys[draw(st.integers(0, len(keys) - 1))] if keys else "x"
        if edit == "drop":
            content.pop(key, None)
        elif edit == "array":
            content[key] = draw(arrays)
        else:
            content[draw(st.sampled_from(["claim1/a/gary", "extra", f"{key}@slice0"]))] = \
                draw(arrays)
        np.savez(path, **content)


EDITS = st.sampled_from(["delete", "rename", "copy", "truncate", "flip", "bytes", "index",
                         "drop", "array", "key"])


@FUZZ
@given(ref_edits=st.lists(EDITS, max_size=3), cand_edits=st.lists(EDITS, max_size=3),
       rewrite=st.booleans(), draw=st.data())
def test_golden_compare_and_reference_on_hand_edited_folders(tmp_path_factory, capsys,
                                                             reference_pair, ref_edits,
                                                             cand_edits, rewrite, draw):
    """Reference and candidate folders edited by hand: `golden compare` ends in a verdict (0 or
    1) or one clean line (2), leaves both folders as they were, and passes only when both
    sides hold the same images, every reference file the one index.json records; `golden
    reference` into an edited folder leaves every file it does not write as it was."""
    import shutil

    folder = tmp_path_factory.mktemp("edited")
    ref, cand = folder / "ref", folder / "cand"
    shutil.copytree(reference_pair / "ref", ref)
    shutil.copytree(reference_pair / "cand", cand)
    for edit in ref_edits:
        _edit(ref, edit, draw.draw)
    for edit in cand_edits:
        _edit(cand, edit, draw.draw)
    if rewrite:
        before = digest(ref)
        status, _ = run_cli(capsys, "golden", "reference", reference_pair / "images" / "a.png",
                            "--out", ref, "--jobs", "1")
        after = digest(ref)
        for name in ("a.npz", "index.json", ".refseg-output"):
            before.pop(name, None)
            after.pop(name, None)
        assert after == before
    before = digest(folder)
    capsys.readouterr()
    status = main(["golden", "compare", str(ref), str(cand), "--jobs", "1"])
    out, err = capsys.readouterr()
    assert status in (0, 1, 2), (status, err)
    if status == 2:
        assert err.startswith("refseg: error: ") and err.count("\n") == 1, err
    assert not err or status == 2, err
    assert digest(folder) == before
    if status == 0:
        index = json.loads((ref / "index.json").read_text())["images"]
        stems = {p.stem for p in ref.glob("*.npz")}
        assert stems == set(index) == {p.stem for p in cand.glob("*.npz")}, out
        assert all(hashlib.sha256((ref / f"{n}.npz").read_bytes()).hexdigest() ==
                   index[n]["sha256"] for n in stems), out


@pytest.mark.parametrize("rows, cols, storage", [(362, 362, "full"), (363, 363, "summary"),
                                                 (900, 1200, "summary")])
def test_golden_reference_and_compare_around_the_summary_threshold(tmp_path, capsys, rows,
                                                                   cols, storage):
    """Images of 131,044, 131,769 (the summary threshold is 131,072 elements) and 1,080,000
    pixels: referenced, stored as the threshold says, refseg's own candidate passes; a
    candidate folder missing the image's file fails it as missing."""
    from reference_folders import make_image, own_candidates
    from refseg.golden.references import read_reference

    image = make_image(tmp_path / "photo.png", rows, cols)
    ref = tmp_path / "ref"
    status, _ = run_cli(capsys, "golden", "reference", image, "--out", ref, "--jobs", "1")
    assert status == 0
    assert read_reference(ref / "photo.npz").entries["claim1/photo/gray"]["storage"] == storage
    cand = own_candidates(ref, tmp_path / "cand")
    assert main(["golden", "compare", str(ref), str(cand)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "PASS"
    (cand / "photo.npz").unlink()
    assert main(["golden", "compare", str(ref), str(cand)]) == 1
    assert "photo: missing: " in capsys.readouterr().out
