"""``refseg audit readings``: the quick check of spec/sensitivity.md, its links from
readings.md, the command's outputs and errors, the aggregation, and the downstream runs."""
import io
import json
import re

import numpy as np
import pytest

from refseg.audit import downstream, network_inputs, readings
from refseg.claim1 import alternatives as al
from refseg.cli import main
from refseg.data.inputs import network_input, prepare
from refseg.data.synthetic import weld_image
from refseg.publish import OUTPUT_MARKER
from refseg.errors import InputError
from refseg.run import evaluation
from refseg.run.config import DemoSettings, TrainConfig
from refseg.registry import load_registry
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
                 ["--out", tmp_path / "o", "--jobs", "0"],
                 ["--out", tmp_path / "o", "--seeds", "a,b"],
                 ["--out", tmp_path / "o", "--seeds", "1,1"],
                 ["--out", tmp_path / "o", "--record", blocker]):
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
    assert set(readings.audited_readings()) | set(readings.NOT_AUDITED) \
        | set(readings.AUDITED_DOWNSTREAM) == claim1


def test_explain_shows_the_sensitivity_table_of_each_reading(capsys):
    assert main(["explain", "claim1.step2.edges.canny"]) == 0
    text = capsys.readouterr().out
    assert "sensitivity of R-canny" in text and "(`canny-ratio-3`)" in text
    assert "sensitivity of R-border" in text and "(`border-zero`)" in text


def _entry(weights, changed, single=None, contour=None, feature=0.1, distance=0.0,
           decides=None):
    e = {"weights": weights, "feature": feature, "changed": changed, "single": single,
         "distance": distance, "decides": decides}
    if contour is not None:
        e["contour"] = contour
    return e


def test_summaries_by_hand():
    """Three images, every variant given the same hand-made numbers: means, order, median,
    worst, single-operator count and pooled contour are what arithmetic gives."""
    in_order, out_of_order = [0.4, 0.13, 0.14, 0.33], [0.3, 0.1, 0.2, 0.4]
    per = {"photo": _entry(out_of_order, 0.5, "canny", distance=0.9, decides="canny"),
           "weld0": _entry(in_order, 0.1, None, [3, 4], distance=0.1),
           "weld1": _entry(out_of_order, 0.2, "log", [1, 6], distance=0.25)}
    results = {image: {name: entry for name in ("chosen", *al.BY_NAME)}
               for image, entry in per.items()}
    s = readings.summarise(results, ["weld0", "weld1"])["weights-equal"]
    assert s["weights"] == pytest.approx([0.35, 0.115, 0.17, 0.365], abs=1e-15)
    assert (s["order"], s["order_of"]) == (1, 2)
    assert s["changed_median"] == 0.2 and s["changed_worst"] == 0.5
    assert s["worst_image"] == "photo"
    assert (s["single"], s["single_by"]) == (2, {"canny": 1, "log": 1})
    assert s["distance"] == 0.175  # median of the welds' 0.1 and 0.25; the photo left out
    assert (s["decides"], s["decides_by"]) == (1, {"canny": 1})
    assert s["contour"] == pytest.approx(0.4, abs=1e-15)
    assert s["example"] is True
    assert readings.summarise(results, ["weld0", "weld1"])["offset-1.7"]["example"] is False


def _fake_training(monkeypatch, accuracies):
    """train and evaluate_runs of the grid replaced: each run's test accuracy is taken from
    ``accuracies`` {(seed, kind, reading): value}; returns the configs trained."""
    seen = []

    def fake_train(data, run, config, **kwargs):
        seen.append(config)
        run.mkdir(parents=True)
        return [{"val_pixel_accuracy": 0.5}]

    class Row:
        def __init__(self, accuracy):
            self.scores = type("S", (), {"pixel_accuracy": accuracy,
                                         "class_iou": np.array([0.01, np.nan, 0.3]),
                                         "mean_iou": 0.2, "boundary_f1": 0.4})()

    def fake_evaluate(test, runs, route):
        assert route == "reference"  # the downstream scores are the reference route's
        c = seen[-1]
        return [Row(accuracies[(c.seed, c.input_kind, c.feature_reading)])], None, None

    monkeypatch.setattr(downstream, "train", fake_train)
    monkeypatch.setattr(downstream, "evaluate_runs", fake_evaluate)
    return seen


