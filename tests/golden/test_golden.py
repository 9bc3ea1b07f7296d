"""Golden-file bundles: writing, determinism, checking candidates, and the independent
implementations in examples/ (OpenCV for claim 1, plain PyTorch for the network) checked
against the bundle."""
import contextlib
import importlib.util
import itertools
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from refseg import cli, golden
from refseg.publish import OUTPUT_MARKER
from anchors import require

from checkout import ROOT
IMAGE = "claim1/coffee"


@pytest.fixture
def bundle(golden_bundle):
    return golden_bundle


def _own(manifest, stored, kept, prefix=""):
    """refseg's own output under the manifest's names (whole arrays, also the summarised)."""
    return {n: kept[n] if e["storage"] == "summary" else stored[n]
            for n, e in manifest["arrays"].items() if n.startswith(prefix)}


def _check(folder, tmp_path, arrays, *select, options=()):
    path = tmp_path / "candidate.npz"
    np.savez(path, **arrays)
    args = [f"--select={s}" for s in select] + list(options)
    report = tmp_path / "report.json"
    status = cli.main(["golden", "check", str(folder), str(path), "--report", str(report),
                       *args])
    return status, json.loads(report.read_text())


def _check_in_memory(folder, arrays, *select):
    """As :func:`_check`, with the candidate's arrays given in memory: for arrays of the
    network part, tens of MB each as a file."""
    report = golden.check_bundle(folder, arrays, list(select) or None)
    return (0 if report.passed else 1), report.as_dict()


def _row(report, name):
    return next(r for r in report["rows"] if r["name"] == name)


@pytest.mark.infrastructure
def test_bundle_layout_size_and_manifest(bundle):
    folder, manifest, stored, _ = bundle
    assert sorted(p.name for p in folder.iterdir()) == [OUTPUT_MARKER, "arrays.npz",
                                                        "manifest.json",
                                                        "manifest.schema.json",
                                                        "readings.md", "weights.npz"]
    assert (folder / "arrays.npz").stat().st_size < 25e6
    entries = manifest["arrays"]
    for name, e in entries.items():
        assert {"shape", "dtype", "sha256", "tolerance", "claim", "function", "role",
                "meaning", "readings", "computed_from"} <= set(e)
        assert e["tolerance"]["why"] and e["claim"].startswith("claim") and e["meaning"]
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
    # the weights are in the bundle with --with-weights, and their hash is in the manifest
    # either way; refseg regenerates the same weights from the seed
    from refseg.models import ResMobileNet

    net = manifest["network"]
    assert golden.weights_sha256(golden.read_weights(folder, manifest)) == \
        net["weights_sha256"]
    assert golden.weights_sha256(ResMobileNet(tuple(net["input_hw"]), seed=net["seed"])
                                 .weights()) == net["weights_sha256"]


