"""For CI and for people: `golden check` and `golden compare` with `--junit` (JUnit XML held to
the schema CI systems read), `--html` (one offline page of pictures, loaded in Chromium) and
`--accept` (a TOML list of accepted differences), and compare's counts per image."""
import base64
import io
import json
import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from PIL import Image

from anchors import require
from browser import load_page
from junit_schema import JUNIT_XSD, junit_problems
from refseg import cli
from refseg.claim1.alternatives import BY_NAME
from refseg.golden.candidate import own_candidate
from refseg.golden.failure_page import (BORDER_WIDTH, CANDIDATE_COLOUR, REFERENCE_COLOUR,
                                        array_picture)
from refseg.golden import references
from refseg.golden.flagged import variant_arrays

pytestmark = pytest.mark.infrastructure

REPLICATE = """[[accept]]
array = "claim1/*/blurred"
reading = "border-replicate"
reason = "our Gaussian replicates the edge pixel"
"""


def _images(manifest):
    return [n.split("/", 1)[1] for n in manifest["arrays"] if n.startswith("input/")]


@pytest.fixture(scope="module")
def candidates(golden_bundle, tmp_path_factory):
    """refseg's own claim-1 candidate, and one that reads the border as replicate: every
    claim-1 array of the alternative (the flagged vectors hold each one)."""
    folder, manifest, stored = golden_bundle[:3]
    root = tmp_path_factory.mktemp("ci")
    own_candidate(folder, root / "own.npz", ["claim1"])
    own = dict(np.load(root / "own.npz", allow_pickle=False))
    replicate = dict(own)
    for image in _images(manifest):
        for step, array in variant_arrays(stored[f"input/{image}"],
                                          BY_NAME["border-replicate"].variant).items():
            key = f"claim1/{image}/{step}"
            replicate[key] = array.astype(own[key].dtype)
    np.savez(root / "replicate.npz", **replicate)
    return root, own, replicate


def _check(folder, candidate, *options):
    return cli.main(["golden", "check", str(folder), str(candidate), "--part", "claim1",
                     *map(str, options)])


def _one_line_error(capsys):
    err = capsys.readouterr().err
    assert err.startswith("refseg: error: ") and err.count("\n") == 1, err
    return err


# -- --accept ------------------------------------------------------------------------------------
def test_an_accepted_reading_passes_and_is_reported_as_accepted(golden_bundle, candidates,
                                                                  tmp_path, capsys):
    """Without the accept file the replicate candidate fails; with it, it passes (exit 0):
    each image's blurred is accepted by reading, its edge maps, weights, final weight and
    feature map downstream (they match the alternative's vectors), its responses as not
    compared; the text says so and the JSON lists every accepted array."""
    folder, manifest = golden_bundle[:2]
    root = candidates[0]
    assert _check(folder, root / "replicate.npz") == 1
    capsys.readouterr()
    accept = tmp_path / "accept.toml"
    accept.write_text(REPLICATE)
    report = tmp_path / "report.json"
    assert _check(folder, root / "replicate.npz", "--accept", accept, "--report", report) == 0
    out = capsys.readouterr().out
    data = json.loads(report.read_text())
    assert data["passed"] and data["accept_unused"] == []
    how = {d["array"]: d["how"] for d in data["accepted"]}
    # the edge-case images whose blur the border rule leaves alone carry it from there on
    images = [i for i in _images(manifest) if f"claim1/{i}/blurred" in how]
    assert len(images) >= 5
    for image in images:
        assert how[f"claim1/{image}/blurred"] == "reading"
        assert how[f"claim1/{image}/response/sobel"] == "downstream"
        assert how[f"claim1/{image}/feature_map"] == "downstream"
    rows = {r["name"]: r for r in data["rows"]}
    assert all(rows[name]["status"] == "accepted" for name in how)
    assert not any(r["status"] == "fail" for r in data["rows"])
    assert data["parts"]["claim1"]["accepted"] == len(how)
    assert (f"accept entry 1 (reading border-replicate): {len(how)} arrays accepted"
            in out)
    checked = len(data["rows"])
    assert out.splitlines()[-1].startswith(f"PASS: {checked} arrays checked, "
                                           f"{checked - len(how)} passed, {len(how)} "
                                           "accepted, 0 failed")