def test_the_grid_trains_every_run_records_it_and_resumes(tmp_path, monkeypatch):
    """grid_runs orders refseg's readings first, gray once per seed; run_grid trains each run
    with its kind, reading and seed, records it as it is scored, skips what the record holds,
    and refuses a record of other settings."""
    runs = downstream.grid_runs((0, 1), (None, "weights-equal"), ["canny-otsu-high"])
    kinds = list(downstream.FEATURE_KINDS)
    assert [r.key() for r in runs] == (
        [(0, "gray", None)] + [(0, k, None) for k in kinds]
        + [(1, "gray", None)] + [(1, k, None) for k in kinds]
        + [(s, k, "weights-equal") for s in (0, 1) for k in kinds]
        + [(0, "feature", "canny-otsu-high"), (1, "feature", "canny-otsu-high")])
    accuracies = {r.key(): (80 + i) / 100 for i, r in enumerate(runs)}
    seen = _fake_training(monkeypatch, accuracies)
    settings = DemoSettings(count=5, test_count=1, epochs=1, input_hw=(32, 32))
    record = tmp_path / "record.jsonl"
    first = downstream.run_grid(tmp_path / "w", runs[:3], settings, record, io.StringIO(),
                                stamp={"commit": "abc1234"})
    assert [(c.seed, c.input_kind, c.feature_reading) for c in seen] == [
        r.key() for r in runs[:3]]
    assert [r["pixel_accuracy"] for r in first["runs"]] == [0.8, 0.81, 0.82]
    assert first["runs"][0]["iou"] == [0.01, None, 0.3]
    assert first["runs"][0]["commit"] == "abc1234"
    assert len(record.read_text().splitlines()) == 4  # the settings, then a line a run
    assert len(list((tmp_path / "w" / "data" / "images").iterdir())) == 5
    assert not (tmp_path / "w" / "runs" / "run1").exists()  # runs are removed when scored
    again = downstream.run_grid(tmp_path / "w2", runs[:5], settings, record, io.StringIO())
    assert len(seen) == 5 and [r.key() for r in runs[3:5]] == [
        (c.seed, c.input_kind, c.feature_reading) for c in seen[3:]]
    assert [r["pixel_accuracy"] for r in again["runs"]] == [0.8, 0.81, 0.82, 0.83, 0.84]
    with pytest.raises(InputError, match="recorded with other settings"):
        downstream.run_grid(tmp_path / "w3", runs, DemoSettings(count=6, test_count=1,
                            epochs=1, input_hw=(32, 32)), record, io.StringIO())
    (tmp_path / "other.jsonl").write_text('{"a": 1}\n')
    with pytest.raises(InputError, match="not a downstream record"):
        downstream.read_record(tmp_path / "other.jsonl", settings)


def test_the_audit_grid_trains_into_a_record_and_renders_it_again(tmp_path, monkeypatch):
    """grid_settings applies the sizes given and refuses repeated seeds; train_grid trains
    refseg's and the paired readings, then the screen's other readings (one among the paired
    ones is not trained twice), writing only the record where it is asked; recorded_grid gives
    the same runs back for the seeds asked, training nothing."""
    seeds, settings = downstream.grid_settings(True, (0,), None, count=5, test_count=1,
                                               epochs=None, jobs=None)
    assert seeds == (0,)
    assert (settings.count, settings.test_count, settings.epochs, settings.input_hw) == (
        5, 1, downstream.QUICK.epochs, downstream.QUICK.input_hw)
    with pytest.raises(InputError, match="--seeds"):
        downstream.grid_settings(True, (1, 1), None)
    runs = downstream.grid_runs(seeds, downstream.PAIRED_READINGS, ["canny-otsu-high"])
    seen = _fake_training(monkeypatch, {r.key(): 0.8 for r in runs})
    record = tmp_path / "record.jsonl"
    trained = downstream.train_grid(settings, seeds, ["weights-equal", "canny-otsu-high"],
                                    record, "abc1234", io.StringIO())
    assert [(c.seed, c.input_kind, c.feature_reading) for c in seen] == [r.key() for r in runs]
    assert [p.name for p in tmp_path.iterdir()] == ["record.jsonl"]
    assert {r["commit"] for r in trained["runs"]} == {"abc1234"}
    assert downstream.recorded_grid(settings, seeds, record) == trained
    assert downstream.recorded_grid(settings, (1,), record)["runs"] == []
    assert len(seen) == len(runs)