@pytest.mark.infrastructure
def test_every_entry_names_its_readings_parameters_and_sources_in_pipeline_order(bundle):
    """Each entry cites reading IDs whose text readings.md carries, is listed after the
    arrays it is computed from, and the claim-1 steps carry every parameter they use."""
    folder, manifest, _, _ = bundle
    entries = manifest["arrays"]
    text = (folder / "readings.md").read_text(encoding="utf-8")
    seen = set()
    for name, e in entries.items():
        assert all(source in seen for source in e["computed_from"]), name
        seen.add(name)
        for reading in e["readings"]:
            assert f"## {reading}:" in text, (name, reading)
    assert "R-canny" in entries[f"{IMAGE}/edges/canny"]["readings"]
    assert "R-log" in entries[f"{IMAGE}/edges/log"]["readings"]
    assert "R-dataset" in entries["net/input"]["readings"]
    canny = entries[f"{IMAGE}/edges/canny"]["params"]
    assert canny["gradient"]["KX"] == [[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]]
    assert "8-connectivity" in canny["hysteresis"] and "m >= right" in \
        canny["non_maximum_suppression"]
    assert canny["otsu"]["bins"] == 256 and "centre" in canny["otsu"]["threshold"]
    log = entries[f"{IMAGE}/edges/log"]["params"]
    assert log["kernel"] == [[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]]
    # the stored LoG threshold includes its ratio, and says so
    assert "the ratio included" in entries[f"{IMAGE}/threshold/log/slope"]["meaning"]
    assert entries[f"{IMAGE}/edges/prewitt"]["params"]["KX"] == [[-1.0, 0.0, 1.0]] * 3
    resize = entries["net/input"]["params"]["resize"]
    assert "BILINEAR" in resize["library"] and "float32" in resize["method"]
    assert entries["net/pre_resize"]["shape"] == [2, 96, 256]
    layers = {row["name"]: row for row in manifest["network"]["layers"]}
    assert layers["x1"]["op"] == "Conv2DTranspose" and layers["x1"]["inputs"] == ["post_relu"]
    assert layers["conv1_conv"]["kernel"] == [7, 7] and layers["conv1_pad"]["padding"] == \
        [[3, 3], [3, 3]]
    assert sum(len(row["weights"]) for row in layers.values()) == \
        manifest["network"]["weights_count"]


