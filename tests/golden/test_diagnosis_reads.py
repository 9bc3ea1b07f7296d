"""The diagnosis of arrays an alternative computes from other arrays than refseg's (its
note's ``reads``): scipy's gaussian_laplace of the gray image and skimage's Canny of the
blurred image are causes of their own below a failing array they do not read; and a LoG map
lacking only the pixels of an exact 0 is named as that rule left out."""
import numpy as np
import pytest

from refseg.claim1 import alternatives as al
from refseg.golden import check_bundle
from refseg.golden.flagged import variant_arrays

from test_rounding import _candidate, _separable

pytestmark = pytest.mark.infrastructure
PHOTOS = ("astronaut", "coffee", "chelsea", "weld0", "weld1")


def _matches(report, image):
    return {(d["array"].split("/", 2)[2], d["alternative"]): d for d in report.diagnosis
            if d["verdict"] == "matches" and d["image"] == image}


def _report_of(golden_bundle, variant):
    """The claim-1 check of a candidate computed by ``variant`` on every bundle image."""
    folder, manifest, stored, _ = golden_bundle
    candidate = _candidate(manifest, stored, lambda rgb: variant_arrays(rgb, variant))
    return check_bundle(folder, candidate, parts=["claim1"])


def test_gaussian_laplace_of_the_gray_image_is_a_cause_below_a_failing_blur(golden_bundle):
    report = _report_of(golden_bundle, al.Variant(blur="skimage",
                                                  log_kernel="scipy-gaussian-laplace"))
    for image in PHOTOS:
        found = _matches(report, image)
        assert ("blurred", "skimage.filters.gaussian") in found
        log = found[("response/log", "scipy.ndimage.gaussian_laplace")]
        assert log["own_sources"] == [f"claim1/{image}/gray"] and log["root_cause"]
        row = next(r for r in report.rows if r.name == f"claim1/{image}/response/log")
        assert row.follows == [f"claim1/{image}/blurred"]  # the pipeline's order is kept
    assert ("a cause of its own: scipy.ndimage.gaussian_laplace computes it from "
            "claim1/astronaut/gray, which passes") in report.text()


def test_skimage_canny_is_a_cause_below_a_failing_canny_response(golden_bundle):
    report = _report_of(golden_bundle, al.Variant(gradient_scale="skimage-canny",
                                                  canny_library="skimage"))
    for image in PHOTOS:
        found = _matches(report, image)
        assert ("response/canny", "skimage.filters.sobel-canny") in found
        canny = found[("edges/canny", "skimage.feature.canny")]
        assert canny["own_sources"] == [f"claim1/{image}/blurred"]
    # given the Otsu thresholds it reads them too, which follow the failing response: never
    # a cause there
    assert not any(d.get("alternative") == "skimage.feature.canny-otsu" and d["root_cause"]
                   for d in report.diagnosis)
    for d in report.diagnosis:
        if d.get("alternative") == "skimage.feature.canny-otsu":
            assert d["contradicted_by"] == [f"claim1/{d['image']}/response/canny"]


def test_a_log_map_without_the_exact_zero_rule_is_named(golden_bundle):
    folder, manifest, stored, _ = golden_bundle
    candidate = _candidate(manifest, stored, lambda rgb: _separable(rgb, zero_rule=False))
    report = check_bundle(folder, candidate, parts=["claim1"])
    entry = next(d for d in report.diagnosis if d["array"] == "claim1/log-zeros/edges/log")
    assert entry["verdict"] == "no known reading"
    assert entry["shape"]["kind"] == "exact-zero rule"
    lost = stored["claim1/log-zeros/edges/log"] & ~candidate["claim1/log-zeros/edges/log"]
    assert entry["shape"]["missing"] == int(lost.sum()) > 0
    assert "the rule for an exact 0 between opposite signs" in report.text()
    # a map that lacks other pixels keeps the plain shape
    fewer = dict(candidate)
    edges = stored["claim1/coffee/edges/log"].copy()
    inside = np.argwhere(edges[4:-4, 4:-4])[0] + 4
    edges[tuple(inside)] = 0
    fewer["claim1/coffee/edges/log"] = edges
    report = check_bundle(folder, fewer, parts=["claim1"], select=["claim1/coffee/*"])
    entry = next(d for d in report.diagnosis if d["array"] == "claim1/coffee/edges/log")
    assert entry["shape"]["kind"] == "subset"