def test_a_real_difference_downstream_of_an_accepted_reading_still_fails(
        golden_bundle, candidates, tmp_path, capsys):
    """One interior pixel of one edge map flipped in the replicate candidate: that map
    matches neither refseg's nor the alternative's, so it fails, as a root cause of its own;
    the rest stays accepted."""
    folder, manifest = golden_bundle[:2]
    root, _, replicate = candidates
    image = _images(manifest)[0]
    key = f"claim1/{image}/edges/prewitt"
    broken = dict(replicate)
    broken[key] = replicate[key].copy()
    broken[key][40, 60] ^= 1
    np.savez(tmp_path / "broken.npz", **broken)
    accept = tmp_path / "accept.toml"
    accept.write_text(REPLICATE)
    report = tmp_path / "report.json"
    assert _check(folder, tmp_path / "broken.npz", "--accept", accept, "--report",
                  report) == 1
    data = json.loads(report.read_text())
    failing = [r for r in data["rows"] if r["status"] == "fail"]
    assert [r["name"] for r in failing][:1] == [key]
    assert failing[0]["root_cause"] and failing[0]["follows"] == []
    assert {r["name"] for r in data["rows"] if r["status"] == "accepted"} >= {
        f"claim1/{image}/blurred", f"claim1/{image}/edges/sobel"}


def test_an_accepted_reading_the_candidate_does_not_follow_accepts_nothing(
        golden_bundle, candidates, tmp_path, capsys):
    """Accepting gray-average for a candidate with refseg's gray: nothing is accepted, the
    entry is reported as no longer occurring, and the replicate difference still fails."""
    folder = golden_bundle[0]
    root = candidates[0]
    accept = tmp_path / "accept.toml"
    accept.write_text('[[accept]]\narray = "claim1/*/gray"\nreading = "R-gray gray-average"\n'
                      'reason = "we once averaged"\n')
    assert _check(folder, root / "replicate.npz", "--accept", accept) == 1
    out = capsys.readouterr().out
    assert ("accept entry 1 (claim1/*/gray, reading gray-average): no longer occurs: the "
            "candidate has no such difference") in out
    accept.write_text('[[accept]]\narray = "net/*"\nmax_elements = 1\nreason = "x"\n')
    assert _check(folder, root / "own.npz", "--accept", accept) == 0
    assert "accept entry 1 (net/*, at most 1 elements): names no array checked" in \
        capsys.readouterr().out


def test_a_bound_accepts_a_difference_within_it_and_no_more(golden_bundle, candidates,
                                                              tmp_path, capsys):
    folder, manifest = golden_bundle[:2]
    _, own, _ = candidates
    image = _images(manifest)[1]
    changed = dict(own)
    key = f"claim1/{image}/edges/canny"
    changed[key] = own[key].copy()
    changed[key][30, 30] ^= 1
    changed[key][31, 40] ^= 1
    gray = f"claim1/{image}/gray"
    changed[gray] = own[gray] * (1 + 2e-9)
    np.savez(tmp_path / "changed.npz", **changed)
    accept = tmp_path / "accept.toml"

    def run(bounds):
        accept.write_text("".join(f'[[accept]]\narray = "{a}"\n{b}\nreason = "r"\n'
                                  for a, b in bounds))
        status = _check(folder, tmp_path / "changed.npz", "--accept", accept, "--report",
                        tmp_path / "r.json", "--force")
        capsys.readouterr()
        return status, json.loads((tmp_path / "r.json").read_text())

    status, data = run([(key, "max_elements = 2"), ("claim1/*/gray", "max_rel = 3e-9")])
    assert status == 0
    assert {d["array"]: d["how"] for d in data["accepted"]} == {gray: "bound", key: "bound"}
    status, data = run([(key, "max_elements = 1"), ("claim1/*/gray", "max_rel = 3e-9")])
    assert status == 1 and [d["array"] for d in data["accepted"]] == [gray]
    status, data = run([(key, "max_elements = 2"), ("claim1/*/gray", "max_rel = 1e-9")])
    assert status == 1 and [d["array"] for d in data["accepted"]] == [key]


