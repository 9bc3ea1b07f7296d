"""The publishing contract at its edges, through the real CLI: a lock file or an output that is
not a plain file of refseg's is refused and never written through, no verb replaces a file in
a folder refseg did not publish, a full disk is an error line and not a SIGBUS, every verb
completes a publication that a killed writer cut short before it reads, a lock file removed
while a writer runs is made again, and error lines name no Python exception class."""
import argparse
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from checkout import run_refseg, synth_images
from reference_folders import own_candidates
from refseg.errors import InputError
from refseg.publish import (JOURNAL, OUTPUT_MARKER, STAGING_MARKER, STAGING_PREFIX,
                            locked_folder, staged_folders, write_json)

pytestmark = pytest.mark.infrastructure

SIZE = "40x64"


def digest(root: Path) -> dict:
    """{relative path: sha256, 'dir' or the kind of a special file} of everything under
    ``root``, hidden files included; links are not followed."""
    out = {}
    for p in sorted(root.rglob("*")):
        key, mode = str(p.relative_to(root)), p.lstat().st_mode
        out[key] = ("dir" if stat.S_ISDIR(mode) else f"link to {os.readlink(p)}"
                    if stat.S_ISLNK(mode) else hashlib.sha256(p.read_bytes()).hexdigest()
                    if stat.S_ISREG(mode) else f"mode {stat.S_IFMT(mode)}")
    return out


def one_line_error(result, *fragments):
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert result.stderr.startswith("refseg: error: ") and result.stderr.count("\n") == 1, \
        result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr
    assert not re.search(r"\b[A-Z][A-Za-z]*(Error|Exception)\b", result.stderr), result.stderr


@pytest.fixture(scope="module")
def welds(tmp_path_factory):
    return synth_images(tmp_path_factory.mktemp("welds"), 6, SIZE)


@pytest.fixture(scope="module")
def run(tmp_path_factory, welds):
    """A run folder of `refseg train` (one epoch at 32x32)."""
    folder = tmp_path_factory.mktemp("run") / "run"
    result = run_refseg("train", welds[0].parent.parent, "--out", folder, "--epochs", "1",
                        "--input-size", "32x32", "--jobs", "1")
    assert result.returncode == 0, result.stderr
    return folder


# ------------------------------------------------------------------ the lock file and outputs

def _make(kind: str, path: Path, precious: Path) -> str:
    """Put a ``kind`` at ``path``; returns the words the refusal uses for it."""
    if kind == "hard link":
        os.link(precious, path)
        return "a file with 2 hard links that refseg did not write"
    if kind == "symbolic link":
        path.symlink_to(precious)
        return "a symbolic link"
    if kind == "link to nothing":
        path.symlink_to(precious.parent / "nothing-here")
        return "a symbolic link"
    if kind == "folder":
        path.mkdir()
        (path / "notes.txt").write_text("a user's file")
        return "a folder"
    if kind == "named pipe":
        os.mkfifo(path)
        return "a named pipe (FIFO)"
    try:
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's numbers
    except PermissionError:
        pytest.skip("making a device file needs root")
    return "a device"