def _grid_result(differences, gray=0.9):
    """A grid of two arms over len(differences) seeds: gray, and the feature map at gray +
    the difference."""
    runs = []
    for seed, d in enumerate(differences):
        for kind, acc in (("gray", gray), ("feature", gray + d)):
            runs.append({"seed": seed, "kind": kind, "reading": None, "pixel_accuracy": acc,
                         "iou": [0.1, 0.7, 0.9], "boundary_f1": 0.5, "miou": 0.5,
                         "val_pixel_accuracy": 0.5, "seconds": 60.0})
    return {"settings": downstream.settings_json(DemoSettings()), "runs": runs,
            "machine": "a test machine"}


def test_the_paired_interval_and_the_r_dataset_block_by_hand():
    """Differences 0.01, 0.03, 0.02: mean 0.02, sd 0.01, the 95 % interval 0.02 -/+
    t(0.975, 2) 0.01 / sqrt(3), t(0.975, 2) = 4.302652729911275 (tables); the block reports
    them and the sentence on [0121] follows the interval."""
    p = network_inputs.paired_interval([0.01, 0.03, 0.02])
    half = 4.302652729911275 * 0.01 / np.sqrt(3)
    assert p["n"] == 3 and p["mean"] == pytest.approx(0.02, abs=1e-15)
    assert p["sd"] == pytest.approx(0.01, abs=1e-15)
    assert (p["low"], p["high"]) == pytest.approx((0.02 - half, 0.02 + half), abs=1e-12)
    assert network_inputs.verdict(p) == "not resolved"  # 0.02 - 0.0248 < 0
    assert network_inputs.verdict(network_inputs.paired_interval([0.01, 0.011, 0.012])) \
        == "above gray"
    assert network_inputs.verdict(network_inputs.paired_interval([-0.1, -0.11])) \
        == "below gray"
    assert network_inputs.verdict(network_inputs.paired_interval([0.1])) == "one seed"
    summary = network_inputs.summarise_grid(_grid_result([0.01, 0.03, 0.02])["runs"])
    assert [(e["kind"], e["seeds"]) for e in summary] == [("gray", [0, 1, 2]),
                                                          ("feature", [0, 1, 2])]
    assert summary[1]["pixel_accuracy"]["mean"] == pytest.approx(0.92, abs=1e-12)
    assert summary[1]["contour_iou"]["paired"]["mean"] == 0.0
    text = network_inputs.block(_grid_result([0.01, 0.03, 0.02]), "abc1234", "cmd")
    assert "| `feature` | refseg's | 3 | +0.0200 [-0.0048, +0.0448] |" in text
    assert "| not resolved |" in text and "3 runs" not in text and "6 runs" in text
    assert "no input built from the feature regions is shown above the gray image; not " \
        "resolved (interval around 0, or one seed): `feature` +0.0200 [-0.0048, +0.0448] " \
        "(3 seeds)." in text
    below = network_inputs.block(_grid_result([-0.1, -0.11, -0.12]), "abc1234", "cmd")
    assert "no input built from the feature regions is shown above" in below
    assert "; below it: `feature` -0.1100 [" in below and "| below gray |" in below
    above = network_inputs.block(_grid_result([0.01, 0.011, 0.012]), "abc1234", "cmd")
    assert "(mean [95% t interval]): above the gray image: `feature` +0.0110 [" in above
    assert "Not measured" in network_inputs.block(None, "abc1234", "cmd")


