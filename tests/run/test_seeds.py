"""The demo's scores over several seeds: mean, sample standard deviation, the differences the
README draws and whether they exceed the spread, on demo folders written by hand."""
import json

import pytest

from refseg.run.seeds import format_seed_table, seed_statistics, write_seed_table

pytestmark = pytest.mark.infrastructure


def _demo_folder(root, seed, accuracies):
    folder = root / f"seed-{seed}"
    folder.mkdir()
    (folder / "demo.json").write_text(json.dumps(
        {"settings": {"seed": seed}, "machine": {"cpu": "CPU X"}}))
    rows = [{"run": run, "pixel_accuracy": acc, "class_iou": [0.1, 0.5, acc],
             "mean_iou": acc / 2, "boundary_f1": 0.25} for run, acc in accuracies.items()]
    (folder / "scores.json").write_text(json.dumps(rows))
    return folder


def test_seed_statistics_and_table(tmp_path):
    folders = [
        _demo_folder(tmp_path, 0, {"fusion-feature": 0.80, "fusion-gray": 0.90,
                                   "resnet50v2-feature": 0.79}),
        _demo_folder(tmp_path, 1, {"fusion-feature": 0.85, "fusion-gray": 0.92,
                                   "resnet50v2-feature": 0.86}),
        _demo_folder(tmp_path, 2, {"fusion-feature": 0.90, "fusion-gray": 0.94,
                                   "resnet50v2-feature": 0.90})]
    stats = seed_statistics(folders)
    assert stats["seeds"] == [0, 1, 2]
    feature = stats["runs"]["fusion-feature"]["pixel accuracy"]
    # 0.80, 0.85, 0.90: mean 0.85, sample sd 0.05
    assert feature["mean"] == pytest.approx(0.85, abs=1e-12)
    assert feature["sd"] == pytest.approx(0.05, abs=1e-12)
    assert (feature["min"], feature["max"]) == (0.80, 0.90)
    assert stats["runs"]["fusion-feature"]["boundary F1"]["sd"] == 0.0
    gray = next(c for c in stats["comparisons"] if c["run"] == "fusion-gray"
                and c["score"] == "pixel accuracy")
    # differences 0.10, 0.07, 0.04: mean 0.07 > the larger sd (0.05), all positive
    assert gray["values"] == pytest.approx([0.10, 0.07, 0.04], abs=1e-12)
    assert gray["mean"] == pytest.approx(0.07, abs=1e-12) and gray["exceeds_spread"]
    branch = next(c for c in stats["comparisons"] if c["run"] == "resnet50v2-feature"
                  and c["score"] == "pixel accuracy")
    # -0.01, +0.01, 0.00: within the spread
    assert not branch["exceeds_spread"] and branch["same_sign"] == 1
    assert not any(c["run"] == "mobilenetv2-feature" for c in stats["comparisons"])
    table = format_seed_table(stats)
    assert "| fusion-feature | 0.8500 ± 0.0500 |" in table
    assert "| fusion-gray - fusion-feature | pixel accuracy | +0.1000, +0.0700, +0.0400 | " \
           "+0.0700 ± 0.0300 | 0.0500 | yes (3 of 3 seeds one way) |" in table
    path = write_seed_table(tmp_path, folders)
    assert path.read_text().endswith("Machines: CPU X.\n")
    assert json.loads((tmp_path / "seeds.json").read_text())["runs"].keys() == \
        stats["runs"].keys()
