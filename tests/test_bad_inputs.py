"""The bad-input corpus: each case runs the real CLI (a subprocess) on one bad input and asserts
what every bad input must give: exit status 2, exactly one line on stderr that names the file
(or option) and the problem, no traceback, no file or folder created or changed anywhere in
the test's folder -- so an earlier output there stays as it was.

Kills are in ``test_kills.py``, option ranges in ``test_option_ranges.py``, the golden bundle's
integrity cases (tampered arrays, paths outside the bundle, tolerances) in
``tests/golden/test_golden.py``.
"""
import hashlib
import io
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from anchors import require
from checkout import run_refseg

pytestmark = pytest.mark.infrastructure


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Good inputs that the cases spoil: a data set, one of its images, a tiny trained run."""
    root = tmp_path_factory.mktemp("world")
    data = root / "data"
    assert run_refseg("synth", "--count", "5", "--out", data, "--size", "48x96").returncode == 0
    run = root / "run"
    trained = run_refseg("train", data, "--out", run, "--epochs", "1", "--input-size", "32x32",
                         "--batch-size", "2", "--jobs", "1", "--branches", "mobilenetv2")
    assert trained.returncode == 0, trained.stderr
    return {"data": data, "image": data / "images" / "weld_00000.png", "run": run}


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            if p.is_file() else "folder" for p in sorted(folder.rglob("*"))}


def _png_bytes(array) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def _forged_npz(path: Path, key="conv1_conv/kernel", shape=(2 ** 38,)) -> Path:
    """A few hundred bytes whose header declares a 1 TiB float32 array."""
    header = np.lib.format.header_data_from_array_1_0(np.zeros(1, np.float32))
    header["shape"] = shape
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, header)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(f"{key}.npy", buffer.getvalue() + b"\0" * 64)
    return path


def _copy_run(world, tmp: Path) -> Path:
    return Path(shutil.copytree(world["run"], tmp / "run"))


# each case: (tmp, world) -> (argv, text the one line must contain)
def edges_missing_image(tmp, w):
    return ["edges", tmp / "nope.png", "--out", tmp / "o"], "nope.png: no such file"


def edges_empty_file(tmp, w):
    (tmp / "empty.png").write_bytes(b"")
    return ["edges", tmp / "empty.png", "--out", tmp / "o"], "empty.png: empty file"


def edges_text_named_png(tmp, w):
    (tmp / "notes.png").write_text("not an image")
    return ["edges", tmp / "notes.png", "--out", tmp / "o"], "notes.png: not an image"


def edges_truncated_png(tmp, w):
    data = w["image"].read_bytes()
    (tmp / "cut.png").write_bytes(data[:len(data) // 2])
    return ["edges", tmp / "cut.png", "--out", tmp / "o"], "cut.png: truncated or corrupt"


def edges_image_over_the_pixel_limit(tmp, w):
    # 9000x9000 zeros: some 80 KB of PNG that would take gigabytes to process
    (tmp / "huge.png").write_bytes(_png_bytes(np.zeros((9000, 9000), np.uint8)))
    return ["edges", tmp / "huge.png", "--out", tmp / "o"], \
        "huge.png: 9000x9000 pixels is more than the limit of 40,000,000"


def edges_out_is_a_file(tmp, w):
    (tmp / "o.txt").write_text("mine")
    return ["edges", w["image"], "--out", tmp / "o.txt"], "o.txt: exists and is not a folder"


def edges_out_holds_the_users_files(tmp, w):
    (tmp / "o").mkdir()
    (tmp / "o" / "notes.txt").write_text("mine")
    return ["edges", w["image"], "--out", tmp / "o"], "holds files that refseg did not write"


def edges_bad_second_image_leaves_the_earlier_output(tmp, w):
    assert run_refseg("edges", w["image"], "--out", tmp / "o").returncode == 0
    (tmp / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
    return ["edges", w["image"], tmp / "bad.png", "--out", tmp / "o"], "bad.png"


def edges_max_pixels_not_a_number(tmp, w):
    return ["edges", w["image"], "--out", tmp / "o", "--max-pixels", "lots"], "--max-pixels"


def edges_max_pixels_out_of_range(tmp, w):
    return ["edges", w["image"], "--out", tmp / "o", "--max-pixels", "0"], "--max-pixels"


def dataset_check_missing_folder(tmp, w):
    return ["dataset", "check", tmp / "nowhere"], "nowhere"


def _spoiled_data(tmp, w) -> Path:
    return Path(shutil.copytree(w["data"], tmp / "data"))


def train_off_palette_label(tmp, w):
    data = _spoiled_data(tmp, w)
    label = data / "labels" / "weld_00002.png"
    pixels = np.asarray(Image.open(label)).copy()
    pixels[3, 3] = (7, 7, 7)
    label.write_bytes(_png_bytes(pixels))
    return ["train", data, "--out", tmp / "run", "--epochs", "1"], "weld_00002.png"


def train_label_of_another_size(tmp, w):
    data = _spoiled_data(tmp, w)
    label = data / "labels" / "weld_00001.png"
    pixels = np.asarray(Image.open(label))[:40]
    label.write_bytes(_png_bytes(np.ascontiguousarray(pixels)))
    return ["train", data, "--out", tmp / "run", "--epochs", "1"], "weld_00001.png"


def train_missing_data_folder(tmp, w):
    return ["train", tmp / "nowhere", "--out", tmp / "run"], "nowhere"


def train_weights_missing(tmp, w):
    return ["train", w["data"], "--out", tmp / "run", "--weights", tmp / "pre.npz"], "pre.npz"


def train_weights_with_wrong_keys(tmp, w):
    np.savez(tmp / "pre.npz", **{"foo/bar": np.zeros(3, np.float32)})
    return ["train", w["data"], "--out", tmp / "run", "--weights", tmp / "pre.npz"], "pre.npz"


def train_weights_with_nan(tmp, w):
    np.savez(tmp / "pre.npz", **{"Conv1/kernel": np.full((3, 3, 3, 32), np.nan, np.float32)})
    return ["train", w["data"], "--out", tmp / "run", "--branches", "mobilenetv2",
            "--weights", tmp / "pre.npz"], "pre.npz"


def train_weights_forged_to_a_tebibyte(tmp, w):
    _forged_npz(tmp / "pre.npz")
    return ["train", w["data"], "--out", tmp / "run", "--weights", tmp / "pre.npz"], \
        "pre.npz: member 'conv1_conv/kernel.npy' declares (274877906944,) float32"


def train_init_from_nowhere(tmp, w):
    return ["train", w["data"], "--out", tmp / "run", "--init-from", tmp / "nowhere"], \
        "nowhere"


def weights_inspect_member_not_npy(tmp, w):
    with zipfile.ZipFile(tmp / "w.npz", "w") as archive:
        archive.writestr("notes.txt", "hello")
    return ["weights", "inspect", tmp / "w.npz"], "w.npz: member 'notes.txt' is not a .npy"


def weights_inspect_pickled(tmp, w):
    np.savez(tmp / "w.npz", **{"x/kernel": np.array([{"a": 1}], dtype=object)})
    return ["weights", "inspect", tmp / "w.npz"], "w.npz: holds pickled objects"


def weights_inspect_forged_to_a_tebibyte(tmp, w):
    _forged_npz(tmp / "w.npz")
    return ["weights", "inspect", tmp / "w.npz"], "w.npz: member"


def weights_convert_h5_declaring_a_tebibyte(tmp, w):
    h5py = require("h5py")
    with h5py.File(tmp / "w.h5", "w") as f:
        f.attrs["layer_names"] = [b"conv1_conv"]
        group = f.create_group("conv1_conv")
        group.attrs["weight_names"] = [b"conv1_conv/kernel:0"]
        group.create_dataset("conv1_conv/kernel:0", shape=(2 ** 38,), dtype="float32",
                             chunks=(2 ** 16,))
    assert (tmp / "w.h5").stat().st_size < 100_000
    return ["weights", "convert", tmp / "w.h5", tmp / "w.npz"], "w.h5"


def predict_run_with_corrupt_config(tmp, w):
    run = _copy_run(w, tmp)
    (run / "config.json").write_text("{not json")
    return ["predict", run, w["image"], "--out", tmp / "p"], "config.json"


def predict_run_with_damaged_history(tmp, w):
    run = _copy_run(w, tmp)
    with np.load(run / "checkpoint.npz", allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays["epoch"] = np.array(5)
    np.savez(run / "checkpoint.npz", **arrays)
    return ["predict", run, w["image"], "--out", tmp / "p"], "checkpoint.npz: a damaged"


def predict_image_over_the_pixel_limit(tmp, w):
    return ["predict", w["run"], w["image"], "--out", tmp / "p", "--max-pixels", "100"], \
        "weld_00000.png: 96x48 pixels is more than the limit of 100"


def predict_over_a_result_holding_the_users_file(tmp, w):
    assert run_refseg("predict", w["run"], w["image"], "--out", tmp / "p").returncode == 0
    (tmp / "p" / "weld_00000" / "notes.txt").write_text("mine")
    return ["predict", w["run"], w["image"], "--out", tmp / "p"], \
        "weld_00000: exists and holds files refseg predict did not write (notes.txt)"


def evaluate_out_is_a_file(tmp, w):
    (tmp / "notes.txt").write_text("mine")
    return ["evaluate", w["run"], w["data"], "--out", tmp / "notes.txt"], "notes.txt"


def golden_check_missing_bundle(tmp, w):
    np.savez(tmp / "c.npz", x=np.zeros(2))
    return ["golden", "check", tmp / "nowhere", tmp / "c.npz"], "nowhere"


def golden_check_manifest_not_json(tmp, w):
    (tmp / "b").mkdir()
    (tmp / "b" / "manifest.json").write_text("{oops")
    np.savez(tmp / "c.npz", x=np.zeros(2))
    return ["golden", "check", tmp / "b", tmp / "c.npz"], "manifest.json"


def synth_into_the_users_folder(tmp, w):
    (tmp / "mine").mkdir()
    (tmp / "mine" / "thesis.tex").write_text("mine")
    return ["synth", "--count", "2", "--out", tmp / "mine"], \
        "mine: holds files that refseg did not write (thesis.tex)"


def demo_out_is_a_file(tmp, w):
    (tmp / "demo.txt").write_text("mine")
    return ["demo", "--out", tmp / "demo.txt"], "demo.txt: exists and is not a folder"


CASES = [edges_missing_image, edges_empty_file, edges_text_named_png, edges_truncated_png,
         edges_image_over_the_pixel_limit, edges_out_is_a_file, edges_out_holds_the_users_files,
         edges_bad_second_image_leaves_the_earlier_output, edges_max_pixels_not_a_number,
         edges_max_pixels_out_of_range, dataset_check_missing_folder, train_off_palette_label,
         train_label_of_another_size, train_missing_data_folder, train_weights_missing,
         train_weights_with_wrong_keys, train_weights_with_nan,
         train_weights_forged_to_a_tebibyte, train_init_from_nowhere,
         weights_inspect_member_not_npy, weights_inspect_pickled,
         weights_inspect_forged_to_a_tebibyte,
         weights_convert_h5_declaring_a_tebibyte, predict_run_with_corrupt_config,
         predict_run_with_damaged_history, predict_image_over_the_pixel_limit,
         predict_over_a_result_holding_the_users_file,
         evaluate_out_is_a_file, golden_check_missing_bundle, golden_check_manifest_not_json,
         synth_into_the_users_folder, demo_out_is_a_file]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_a_bad_input_ends_in_one_line_and_changes_nothing(tmp_path, world, case):
    argv, expected = case(tmp_path, world)
    before = snapshot(tmp_path)
    result = run_refseg(*argv, timeout=120)
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("refseg: error: "), \
        result.stderr
    assert expected in result.stderr, result.stderr
    assert snapshot(tmp_path) == before


def _small_disk(limit_bytes):
    """In the child: files may grow to ``limit_bytes`` only, as on a full disk (EFBIG)."""
    def limit():
        import resource
        import signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    return limit


@pytest.mark.parametrize("argv, limit", [
    (["edges", "IMAGE", "--out", "OUT"], 60_000),  # features.npz is larger
    (["synth", "--count", "3", "--out", "OUT", "--size", "96x320"], 30_000)])  # each image is
def test_a_full_disk_names_the_file_and_publishes_nothing(tmp_path, world, argv, limit):
    out = tmp_path / "out"
    argv = [world["image"] if a == "IMAGE" else out if a == "OUT" else a for a in argv]
    result = run_refseg(*argv, preexec_fn=_small_disk(limit))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    # the file under the name the user will look for, not the staging folder's
    assert f"refseg: error: {out}/" in result.stderr, result.stderr
    assert "could not be written: File too large" in result.stderr
    assert "staging" not in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_missing_output_folder_is_named_itself(tmp_path):
    from refseg import publish

    with pytest.raises(OSError) as info:
        publish.write_json(tmp_path / "nowhere" / "x.json", {})
    assert info.value.filename == str(tmp_path / "nowhere")
    assert "output folder does not exist" in info.value.strerror
