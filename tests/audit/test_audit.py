"""``refseg audit readings``: the quick check of spec/sensitivity.md, its links from
readings.md, the command's outputs and errors, the aggregation, and the downstream runs."""
import io
import json
import re

import numpy as np
import pytest

from refseg.audit import downstream, readings
from refseg.claim1 import alternatives as al
from refseg.cli import main
from refseg.data.inputs import network_input, prepare
from refseg.data.synthetic import weld_image
from refseg.publish import OUTPUT_MARKER
from refseg.errors import InputError
from refseg.run import evaluation
from refseg.run.config import DemoSettings, TrainConfig
from refseg.trace import load_registry
from checkout import SPEC, run_refseg

pytestmark = pytest.mark.infrastructure
SENSITIVITY = (SPEC / "sensitivity.md").read_text(encoding="utf-8")


def test_quick_out_writes_both_files_and_the_shipped_quick_check_is_current(tmp_path):
    """One quick run (3 photographs, 4 welds) through the command: its files appear whole,
    and its quick-check block is spec/sensitivity.md's (regenerate with `refseg audit
    readings` when this fails)."""
    out = tmp_path / "audit"
    done = run_refseg("audit", "readings", "--quick", "--out", out)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == [OUTPUT_MARKER, "sensitivity.json",
                                                     "sensitivity.md"]
    text = (out / "sensitivity.md").read_text(encoding="utf-8")
    block = readings.shipped_quick_section(text)
    assert block is not None
    assert readings.shipped_quick_section(SENSITIVITY) == block, \
        "spec/sensitivity.md is stale: run `refseg audit readings` in the checkout"
    numbers = json.loads((out / "sensitivity.json").read_text(encoding="utf-8"))
    assert numbers["corpus"] == ["astronaut", "coffee", "chelsea", "weld0", "weld1", "weld2",
                                 "weld3"]
    assert set(numbers["per_image"]["weld0"]) == {"chosen", *al.BY_NAME}
    assert numbers["per_image"]["weld0"]["chosen"]["changed"] == 0
    assert numbers["downstream"] is None


def test_bad_invocations_exit_2_with_one_line_and_write_nothing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for args in (["--out", blocker], ["--quick", "--downstream"], [],
                 ["--out", tmp_path / "o", "--epochs", "0"],
                 ["--out", tmp_path / "o", "--count", "1000000"],
                 ["--out", tmp_path / "o", "--jobs", "0"]):
        done = run_refseg("audit", "readings", *args, cwd=tmp_path)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_every_claim1_reading_links_to_its_sensitivity_table():
    registry = load_registry(SPEC)
    claim1 = {r for e in registry.elements.values()
              if e.id.startswith(("claim1.step1.", "claim1.step2.")) for r in e.readings}
    headings = {readings.slug(line.lstrip("#")) for line in SENSITIVITY.splitlines()
                if line.startswith("#")}
    sections = re.split(r"^## ", registry.readings_text, flags=re.M)
    for rid in sorted(claim1):
        section = next(s for s in sections if s.startswith(f"{rid}:"))
        links = re.findall(r"\(sensitivity\.md#([\w-]+)\)", section)
        assert links and set(links) <= headings, rid
    for rid in readings.audited_readings():
        table = [line for line in SENSITIVITY.split(f"\n### {rid}\n", 1)[1].split("\n### ")[0]
                 .splitlines() if line.startswith("| ")]
        assert len(table) == 2 + sum(a.reading == rid for a in al.ALTERNATIVES), rid
    assert set(readings.audited_readings()) | set(readings.NOT_AUDITED) == claim1


def test_explain_shows_the_sensitivity_table_of_each_reading(capsys):
    assert main(["explain", "claim1.step2.edges.canny"]) == 0
    text = capsys.readouterr().out
    assert "sensitivity of R-canny" in text and "(`canny-ratio-3`)" in text
    assert "sensitivity of R-border" in text and "(`border-zero`)" in text


def _entry(weights, changed, single=None, contour=None, feature=0.1):
    e = {"weights": weights, "feature": feature, "changed": changed, "single": single}
    if contour is not None:
        e["contour"] = contour
    return e


def test_summaries_by_hand():
    """Three images, every variant given the same hand-made numbers: means, order, median,
    worst, single-operator count and pooled contour are what arithmetic gives."""
    in_order, out_of_order = [0.4, 0.13, 0.14, 0.33], [0.3, 0.1, 0.2, 0.4]
    per = {"photo": _entry(out_of_order, 0.5, "canny"),
           "weld0": _entry(in_order, 0.1, None, [3, 4]),
           "weld1": _entry(out_of_order, 0.2, "log", [1, 6])}
    results = {image: {name: entry for name in ("chosen", *al.BY_NAME)}
               for image, entry in per.items()}
    s = readings.summarise(results, ["weld0", "weld1"])["weights-equal"]
    assert s["weights"] == pytest.approx([0.35, 0.115, 0.17, 0.365], abs=1e-15)
    assert (s["order"], s["order_of"]) == (1, 2)
    assert s["changed_median"] == 0.2 and s["changed_worst"] == 0.5
    assert s["worst_image"] == "photo"
    assert (s["single"], s["single_by"]) == (2, {"canny": 1, "log": 1})
    assert s["contour"] == pytest.approx(0.4, abs=1e-15)
    assert s["example"] is True
    assert readings.summarise(results, ["weld0", "weld1"])["offset-1.7"]["example"] is False


