"""The publishing contract, case by case, through the real CLI: a user's files stay
byte-identical, outputs appear whole or not at all, writers into one folder are serialised,
and only what refseg can prove is its own and dead is ever swept."""
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from checkout import run_refseg, synth_images
from refseg.errors import InputError
from refseg.publish import (OUTPUT_MARKER, STAGING_MARKER, STAGING_PREFIX, FolderLock,
                            check_single_output, staged_folders, sweep_stale, write_json)

pytestmark = pytest.mark.infrastructure

SIZE = "40x64"


def digest(root: Path) -> dict:
    """{relative path: sha256 or 'dir'} of everything under ``root``, hidden files included."""
    out = {}
    for p in sorted(root.rglob("*")):
        key = str(p.relative_to(root))
        out[key] = "dir" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def one_line_error(result, *fragments):
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert result.stderr.startswith("refseg: error: ") and result.stderr.count("\n") == 1, \
        result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


@pytest.fixture(scope="module")
def welds(tmp_path_factory):
    return synth_images(tmp_path_factory.mktemp("welds"), 6, SIZE)


def test_the_parent_of_out_is_never_swept(tmp_path, welds):
    parent = tmp_path / "h"
    parent.mkdir()
    (parent / ".notes.99999.backup.tmp").write_text("x")
    (parent / ".cache.2024.05.tmp").mkdir()
    (parent / ".refseg-staging-1-x").mkdir()
    (parent / ".refseg-staging-1-x" / "mine.txt").write_text("a user's file")
    (parent / ".o.1.abc.tmp").write_text("y")
    before = digest(parent)
    assert run_refseg("edges", welds[0], "--out", parent / "o").returncode == 0
    assert run_refseg("edges", welds[1], "--out", parent / "o").returncode == 0
    after = digest(parent)
    assert {k: v for k, v in after.items() if not k.startswith("o")} == before
    assert sorted(p.name for p in (parent / "o").iterdir()) == [
        OUTPUT_MARKER, welds[0].stem, welds[1].stem]


def test_a_staging_lookalike_inside_out_is_kept_and_a_dead_staging_swept(tmp_path, welds):
    out = tmp_path / "o"
    assert run_refseg("edges", welds[0], "--out", out).returncode == 0
    lookalike = out / f"{STAGING_PREFIX}1-x"  # no marker: not provably refseg's
    lookalike.mkdir()
    (lookalike / "keep.txt").write_text("mine")
    dead = out / f"{STAGING_PREFIX}dead"  # refseg's marker, nobody holding its lock
    dead.mkdir()
    (dead / STAGING_MARKER).write_bytes(b"")
    (dead / "half.png").write_bytes(b"half")
    assert run_refseg("edges", welds[1], "--out", out).returncode == 0
    assert (lookalike / "keep.txt").read_text() == "mine"
    assert not dead.exists()