@pytest.mark.parametrize("text, says", [
    ("[[accept]\n", "not TOML"),
    ("", "no [[accept]] entries"),
    ("[other]\nx = 1\n", "unknown table 'other'"),
    ('[[accept]]\narray = "claim1/*"\nreason = "r"\n', "give either 'reading' or a bound"),
    ('[[accept]]\narray = "claim1/*"\nreading = "border-replicate"\nmax_rel = 1e-3\n'
     'reason = "r"\n', "not both"),
    ('[[accept]]\narray = "claim1/*"\nreading = "border-replicat"\nreason = "r"\n',
     "did you mean border-replicate?"),
    ('[[accept]]\narray = "claim1/*"\nreading = "R-gray border-replicate"\nreason = "r"\n',
     "names no alternative reading"),
    ('[[accept]]\narray = "claim1/*"\nmax_elements = -1\nreason = "r"\n', "whole number"),
    ('[[accept]]\narray = "claim1/*"\nmax_elements = true\nreason = "r"\n', "whole number"),
    ('[[accept]]\narray = "claim1/*"\nmax_rel = nan\nreason = "r"\n', "finite number"),
    ('[[accept]]\narray = "claim1/*"\nmax_elements = 1\n', "'reason' must be"),
    ('[[accept]]\narray = "claim1/*"\nmax_elements = 1\nreason = "r"\nwhy = 2\n',
     "unknown key 'why'"),
    ("accept = 3\n", "no [[accept]] entries"),
])
def test_a_malformed_accept_file_is_refused_in_one_line(golden_bundle, candidates, tmp_path,
                                                        capsys, text, says):
    accept = tmp_path / "accept.toml"
    accept.write_text(text)
    junit = tmp_path / "out.xml"
    assert _check(golden_bundle[0], candidates[0] / "own.npz", "--accept", accept,
                  "--junit", junit) == 2
    err = _one_line_error(capsys)
    assert str(accept) in err and says in err
    assert not junit.exists()


def test_a_missing_accept_file_is_refused_in_one_line(golden_bundle, candidates, tmp_path,
                                                      capsys):
    for path, says in ((tmp_path / "none.toml", "no such file"), (tmp_path, "is a folder")):
        assert _check(golden_bundle[0], candidates[0] / "own.npz", "--accept", path) == 2
        assert says in _one_line_error(capsys)


# -- --junit -------------------------------------------------------------------------------------
def test_the_junit_checker_finds_what_ci_would_reject():
    """The test's own schema check fails documents CI systems reject: the check can fail."""
    good = ('<testsuites tests="1" failures="1"><testsuite name="s" tests="1" failures="1" '
            'errors="0" skipped="0" time="0"><testcase name="a" classname="c" time="0">'
            '<failure message="m" type="t"/></testcase></testsuite></testsuites>')
    assert junit_problems(good) == []
    assert junit_problems(good.replace(' classname="c"', "")) == [
        "testsuite 's': testcase 'a': no classname"]
    assert junit_problems(good.replace(' type="t"', "")) == [
        "testsuite 's': testcase 'a': failure without type"]
    assert junit_problems(good.replace('failures="1" errors', 'failures="0" errors')) == [
        "testsuite 's': failures='0', its cases give 1"]
    assert junit_problems(good.replace(' skipped="0"', "")) == ["testsuite 's': no skipped"]


def _validate(text):
    xmlschema = require("xmlschema")
    xmlschema.XMLSchema(JUNIT_XSD).validate(text)
    assert junit_problems(text) == []
    return ET.fromstring(text.encode("utf-8"))