def _resolve(dotted: str):
    """The object a dotted name names: the longest importable module, then attributes."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attribute in parts[i:]:
            found = getattr(found, attribute)
        return found
    raise ImportError(dotted)


@pytest.mark.infrastructure
def test_every_function_the_manifest_names_is_a_real_object(bundle):
    """Each entry's ``function`` and each input's ``source`` naming refseg code imports
    and resolves, attribute by attribute, to a function, method or class (the photographs'
    source is ``skimage.data``); so does the function of a user's image; a name of nothing
    fails the resolution."""
    from refseg.golden import produce

    _, manifest, _, _ = bundle
    named = {e["function"] for e in manifest["arrays"].values()}
    named |= {i["source"] for i in manifest["inputs"].values()
              if i.get("source", "").startswith("refseg.")}
    named |= {produce.READ_IMAGE}
    assert len(named) >= 20 and produce.PHOTO_SOURCE in named
    for name in sorted(named - {produce.PHOTO_SOURCE}):
        assert name.startswith("refseg."), name
        assert callable(_resolve(name)), name
    for nothing in ("refseg.autograd.no_such_op", "refseg.models.ResMobileNet.no_such_method"):
        with pytest.raises(AttributeError):
            _resolve(nothing)


@pytest.mark.infrastructure
def test_rules_the_docstrings_state_are_taken_from_them(bundle):
    """The LoG's response and zero-crossing rules and the Gaussian template's rule in the
    manifest are the numbered Notes of the operators' docstrings, as one line each; a step
    a docstring does not have is refused."""
    from refseg.claim1 import operators, preprocess
    from refseg.golden.descriptions import docstring_step

    _, manifest, _, _ = bundle
    log = manifest["arrays"][f"{IMAGE}/edges/log"]["params"]
    assert log["response"].startswith("response = 3x3 correlation with LAPLACE_4")
    assert docstring_step(operators.laplacian_of_gaussian, 2) in log["zero_crossing"]
    assert docstring_step(operators.laplacian_of_gaussian, 3) in log["zero_crossing"]
    blurred = manifest["arrays"][f"{IMAGE}/blurred"]["params"]
    assert blurred["kernel_rule"].startswith("Give the template's cells coordinates")
    assert "divide by the sum" in blurred["kernel_rule"].lower()
    assert "``" not in blurred["kernel_rule"] and ":data:" not in log["response"]
    with pytest.raises(LookupError):
        docstring_step(operators.laplacian_of_gaussian, 9)


@pytest.mark.infrastructure
def test_refseg_passes_its_own_bundle(bundle):
    """Every array, whole, checked in memory (as a file the network's arrays take 650 MB; the
    tests of one changed pixel, a wrong dtype and the rest check candidate files)."""
    folder, manifest, stored, kept = bundle
    report = golden.check_bundle(folder, _own(manifest, stored, kept)).as_dict()
    assert report["passed"], [r for r in report["rows"] if r["status"] != "pass"]
    assert report["candidate"] == "<arrays in memory>"
    outputs = [n for n, e in manifest["arrays"].items() if e["role"] == "output"]
    assert report["checked"] >= len(outputs)
    assert all(r["identical"] for r in report["rows"])


@pytest.mark.infrastructure
def test_one_changed_pixel_fails_naming_array_and_position(bundle, tmp_path, capsys):
    folder, manifest, stored, kept = bundle
    arrays = _own(manifest, stored, kept, IMAGE)
    arrays[f"{IMAGE}/edges/canny"] = arrays[f"{IMAGE}/edges/canny"].copy()
    arrays[f"{IMAGE}/edges/canny"][5, 7] ^= 1
    arrays[f"{IMAGE}/edges/canny"][9, 2] ^= 1
    status, report = _check(folder, tmp_path, arrays, f"{IMAGE}/*")
    assert status == 1 and not report["passed"]
    row = _row(report, f"{IMAGE}/edges/canny")
    assert row["status"] == "fail" and row["position"] == [5, 7]
    assert row["count"] == 2 and row["positions"] == [[5, 7], [9, 2]]
    assert row["root_cause"]
    out = capsys.readouterr().out
    assert f"{IMAGE}/edges/canny" in out and "2 of 35840 pixels differ; first at [5,7], [9,2]" \
        in out
    assert report["failed"] == 1


@pytest.mark.infrastructure
def test_a_candidate_in_memory_fails_like_a_file(bundle):
    folder, manifest, stored, kept = bundle
    arrays = _own(manifest, stored, kept, IMAGE)
    arrays[f"{IMAGE}/edges/canny"] = arrays[f"{IMAGE}/edges/canny"].copy()
    arrays[f"{IMAGE}/edges/canny"][5, 7] ^= 1
    report = golden.check_bundle(folder, arrays, select=[f"{IMAGE}/*"])
    assert not report.passed
    row = _row(report.as_dict(), f"{IMAGE}/edges/canny")
    assert row["status"] == "fail" and row["position"] == [5, 7] and row["count"] == 1
    assert [r.name for r in report.rows if r.status != "pass"] == [f"{IMAGE}/edges/canny"]


def _claim1_arrays(image, rgb):
    """refseg's claim-1 arrays of ``rgb`` under the bundle's names for ``image``."""
    from refseg.claim1 import features

    r = features.extract(rgb)
    p = f"claim1/{image}"
    out = {f"{p}/gray": r.gray, f"{p}/blurred": r.blurred, f"{p}/mean_image": r.mean_image,
           f"{p}/intermediate_cv": np.float64(r.intermediate_cv),
           f"{p}/final_weight": r.final_weight, f"{p}/feature_map": r.feature_map}
    for op in r.edges:
        out[f"{p}/response/{op}"], out[f"{p}/edges/{op}"] = r.responses[op], r.edges[op]
        out.update({f"{p}/threshold/{op}/{k}": np.float64(v)
                    for k, v in r.thresholds[op].items()})
    out.update({f"{p}/{k}": r.vector(k) for k in ("std", "mean", "cv", "weights")})
    return out


@pytest.mark.infrastructure
def test_a_wrong_gray_image_is_reported_first_as_the_root_cause(bundle, tmp_path, capsys):
    """A candidate that weights the channels in BGR order: every step of each image fails;
    the report lists each image's failures in pipeline order, gray first and marked the
    root cause, every later one naming it."""
    folder, manifest, stored, kept = bundle
    arrays = {}
    for image in ("coffee", "weld0"):
        arrays.update(_claim1_arrays(image, stored[f"input/{image}"][..., ::-1]))
    status, report = _check(folder, tmp_path, arrays, "claim1/coffee/*", "claim1/weld0/*")
    assert status == 1
    out = capsys.readouterr().out.splitlines()
    head = out.index("claim1/coffee: 23 of 23 arrays fail; root cause: claim1/coffee/gray")
    assert out[head + 1].split()[:2] == ["fail", "claim1/coffee/gray"]
    assert out[head + 1].endswith("<- root cause")
    assert out[head + 2].split()[1] == "claim1/coffee/blurred"
    assert all(line.endswith("(follows claim1/coffee/gray)") for line in out[head + 2:head + 24])
    assert report["parts"]["claim1"]["root_causes"] == ["claim1/coffee/gray",
                                                        "claim1/weld0/gray"]
    assert _row(report, "claim1/weld0/feature_map")["follows"] == ["claim1/weld0/gray"]


@pytest.mark.infrastructure
def test_parts_are_checked_alone_with_a_summary_line_each(bundle, tmp_path, capsys):
    folder, manifest, stored, kept = bundle
    arrays = _own(manifest, stored, kept, "claim1/")
    status, report = _check(folder, tmp_path, arrays)
    out = capsys.readouterr().out
    assert status == 1 and "net: 290 of 290 output arrays are missing" in out
    assert "--part claim1 checks that part alone" in out
    assert out.count("  missing ") == 0  # whole groups missing: one line each, not 324 rows
    status, report = _check(folder, tmp_path, arrays, options=["--part", "claim1"])
    out = capsys.readouterr().out
    assert status == 0 and report["passed"]
    assert "part claim1: 299 arrays checked, 299 passed (299 bit-identical)" in out
    assert "part net: not checked" in out and "part ops: not checked" in out
    assert list(report["parts"]) == ["claim1"]
    # a key of a part not checked is not judged, even one that names no array
    arrays["net/layer/x99"] = np.zeros(3, np.float32)
    status, report = _check(folder, tmp_path, arrays, options=["--part", "claim1"])
    assert status == 0 and report["unexpected"] == []
    status, report = _check(folder, tmp_path, arrays, options=["--part", "claim1",
                                                               "--part", "net"])
    assert status == 1 and report["unexpected"] == ["net/layer/x99"]


@pytest.mark.infrastructure
def test_a_key_that_names_no_array_fails_and_names_the_likely_one(bundle, tmp_path, capsys):
    folder, manifest, stored, kept = bundle
    arrays = _own(manifest, stored, kept, IMAGE)
    arrays["claim1/coffe/gray"] = arrays.pop(f"{IMAGE}/gray")
    status, report = _check(folder, tmp_path, arrays, options=["--part", "claim1"])
    out = capsys.readouterr().out
    assert status == 1 and report["unexpected"] == ["claim1/coffe/gray"]
    assert "claim1/coffe/gray: names no array; did you mean claim1/coffee/gray?" in out
    status, report = _check(folder, tmp_path, {"claim1/coffe/gray": arrays["claim1/coffe/gray"]},
                            f"{IMAGE}/blurred", options=["--allow-extra"])
    assert status == 1  # blurred, an output, is missing; the extra key alone would pass
    capsys.readouterr()
    status, report = _check(folder, tmp_path, {"claim1/coffe/gray": arrays["claim1/coffe/gray"],
                                               f"{IMAGE}/gray": stored[f"{IMAGE}/gray"]},
                            f"{IMAGE}/gray", options=["--allow-extra"])
    assert status == 0 and report["passed"] and report["unexpected"] == ["claim1/coffe/gray"]
    out = capsys.readouterr().out
    # what --allow-extra allows is counted, not listed
    assert "1 candidate key that name no array of the bundle, allowed by --allow-extra" in out
    assert "coffe/" not in out and "unexpected" not in out


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
def test_a_big_endian_candidate_with_identical_values_passes(bundle, tmp_path):
    """The byte order is how a file stores values: a candidate written big-endian (by another
    machine or library) with refseg's values passes, bit-identical, and one changed value in
    it still fails."""
    folder, manifest, stored, kept = bundle
    arrays = {n: a.astype(a.dtype.newbyteorder(">")) if a.dtype.itemsize > 1 else a
              for n, a in _own(manifest, stored, kept, IMAGE).items()}
    assert arrays[f"{IMAGE}/gray"].dtype.str == ">f8"
    status, report = _check(folder, tmp_path, arrays, f"{IMAGE}/*")
    assert status == 0 and report["failed"] == 0, report["rows"]
    assert all(r["identical"] for r in report["rows"])
    arrays[f"{IMAGE}/gray"] = arrays[f"{IMAGE}/gray"].copy()
    arrays[f"{IMAGE}/gray"][3, 4] += 1.0
    status, report = _check(folder, tmp_path, arrays, f"{IMAGE}/*")
    assert status == 1 and _row(report, f"{IMAGE}/gray")["position"] == [3, 4]


@pytest.mark.infrastructure
def test_summarised_arrays_fail_on_any_interior_change_with_its_own_numbers(bundle):
    folder, manifest, stored, kept = bundle
    name = "net/grad/x1/kernel"
    entry = manifest["arrays"][name]
    grad = kept[name].copy()
    scale = float(np.abs(grad).max())
    grad[1, 2, 3, 4] += scale  # inside the first stored slice
    status, report = _check_in_memory(folder, {name: grad}, name)
    assert status == 1 and _row(report, name)["position"] == [1, 2, 3, 4]
    # 900,000 interior elements shuffled: sums, l2 and max unchanged, the sample sees it
    grad = kept[name].copy()
    flat = grad.reshape(-1)
    lo = flat.size // 4
    flat[lo:lo + 900_000] = np.random.default_rng(3).permutation(flat[lo:lo + 900_000])
    assert golden.format.summary_statistics(grad) == pytest.approx(entry["stats"], rel=1e-12)
    status, report = _check_in_memory(folder, {name: grad}, name)
    row = _row(report, name)
    assert status == 1 and row["count"] > 10 and "sample" in row["reason"]
    assert lo <= np.ravel_multi_index(row["position"], grad.shape) < lo + 900_000
    # one element changed outside the slices and the sample: its block's sum reports it,
    # with the block's own numbers, not the slices' rounding-level error
    sampled = set(stored[entry["sample"]["index"]].tolist())
    flat_index = next(i for i in range(flat.size // 2, flat.size) if i not in sampled)
    grad = kept[name].copy()
    grad.reshape(-1)[flat_index] += 50 * scale
    status, report = _check_in_memory(folder, {name: grad}, name)
    row = _row(report, name)
    block = flat_index // entry["blocks"]["length"]
    assert status == 1 and row["reason"].startswith(f"block {block} of 256")
    assert row["max_abs"] == pytest.approx(50 * scale, rel=1e-6)
    assert f"off by {50 * scale:.3g}" in row["reason"]


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
def test_write_is_byte_identical_across_thread_counts_with_and_without_the_engine(
        bundle, tmp_path):
    """Two more writes, side by side, nothing pinned, give the bundle's bytes: one on 1 thread
    with the engine (``refseg.engine``), scikit-image and threadpoolctl made unimportable (the
    runtime dependencies are numpy, scipy and pillow; the reference never imports the engine),
    one on 2 threads with all present and training's engine installed around the write (the
    bundle's network part takes the reference route whatever is installed)."""
    folder = bundle[0]  # written with --with-weights: the manifest is the same without
    write = "from refseg import cli; sys.exit(cli.main(['golden', 'write', {!r}]))"
    blocked = ("import sys; sys.modules['refseg.engine'] = None; sys.modules['skimage'] = None; "
               "sys.modules['threadpoolctl'] = None; " + write.format(str(tmp_path / "1")))
    installed = ("import sys; from refseg.engine.training import training_engine\n"
                 "with training_engine():\n    " + write.format(str(tmp_path / "2")))
    procs = []
    for threads, code in (("1", blocked), ("2", installed)):
        env = dict(os.environ, OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads)
        procs.append(subprocess.Popen([sys.executable, "-P", "-c", code], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    for threads in ("1", "2"):
        for name in ("arrays.npz", "manifest.json"):
            assert (tmp_path / threads / name).read_bytes() == (folder / name).read_bytes(), \
                f"{threads} thread(s): {name}"


@pytest.mark.infrastructure
def test_shipped_photographs_are_the_scikit_image_crops():
    """The three crops shipped with refseg equal the crops of ``skimage.data`` that
    photos.json names, pixel for pixel, and the originals hash as recorded."""
    data = require("skimage.data")
    from refseg.golden.format import array_sha256
    from refseg.golden.bundle_images import PHOTO_FOLDER, PHOTOS, shipped_photos

    records = json.loads((PHOTO_FOLDER / "photos.json").read_text())
    images, provenance = shipped_photos()
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
                        str(candidate), "--part", "claim1", "--report", str(report)],
                       capture_output=True, text=True)
    rows = json.loads(report.read_text())["rows"]
    claim1_outputs = [n for n, e in manifest["arrays"].items()
                      if n.startswith("claim1/") and e["role"] == "output"]
    assert "part claim1: 299 arrays checked, 299 passed" in r.stdout
    assert r.returncode == 0, r.stdout
    assert sorted(row["name"] for row in rows) == sorted(claim1_outputs)
    # the binary maps and the vote agree exactly on the photographs and welds; on the edge-case
    # images drawn with ties some pass by the rounding rule; float64 steps to rounding
    rounded = {row["name"].split("/")[1] for row in rows if row["rounding"]}
    assert rounded and rounded <= {"edge-ties", "few-levels", "log-zeros", "flat", "lines",
                                   "tiny", "saturated", "tall"}
    assert all(row["max_abs"] == 0 for row in rows if ("/edges/" in row["name"]
               or row["name"].endswith("/feature_map")) and not row["rounding"])
    assert max(row["max_rel"] for row in rows if not row["rounding"]) < 1e-13


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
    from refseg.registry import load_registry

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
    of a freshly written bundle, for every element that the bundle pins, and holds the
    SHA-256 of every flagged vector's arrays."""
    from refseg.audit import trace

    from refseg.golden.flagged import flagged_pins

    shipped = json.loads((ROOT / "spec" / trace.GOLDEN_PINS_FILE).read_text(encoding="utf-8"))
    expected = json.loads(trace.render_golden_pins(golden.pinned_elements(bundle[1]),
                                                   flagged_pins(bundle[1])))
    # the flagged vectors are held to their hashes: expected data never moves silently
    assert shipped.pop("flagged_vectors") == expected.pop("flagged_vectors"), \
        "the flagged vectors moved: if on purpose, run `refseg trace --write`"
    assert shipped == expected, "spec/golden_pins.json is stale: run `refseg trace --write`"
    assert shipped["claim1.step2.cv"] == sorted(
        f"claim1/{name}/{key}" for name in (n.split("/", 1)[1] for n in bundle[1]["arrays"]
                                            if n.startswith("input/"))
        for key in ("cv", "mean"))


