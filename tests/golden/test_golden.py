"""Golden-file bundles: writing, determinism, checking candidates, and the independent
OpenCV implementation of claim 1 in examples/ checked against the bundle."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from refseg import cli, golden
from anchors import require

from checkout import ROOT
IMAGE = "claim1/coffee"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    folder = tmp_path_factory.mktemp("golden") / "bundle"
    done = golden.write_bundle(folder, keep=("net/*",))
    manifest, stored = golden.read_bundle(folder)
    return folder, manifest, stored, done.kept


def _own(manifest, stored, kept, prefix=""):
    """refseg's own output under the manifest's names (whole arrays, also the summarised)."""
    return {n: kept[n] if e["storage"] == "summary" else stored[n]
            for n, e in manifest["arrays"].items() if n.startswith(prefix)}


def _check(folder, tmp_path, arrays, *select):
    path = tmp_path / "candidate.npz"
    np.savez(path, **arrays)
    args = [f"--select={s}" for s in select]
    report = tmp_path / "report.json"
    status = cli.main(["golden", "check", str(folder), str(path), "--report", str(report),
                       *args])
    return status, json.loads(report.read_text())


def _row(report, name):
    return next(r for r in report["rows"] if r["name"] == name)


@pytest.mark.infrastructure
def test_bundle_layout_size_and_manifest(bundle):
    folder, manifest, stored, _ = bundle
    assert sorted(p.name for p in folder.iterdir()) == ["arrays.npz", "manifest.json"]
    assert (folder / "arrays.npz").stat().st_size < 30e6
    entries = manifest["arrays"]
    for name, e in entries.items():
        assert {"shape", "dtype", "sha256", "tolerance", "claim", "function", "role"} <= set(e)
        assert e["tolerance"]["why"] and e["claim"].startswith("claim")
        if e["storage"] == "full":
            assert golden.array_sha256(stored[name]) == e["sha256"]
            assert list(stored[name].shape) == e["shape"]
    assert entries[f"{IMAGE}/edges/canny"]["tolerance"]["rule"] == "exact"
    assert entries[f"{IMAGE}/gray"]["tolerance"]["rtol"] == 1e-9
    assert entries["net/prediction"]["dtype"] == "<f4"
    assert entries["net/grad/x1/kernel"]["storage"] == "summary"
    assert len([n for n in entries if n.startswith("net/tap/")]) == 10
    assert manifest["versions"]["compiler"] and manifest["versions"]["numpy"] == np.__version__
    assert manifest["inputs"]["coffee"]["license"].startswith("courtesy")
    # the weights are not stored: their hash is, and refseg regenerates them
    from refseg.models import ResMobileNet

    net = manifest["network"]
    assert golden.weights_sha256(ResMobileNet(tuple(net["input_hw"]), seed=net["seed"])
                                 .weights()) == net["weights_sha256"]


@pytest.mark.infrastructure
def test_refseg_passes_its_own_bundle(bundle, tmp_path):
    folder, manifest, stored, kept = bundle
    status, report = _check(folder, tmp_path, _own(manifest, stored, kept))
    assert status == 0 and report["passed"], [r for r in report["rows"] if r["status"] != "pass"]
    outputs = [n for n, e in manifest["arrays"].items() if e["role"] == "output"]
    assert report["checked"] >= len(outputs)
    assert all(r["identical"] for r in report["rows"])


@pytest.mark.infrastructure
def test_one_changed_pixel_fails_naming_array_and_position(bundle, tmp_path, capsys):
    folder, manifest, stored, kept = bundle
    arrays = _own(manifest, stored, kept, IMAGE)
    arrays[f"{IMAGE}/edges/canny"] = arrays[f"{IMAGE}/edges/canny"].copy()
    arrays[f"{IMAGE}/edges/canny"][5, 7] ^= 1
    status, report = _check(folder, tmp_path, arrays, f"{IMAGE}/*")
    assert status == 1 and not report["passed"]
    row = _row(report, f"{IMAGE}/edges/canny")
    assert row["status"] == "fail" and row["position"] == [5, 7]
    out = capsys.readouterr().out
    assert f"{IMAGE}/edges/canny" in out and "[5,7]" in out
    assert report["failed"] == 1


@pytest.mark.infrastructure
def test_wrong_dtype_missing_array_and_nan_fail_with_reasons(bundle, tmp_path):
    folder, manifest, stored, kept = bundle
    arrays = _own(manifest, stored, kept, IMAGE)
    arrays[f"{IMAGE}/final_weight"] = arrays[f"{IMAGE}/final_weight"].astype(np.float32)
    del arrays[f"{IMAGE}/feature_map"]
    gray = arrays[f"{IMAGE}/gray"].copy()
    gray[3, 4] = np.nan
    arrays[f"{IMAGE}/gray"] = gray
    arrays[f"{IMAGE}/blurred"] = arrays[f"{IMAGE}/blurred"][:-1]
    status, report = _check(folder, tmp_path, arrays, f"{IMAGE}/*")
    assert status == 1
    assert "dtype float32" in _row(report, f"{IMAGE}/final_weight")["reason"]
    assert _row(report, f"{IMAGE}/feature_map")["status"] == "missing"
    assert _row(report, f"{IMAGE}/gray")["reason"] == "NaN at [3, 4]"
    assert "shape" in _row(report, f"{IMAGE}/blurred")["reason"]
    assert report["failed"] == 4


@pytest.mark.infrastructure
def test_summarised_arrays_are_checked_by_slices_and_statistics(bundle, tmp_path):
    folder, manifest, stored, kept = bundle
    name = "net/grad/x1/kernel"
    grad = kept[name].copy()
    scale = float(np.abs(grad).max())
    grad[1, 2, 3, 4] += scale  # inside the first stored slice
    status, report = _check(folder, tmp_path, {name: grad}, name)
    assert status == 1 and _row(report, name)["position"] == [1, 2, 3, 4]
    grad = kept[name].copy()
    grad[1, 1, 300, 1000] += 50 * scale  # outside both slices: the statistics see it
    status, report = _check(folder, tmp_path, {name: grad}, name)
    assert status == 1 and "statistic" in _row(report, name)["reason"]


@pytest.mark.infrastructure
def test_pickled_or_unreadable_candidates(bundle, tmp_path, capsys):
    folder, manifest, stored, kept = bundle
    path = tmp_path / "pickled.npz"
    np.savez(path, **{f"{IMAGE}/gray": np.array([object()], dtype=object)})
    assert cli.main(["golden", "check", str(folder), str(path), "--select", f"{IMAGE}/gray"]) == 1
    assert "unreadable without pickles" in capsys.readouterr().out
    text = tmp_path / "c.npz"
    text.write_text("no")
    assert cli.main(["golden", "check", str(folder), str(text)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("refseg: error:") and "\n" not in err


@pytest.mark.infrastructure
def test_write_is_byte_identical_twice_and_across_thread_counts(bundle, tmp_path):
    folder = bundle[0]
    procs = []
    for threads in ("1", "2"):
        env = dict(os.environ, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads)
        procs.append(subprocess.Popen(
            [sys.executable, "-P", "-m", "refseg", "golden", "write", str(tmp_path / threads)],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    for threads in ("1", "2"):
        for name in ("arrays.npz", "manifest.json"):
            assert (tmp_path / threads / name).read_bytes() == (folder / name).read_bytes()


@pytest.mark.infrastructure
def test_write_needs_neither_scikit_image_nor_threadpoolctl(bundle, tmp_path):
    """The runtime dependencies are numpy, scipy and pillow: with the two optional libraries
    made unimportable, golden write still writes the same bytes."""
    folder = bundle[0]
    code = ("import sys; sys.modules['skimage'] = None; sys.modules['threadpoolctl'] = None; "
            "from refseg import cli; "
            f"sys.exit(cli.main(['golden', 'write', {str(tmp_path / 'b')!r}]))")
    r = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for name in ("arrays.npz", "manifest.json"):
        assert (tmp_path / "b" / name).read_bytes() == (folder / name).read_bytes()


@pytest.mark.infrastructure
def test_shipped_photographs_are_the_scikit_image_crops():
    """The three crops shipped with refseg equal the crops of ``skimage.data`` that
    photos.json names, pixel for pixel, and the originals hash as recorded."""
    data = require("skimage.data")
    from refseg.golden.format import array_sha256
    from refseg.golden.produce import PHOTO_FOLDER, PHOTOS, _photos

    records = json.loads((PHOTO_FOLDER / "photos.json").read_text())
    images, provenance = _photos()
    assert sorted(images) == sorted(PHOTOS) == sorted(records)
    for name in PHOTOS:
        full = getattr(data, name)()
        rows, cols = records[name]["crop"]["rows"], records[name]["crop"]["cols"]
        np.testing.assert_array_equal(images[name], full[slice(*rows), slice(*cols)])
        assert images[name].dtype == np.uint8
        assert array_sha256(full) == records[name]["original_sha256"]
        assert provenance[name]["license"] and provenance[name]["original_shape"] == \
            list(full.shape)


@pytest.mark.infrastructure
def test_write_refuses_a_folder_of_other_files(tmp_path, capsys):
    (tmp_path / "mine.txt").write_text("keep me")
    assert cli.main(["golden", "write", str(tmp_path)]) == 2
    assert "not a golden bundle" in capsys.readouterr().err
    assert (tmp_path / "mine.txt").read_text() == "keep me"


@pytest.mark.claim("claim1.step2.gray", "claim1.step2.gauss", "claim1.step2.edges.canny",
                   "claim1.step2.edges.sobel", "claim1.step2.edges.prewitt",
                   "claim1.step2.edges.log", "claim1.step2.mean_image", "claim1.step2.std",
                   "claim1.step2.cv", "claim1.step2.weights", "claim1.step2.final_weight",
                   "claim1.step2.decision")
def test_independent_opencv_implementation_passes_the_claim1_arrays(bundle, tmp_path):
    require("cv2")
    folder, manifest, _, _ = bundle
    candidate = tmp_path / "candidate.npz"
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "opencv_claim1.py"),
                        str(folder), str(candidate)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    report = tmp_path / "report.json"
    r = subprocess.run([sys.executable, "-P", "-m", "refseg", "golden", "check", str(folder),
                        str(candidate), "--select", "claim1/*", "--report", str(report)],
                       capture_output=True, text=True)
    rows = json.loads(report.read_text())["rows"]
    claim1_outputs = [n for n, e in manifest["arrays"].items()
                      if n.startswith("claim1/") and e["role"] == "output"]
    assert r.returncode == 0, r.stdout
    assert sorted(row["name"] for row in rows) == sorted(claim1_outputs)
    # the binary maps and the vote agree exactly; float64 steps to rounding
    assert all(row["max_abs"] == 0 for row in rows if "/edges/" in row["name"]
               or row["name"].endswith("/feature_map"))
    assert max(row["max_rel"] for row in rows) < 1e-13


@pytest.mark.infrastructure
def test_golden_weights_regenerates_the_pinned_network(bundle, tmp_path, capsys):
    """`refseg golden weights` writes the seeded network weights whose hash the manifest pins;
    they load strictly into a network of the bundle's size."""
    from refseg.cli import main
    from refseg.models import ResMobileNet

    folder, manifest, _, _ = bundle
    out = tmp_path / "weights.npz"
    assert main(["golden", "weights", str(folder), str(out)]) == 0
    printed = capsys.readouterr().out
    with np.load(out, allow_pickle=False) as npz:
        weights = {k: npz[k] for k in npz.files}
    digest = golden.weights_sha256(weights)
    assert digest in printed and digest in json.dumps(manifest)
    model = ResMobileNet(golden.produce.NET_HW, seed=123)
    report = model.set_weights(weights, strict=True, source=str(out))
    assert not report.problems