def test_a_live_writer_is_never_swept_whatever_its_pid(tmp_path, welds):
    """Liveness is the lock on the staging marker, not a pid (a writer in another pid
    namespace or on another host holds its lock just the same)."""
    out = tmp_path / "o"
    assert run_refseg("edges", welds[0], "--out", out).returncode == 0
    live = out / f"{STAGING_PREFIX}99999999-elsewhere"
    live.mkdir()
    fd = os.open(live / STAGING_MARKER, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        assert sweep_stale(out) == []
        assert live.is_dir()
    finally:
        os.close(fd)
    assert sweep_stale(out) == [live.name]


def test_stems_that_are_refseg_names_are_refused(tmp_path, welds):
    odd = tmp_path / f"{STAGING_PREFIX}1-x.png"
    odd.write_bytes(welds[0].read_bytes())
    out = tmp_path / "o"
    result = run_refseg("edges", odd, "--out", out)
    one_line_error(result, "refseg's own")
    assert not out.exists()


def test_synth_keeps_the_files_it_did_not_draw(tmp_path):
    out = tmp_path / "set"
    assert run_refseg("synth", "--count", "3", "--out", out, "--size", SIZE).returncode == 0
    (out / "images" / "my_photo.png").write_bytes(b"photo")
    (out / "labels" / "my_photo.png").write_bytes(b"label")
    before = digest(out)
    result = run_refseg("synth", "--count", "2", "--out", out, "--size", SIZE)
    one_line_error(result, "my_photo.png")
    assert digest(out) == before


def test_single_file_outputs_never_replace_an_input(tmp_path):
    bundle = tmp_path / "B"
    bundle.mkdir()
    (bundle / "manifest.json").write_text("{}")
    (bundle / "arrays.npz").write_bytes(b"PK-not-really")
    candidate = tmp_path / "c.npz"
    candidate.write_bytes(b"candidate")
    before = digest(tmp_path)
    for argv in (["golden", "check", bundle, candidate, "--report", candidate],
                 ["golden", "check", bundle, candidate, "--report", bundle / "manifest.json"],
                 ["golden", "check", bundle, candidate, "--report", candidate, "--force"],
                 ["golden", "weights", bundle, bundle / "arrays.npz"],
                 ["golden", "weights", bundle, bundle / "arrays.npz", "--force"]):
        one_line_error(run_refseg(*argv), "is an input of this command")
    assert digest(tmp_path) == before


def test_single_file_outputs_replace_only_what_refseg_wrote(tmp_path):
    users = tmp_path / "users.npz"
    users.write_bytes(b"a user's file")
    source = tmp_path / "w.h5"
    source.write_bytes(b"\x89HDF\r\n\x1a\nnot really")
    result = run_refseg("weights", "convert", source, users)
    one_line_error(result, f"{users}: exists and refseg did not write it; --force")
    assert users.read_bytes() == b"a user's file"
    with pytest.raises(InputError, match="refseg did not write it"):
        check_single_output(users)
    assert check_single_output(users, force=True) == users
    ours = tmp_path / "report.json"
    write_json(ours, {"a": 1})
    try:
        os.getxattr(ours, "user.refseg.written")
    except OSError:
        pytest.skip("this file system keeps no extended attributes: only --force replaces")
    assert check_single_output(ours) == ours


def test_a_second_writer_waits_for_the_first_and_says_so(tmp_path, welds):
    out = tmp_path / "o"
    assert run_refseg("edges", welds[0], "--out", out).returncode == 0
    lock = FolderLock(out).acquire()
    try:
        proc = subprocess.Popen([sys.executable, "-P", "-m", "refseg", "edges", str(welds[1]),
                                 "--out", str(out)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        line = proc.stderr.readline()  # blocks until the waiting line (or the end)
        assert "another refseg command" in line and "waiting for it to finish" in line, line
        assert f"pid {os.getpid()}" in line
        assert proc.poll() is None  # still waiting: the lock is held
    finally:
        lock.release()
    out_text, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [welds[0].stem, welds[1].stem]


def test_two_writers_into_one_folder_lose_nothing(tmp_path, welds):
    """Many tries of two `edges` started together into a folder of earlier results: both
    exit 0, every result of both is there, and the earlier results are byte-identical."""
    for attempt in range(4):
        out = tmp_path / f"o{attempt}"
        assert run_refseg("edges", welds[4], welds[5], "--out", out).returncode == 0
        earlier = {k: v for k, v in digest(out).items() if not k.startswith(".")}
        a, b = welds[(2 * attempt) % 4], welds[(2 * attempt + 1) % 4]
        procs = [subprocess.Popen([sys.executable, "-P", "-m", "refseg", "edges", str(image),
                                   "--out", str(out)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for image in (a, b)]
        for proc in procs:
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err
        stems = sorted(p.name for p in out.iterdir() if p.is_dir())
        assert stems == sorted({a.stem, b.stem, welds[4].stem, welds[5].stem})
        now = digest(out)
        assert all(now[k] == v for k, v in earlier.items())
        for stem in (a.stem, b.stem):
            assert json.loads((out / stem / "report.json").read_text())
        assert not [p for p in out.iterdir() if p.name.startswith(STAGING_PREFIX)]


def test_a_failed_first_writer_leaves_no_folder_for_the_one_waiting(tmp_path):
    """The first writer made the folder and fails; the second, waiting on its lock, finds the
    folder gone and makes it again."""
    out = tmp_path / "o"
    with pytest.raises(RuntimeError):
        with staged_folders(out) as staging:
            (staging.root / "a.txt").write_text("never published")
            raise RuntimeError
    assert not out.exists()
    with staged_folders(out) as staging:
        (staging.root / "b.txt").write_text("b")
    assert sorted(p.name for p in out.iterdir()) == [OUTPUT_MARKER, "b.txt"]


#: Run the second command as an ordinary user would see the folder: root may write into a
#: read-only folder, so under root ``os.access`` answers from the permission bits alone.
AS_AN_ORDINARY_USER = """
import os, stat, sys
from refseg.cli import main
real_access = os.access
def access(path, mode, **kwargs):
    if mode & os.W_OK and not os.stat(path).st_mode & stat.S_IWUSR:
        return False
    return real_access(path, mode, **kwargs)
if os.geteuid() == 0:
    os.access = access
sys.exit(main(sys.argv[1:]))
"""


def test_a_read_only_results_folder_is_refused_before_the_work(tmp_path, welds):
    res = tmp_path / "res"
    assert run_refseg("edges", welds[0], "--out", res).returncode == 0
    before = digest(res)
    for p in [res, *res.rglob("*")]:
        p.chmod(p.stat().st_mode & ~0o222)
    try:
        result = subprocess.run([sys.executable, "-P", "-c", AS_AN_ORDINARY_USER, "edges",
                                 str(welds[1]), "--out", str(res)],
                                capture_output=True, text=True, timeout=300)
        one_line_error(result, str(res))
        assert digest(res) == before
    finally:
        for p in [res, *res.rglob("*")]:
            p.chmod(p.stat().st_mode | 0o200)


def _exif_image(path: Path, pixels: np.ndarray, orientation: int):
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.fromarray(pixels).save(path, exif=exif)


def test_exif_orientation_is_applied_and_recorded(tmp_path):
    from refseg.images import read_image

    pixels = np.random.default_rng(3).integers(0, 256, (5, 8, 3), dtype=np.uint8)
    path = tmp_path / "turned.png"
    _exif_image(path, pixels, 6)  # a viewer turns it 90 degrees clockwise
    loaded = read_image(path)
    assert np.array_equal(loaded.pixels, np.rot90(pixels, k=-1))
    assert loaded.exif_orientation == 6 and loaded.info()["exif_orientation"] == 6
    out = tmp_path / "o"
    assert run_refseg("edges", path, "--out", out).returncode == 0
    report = json.loads((out / "turned" / "report.json").read_text())
    assert '"exif_orientation": 6' in json.dumps(report)


def test_a_multi_frame_image_is_refused_with_its_frame_count(tmp_path):
    frames = [Image.fromarray(np.full((8, 8, 3), v, np.uint8)) for v in (0, 255, 128)]
    path = tmp_path / "anim.gif"
    frames[0].save(path, save_all=True, append_images=frames[1:])
    out = tmp_path / "o"
    one_line_error(run_refseg("edges", path, "--out", out), str(path), "holds 3 frames")
    assert not out.exists()


def test_a_file_name_that_is_not_utf8(tmp_path, welds):
    folder = os.fsencode(tmp_path)
    name = folder + b"/we\xffld.png"
    with open(name, "wb") as f:
        f.write(welds[0].read_bytes())
    out = tmp_path / "o"
    result = subprocess.run([sys.executable, "-P", "-m", "refseg", "edges", name,
                             b"--out", os.fsencode(out)], capture_output=True)
    assert result.returncode == 0, result.stderr
    assert (os.fsencode(out) + b"/we\xffld") in [os.fsencode(p) for p in out.iterdir()]
    report = json.loads((out / os.fsdecode(b"we\xffld") / "report.json").read_bytes())
    assert report


def test_train_into_its_own_data_set_is_refused(welds):
    data = welds[0].parent.parent
    before = digest(data)
    for out in (data / "images" / "run", data):
        one_line_error(run_refseg("train", data, "--out", out, "--epochs", "1"),
                       "data set")
    assert digest(data) == before


def test_negative_moving_variance_is_refused_at_load_naming_the_file(tmp_path, welds):
    from refseg.models import ResMobileNet

    data = welds[0].parent.parent
    before = digest(data)
    weights = tmp_path / "w.npz"
    model = ResMobileNet((32, 32), branches=("mobilenetv2",))
    arrays = {k: np.array(v) for k, v in model.weights().items()}
    key = next(k for k in arrays if k.endswith("moving_variance"))
    arrays[key][0] = -1.0
    np.savez(weights, **arrays)
    run = tmp_path / "run"
    result = run_refseg("train", data, "--out", run, "--epochs", "1", "--input-size", "32x32",
                        "--branches", "mobilenetv2", "--weights", weights, "--jobs", "1")
    one_line_error(result, str(weights), "negative-variance", key)
    assert not run.exists() and digest(data) == before


def test_hdf5_declaring_unwritten_datasets_is_refused_before_allocating(tmp_path):
    h5py = pytest.importorskip("h5py")  # an anchor: CI installs it
    source = tmp_path / "big.h5"
    with h5py.File(source, "w") as f:
        f.attrs["layer_names"] = [b"conv"]
        group = f.create_group("conv")
        group.attrs["weight_names"] = [f"conv/w{i}:0".encode() for i in range(6)]
        for i in range(6):
            group.create_dataset(f"conv/w{i}:0", shape=(2 ** 26,), dtype="float32")
    assert source.stat().st_size < 100_000
    result = run_refseg("weights", "convert", source, tmp_path / "w.npz")
    one_line_error(result, str(source), "holds no data (never written)")
    assert not (tmp_path / "w.npz").exists()


@pytest.mark.parametrize("name, content, fragment", [
    ("scores.json", "[]", "non-empty list"),
    ("scores.json", '[{"run": "../x"}]', "run must name"),
    ("scores.json", '{"run": 1}', "non-empty list"),
    ("scores.json", "[" * 5000 + "]" * 5000, "nested more than"),
    ("scores.json", '[{"run": "a", "pixel_accuracy": NaN}]', "NaN"),
    ("metrics.jsonl", '{"epoch": 1}\nnot json\n', "line"),
])
def test_report_on_a_damaged_folder_is_one_line(tmp_path, name, content, fragment):
    folder = tmp_path / "demo"
    (folder / "runs" / "a").mkdir(parents=True)
    (folder / "scores.json").write_text('[{"run": "a", "pixel_accuracy": 0.9, "mean_iou": 0.5,'
                                        ' "seconds_per_image": 0.1, "class_iou": [0.5, null]}]')
    target = folder / name if name != "metrics.jsonl" else folder / "runs" / "a" / name
    target.write_text(content)
    (folder / OUTPUT_MARKER).write_bytes(b"")  # a folder refseg published, damaged since
    before = digest(tmp_path)
    result = run_refseg("report", folder)
    one_line_error(result, fragment)
    after = digest(tmp_path)
    after.pop(f"demo/{OUTPUT_MARKER}")  # the lock file records its last holder
    assert after == {k: v for k, v in before.items() if k != f"demo/{OUTPUT_MARKER}"}


def test_a_forged_list_in_a_dead_staging_moves_nothing_outside(tmp_path):
    out = tmp_path / "o"
    with staged_folders(out) as staging:
        (staging.root / "a.txt").write_text("a")
    (tmp_path / "outside.txt").write_text("mine")
    dead = out / f"{STAGING_PREFIX}forged"
    dead.mkdir()
    (dead / STAGING_MARKER).write_bytes(b"")
    (dead / ".refseg-publishing").write_text(json.dumps(
        {"entries": ["..", ".", "../outside.txt", "", OUTPUT_MARKER, "b.txt"]}))
    (dead / "b.txt").write_text("b")
    before = digest(tmp_path)
    assert sweep_stale(out) == [dead.name]
    after = digest(tmp_path)
    assert after.pop("o/b.txt") == hashlib.sha256(b"b").hexdigest()
    assert after == {k: v for k, v in before.items() if not k.startswith(f"o/{dead.name}")}


def test_a_file_staged_where_a_folder_is_published_is_refused_before_moving(tmp_path):
    out = tmp_path / "o"
    with staged_folders(out) as staging:
        staging.folder("x")
        (staging.root / "a.txt").write_text("old")
    before = digest(out)
    with pytest.raises(InputError, match="exists as a folder; refseg writes a file there"):
        with staged_folders(out) as staging:
            (staging.root / "a.txt").write_text("new")
            (staging.root / "x").write_text("a file now")
    assert digest(out) == before


def test_golden_write_on_a_full_disk_names_the_file(tmp_path):
    """The bundle's computation is replaced by a stand-in (this is about how it is written);
    files may grow to 50 kB only, as on a full disk."""
    code = """
import resource, signal, sys
import numpy as np
import refseg.golden.produce as produce
produce.build_bundle = lambda threads=1, keep=(), extra=None: (
    {"arrays": {}, "network": {"input_hw": [32, 32], "seed": 0}},
    {"x": np.random.default_rng(0).random(40_000)}, {})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, 50_000))
from refseg.cli import main
sys.exit(main(sys.argv[1:]))
"""
    bundle = tmp_path / "bundle"
    result = subprocess.run([sys.executable, "-P", "-c", code, "golden", "write", str(bundle)],
                            capture_output=True, text=True, timeout=300)
    one_line_error(result, f"{bundle / 'arrays.npz'}: could not be written")
    assert list(tmp_path.iterdir()) == []


def test_synth_sizes_stay_within_what_dataset_check_reads(tmp_path):
    result = run_refseg("synth", "--count", "1", "--out", tmp_path / "set", "--size",
                        "6400x6400")
    one_line_error(result, "40,960,000 pixels, more than the 40,000,000")
    assert "--max-pixels" not in result.stderr and not (tmp_path / "set").exists()


def test_a_marker_that_is_a_link_is_never_written_through(tmp_path, welds):
    precious = tmp_path / "precious.txt"
    precious.write_text("a user's file")
    out = tmp_path / "o"
    out.mkdir()
    (out / OUTPUT_MARKER).symlink_to(precious)
    one_line_error(run_refseg("edges", welds[0], "--out", out), str(out / OUTPUT_MARKER))
    assert precious.read_text() == "a user's file"
    assert sorted(p.name for p in out.iterdir()) == [OUTPUT_MARKER]


def test_dataset_check_sees_an_exif_turned_image_as_a_viewer_does(tmp_path):
    """An image whose EXIF turns it 90 degrees no longer lines up with its label as stored:
    the pair is refused instead of training on misaligned pixels."""
    from refseg.data.dataset import load_dataset, write_label

    (tmp_path / "images").mkdir()
    (tmp_path / "labels").mkdir()
    _exif_image(tmp_path / "images" / "a.png", np.zeros((40, 64, 3), np.uint8), 6)
    write_label(tmp_path / "labels" / "a.png", np.zeros((40, 64), np.uint8))
    with pytest.raises(InputError, match="40x64.*64x40|64x40.*40x64"):
        load_dataset(tmp_path)