def _copy_bundle(bundle, tmp_path):
    """A copy of the shared bundle whose .npz files (the weights: 200 MB) are hard links to
    the shared ones: a test that changes one unlinks it first (:func:`_unlinked`), never
    writing through the link."""
    import os
    import shutil

    def link_npz(source, target):
        if source.endswith(".npz"):
            return os.link(source, target)
        return shutil.copy2(source, target)

    folder = tmp_path / "copy"
    shutil.copytree(bundle[0], folder, copy_function=link_npz)
    return folder, json.loads((folder / "manifest.json").read_text())


def _unlinked(path):
    """``path``, no longer a link to the shared bundle's file, ready to be written anew."""
    path.unlink()
    return path


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
    golden.format.write_deterministic_npz(_unlinked(folder / "arrays.npz"), arrays)
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
    (lambda m, e: m.update(arrays_file="../elsewhere.npz"),
     'arrays_file must be "arrays.npz", got "../elsewhere.npz"'),
    (lambda m, e: m.pop("arrays_file_sha256"), "has no 'arrays_file_sha256'"),
    (lambda m, e: e["tolerance"].update(rtol=1e30), "is not one of the format's"),
    (lambda m, e: e["tolerance"].update(rtol=1e-3), "is not one of the format's"),
    (lambda m, e: e.pop("shape"), "has no 'shape'"),
    (lambda m, e: e.update(dtype="no-such-type"), "dtype \"no-such-type\" does not match"),
    (lambda m, e: e.update(storage="zipped"), "storage must be one of"),
    (lambda m, e: m.update(arrays=[]), "arrays must be object, got []"),
    (lambda m, e: m.update(files={"../readings.md": "0"}), "files has no 'readings.md'"),
    (lambda m, e: e.update(readings=["gray weights"]), "does not match ^R-"),
    (lambda m, e: e.update(computed_from=["claim1/coffe/rgb"]), "computed from"),
    (lambda m, e: m.update(format_version=1), "format version 1 is not the one"),
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


