"""Your own images and checks at scale: `golden write --images` and the self-check
(`golden candidate` + `golden check`) on a fresh bundle; `golden reference` + `golden compare`
over a folder, with diagnoses and the summary table; the Dask example on a two-worker
LocalCluster agreeing with the command."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from anchors import require
from checkout import ROOT
from refseg import cli, golden
from refseg.golden import scale
from refseg.golden.format import part_of


def _images(folder):
    """Four small images of the kinds `refseg edges` reads: RGB PNG (a name with a space),
    8-bit gray PNG, noisy 16-bit gray PNG, JPEG."""
    folder.mkdir()
    rng = np.random.default_rng(7)
    rgb = np.zeros((36, 52, 3), np.uint8)
    rgb[8:28, 14:40] = (210, 140, 60)
    rgb = np.clip(rgb + rng.normal(0, 12, rgb.shape), 0, 255).astype(np.uint8)
    Image.fromarray(rgb).save(folder / "bright box.png")
    Image.fromarray(rgb[:, :, 1]).save(folder / "gray.png")
    deep = np.clip(rgb[:, :, 0].astype(float) * 257 + rng.normal(0, 300, rgb.shape[:2]), 0,
                   65535).astype(np.uint16)
    Image.fromarray(deep).save(folder / "deep.png")
    Image.fromarray(rgb[::-1]).save(folder / "photo.jpg", quality=90)
    return sorted(folder.iterdir())


@pytest.mark.infrastructure
def test_write_images_then_the_self_check_and_the_outside_example_pass(tmp_path, capsys):
    require("cv2")
    files = _images(tmp_path / "images")
    folder = tmp_path / "bundle"
    assert cli.main(["golden", "write", str(folder), "--images", *map(str, files)]) == 0
    manifest, stored = golden.read_bundle(folder)
    import jsonschema

    jsonschema.Draft202012Validator(golden.schema.schema()).validate(manifest)
    record = manifest["inputs"]["bright_box"]
    assert record["file"] == "bright box.png" and len(record["file_sha256"]) == 64
    assert record["pixels_sha256"] == golden.array_sha256(stored["input/bright_box"])
    assert stored["input/deep"].shape == (36, 52, 3) and stored["input/deep"].dtype.kind == "f"
    assert any(v["image"] == "photo" for v in manifest["flagged"]["vectors"])
    # the self-check: refseg's own candidate of the parts the images change, every array whole,
    # passes its bundle (the network part, 650 MB as a file, is the one of every bundle: the
    # golden tests check it)
    own = tmp_path / "own.npz"
    parts = ["--part", "claim1", "--part", "ops"]
    assert cli.main(["golden", "candidate", str(folder), str(own), *parts]) == 0
    assert f"check it with `refseg golden check {folder} {own} --part claim1 --part ops`" in \
        capsys.readouterr().out
    with np.load(own, allow_pickle=False) as npz:
        assert sorted(npz.files) == sorted(n for n in manifest["arrays"]
                                           if part_of(n) in ("claim1", "ops"))
    assert cli.main(["golden", "check", str(folder), str(own), *parts]) == 0
    out = capsys.readouterr().out
    count = sum(part_of(n) != "net" for n in manifest["arrays"])
    assert f"PASS: {count} arrays checked, {count} passed" in out
    # the outside OpenCV implementation passes on the user's images too
    candidate = tmp_path / "cv.npz"
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "opencv_claim1.py"),
                        str(folder), str(candidate)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert cli.main(["golden", "check", str(folder), str(candidate), "--part", "claim1"]) == 0, \
        capsys.readouterr().out


@pytest.mark.infrastructure
def test_a_candidate_of_an_unknown_part_is_refused_before_any_work(tmp_path):
    from refseg.errors import InputError
    from refseg.golden.candidate import own_candidate

    with pytest.raises(InputError, match=r"^--part nets: not a part of the bundle \(claim1, "):
        own_candidate(tmp_path / "no-bundle", tmp_path / "c.npz", ["claim1", "nets"])
    assert not (tmp_path / "c.npz").exists()


@pytest.mark.infrastructure
def test_write_images_refuses_a_bad_image_before_any_work(tmp_path, capsys):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n" + b"0" * 20)
    assert cli.main(["golden", "write", str(tmp_path / "b"), "--images", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"refseg: error: {bad}") and err.count("\n") == 1
    assert not (tmp_path / "b").exists()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Reference files of four images; candidates from the outside OpenCV example: one of
    refseg's reading, one with gauss-binomial, one with the gray-bgr misreading, and one
    image without a candidate file."""
    require("cv2")
    root = tmp_path_factory.mktemp("scale")
    files = _images(root / "images")
    ref, cand = root / "ref", root / "cand"
    assert cli.main(["golden", "reference", str(root / "images"), "--out", str(ref),
                     "--jobs", "2"]) == 0
    assert sorted(p.name for p in ref.glob("*.npz")) == ["bright_box.npz", "deep.npz",
                                                         "gray.npz", "photo.npz"]
    example = str(ROOT / "examples" / "opencv_claim1.py")
    for reading in ("refseg", "gauss-binomial", "gray-bgr"):
        r = subprocess.run([sys.executable, example, "--folder", str(ref),
                            str(root / reading), "--reading", reading],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    cand.mkdir()
    for name, reading in (("deep", "refseg"), ("gray", "refseg"),
                          ("photo", "gauss-binomial"), ("bright_box", "gray-bgr")):
        (cand / f"{name}.npz").write_bytes((root / reading / f"{name}.npz").read_bytes())
    (cand / "gray.npz").unlink()
    return root, files, ref, cand


@pytest.mark.infrastructure
def test_compare_summarises_passes_root_causes_and_diagnoses(folders, tmp_path, capsys):
    root, _, ref, cand = folders
    report = tmp_path / "report.json"
    status = cli.main(["golden", "compare", str(ref), str(cand), "--jobs", "2", "--report",
                       str(report)])
    out = capsys.readouterr().out
    assert status == 1
    summary = json.loads(report.read_text())
    assert (summary["images"], summary["passed"], summary["failed"], summary["missing"]) == \
        (4, 1, 2, 1)
    assert summary["diagnosis"] == {"R-gauss gauss-binomial": 1}
    assert summary["no_known_reading"] == 1
    assert summary["first_failing_step"] == {"blurred": 1, "gray": 1}
    failing = {r["image"]: r for r in summary["failing_images"]}
    assert failing["photo"]["diagnosis"] == ["R-gauss gauss-binomial"]
    assert failing["bright_box"]["diagnosis"] == [] and failing["bright_box"][
        "first_failing"] == ["gray"]
    assert failing["gray"]["status"] == "missing"
    assert "R-gauss gauss-binomial" in out and "no known reading matches" in out
    assert out.splitlines()[0] == "images: 4, passed 1, failed 2, missing 1, unreadable 0"
    # one process or two: the same summary
    assert scale.summarize(scale.compare_folders(ref, cand, jobs=1)) == summary


@pytest.mark.infrastructure
def test_compare_refuses_missing_folders_in_one_line(folders, tmp_path, capsys):
    root, _, ref, cand = folders
    for argv in (["golden", "compare", str(tmp_path / "none"), str(cand)],
                 ["golden", "compare", str(ref), str(tmp_path / "none")],
                 ["golden", "compare", str(tmp_path), str(cand)],
                 ["golden", "compare", str(ref), str(cand), "--jobs", "0"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("refseg: error: ") and err.count("\n") == 1


@pytest.mark.infrastructure
def test_the_dask_example_on_two_workers_agrees_with_the_command(folders, tmp_path, capsys):
    require("dask.distributed")
    root, _, ref, folder = folders
    # the candidates, and one of an image the folder of images does not hold
    cand = tmp_path / "cand"
    shutil.copytree(folder, cand)
    (cand / "stray.npz").write_bytes((folder / "deep.npz").read_bytes())
    report = tmp_path / "dask.json"
    # the cluster's workers keep their files in dask's temporary folder, the system's by
    # default (/tmp/dask-scratch-space/, left behind): the test's own instead
    shared_scratch = Path(tempfile.gettempdir()) / "dask-scratch-space"
    scratch_before = shared_scratch.exists()
    r = subprocess.run([sys.executable, "-P", str(ROOT / "examples" / "dask_compare.py"),
                        str(root / "images"), str(cand), str(tmp_path / "dask_ref"),
                        "--workers", "2", "--report", str(report)],
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, "DASK_TEMPORARY_DIRECTORY": str(tmp_path)})
    assert r.returncode == 1, r.stderr[-2000:]
    assert (tmp_path / "dask-scratch-space").is_dir()
    assert shared_scratch.exists() == scratch_before
    cli_report = tmp_path / "cli.json"
    assert cli.main(["golden", "compare", str(ref), str(cand), "--report",
                     str(cli_report)]) == 1
    # the same report but for the reference folder each one names
    dask_report = report.read_text().replace(str(tmp_path / "dask_ref"), str(ref))
    assert json.loads(dask_report) == json.loads(cli_report.read_text())
    assert json.loads(dask_report)["unreferenced"] == 1
    assert (r.stdout.strip().replace(str(tmp_path / "dask_ref"), str(ref))
            == capsys.readouterr().out.strip())
    for path in ref.glob("*.npz"):
        with np.load(path) as a, np.load(tmp_path / "dask_ref" / path.name) as b:
            assert sorted(a.files) == sorted(b.files)
            assert all(np.array_equal(a[k], b[k]) for k in a.files)
