"""Flagged vectors and the diagnosis of `golden check`: outside OpenCV candidates
(examples/opencv_claim1.py, no refseg code) that each implement one alternative reading are
diagnosed by the alternative's name on every image of the bundle; a misreading no
alternative covers is said to match no known reading."""
import importlib.util
import json

import pytest

from anchors import require
from checkout import ROOT
from refseg import cli
from refseg.claim1.alternatives import ALTERNATIVES, BY_NAME, LIBRARY_DEFAULTS

#: Outside candidates: (reading, alternative); 12 alternatives over 8 readings.
DIAGNOSED = [("R-gray", "gray-average"), ("R-gray", "gray-maximum"),
             ("R-border", "border-replicate"), ("R-gauss", "gauss-binomial"),
             ("R-gauss", "gauss-sigma-1"), ("R-canny", "canny-ratio-3"),
             ("R-canny", "canny-otsu-high"), ("R-log", "log-laplace8"),
             ("R-log", "log-positive"), ("R-std", "std-own-mean"),
             ("R-weights", "weights-equal"), ("R-final", "offset-1.7")]


@pytest.fixture(scope="module")
def example():
    """examples/opencv_claim1.py as a module (its code only: it imports no refseg)."""
    require("cv2")
    spec = importlib.util.spec_from_file_location("opencv_claim1",
                                                  ROOT / "examples" / "opencv_claim1.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _outside_candidate(example, folder, tmp_path, reading, capsys):
    """The OpenCV example's candidate under ``reading``, checked (claim 1) through the CLI:
    (exit status, the --report JSON, the printed text)."""
    candidate = tmp_path / f"{reading}.npz"
    example.main(folder, candidate, reading)
    report = tmp_path / f"{reading}.json"
    capsys.readouterr()
    status = cli.main(["golden", "check", str(folder), str(candidate), "--part", "claim1",
                       "--report", str(report)])
    return status, json.loads(report.read_text()), capsys.readouterr().out


def _images(manifest):
    return [n.split("/", 1)[1] for n in manifest["arrays"] if n.startswith("input/")]


@pytest.mark.infrastructure
def test_the_outside_example_imports_no_refseg():
    source = (ROOT / "examples" / "opencv_claim1.py").read_text(encoding="utf-8")
    assert "refseg" not in "\n".join(line for line in source.splitlines()
                                     if line.startswith(("import", "from")))
    assert len(DIAGNOSED) >= 8 and len({r for r, _ in DIAGNOSED}) >= 5
    assert all(BY_NAME[name].reading == reading for reading, name in DIAGNOSED)


@pytest.mark.infrastructure
@pytest.mark.parametrize("reading, alternative", DIAGNOSED)
def test_an_outside_alternative_is_diagnosed_by_name_on_every_image(
        golden_bundle, example, tmp_path, capsys, reading, alternative):
    folder, manifest = golden_bundle[:2]
    status, report, text = _outside_candidate(example, folder, tmp_path, alternative, capsys)
    assert status == 1 and not report["passed"]
    found = [d for d in report["diagnosis"] if d["verdict"] == "matches"]
    assert {(d["reading"], d["alternative"]) for d in found} == {(reading, alternative)}
    # images where some array passed by the rounding rule: the candidate's maps are not
    # refseg's there, and the flagged vectors (computed on refseg's maps) cannot match what
    # follows them; everywhere else every root cause is explained by the match
    rounded = {r["group"].split("/")[1] for r in report["rows"] if r["rounding"]}
    assert all(d["verdict"] in ("matches", "not claimed") for d in report["diagnosis"]
               if d["image"] not in rounded)
    # every image the alternative changes (the gray edge-case images hold R = G = B, which
    # gray-average or gray-maximum cannot change), and nothing fails on the others
    changed = manifest["flagged"]["notes"][alternative]["effect"]
    assert set(changed) - rounded <= {d["image"] for d in found} <= set(changed)
    assert {"astronaut", "coffee", "chelsea", "weld0", "weld1"} <= set(changed) - rounded
    assert len(changed) >= 5
    assert not any(r["status"] == "fail" and r["group"].split("/")[1] not in changed
                   for r in report["rows"])
    for d in found:
        line = (f"diagnosis: {d['array']}: matches {reading} {alternative} "
                f"({BY_NAME[alternative].text}; {d['result']}")
        assert line in text
        assert d["result"] == manifest["flagged"]["notes"][alternative]["result"]
    # root cause first: the diagnosed arrays are the first ones the alternative changes
    assert not any(f"diagnosis: claim1/{image}: no known reading" in text
                   for image in set(changed) - rounded)


@pytest.mark.infrastructure
def test_a_misreading_no_alternative_covers_matches_no_known_reading(golden_bundle, example,
                                                                     tmp_path, capsys):
    """The BT.601 weights applied in BGR order: gray fails on every image, no flagged vector
    matches, and the check says so image by image."""
    folder, manifest = golden_bundle[:2]
    status, report, text = _outside_candidate(example, folder, tmp_path, "gray-bgr", capsys)
    assert status == 1
    # the colour images (on a gray one BGR and RGB are the same)
    coloured = [image for image in _images(manifest) if image in (
        "astronaut", "coffee", "chelsea", "weld0", "weld1", "saturated")]
    # one entry per root cause, "no known reading" (not an empty list, which would say
    # nothing was diagnosed)
    assert sorted(d["array"] for d in report["diagnosis"]) == sorted(
        f"claim1/{image}/gray" for image in coloured)
    assert {d["verdict"] for d in report["diagnosis"]} == {"no known reading"}
    for image in coloured:
        assert (f"diagnosis: claim1/{image}: no known reading matches (root cause "
                f"claim1/{image}/gray)") in text


@pytest.mark.infrastructure
def test_refseg_s_reading_from_outside_passes_without_a_diagnosis(golden_bundle, example,
                                                                   tmp_path, capsys):
    status, report, text = _outside_candidate(example, golden_bundle[0], tmp_path, "refseg",
                                              capsys)
    assert status == 0 and report["diagnosis"] == [] and "diagnosis:" not in text


@pytest.mark.infrastructure
def test_flagged_vectors_carry_results_flags_notes_and_the_indistinguishable(golden_bundle):
    folder, manifest, stored, _ = golden_bundle
    flagged = manifest["flagged"]
    assert set(flagged["notes"]) == {a.name for a in (*ALTERNATIVES, *LIBRARY_DEFAULTS)}
    assert flagged["notes"]["gray-average"]["result"] == "invalid"
    assert flagged["notes"]["offset-1.45"]["result"] == "acceptable"
    assert flagged["notes"]["gray-average"]["paragraphs"].startswith("[00")
    # every alternative changes some array of some image: mean-255 and std-ddof-1 leave the
    # weights as they are but change the statistics, which the flagged vectors cover as every
    # other claim-1 array; empty-takes-all shows on few-levels (no Canny edge), and
    # threshold_otsu and cv2.Canny-L2 on the edge-case images only
    assert not any(g["from"] == "refseg's reading" for g in flagged["indistinguishable"])
    for name in ("empty-takes-all", "skimage.filters.threshold_otsu", "cv2.Canny-L2"):
        assert set(flagged["notes"][name]["effect"]) <= {
            "edge-ties", "few-levels", "log-zeros", "flat", "lines", "tiny", "saturated",
            "tall"}, name
    assert flagged["notes"]["mean-255"]["effect"]["coffee"]["first_array"] == \
        "claim1/coffee/mean_image"
    assert flagged["notes"]["std-ddof-1"]["effect"]["coffee"]["first_array"] == \
        "claim1/coffee/std"
    for vector in flagged["vectors"]:
        reading, name = vector["flags"]
        every = {a.name: a for a in (*ALTERNATIVES, *LIBRARY_DEFAULTS)}
        assert every[name].reading == reading and vector["result"] in ("acceptable",
                                                                         "invalid")
        for array, a in vector["arrays"].items():
            assert manifest["arrays"][array]["shape"] == a["shape"]
            assert a["sha256"] != manifest["arrays"][array]["sha256"]
    gray = next(v for v in flagged["vectors"] if v["id"] == "gray-average/coffee")
    # a float image is a fingerprint; the gray image of (R + G + B) / 3 at its sample
    entry = gray["arrays"]["claim1/coffee/gray"]
    assert entry["storage"] == "fingerprint"
    rgb = stored["input/coffee"].astype(float)
    index = stored[entry["sample"]["index"]].astype(int)
    expected = (rgb.sum(axis=2) / 3).reshape(-1)[index]
    assert abs(stored[entry["sample"]["value"]] - expected).max() < 1e-12
    assert gray["arrays"]["claim1/coffee/edges/canny"]["storage"] == "full"


@pytest.mark.infrastructure
def test_a_failing_candidate_of_another_part_gets_no_claim1_diagnosis(golden_bundle, tmp_path,
                                                                       capsys):
    import numpy as np

    folder, manifest, stored, kept = golden_bundle
    path = tmp_path / "c.npz"
    np.savez(path, **{"net/loss": kept.get("net/loss", stored["net/loss"]) + np.float32(1)})
    assert cli.main(["golden", "check", str(folder), str(path), "--select", "net/loss"]) == 1
    assert "diagnosis:" not in capsys.readouterr().out
