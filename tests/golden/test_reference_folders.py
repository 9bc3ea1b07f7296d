"""Reference folders (`golden reference`) and their comparison (`golden compare`) at the edges:
images over the summary threshold, a candidate image read differently, every image and key on
either side that was not compared, references of another refseg or another image, and the
bound on worker processes of every verb that takes --jobs."""
import hashlib
import json
import shutil

import numpy as np
import pytest

from reference_folders import make_image as _image, own_candidates
from refseg import cli
from refseg.golden import scale
from refseg.golden.format import FULL_LIMIT

pytestmark = pytest.mark.infrastructure


def _compare(capsys, ref, cand, *options):
    capsys.readouterr()
    status = cli.main(["golden", "compare", str(ref), str(cand), "--jobs", "1", *options])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A reference folder of three small images and refseg's own candidates for them."""
    root = tmp_path_factory.mktemp("refs")
    (root / "images").mkdir()
    for i, name in enumerate("abc"):
        _image(root / "images" / f"{name}.png", 20 + i, 24, seed=i)
    assert cli.main(["golden", "reference", str(root / "images"), "--out",
                     str(root / "ref"), "--jobs", "1"]) == 0
    own_candidates(root / "ref", root / "cand")
    return root


def _copy(small, tmp_path):
    shutil.copytree(small / "ref", tmp_path / "ref")
    shutil.copytree(small / "cand", tmp_path / "cand")
    return tmp_path / "ref", tmp_path / "cand"


def test_references_over_the_summary_threshold_are_written_and_compared(tmp_path, capsys):
    """363x363 (131,769 pixels, over the 131,072 of the bundle's summary storage): the
    reference stores its large arrays as summaries, refseg's own candidate passes, and one
    changed interior pixel of the gray image fails, named."""
    image = _image(tmp_path / "big.png", 363, 363)
    ref = tmp_path / "ref"
    assert cli.main(["golden", "reference", str(image), "--out", str(ref)]) == 0
    assert 363 * 363 > FULL_LIMIT
    from refseg.golden import references

    entries = references.read_reference(ref / "big.npz").entries
    assert entries["claim1/big/gray"]["storage"] == "summary"
    assert entries["input/big"]["storage"] == "full"
    cand = own_candidates(ref, tmp_path / "cand")
    status, out, _ = _compare(capsys, ref, cand)
    assert status == 0 and out.splitlines()[-1] == "PASS", out
    with np.load(cand / "big.npz") as npz:
        arrays = dict(npz)
    arrays["claim1/big/gray"][200, 180] += 0.5
    np.savez(cand / "big.npz", **arrays)
    status, out, _ = _compare(capsys, ref, cand)
    assert status == 1 and "big: fail: gray" in out, out


def test_reference_files_record_refseg_the_image_its_reading_and_parameters(small):
    from refseg.golden import references

    ref = small / "ref"
    index = json.loads((ref / "index.json").read_text())
    assert index["refseg"] == references.__version__ and sorted(index["images"]) == \
        ["a", "b", "c"]
    record = index["images"]["a"]
    data = (small / "images" / "a.png").read_bytes()
    assert record["sha256"] == hashlib.sha256((ref / "a.npz").read_bytes()).hexdigest()
    assert record["file_sha256"] == hashlib.sha256(data).hexdigest()
    meta = references.read_reference(ref / "a.npz").meta
    assert meta["refseg"] == references.__version__ and meta["image"] == "a"
    assert meta["file"] == "a.png" and meta["file_sha256"] == record["file_sha256"]
    with np.load(ref / "a.npz") as npz:
        pixels = npz["input/a"]
    assert meta["pixels_sha256"] == hashlib.sha256(pixels.tobytes()).hexdigest()
    assert meta["reading"] == {"mode": "RGB", "bit_depth": 8, "rows": 20, "cols": 24,
                               "exif_orientation": 1, "notes": []}
    assert meta["parameters"]["vote_offset"] == 1.5 and meta["parameters"]["sigma"] == 0.8


