"""SIGKILL at the moments that matter: a command's outputs are the old ones or the new ones,
whole, never a mix, and what a killed command left is cleared by the next one.

The kill points are injected by running the real CLI under a small wrapper that replaces one
function of the installed refseg with one that kills the process (``os.kill(getpid(),
SIGKILL)``) before or after calling the original: with every output staged but nothing
published, just after the last entry is moved into the output folder, after the first of
several, and during a checkpoint write. Random-time kills of ``synth`` complement
them.
"""
import hashlib
import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from checkout import run_refseg, synth_images
from refseg import publish
from refseg.images import read_image
from refseg.data import dataset
from refseg.data.synthetic import weld_image

pytestmark = pytest.mark.infrastructure

SIZE = "40x64"

# the wrapper: PATCH names what to replace; the original stays reachable as `original`
WRAPPER = textwrap.dedent("""
    import os, signal, sys
    import refseg.publish as publish
    def die():
        os.kill(os.getpid(), signal.SIGKILL)
    {patch}
    from refseg.cli import main
    sys.exit(main(sys.argv[1:]))
""")

# killed with every output staged, before their list is written: nothing was published
BEFORE_SWAP = """
def publish_nothing(self):
    die()
publish.StagedFolders.publish = publish_nothing
"""
AFTER_SWAP = """
original = publish.StagedFolders.publish
def publish_then_die(self):
    original(self)
    die()
publish.StagedFolders.publish = publish_then_die
"""
# killed after the first entry is in place, the others still staged: the next reader (or
# writer) of the folder completes the publication from the staging folder's list
BETWEEN_RENAMES = """
original = publish._move_in
def _move_in(staged, target, aside):
    original(staged, target, aside)
    die()
publish._move_in = _move_in
"""