@pytest.mark.infrastructure
def test_a_changed_readings_or_weights_file_is_refused(bundle, tmp_path, capsys):
    folder, manifest = _copy_bundle(bundle, tmp_path)
    candidate = tmp_path / "candidate.npz"
    np.savez(candidate, **{f"{IMAGE}/gray": bundle[2][f"{IMAGE}/gray"]})
    with open(folder / "readings.md", "a", encoding="utf-8") as f:
        f.write("\nR-gray: BT.709 weights\n")
    assert cli.main(["golden", "check", str(folder), str(candidate), "--select",
                     f"{IMAGE}/gray"]) == 2
    assert "readings.md: its SHA-256 is not the one manifest.json records" in \
        capsys.readouterr().err
    with _one_bit_flipped(bundle[0] / "weights.npz", "x1/bias.npy"):
        assert cli.main(["golden", "weights", str(bundle[0]), str(tmp_path / "out.npz")]) == 2
    err = capsys.readouterr().err
    assert "weights.npz: the weights do not hash to the network.weights_sha256" in err
    assert err.count("\n") == 1 and not (tmp_path / "out.npz").exists()
    golden.read_weights(*bundle[:2])  # whole again


@contextlib.contextmanager
def _one_bit_flipped(path, member):
    """The stored (not deflated) ``member`` of the .npz ``path`` with the top bit of its last
    byte flipped in place, its CRC-32 in the local header and in the central directory made to
    match, for the time of the block: still a valid archive, whose member's last value changed
    sign. In place, because the file is the shared bundle's 193 MB of weights; put back
    however the block ends."""
    import struct
    import zipfile
    import zlib

    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(member)
        central = archive.start_dir + sum(
            46 + len(i.orig_filename.encode()) + len(i.extra) + len(i.comment)
            for i in archive.infolist()[:archive.infolist().index(info)])
    assert info.compress_type == zipfile.ZIP_STORED and info.flag_bits & 0x800 == 0
    with open(path, "r+b") as f:
        f.seek(info.header_offset + 26)
        name_length, extra_length = struct.unpack("<HH", f.read(4))
        start = info.header_offset + 30 + name_length + extra_length
        f.seek(start)
        data = bytearray(f.read(info.file_size))
        original = bytes(data)
        data[-1] ^= 0x80
        patches = [(start, bytes(data)), (info.header_offset + 14,
                                          struct.pack("<I", zlib.crc32(data))),
                   (central + 16, struct.pack("<I", zlib.crc32(data)))]
        f.seek(central)
        assert f.read(4) == b"PK\x01\x02"
        undo = [(start, original)] + [(where, struct.pack("<I", info.CRC))
                                      for where, _ in patches[1:]]
        for where, value in patches:
            f.seek(where)
            f.write(value)
    try:
        yield
    finally:
        with open(path, "r+b") as f:
            for where, value in undo:
                f.seek(where)
                f.write(value)