@pytest.mark.parametrize("change", ["alpha", "sixteen-bit", "turned"])
def test_a_candidate_image_read_differently_fails_that_image_alone(small, tmp_path, capsys,
                                                                   change):
    """The candidate's input/<image> is not the reference's (an alpha channel kept, 16-bit
    values, the image turned): that image fails at `input` with the reason; the others are
    still compared and pass."""
    ref, cand = _copy(small, tmp_path)
    with np.load(cand / "b.npz") as npz:
        arrays = dict(npz)
    rgb = arrays["input/b"]
    arrays["input/b"] = {"alpha": lambda: np.concatenate([rgb, rgb[:, :, :1]], axis=2),
                         "sixteen-bit": lambda: rgb.astype(np.float64) * 257,
                         "turned": lambda: np.ascontiguousarray(rgb[::-1])}[change]()
    np.savez(cand / "b.npz", **arrays)
    status, out, err = _compare(capsys, ref, cand, "--report", str(tmp_path / "r.json"))
    assert status == 1 and not err, err
    summary = json.loads((tmp_path / "r.json").read_text())
    assert (summary["images"], summary["passed"], summary["failed"]) == (3, 2, 1)
    (failing,) = summary["failing_images"]
    assert failing["image"] == "b" and failing["first_failing"] == ["input"]
    reason = {"alpha": "shape (21, 24, 4), expected (21, 24, 3)",
              "sixteen-bit": "dtype float64, expected uint8",
              "turned": "elements differ"}[change]
    assert reason in failing["why"]
    assert f"b: fail: input (the candidate's image is not the one the reference was made " \
           f"from: " in out and reason in out


def test_every_image_and_key_not_compared_is_reported_and_fails(small, tmp_path, capsys):
    ref, cand = _copy(small, tmp_path)
    # a candidate image with no reference, a reference deleted by hand, a key naming no
    # array, a candidate without two of its intermediates
    shutil.copy(cand / "a.npz", cand / "extra.npz")
    (ref / "c.npz").unlink()
    with np.load(cand / "a.npz") as npz:
        arrays = dict(npz)
    arrays["claim1/a/gary"] = arrays.pop("claim1/a/gray")
    np.savez(cand / "a.npz", **arrays)
    with np.load(cand / "b.npz") as npz:
        arrays = {k: v for k, v in npz.items()
                  if k not in ("claim1/b/blurred", "claim1/b/mean_image")}
    np.savez(cand / "b.npz", **arrays)
    status, out, _ = _compare(capsys, ref, cand, "--report", str(tmp_path / "r.json"))
    assert status == 1
    summary = json.loads((tmp_path / "r.json").read_text())
    by_image = {r["image"]: r for r in summary["failing_images"]}
    assert summary["images"] == 4 and summary["passed"] == 0 and sorted(by_image) == \
        ["a", "b", "c", "extra"]
    assert by_image["extra"]["status"] == "unreferenced"
    assert by_image["c"]["status"] == "error" and "listed in index.json but missing" in \
        by_image["c"]["error"]
    assert by_image["a"]["unexpected"] == [
        "claim1/a/gary: names no array; did you mean claim1/a/gray?"]
    assert by_image["b"]["missing_steps"] == ["blurred", "mean_image"]
    lines = out.splitlines()
    assert lines[0] == ("images: 4, passed 0, failed 2, missing 0, unreadable 1, without "
                        "reference 1")
    assert "  b: fail: missing from the candidate: blurred, mean_image" in lines
    assert any(line.startswith("  a: fail: ") and "1 key naming no array (claim1/a/gary" in line
               for line in lines), out
    assert any(line.startswith("  extra: unreferenced: ") and "no reference file" in line
               for line in lines), out
    assert lines[-1] == "FAIL"


def test_reference_files_changed_renamed_added_or_of_another_refseg_are_reported(
        small, tmp_path, capsys, monkeypatch):
    from refseg.golden import references

    ref, cand = _copy(small, tmp_path)
    # a reference file renamed by hand (its index line with it), one changed, one added
    index = json.loads((ref / "index.json").read_text())
    (ref / "b.npz").rename(ref / "renamed.npz")
    index["images"]["renamed"] = {**index["images"].pop("b"), "file": "renamed.npz"}
    (ref / "index.json").write_text(json.dumps(index))
    shutil.copy(cand / "b.npz", cand / "renamed.npz")
    data = bytearray((ref / "a.npz").read_bytes())
    data[100] ^= 1
    (ref / "a.npz").write_bytes(bytes(data))
    shutil.copy(ref / "c.npz", ref / "d.npz")
    shutil.copy(cand / "c.npz", cand / "d.npz")
    status, out, _ = _compare(capsys, ref, cand)
    assert status == 1
    assert f"  a: error: {ref / 'a.npz'}: its SHA-256 is not the one index.json records" \
           in out
    assert f"  renamed: error: {ref / 'renamed.npz'}: holds the reference of image 'b', " \
           "not of 'renamed' (renamed?)" in out
    assert f"  d: error: {ref / 'd.npz'}: not listed in index.json" in out
    assert "  c: " not in out  # compared, and passes
    # references of another refseg: the folder is refused whole, before any work
    monkeypatch.setattr(references, "__version__", "0.0.1")
    assert cli.main(["golden", "reference", str(small / "images" / "a.png"), "--out",
                     str(tmp_path / "old")]) == 0
    monkeypatch.undo()
    status, out, err = _compare(capsys, tmp_path / "old", cand)
    assert status == 2 and err.count("\n") == 1
    assert err.startswith(f"refseg: error: {tmp_path / 'old' / 'index.json'}: written by "
                          f"refseg '0.0.1', this is refseg {references.__version__}; write "
                          "the references again"), err
    # and one file of another refseg among this one's: that image is reported
    shutil.copy(tmp_path / "old" / "a.npz", ref / "a.npz")
    index = json.loads((ref / "index.json").read_text())
    index["images"]["a"]["sha256"] = hashlib.sha256((ref / "a.npz").read_bytes()).hexdigest()
    (ref / "index.json").write_text(json.dumps(index))
    status, out, _ = _compare(capsys, ref, cand)
    assert status == 1 and f"  a: error: {ref / 'a.npz'}: written by refseg '0.0.1'" in out