def run_killed(patch, *args):
    """The CLI with ``patch`` applied; returns the completed process."""
    code = WRAPPER.format(patch=textwrap.indent(textwrap.dedent(patch), "").strip())
    return subprocess.run([sys.executable, "-P", "-c", code, *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def tree_digest(folder: Path) -> dict:
    """{relative path: sha256} of every file under ``folder``, hidden refseg leftovers
    excluded."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()
            and not any(publish.is_reserved(part) for part in p.relative_to(folder).parts)}


def assert_whole_synth_set(folder: Path, allowed_seeds):
    """``folder`` is one complete synth set: its synth.json's seed is one of
    ``allowed_seeds`` and every image and label is the one that seed draws."""
    # first a refseg reader: it completes a publication a killed writer had begun
    assert run_refseg("dataset", "check", folder).returncode == 0
    meta = json.loads((folder / "synth.json").read_text())
    assert meta["seed"] in allowed_seeds
    stems = dataset.load_dataset(folder).stems
    assert len(stems) == meta["count"]
    rows, cols = meta["size"]["rows"], meta["size"]["cols"]
    for record in meta["samples"]:
        sample = weld_image(record["seed"], (rows, cols))
        image = read_image(folder / "images" / f"{record['stem']}.png").pixels
        assert np.array_equal(image, sample.rgb), record["stem"]
        assert np.array_equal(dataset.read_label(folder / "labels" / f"{record['stem']}.png"),
                              sample.classes), record["stem"]
    return meta["seed"]


def no_leftovers(folder: Path) -> bool:
    return not [p for p in folder.rglob("*") if p.name.startswith(publish.STAGING_PREFIX)
                or p.name.endswith(".tmp")]


@pytest.mark.parametrize("patch, winner", [(BEFORE_SWAP, 0), (AFTER_SWAP, 7),
                                           (BETWEEN_RENAMES, 7)])
def test_synth_over_a_set_killed_at_the_swap_leaves_one_whole_set(tmp_path, patch, winner):
    out = tmp_path / "set"
    assert run_refseg("synth", "--count", "3", "--out", out, "--size", SIZE).returncode == 0
    killed = run_killed(patch, "synth", "--count", "4", "--out", out, "--seed", "7",
                        "--size", SIZE)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert assert_whole_synth_set(out, {0, 7}) == winner
    # the next command into the folder clears what the killed one left beside it
    assert run_refseg("synth", "--count", "2", "--out", out, "--size", SIZE).returncode == 0
    assert assert_whole_synth_set(out, {0}) == 0
    assert no_leftovers(tmp_path)


def test_synth_killed_at_random_moments_never_mixes_two_sets(tmp_path):
    out = tmp_path / "set"
    assert run_refseg("synth", "--count", "6", "--out", out, "--size", SIZE).returncode == 0
    for delay in (0.3, 0.6, 0.9, 1.2):
        proc = subprocess.Popen([sys.executable, "-P", "-m", "refseg", "synth", "--count", "6",
                                 "--out", str(out), "--seed", "7", "--size", SIZE],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert_whole_synth_set(out, {0, 7})


@pytest.fixture(scope="module")
def three_images(tmp_path_factory):
    return synth_images(tmp_path_factory.mktemp("images"), 3, SIZE)


@pytest.mark.parametrize("patch, published", [(BEFORE_SWAP, False), (AFTER_SWAP, True)])
def test_edges_of_three_images_killed_at_the_swap_publish_all_or_none(tmp_path, three_images,
                                                                       patch, published):
    out = tmp_path / "edges"
    assert run_refseg("edges", three_images[0], "--out", out).returncode == 0
    before = tree_digest(out)
    killed = run_killed(patch, "edges", *three_images, "--out", out, "--sigma", "1.2")
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    stems = sorted(p.name for p in out.iterdir() if p.is_dir())
    if published:
        assert stems == sorted(p.stem for p in three_images)
        for stem in stems:
            report = json.loads((out / stem / "report.json").read_text())
            assert report["params"]["sigma"] == 1.2
    else:
        assert tree_digest(out) == before


def _fake_bundle_patch(tag: str) -> str:
    """golden write with its computation replaced by a tiny stand-in: the kill test is about
    how the bundle is published, not what it holds."""
    return f"""
import numpy as np
import refseg.golden.produce as produce
produce.build_bundle = lambda threads=1, keep=(), extra=None: (
    {{"arrays": {{}}, "tag": "{tag}"}}, {{"x": np.arange(3.0)}}, {{}})
"""


@pytest.mark.parametrize("patch, winner", [(BEFORE_SWAP, "old"), (AFTER_SWAP, "new")])
def test_golden_write_over_a_bundle_killed_at_the_swap_keeps_one_bundle(tmp_path, patch,
                                                                         winner):
    folder = tmp_path / "bundle"
    first = run_killed(_fake_bundle_patch("old"), "golden", "write", folder)
    assert first.returncode == 0, first.stderr
    old = tree_digest(folder)
    killed = run_killed(_fake_bundle_patch("new") + patch, "golden", "write", folder)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["tag"] == winner
    recorded = manifest["arrays_file_sha256"]
    assert hashlib.sha256((folder / "arrays.npz").read_bytes()).hexdigest() == recorded
    if winner == "old":
        assert tree_digest(folder) == old


def test_predict_over_a_result_killed_at_the_swap_keeps_the_old_result(tmp_path,
                                                                       three_images):
    """The result folder of ``predict`` is published like every other: killed just before the
    swap, the earlier result stays. (A run folder is faked with the smallest network.)"""
    data = three_images[0].parent.parent
    run = tmp_path / "run"
    trained = run_refseg("train", data, "--out", run, "--epochs", "1", "--input-size", "32x32",
                         "--batch-size", "2", "--jobs", "1", "--branches", "mobilenetv2")
    assert trained.returncode == 0, trained.stderr
    out = tmp_path / "pred"
    assert run_refseg("predict", run, three_images[0], "--out", out).returncode == 0
    before = tree_digest(out)
    killed = run_killed(BEFORE_SWAP, "predict", run, *three_images, "--out", out)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert tree_digest(out) == before


def test_train_killed_while_writing_its_checkpoint_keeps_the_last_whole_one(tmp_path,
                                                                            three_images):
    data = three_images[0].parent.parent
    run = tmp_path / "run"
    args = ["train", data, "--out", run, "--epochs", "2", "--input-size", "32x32",
            "--batch-size", "2", "--jobs", "1", "--branches", "mobilenetv2"]
    # killed inside the second checkpoint write, after the data is written, before the rename
    patch = """
import os as _os
calls = []
original = _os.replace
def replace(src, dst, *a, **k):
    if str(dst).endswith("checkpoint.npz"):
        calls.append(dst)
        if len(calls) == 2:
            die()
    return original(src, dst, *a, **k)
_os.replace = replace
"""
    killed = run_killed(patch, *args)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with np.load(run / "checkpoint.npz", allow_pickle=False) as npz:
        assert int(npz["epoch"]) == 1
    resumed = run_refseg(*args, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    with np.load(run / "checkpoint.npz", allow_pickle=False) as npz:
        assert int(npz["epoch"]) == 2
    assert no_leftovers(run)


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_extraction_workers_die_with_a_killed_train(tmp_path):
    data = tmp_path / "data"
    assert run_refseg("synth", "--count", "80", "--out", data).returncode == 0
    proc = subprocess.Popen([sys.executable, "-P", "-m", "refseg", "train", str(data), "--out",
                             str(tmp_path / "run"), "--epochs", "1", "--jobs", "2",
                             "--input-size", "32x64", "--branches", "mobilenetv2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    workers = []
    while time.monotonic() < deadline and len(workers) < 2 and proc.poll() is None:
        workers = _children(proc.pid)
        time.sleep(0.02)
    assert len(workers) >= 2, "the extraction workers were never seen"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{w}").exists() for w in workers):
        time.sleep(0.05)
    alive = [w for w in workers if Path(f"/proc/{w}").exists()
             and "Z" not in Path(f"/proc/{w}/stat").read_text().rsplit(")", 1)[1].split()[0]]
    assert alive == [], f"workers {alive} outlived their parent"