@pytest.mark.claim("claim1.step2.final_weight", "claim1.step2.decision")
def test_the_vote_decides_on_at_least_two_bundle_images(bundle):
    """On at least two of the bundle's images the feature map is neither one operator's map
    nor a majority of any three of them nor k of the four for any k, so a candidate that
    replaces the weighted vote by any of these fails ``feature_map`` there. (On coffee LoG's
    weight is above 1/2, so there the feature map is LoG's map. Sobel's and Prewitt's maps
    nearly coincide and weigh ~0.1 each, so on the other images the vote is close to a
    majority of Canny, Sobel-or-Prewitt and LoG: it differs from the majorities of three at
    4 to 33 pixels, from every single map at 229 or more.)"""
    folder, manifest, stored, _ = bundle
    images = [n.split("/", 1)[1] for n in manifest["arrays"] if n.startswith("input/")]
    operators = ("canny", "sobel", "prewitt", "log")
    decided = []
    for image in images:
        edges = {op: stored[f"claim1/{image}/edges/{op}"].astype(int) for op in operators}
        feature = stored[f"claim1/{image}/feature_map"].astype(bool)
        rivals = [edges[op] > 0 for op in operators]
        rivals += [sum(edges[op] for op in three) >= 2
                   for three in itertools.combinations(operators, 3)]
        rivals += [sum(edges.values()) >= k for k in range(1, 5)]
        if all((rival != feature).any() for rival in rivals) and \
                all((rival != feature).sum() >= 200 for rival in rivals[:4]):
            decided.append(image)
    assert len(decided) >= 2, decided
    weights = stored["claim1/coffee/weights"]
    assert weights[3] > 0.5 and np.array_equal(stored["claim1/coffee/feature_map"],
                                               stored["claim1/coffee/edges/log"])