def test_a_folder_without_an_index_is_refused_in_one_line(small, tmp_path, capsys):
    ref, cand = _copy(small, tmp_path)
    (ref / "index.json").unlink()
    status, out, err = _compare(capsys, ref, cand)
    assert status == 2 and err == (f"refseg: error: {ref}: no index.json; not a reference "
                                   "folder of `refseg golden reference` (or one of an older "
                                   "refseg): write it again\n")


def test_a_second_reference_run_into_the_folder_keeps_the_first_listed(small, tmp_path):
    from refseg.golden import references

    ref = tmp_path / "ref"
    for name in ("a", "b"):
        assert cli.main(["golden", "reference", str(small / "images" / f"{name}.png"),
                         "--out", str(ref)]) == 0
    assert sorted(references.read_index(ref)) == ["a", "b"]


# -- --jobs --------------------------------------------------------------------------------------
class _Spy:
    """Stands in for ProcessPoolExecutor: records the workers asked for and starts at most
    two (so that an unbounded request cannot fork hundreds of processes here)."""

    asked: list = []

    def __new__(cls, max_workers, **kwargs):
        from concurrent.futures import ProcessPoolExecutor

        cls.asked.append(max_workers)
        return ProcessPoolExecutor(min(max_workers, 2), **kwargs)


@pytest.fixture
def spy(monkeypatch):
    from refseg import workers

    _Spy.asked = []
    monkeypatch.setattr(workers, "ProcessPoolExecutor", _Spy)
    return _Spy


def test_a_pool_never_has_more_workers_than_work_items(small, tmp_path, spy):
    """--jobs 1024 on two images: two workers for the references, two for the comparison,
    three for a synthetic data set of three images."""
    images = [small / "images" / "a.png", small / "images" / "b.png"]
    scale.write_references(images, tmp_path / "ref", jobs=1024)
    assert spy.asked == [2]
    own_candidates(tmp_path / "ref", tmp_path / "cand")
    results = list(scale.compare_folders(tmp_path / "ref", tmp_path / "cand", jobs=1024))
    assert [r["status"] for r in results] == ["pass", "pass"] and spy.asked == [2, 2]
    assert cli.main(["synth", "--count", "3", "--size", "32x64", "--out",
                     str(tmp_path / "synth"), "--jobs", "1024"]) == 0
    assert spy.asked == [2, 2, 3]


@pytest.mark.parametrize("argv", [
    ["golden", "reference", "IMAGE", "--out", "OUT"],
    ["golden", "compare", "REF", "REF"],
    ["synth", "--count", "5", "--out", "OUT"],
    ["demo", "--out", "OUT"],
    ["train", "DATA", "--out", "OUT"],
    ["audit", "readings", "--quick", "--out", "OUT"],
], ids=lambda argv: " ".join(a for a in argv[:2] if a.islower()))
@pytest.mark.parametrize("jobs", ["0", "1025", "100000"])
def test_every_jobs_option_is_refused_outside_1_to_1024(small, tmp_path, capsys, spy, argv,
                                                        jobs):
    swap = {"IMAGE": str(small / "images" / "a.png"), "OUT": str(tmp_path / "out"),
            "REF": str(small / "ref"), "DATA": str(tmp_path / "data")}
    capsys.readouterr()
    status = cli.main([swap.get(a, a) for a in argv] + ["--jobs", jobs])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1, err
    assert "jobs: expected an integer from 1 to 1024" in err, err
    assert not (tmp_path / "out").exists() and spy.asked == []