def test_several_inputs_compared_are_judged_again_at_the_bonferroni_coverage():
    """Two inputs over three seeds, differences to gray 0.01, 0.02, 0.03 (mean 0.02, sd 0.01)
    and 0.02, 0.021, 0.022 (mean 0.021, sd 0.001): at 95 % (t(0.975, 2) = 4.3027, half-widths
    0.0248 and 0.00248) the second interval excludes 0, the first does not. With
    two inputs the corrected coverage is 97.5 %, t(0.9875, 2) = 0.975 / sqrt(2 * 0.9875 *
    0.0125) = 6.2053 (Student's t with 2 degrees of freedom in closed form), half-width
    6.2053 * 0.001 / sqrt(3) = 0.003583: the second still excludes 0. With differences
    0.002, 0.003, 0.004 (mean 0.003: above 0.00248, below 0.003583) it excludes 0 at 95 % only."""
    def result(second):
        runs = []
        for seed, (a, b) in enumerate(zip([0.01, 0.02, 0.03], second)):
            for kind, acc in (("gray", 0.9), ("feature", 0.9 + a), ("gray-and-feature", 0.9 + b)):
                runs.append({"seed": seed, "kind": kind, "reading": None, "pixel_accuracy": acc,
                             "iou": [0.1, 0.7, 0.9], "boundary_f1": 0.5, "miou": 0.5,
                             "val_pixel_accuracy": 0.5, "seconds": 60.0})
        return network_inputs.sentence_0121(network_inputs.summarise_grid(runs))

    t_corrected = 0.975 / np.sqrt(2 * 0.9875 * 0.0125)
    assert t_corrected == pytest.approx(6.2053, abs=1e-4)
    held = result([0.02, 0.021, 0.022])
    half = t_corrected * 0.001 / np.sqrt(3)
    assert f"at the Bonferroni-corrected coverage 97.50%: `gray-and-feature` +0.0210 " \
        f"[{0.021 - half:+.4f}, {0.021 + half:+.4f}]." in held
    lost = result([0.002, 0.003, 0.004])
    assert "above the gray image: `gray-and-feature` +0.0030 [" in lost
    assert "97.50%: no interval excludes 0 (the differences above are leads, not yet " \
        "shown)." in lost
    assert "Bonferroni" not in result([0.0, 0.01, -0.01])  # nothing resolved: nothing to redo


def test_the_r_dataset_block_survives_a_regeneration(tmp_path):
    """A sensitivity.md whose R-dataset block carries numbers is re-rendered from them (at
    the commit they were measured) when --downstream is not given."""
    block = network_inputs.block(_grid_result([0.01, 0.03]), "abc1234", "cmd")
    text, numbers = network_inputs.kept_block(
        f"intro\n{block}\nrest", network_inputs.BEGIN, network_inputs.END,
        (network_inputs.NUMBERS_BEGIN, network_inputs.NUMBERS_END), network_inputs.block)
    assert text == block and numbers["runs"] == _grid_result([0.01, 0.03])["runs"]
    assert network_inputs.kept_block("no block", network_inputs.BEGIN, network_inputs.END,
                                (network_inputs.NUMBERS_BEGIN, network_inputs.NUMBERS_END),
                                network_inputs.block) == (None, None)
    line = network_inputs.closing_line(block)
    assert line.startswith("[0121] at the demo's size") and "(2 seeds)" in line
    assert "4 runs, 0.1 h of training on a test machine" in line


def test_the_patent_distance_and_the_deciding_operator_by_hand():
    patent = readings.PATENT_WEIGHTS
    assert readings.patent_distance(patent) == 0
    equal = {k: 0.25 for k in patent}
    # |0.25-0.4124| + |0.25-0.1316| + |0.25-0.1339| + |0.25-0.3221| = 0.469, halved
    assert readings.patent_distance(equal) == pytest.approx(0.2345, abs=1e-12)
    assert readings.deciding_operator(patent) is None
    weld0 = {"canny": 0.577, "sobel": 0.104, "prewitt": 0.105, "log": 0.214}
    assert readings.deciding_operator(weld0) == "canny"
    half = {"canny": 0.5, "sobel": 0.2, "prewitt": 0.2, "log": 0.1}
    assert readings.deciding_operator(half) is None  # the others reach 0.5 together too
    near = {"canny": 0.46, "sobel": 0.2, "prewitt": 0.2, "log": 0.14}
    assert readings.deciding_operator(near, 1.5) is None
    assert readings.deciding_operator(near, 1.45) is None  # the others hold 0.54 >= 0.45
    assert readings.deciding_operator({**near, "canny": 0.56, "log": 0.04}, 1.45) == "canny"