def test_the_downstream_runs_and_their_table(tmp_path, monkeypatch):
    """run_downstream trains the gray input, the chosen readings and each alternative, each
    with its reading in its settings, and scores them all; the block reports every run."""
    seen = []

    def fake_train(data, run, config, **kwargs):
        seen.append(config)
        run.mkdir(parents=True)
        return [{"val_pixel_accuracy": 0.5 + 0.01 * len(seen)}]

    class Row:
        def __init__(self, accuracy):
            self.scores = type("S", (), {"pixel_accuracy": accuracy,
                                         "class_iou": np.array([0.01, np.nan, 0.3]),
                                         "mean_iou": 0.2, "boundary_f1": 0.4})()

    monkeypatch.setattr(downstream, "train", fake_train)
    monkeypatch.setattr(downstream, "evaluate_runs", lambda test, runs: (
        [Row(0.9), Row(0.8), Row(0.85)], None, None))
    result = downstream.run_downstream(tmp_path / "w", ["weights-equal"],
                                       DemoSettings(count=5, test_count=1, epochs=1,
                                                    input_hw=(32, 32)), log=io.StringIO())
    assert [(c.input_kind, c.feature_reading) for c in seen] == [
        ("gray", None), ("feature", None), ("feature", "weights-equal")]
    assert [r["name"] for r in result["runs"]] == ["gray input", "chosen readings",
                                                   "weights-equal"]
    assert result["runs"][0]["iou"] == [0.01, None, 0.3]
    assert len(list((tmp_path / "w" / "data" / "images").iterdir())) == 5
    block = readings.downstream_block(result, "abc1234", "refseg audit readings --downstream")
    assert block.count("\n| ") == 4 and "commit abc1234" in block
    assert "No feature input is more than 2% (the spread of single runs) above" in block
    assert "No run finds the contour class (best contour IoU 0.0100)" in block
    numbers = json.loads(readings._block(block, readings.NUMBERS_BEGIN, readings.NUMBERS_END)[
        len(readings.NUMBERS_BEGIN):-len(readings.NUMBERS_END)])
    assert numbers["commit"] == "abc1234" and numbers["runs"] == result["runs"]
    note = readings.closing_note(readings.summarise(
        {"weld0": {n: _entry([0.4, 0.13, 0.14, 0.33], 0.0, None, [1, 2])
                   for n in ("chosen", *al.BY_NAME)}}, ["weld0"]), block)
    assert "- Downstream: test pixel accuracy 80.00% with refseg's readings" in note
    assert "not resolved by one run each." in note and "downstream-numbers" not in note
    assert "Reduced from the demo's settings" in block and "epochs 1 (the demo's 8)" in block


def test_the_downstream_choice_skips_the_continuous_kinds():
    summary = {name: {"changed_median": 0.0, "changed_worst": 0.0}
               for name in ("chosen", *al.BY_NAME)}
    for i, name in enumerate(("continuous-literal", "gray-green", "offset-1.7", "log-13x13")):
        summary[name] = {"changed_median": 0.5 - 0.1 * i, "changed_worst": 0.6}
    assert readings.downstream_choice(summary) == ["gray-green", "offset-1.7", "log-13x13",
                                                   "continuous-graded"]


@pytest.mark.claim("claim1.step2.dataset")
def test_a_feature_reading_reaches_the_network_input_and_the_prediction():
    rgb = weld_image(1, (48, 160)).rgb
    chosen = network_input(rgb, (32, 64), "feature")
    np.testing.assert_array_equal(network_input(rgb, (32, 64), "feature", None), chosen)
    equal = network_input(rgb, (32, 64), "feature", "weights-equal")
    assert equal.shape == chosen.shape and (equal > chosen).any()  # denser map
    x, _ = prepare([(rgb, None)], (32, 64), "feature", 1, "weights-equal")
    np.testing.assert_array_equal(x[0], equal)
    with pytest.raises(InputError, match="feature input only"):
        network_input(rgb, (32, 64), "gray", "weights-equal")

    class Model:
        def predict(self, x):
            self.x = x
            return np.full((1, 32, 64, 3), 1 / 3, np.float32)

    model = Model()
    evaluation.predict_image(model, TrainConfig(input_hw=(32, 64),
                                                feature_reading="weights-equal"), rgb)
    np.testing.assert_array_equal(model.x[0], equal)


@pytest.mark.claim("claim1.step3.train")
def test_train_config_checks_its_feature_reading():
    TrainConfig(feature_reading="gauss-sigma-1").check()
    with pytest.raises(InputError, match="no such alternative"):
        TrainConfig(feature_reading="gauss-sigma-9").check()
    with pytest.raises(InputError, match="feature input only"):
        TrainConfig(input_kind="gray", feature_reading="gauss-sigma-1").check()
    saved = TrainConfig(feature_reading="gauss-sigma-1").to_json()
    assert TrainConfig.from_json(saved).feature_reading == "gauss-sigma-1"
    old = {k: v for k, v in saved.items() if k != "feature_reading"}  # a run of before
    assert TrainConfig.from_json(old).feature_reading is None