def test_check_junit_has_one_testcase_per_array_and_the_diagnosis(golden_bundle, candidates,
                                                                   tmp_path, capsys):
    folder, manifest = golden_bundle[:2]
    root = candidates[0]
    junit, report = tmp_path / "check.xml", tmp_path / "check.json"
    assert _check(folder, root / "replicate.npz", "--junit", junit, "--report", report) == 1
    data = json.loads(report.read_text())
    tree = _validate(junit.read_text(encoding="utf-8"))
    cases = {c.get("name"): c for c in tree.iter("testcase")}
    assert list(cases) == [r["name"] for r in data["rows"]]
    assert int(tree.get("tests")) == len(data["rows"])
    assert int(tree.get("failures")) == data["failed"]
    assert [s.get("name") for s in tree.iter("testsuite")] == [
        f"claim1/{i}" for i in _images(manifest)]
    image = _images(manifest)[0]
    root_cause = cases[f"claim1/{image}/blurred"].find("failure")
    assert "root cause" in root_cause.get("message")
    assert "matches R-border border-replicate" in root_cause.get("message")
    assert "diagnosis:" in root_cause.text
    downstream = cases[f"claim1/{image}/edges/canny"].find("failure")
    assert f"follows claim1/{image}/blurred" in downstream.get("message")
    assert cases[f"claim1/{image}/gray"].find("failure") is None
    # accepted: passing cases that say so; an unused entry: a skipped case
    accept = tmp_path / "accept.toml"
    accept.write_text(REPLICATE + '[[accept]]\narray = "claim1/*/gray"\n'
                      'reading = "gray-average"\nreason = "old"\n')
    assert _check(folder, root / "replicate.npz", "--junit", junit, "--accept", accept) == 0
    tree = _validate(junit.read_text(encoding="utf-8"))
    assert tree.get("failures") == "0" and tree.get("skipped") == "1"
    case = next(c for c in tree.iter("testcase") if c.get("name") == f"claim1/{image}/blurred")
    assert case.find("failure") is None
    assert "accepted by entry 1 (reading border-replicate)" in case.find("system-out").text
    skipped = next(tree.iter("skipped"))
    assert "no longer occurs" in skipped.get("message")


def test_outputs_refuse_a_users_file_and_each_other(golden_bundle, candidates, tmp_path,
                                                    capsys):
    folder = golden_bundle[0]
    own = candidates[0] / "own.npz"
    mine = tmp_path / "mine.xml"
    mine.write_text("my own notes")
    for option in ("--junit", "--html"):
        assert _check(folder, own, option, mine) == 2
        assert "exists and refseg did not write it; --force replaces it" in \
            _one_line_error(capsys)
        assert mine.read_text() == "my own notes"
    same = tmp_path / "same.out"
    assert _check(folder, own, "--junit", same, "--html", same) == 2
    assert "given to both --junit and --html" in _one_line_error(capsys)
    accept = tmp_path / "accept.toml"
    accept.write_text(REPLICATE)
    assert _check(folder, own, "--accept", accept, "--junit", accept, "--force") == 2
    assert "is an input of this command" in _one_line_error(capsys)
    assert accept.read_text() == REPLICATE and not same.exists()
    assert _check(folder, own, "--junit", mine, "--force") == 0
    assert junit_problems(mine.read_text()) == []
    assert _check(folder, own, "--junit", mine) == 0  # refseg wrote it: replaced


# -- --html --------------------------------------------------------------------------------------
def test_a_picture_shows_candidate_only_and_reference_only_pixels_by_place():
    """A 9x10 binary map: two pixels the candidate adds (one on the border ring, one inside)
    and three it misses (two on the ring): counted by place, drawn in the two colours."""
    golden = np.zeros((9, 10), np.uint8)
    golden[4, 2:8] = 1
    golden[0, 0] = golden[8, 9] = 1
    value = golden.copy()
    value[0, 0] = value[8, 9] = value[4, 5] = 0
    value[1, 4] = value[5, 5] = 1
    picture = array_picture("m", golden, value, {"rule": "exact"})
    assert picture["binary"] and picture["labels"] == ["candidate only", "reference only"]
    assert picture["counts"] == {"candidate only": {"border": 1, "interior": 1},
                                 "reference only": {"border": 2, "interior": 1}}
    rgb = np.asarray(Image.open(io.BytesIO(base64.b64decode(picture["png"]))).convert("RGB"))
    assert rgb.shape == (9, 10, 3)
    for (r, c), colour in (((1, 4), CANDIDATE_COLOUR), ((5, 5), CANDIDATE_COLOUR),
                           ((0, 0), REFERENCE_COLOUR), ((8, 9), REFERENCE_COLOUR),
                           ((4, 5), REFERENCE_COLOUR)):
        assert tuple(rgb[r, c]) == colour
    marked = np.all(rgb == CANDIDATE_COLOUR, axis=2) | np.all(rgb == REFERENCE_COLOUR, axis=2)
    assert marked.sum() == 5
    assert BORDER_WIDTH == 2
    # a float array: beyond the relmax tolerance only, higher against lower
    g = np.linspace(1, 2, 90).reshape(9, 10)
    v = g.copy()
    v[4, 4] += 1e-3
    v[0, 3] -= 1e-3
    v[6, 6] += 1e-12  # within 1e-9 of max|g|
    picture = array_picture("f", g, v, {"rule": "relmax", "rtol": 1e-9})
    assert picture["counts"] == {"candidate higher": {"border": 0, "interior": 1},
                                 "candidate lower": {"border": 1, "interior": 0}}
    assert array_picture("x", g[None], v[None], {"rule": "exact"}) is None