@pytest.mark.infrastructure
def test_every_implemented_element_is_pinned_and_explain_lists_the_arrays(bundle, capsys):
    from refseg.cli import main
    from refseg.trace import load_registry

    folder, manifest, _, _ = bundle
    pinned = golden.pinned_elements(manifest)
    implemented = [e for e, item in load_registry().elements.items()
                   if item.status == "implemented"]
    assert [e for e in implemented if not pinned.get(e)] == []
    assert main(["explain", "claim1.step2.traverse", "--golden", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "golden arrays in" in out and "claim1/weld0/feature_map" in out


@pytest.mark.infrastructure
def test_the_shipped_list_of_pinning_arrays_is_the_bundles(bundle):
    """spec/golden_pins.json (what the claim chart lists per element) names exactly the arrays
    of a freshly written bundle, for every element that the bundle pins."""
    from refseg import trace

    shipped = json.loads((ROOT / "spec" / trace.GOLDEN_PINS_FILE).read_text(encoding="utf-8"))
    expected = {k: sorted(v) for k, v in golden.pinned_elements(bundle[1]).items()}
    assert shipped == expected, "spec/golden_pins.json is stale: run `refseg trace --write`"
    assert shipped["claim1.step2.cv"] == sorted(
        f"claim1/{name}/{key}" for name in ("astronaut", "chelsea", "coffee", "weld0", "weld1")
        for key in ("cv", "mean"))


def _copy_bundle(bundle, tmp_path):
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(bundle[0], folder)
    return folder, json.loads((folder / "manifest.json").read_text())


def _write_manifest(folder, manifest):
    (folder / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


@pytest.mark.infrastructure
def test_a_bundle_changed_after_writing_is_refused(bundle, tmp_path, capsys):
    """An arrays.npz rewritten with one array changed (its file hash updated too, or not)
    fails before any comparison, in one line, even against a candidate that matches it."""
    folder, manifest = _copy_bundle(bundle, tmp_path)
    with np.load(folder / "arrays.npz", allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    arrays[f"{IMAGE}/gray"] = arrays[f"{IMAGE}/gray"] + 1.0
    golden.format.write_deterministic_npz(folder / "arrays.npz", arrays)
    candidate = tmp_path / "candidate.npz"
    np.savez(candidate, **{f"{IMAGE}/gray": arrays[f"{IMAGE}/gray"]})
    check = ["golden", "check", str(folder), str(candidate), "--select", f"{IMAGE}/gray"]
    assert cli.main(check) == 2
    err = capsys.readouterr().err
    assert "arrays.npz: its SHA-256 is not the one manifest.json records" in err
    assert err.count("\n") == 1
    import hashlib

    manifest["arrays_file_sha256"] = hashlib.sha256(
        (folder / "arrays.npz").read_bytes()).hexdigest()
    _write_manifest(folder, manifest)
    assert cli.main(check) == 2
    assert f"array '{IMAGE}/gray' does not hash to the SHA-256" in capsys.readouterr().err


@pytest.mark.infrastructure
@pytest.mark.parametrize("tamper, message", [
    (lambda m, e: m.update(arrays_file="../elsewhere.npz"), "arrays_file must be 'arrays.npz'"),
    (lambda m, e: m.pop("arrays_file_sha256"), "no arrays_file_sha256"),
    (lambda m, e: e["tolerance"].update(rtol=1e30), "is not one of the format's"),
    (lambda m, e: e.pop("shape"), "'shape' missing or not a list"),
    (lambda m, e: e.update(dtype="no-such-type"), "is not valid"),
    (lambda m, e: e.update(storage="zipped"), "storage 'zipped'"),
    (lambda m, e: m.update(arrays=[]), "no 'arrays' table"),
])
def test_a_malformed_or_widened_manifest_is_refused_in_one_line(bundle, tmp_path, capsys,
                                                                 tamper, message):
    folder, manifest = _copy_bundle(bundle, tmp_path)
    tamper(manifest, manifest["arrays"][f"{IMAGE}/gray"])
    _write_manifest(folder, manifest)
    candidate = tmp_path / "candidate.npz"
    np.savez(candidate, x=np.zeros(1))
    assert cli.main(["golden", "check", str(folder), str(candidate)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