@pytest.mark.parametrize("seed", [0, 3, 8])
def test_a_deciding_operator_is_the_feature_map(seed):
    """Whenever the audit says one operator decides alone, the feature map is that
    operator's edge map, pixel for pixel; and whenever the feature map differs from every
    operator's map, none decides."""
    rgb = weld_image(seed).rgb
    for name in ("chosen", "offset-1.45", "offset-1.55", "weights-equal", "canny-ratio-3"):
        variant = al.Variant() if name == "chosen" else al.BY_NAME[name].variant
        r = al.extract_variant(rgb, variant)
        decides = readings.deciding_operator(r.weights, variant.offset)
        if decides is not None:
            np.testing.assert_array_equal(r.feature_map, np.asarray(r.edges[decides]) > 0)
        if all(not np.array_equal(r.feature_map, np.asarray(r.edges[k]) > 0)
               for k in r.edges):
            assert decides is None, name


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
    with pytest.raises(InputError, match="built from the feature map"):
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
    with pytest.raises(InputError, match="built from the feature map"):
        TrainConfig(input_kind="gray", feature_reading="gauss-sigma-1").check()
    TrainConfig(input_kind="masked-gray-dilated", feature_reading="gauss-sigma-1").check()
    saved = TrainConfig(feature_reading="gauss-sigma-1").to_json()
    assert TrainConfig.from_json(saved).feature_reading == "gauss-sigma-1"
    old = {k: v for k, v in saved.items() if k != "feature_reading"}  # a run of before
    assert TrainConfig.from_json(old).feature_reading is None


@pytest.mark.claim("claim1.step2.dataset")
def test_the_input_kinds_of_r_dataset_by_hand():
    """At the image's own size (no resizing): the masked kinds are the gray input where the
    (dilated) map is 1 and -1 elsewhere; gray-and-feature is gray, map, gray; an alternative
    reading reaches every kind built from the map."""
    from refseg.claim1 import features, preprocess
    from refseg.data import kinds

    rgb = weld_image(2, (64, 160)).rgb
    fmap = features.extract(rgb).feature_map.astype(bool)
    gray = preprocess.to_gray(rgb).astype(np.float32) / np.float32(127.5) - 1
    x = {k: network_input(rgb, (64, 160), k) for k in kinds.INPUT_KINDS}
    assert all(v.shape == (64, 160, 3) and v.dtype == np.float32 for v in x.values())
    np.testing.assert_array_equal(x["masked-gray"][..., 0], np.where(fmap, gray, -1))
    r = kinds.MASK_RADIUS
    padded = np.pad(fmap, r)
    dilated = np.zeros_like(fmap)
    for dr in range(2 * r + 1):  # the (2r + 1)-square, shift by shift
        for dc in range(2 * r + 1):
            dilated |= padded[dr:dr + fmap.shape[0], dc:dc + fmap.shape[1]]
    assert dilated.sum() > fmap.sum()
    np.testing.assert_array_equal(x["masked-gray-dilated"][..., 1],
                                  np.where(dilated, gray, -1))
    np.testing.assert_array_equal(x["gray-and-feature"][..., 0], x["gray"][..., 0])
    np.testing.assert_array_equal(x["gray-and-feature"][..., 2], x["gray"][..., 0])
    np.testing.assert_array_equal(x["gray-and-feature"][..., 1], x["feature"][..., 0])
    for kind in kinds.FEATURE_KINDS:
        other = network_input(rgb, (64, 160), kind, "weights-equal")
        assert not np.array_equal(other, x[kind]), kind
    with pytest.raises(InputError, match="input kind must be one of"):
        network_input(rgb, (64, 160), "rgb")