@pytest.mark.claim("claim2.backbones", "claim2.taps", "claim2.fusion", "claim3.formula",
                   "claim4.propagation", "claim4.update", "claim1.step2.dataset")
def test_independent_pytorch_network_passes_the_net_arrays(bundle, tmp_path):
    """examples/torch_net.py builds the network from the manifest's layer table and the
    bundle's weights.npz in plain PyTorch (no refseg import), resizes the feature maps by the
    manifest's rule, and passes every net array: the input exactly, the float arrays well
    inside their tolerances (measured: at most 2.1e-9 of one). Its arrays are checked in
    memory: as a candidate file they take 645 MB."""
    require("torch")
    folder, manifest, _, _ = bundle
    script = ROOT / "examples" / "torch_net.py"
    source = script.read_text(encoding="utf-8")
    assert "refseg" not in "\n".join(line for line in source.splitlines()
                                     if line.startswith(("import", "from")))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert r.returncode == 1 and r.stderr.startswith("usage: python examples/torch_net.py")
    spec = importlib.util.spec_from_file_location("torch_net_example", script)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    report = golden.check_bundle(folder, example.candidate_arrays(folder), parts=["net"])
    assert report.passed, [r.as_dict() for r in report.rows if r.status != "pass"][:3]
    rows = report.as_dict()["rows"]
    net = [n for n, e in manifest["arrays"].items()
           if n.startswith("net/") and n != "net/pre_resize"
           and (e["role"] == "output" or n == "net/input")]
    assert sorted(row["name"] for row in rows) == sorted(net)
    assert _row({"rows": rows}, "net/input")["identical"]
    worst = max(row["max_rel"] / manifest["arrays"][row["name"]]["tolerance"]["rtol"]
                for row in rows if manifest["arrays"][row["name"]]["tolerance"]["rtol"])
    assert worst < 1e-6  # float64 against float64: rounding, far inside every tolerance