def test_the_check_page_renders_offline_with_a_picture_per_failing_2d_array(
        golden_bundle, candidates, tmp_path, capsys):
    folder, manifest, stored = golden_bundle[:3]
    root, _, replicate = candidates
    page, report = tmp_path / "check.html", tmp_path / "check.json"
    assert _check(folder, root / "replicate.npz", "--html", page, "--report", report) == 1
    data = json.loads(report.read_text())
    failing_2d = [r["name"] for r in data["rows"] if r["status"] == "fail"
                  and len(manifest["arrays"][r["name"]]["shape"]) == 2]
    text = page.read_text(encoding="utf-8")
    assert "http:" not in text and "https:" not in text and "<script" not in text
    loaded = load_page(page)
    assert loaded.console_errors == [] and loaded.exceptions == []
    assert loaded.failed_requests == []
    assert len(loaded.images) == len(failing_2d) > 0
    for (src, width, height), name in zip(loaded.images, failing_2d):
        assert src.startswith("data:image/png;base64,")
        assert [height, width] == manifest["arrays"][name]["shape"]
    assert loaded.sections == [
        f"claim1/{i}" for i in _images(manifest)
        if any(r["status"] == "fail" and r["name"].startswith(f"claim1/{i}/")
               for r in data["rows"])]
    # the counts beside a binary map's picture, counted here from the arrays
    name = f"claim1/{_images(manifest)[0]}/edges/canny"
    g, v = stored[name].astype(bool), replicate[name].astype(bool)
    ring = np.ones(g.shape, bool)
    ring[2:-2, 2:-2] = False
    counts = [int(np.sum(m & place)) for m in (v & ~g, g & ~v) for place in (ring, ~ring)]
    figure = text.split(f'<figure id="{name}">')[1].split("</figure>")[0]
    cells = [int(c) for c in re.findall(r'<td class="n">(\d+)</td>', figure)]
    assert cells == [counts[0], counts[1], counts[0] + counts[1],
                     counts[2], counts[3], counts[2] + counts[3]]


# -- golden compare ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def compare_folders(tmp_path_factory):
    """Three small images' references; candidates: refseg's own, border-replicate (its
    claim-1 steps' arrays), and one file missing."""
    root = tmp_path_factory.mktemp("compare")
    (root / "images").mkdir()
    rng = np.random.default_rng(5)
    for i in range(3):
        rgb = np.zeros((30, 40, 3), np.uint8)
        rgb[6 + i:22, 0:30] = (200, 120, 40)
        rgb = np.clip(rgb + rng.normal(0, 10, rgb.shape), 0, 255).astype(np.uint8)
        Image.fromarray(rgb).save(root / "images" / f"im{i}.png")
    ref, cand = root / "ref", root / "cand"
    assert cli.main(["golden", "reference", str(root / "images"), "--out", str(ref),
                     "--jobs", "1"]) == 0
    cand.mkdir()
    # a reference file's own description and rounding masks name no array of a candidate
    own = {k: v for k, v in np.load(ref / "im0.npz", allow_pickle=False).items()
           if k != references.META and "@" not in k}
    np.savez(cand / "im0.npz", **own)
    arrays = {k: v for k, v in np.load(ref / "im1.npz", allow_pickle=False).items()
              if k != references.META and "@" not in k}
    for step, value in variant_arrays(arrays["input/im1"],
                                      BY_NAME["border-replicate"].variant).items():
        arrays[f"claim1/im1/{step}"] = value.astype(arrays[f"claim1/im1/{step}"].dtype)
    np.savez(cand / "im1.npz", **arrays)
    return root, ref, cand