KINDS = ["hard link", "symbolic link", "link to nothing", "folder", "named pipe", "device"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_lock_file_that_is_not_a_plain_file_is_refused_and_never_written(tmp_path, welds,
                                                                           kind):
    """`ln thesis.txt OUT/.refseg-output; refseg edges a.png --out OUT` leaves thesis.txt
    alone: the lock file is opened only when it is a plain file with one name."""
    precious = tmp_path / "thesis.txt"
    precious.write_text("a user's file")
    out = tmp_path / "out"
    out.mkdir()
    words = _make(kind, out / OUTPUT_MARKER, precious)
    before = digest(tmp_path)
    result = run_refseg("edges", welds[0], "--out", out, timeout=120)
    one_line_error(result, f"{out / OUTPUT_MARKER}: this folder's lock file is {words}",
                   "will not follow, open or write it")
    assert digest(tmp_path) == before


@pytest.mark.parametrize("kind", ["symbolic link", "folder", "named pipe"])
def test_an_output_file_that_is_not_a_plain_file_is_refused(tmp_path, kind):
    """An atomic write never replaces a link, a folder, a named pipe or a device: the user's
    special file stays (a plain file's other hard links keep its old content anyway)."""
    precious = tmp_path / "thesis.txt"
    precious.write_text("a user's file")
    target = tmp_path / "report.json"
    words = _make(kind, target, precious)
    before = digest(tmp_path)
    with pytest.raises(InputError, match=re.escape(f"{target}: is {words}; refseg replaces "
                                                   "only plain files")):
        write_json(target, {"a": 1})
    assert digest(tmp_path) == before


def test_an_output_file_with_other_hard_links_is_replaced_not_written_through(tmp_path):
    precious = tmp_path / "thesis.txt"
    precious.write_text("a user's file")
    os.link(precious, tmp_path / "report.json")
    write_json(tmp_path / "report.json", {"a": 1})
    assert precious.read_text() == "a user's file"
    assert json.loads((tmp_path / "report.json").read_text()) == {"a": 1}


# ------------------------------------------------------------------ folders refseg did not publish

def test_report_replaces_nothing_in_a_folder_refseg_did_not_publish(tmp_path, run):
    """A run's config.json and metrics.jsonl copied beside the user's own index.html: the
    page is the user's, and refseg report refuses the folder."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "index.html").write_text("<p>my own page</p>")
    for name in ("config.json", "metrics.jsonl"):
        shutil.copy(run / name, folder / name)
    before = digest(tmp_path)
    one_line_error(run_refseg("report", folder),
                   f"{folder}: not a folder refseg published (no {OUTPUT_MARKER})")
    assert digest(tmp_path) == before


def test_report_on_a_folder_of_images_says_it_is_not_refsegs(tmp_path, welds):
    folder = tmp_path / "photos"
    shutil.copytree(welds[0].parent, folder)
    before = digest(tmp_path)
    result = run_refseg("report", folder)
    one_line_error(result, f"{folder}: not a folder refseg published")
    assert "damaged" not in result.stderr
    assert digest(tmp_path) == before


def test_report_on_a_damaged_run_names_no_exception_class(tmp_path, run):
    folder = tmp_path / "run"
    shutil.copytree(run, folder)
    config = json.loads((folder / "config.json").read_text())
    del config["input_hw"]
    (folder / "config.json").write_text(json.dumps(config))
    before = digest(tmp_path)
    one_line_error(run_refseg("report", folder), f"{folder / 'config.json'}: ",
                   "input_hw")
    # the lock file records its last holder
    assert digest(tmp_path).keys() == before.keys()
    assert {k: v for k, v in digest(tmp_path).items() if not k.endswith(OUTPUT_MARKER)} == \
        {k: v for k, v in before.items() if not k.endswith(OUTPUT_MARKER)}


def test_no_error_line_is_formatted_with_an_exception_class_name():
    """The source of every error line: none spells the class of an exception it caught."""
    import refseg

    root = Path(refseg.__file__).parent
    pattern = re.compile(r"type\((exc|error|err|e)\)\.__name__")
    found = [f"{p.relative_to(root)}:{n}" for p in sorted(root.rglob("*.py"))
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if pattern.search(line)]
    assert found == []


# ------------------------------------------------------------------ weights inspect

def test_weights_inspect_refuses_a_file_that_is_not_a_weight_file(tmp_path, run):
    """A golden candidate's keys (hundreds of float64 arrays): one short line, exit 2."""
    arrays = {f"claim1/photo{i}/{step}": np.zeros((4, 4))
              for i in range(60) for step in ("gray", "blurred", "response/canny")}
    np.savez(tmp_path / "candidate.npz", **arrays)
    result = run_refseg("weights", "inspect", tmp_path / "candidate.npz")
    one_line_error(result, f"{tmp_path / 'candidate.npz'}: not a weight file of refseg's "
                           "network: none of its 180 keys")
    assert len(result.stderr) < 250
    one_line_error(run_refseg("weights", "inspect", run / "checkpoint.npz"),
                   "a refseg training checkpoint, not a weight file")


def test_weights_inspect_of_a_file_with_many_wrong_keys_is_bounded(tmp_path):
    from refseg.models import known_weight_shapes

    part, keys = next(iter(known_weight_shapes().items()))
    key, shape = next(iter(keys.items()))
    arrays = {key: np.zeros(shape, np.float32)}
    arrays.update({f"stray/{'x' * 150}/{i}": np.zeros(2) for i in range(300)})
    np.savez(tmp_path / "w.npz", **arrays)
    result = run_refseg("weights", "inspect", tmp_path / "w.npz")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert max(map(len, lines)) <= 300, max(lines, key=len)[:400]
    assert "unexpected keys: 300" in result.stdout and "... and 280 more" in result.stdout
    assert re.search(rf"^{re.escape(key)} .* {part} +ok$", result.stdout, re.M)


# ------------------------------------------------------------------ a full disk

FULL_DISK = """mount -t tmpfs -o size=1m tmpfs "$0" || exit 99
"$1" -P -m refseg train "$2" --out "$0/run" --epochs 1 --input-size 32x32 --jobs 1
echo "status $?"
find "$0" -mindepth 1
"""


def test_train_on_a_full_disk_ends_with_one_line_and_leaves_nothing(tmp_path, welds):
    """`refseg train` into a 1 MB file system (its starting weights fit, its tap cache does
    not; a private mount in a user namespace): one error line naming the file, exit 2, the run
    folder gone, where memory-mapped writes died of SIGBUS leaving .npy.tmp files."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to mount a small file system")
    mount = tmp_path / "small"
    mount.mkdir()
    result = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", FULL_DISK, str(mount),
         sys.executable, str(welds[0].parent.parent)],
        capture_output=True, text=True, timeout=600)
    if result.returncode == 99:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip()}")
    assert result.stdout.splitlines()[-1:] == ["status 2"], (result.stdout, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("refseg:")]
    assert len(errors) == 1 and errors[0].startswith(f"refseg: error: {mount / 'run'}/"), \
        result.stderr
    assert errors[0].endswith(": could not be written: No space left on device"), errors
    assert result.stderr.endswith(errors[0] + "\n")


# ------------------------------------------------------------------ cut publications

def _cut(folder: Path, names: list[str], left: str) -> Path:
    """The state of ``folder`` when a writer publishing ``names`` was killed after moving all
    but ``left`` in: ``left`` still in a dead staging folder whose list was written."""
    staging = folder / f"{STAGING_PREFIX}killed"
    staging.mkdir()
    (staging / STAGING_MARKER).write_bytes(b"")
    (staging / JOURNAL).write_text(json.dumps({"entries": names}))
    os.rename(folder / left, staging / left)
    return staging


def test_every_verb_completes_a_cut_publication_in_the_folders_it_names(tmp_path):
    """One place: before any verb runs, each folder its path arguments name or lie in, when
    refseg published it, gets a cut publication completed (a list argument too)."""
    from refseg.commands.verb import Verb

    folders = []
    for name in ("a", "b"):
        with staged_folders(tmp_path / name) as staging:
            (staging.root / "x.txt").write_text(name)
            (staging.root / "y.txt").write_text(name)
        _cut(tmp_path / name, ["x.txt", "y.txt"], "y.txt")
        folders.append(tmp_path / name)
    seen = {}

    def handler(args):
        seen.update({f.name: sorted(p.name for p in f.iterdir()) for f in folders})
        return "done"

    verb = Verb(("test",), "", lambda parser: None, handler)
    assert verb.dispatch(argparse.Namespace(one=folders[0] / "x.txt", many=[folders[1]],
                                            other=3)) == "done"
    assert seen == {"a": [OUTPUT_MARKER, "x.txt", "y.txt"],
                    "b": [OUTPUT_MARKER, "x.txt", "y.txt"]}


@pytest.fixture(scope="module")
def references(tmp_path_factory, welds):
    """`golden reference` of three welds, and refseg's own candidates for it."""
    root = tmp_path_factory.mktemp("references")
    result = run_refseg("golden", "reference", *welds[:3], "--out", root / "ref", "--jobs",
                        "1")
    assert result.returncode == 0, result.stderr
    own_candidates(root / "ref", root / "candidate")
    return root


def test_golden_compare_completes_a_cut_reference_folder(tmp_path, references):
    reference = tmp_path / "ref"
    shutil.copytree(references / "ref", reference)
    names = sorted(p.name for p in reference.iterdir() if p.suffix == ".npz")
    staging = _cut(reference, names, names[-1])
    result = run_refseg("golden", "compare", reference, references / "candidate", "--jobs",
                        "1")
    assert result.returncode == 0, result.stderr
    assert not staging.exists() and (reference / names[-1]).is_file()
    after, whole = digest(reference), digest(references / "ref")
    assert after.pop(OUTPUT_MARKER) and whole.pop(OUTPUT_MARKER)  # its last holder's record
    assert after == whole


@pytest.mark.parametrize("verb, left", [("report", "metrics.jsonl"),
                                        ("predict", "checkpoint.npz")])
def test_run_readers_complete_a_cut_run_folder(tmp_path, run, welds, verb, left):
    folder = tmp_path / "run"
    shutil.copytree(run, folder)
    staging = _cut(folder, [left], left)
    args = [folder] if verb == "report" else [folder, welds[0], "--out", tmp_path / "p"]
    result = run_refseg(verb, *args)
    assert result.returncode == 0, result.stderr
    assert not staging.exists() and (folder / left).is_file()


# ------------------------------------------------------------------ a lock file removed

def test_a_lock_file_removed_while_a_writer_runs_is_made_again(tmp_path, welds):
    """The user removes .refseg-output while a command stages its outputs: the folder it
    publishes holds a lock file again, and the next writer writes there."""
    out = tmp_path / "out"
    with staged_folders(out) as staging:
        (staging.root / "a.txt").write_text("a")
        (out / OUTPUT_MARKER).unlink()
    assert (out / OUTPUT_MARKER).is_file()
    assert run_refseg("edges", welds[0], "--out", out).returncode == 0
    assert sorted(p.name for p in out.iterdir()) == [OUTPUT_MARKER, "a.txt", welds[0].stem]

    run_folder = tmp_path / "run"
    with locked_folder(run_folder):
        (run_folder / "config.json").write_text("{}")
        (run_folder / OUTPUT_MARKER).unlink()
    record = json.loads((run_folder / OUTPUT_MARKER).read_text())
    assert record["written_by"] == "refseg" and record["pid"] == os.getpid()


def test_a_copy_of_a_refseg_folder_made_with_hard_links_is_written_into(tmp_path, welds):
    """`cp -al OUT COPY` (or copytree with os.link): the lock files share one inode holding
    refseg's record, so COPY is written into; OUT's results stay as they were."""
    out, copy = tmp_path / "out", tmp_path / "copy"
    assert run_refseg("edges", welds[0], "--out", out).returncode == 0
    shutil.copytree(out, copy, copy_function=os.link)
    before = digest(out)
    result = run_refseg("edges", welds[0], welds[1], "--out", copy)
    assert result.returncode == 0, result.stderr
    after = digest(out)
    assert after.pop(OUTPUT_MARKER) and before.pop(OUTPUT_MARKER)  # its last holder's record
    assert after == before and (copy / welds[1].stem).is_dir()


def test_demo_seeds_replaces_no_table_in_a_folder_refseg_did_not_publish(tmp_path,
                                                                       monkeypatch):
    """`demo --seeds` writes seeds.md and seeds.json into --out: a folder of the user's
    holding a seeds.md of their own is refused before any demo runs (each demo is replaced
    here by a stand-in that records it)."""
    import refseg.run.demo as demo
    from refseg.run.config import DemoSettings
    from refseg.run.seeds import run_demo_seeds

    ran = []
    monkeypatch.setattr(demo, "run_demo", lambda folder, settings, log=None: ran.append(folder))
    out = tmp_path / "mine"
    out.mkdir()
    (out / "seeds.md").write_text("my own notes on seeds")
    before = digest(tmp_path)
    with pytest.raises(InputError, match=re.escape(f"{out}: holds files that refseg did not "
                                                   "write (seeds.md)")):
        run_demo_seeds(out, DemoSettings(), 2)
    assert ran == [] and digest(tmp_path) == before