def test_compare_gives_counts_per_image_junit_and_a_page(compare_folders, tmp_path, capsys):
    root, ref, cand = compare_folders
    junit, page, report = tmp_path / "c.xml", tmp_path / "c.html", tmp_path / "c.json"
    assert cli.main(["golden", "compare", str(ref), str(cand), "--jobs", "1", "--junit",
                     str(junit), "--html", str(page), "--report", str(report)]) == 1
    out = capsys.readouterr().out
    summary = json.loads(report.read_text())
    per_image = {r["image"]: r for r in summary["per_image"]}
    assert per_image["im0"] == {"image": "im0", "status": "pass", "checked": 24,
                                "passed": 24, "failed": 0, "accepted": 0}
    im1 = per_image["im1"]
    assert im1["status"] == "fail" and im1["failed"] > 0
    assert im1["passed"] + im1["failed"] == im1["checked"] == 24
    assert per_image["im2"]["status"] == "missing"
    assert (f"im1    fail        24 {im1['passed']:>6} {im1['failed']:>6}        0"
            in out.splitlines())
    tree = _validate(junit.read_text(encoding="utf-8"))
    suites = {s.get("name"): s for s in tree.iter("testsuite")}
    assert list(suites) == ["im0", "im1", "im2"]
    assert suites["im0"].get("tests") == "24" and suites["im0"].get("failures") == "0"
    assert suites["im1"].get("failures") == str(im1["failed"])
    blurred = next(c for c in suites["im1"].iter("testcase")
                   if c.get("name") == "claim1/im1/blurred").find("failure")
    assert "root cause; diagnosis: R-border border-replicate" in blurred.get("message")
    missing = suites["im2"].find("testcase/failure")
    assert missing.get("type") == "missing" and "no such file" in missing.get("message")
    loaded = load_page(page)
    assert loaded.console_errors == [] and loaded.exceptions == []
    assert loaded.failed_requests == []
    assert loaded.sections == ["im1", "im2"]
    failing = [c.get("name") for c in suites["im1"].iter("testcase")
               if c.find("failure") is not None]
    with np.load(ref / "im1.npz", allow_pickle=False) as arrays:
        assert len(loaded.images) == sum(arrays[n].ndim == 2 for n in failing) > 0
    assert all(w == 40 and h == 30 for _, w, h in loaded.images)


def test_compare_accepts_a_reading_per_image(compare_folders, tmp_path, capsys):
    root, ref, cand = compare_folders
    accept = tmp_path / "accept.toml"
    accept.write_text(REPLICATE + '[[accept]]\narray = "claim1/*/gray"\n'
                      'reading = "gray-average"\nreason = "old"\n')
    junit, report = tmp_path / "c.xml", tmp_path / "c.json"
    # a reference file's own description and rounding masks name no array of a candidate
    own = {k: v for k, v in np.load(ref / "im2.npz", allow_pickle=False).items()
           if k != references.META and "@" not in k}
    np.savez(cand / "im2.npz", **own)
    try:
        status = cli.main(["golden", "compare", str(ref), str(cand), "--jobs", "2",
                           "--accept", str(accept), "--junit", str(junit), "--report",
                           str(report)])
    finally:
        (cand / "im2.npz").unlink()
    out = capsys.readouterr().out
    summary = json.loads(report.read_text())
    assert status == 0 and summary["passed"] == 3
    per_image = {r["image"]: r for r in summary["per_image"]}
    assert per_image["im1"]["status"] == "pass" and per_image["im1"]["accepted"] > 0
    assert per_image["im1"]["failed"] == 0
    assert [u["entry"] for u in summary["accept_unused"]] == [2]
    assert "accept entry 2 (claim1/*/gray, reading gray-average): no longer occurs" in out
    assert out.splitlines()[0] == ("images: 3, passed 3 (1 with accepted differences), "
                                   "failed 0, missing 0, unreadable 0")
    tree = _validate(junit.read_text(encoding="utf-8"))
    assert tree.get("failures") == "0" and tree.get("skipped") == "1"
