"""A demo's results, read from its folder once and written twice: as the claim chart's tables
(:mod:`refseg.report.sections`) and as ``index.md``, the demo's Markdown summary.

Every number and every sentence reading a difference from the patent is made here, from the
folder's files (:class:`refseg.report.folder.Source`): the runs' training, their scores on the
test welds, the comparison with the patent's own figures, and which runs kept their weights.
Text is plain with inline Markdown (`code`), which the chart renders as HTML and ``index.md``
keeps as it is.
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from refseg import publish
from refseg.errors import InputError
from refseg.data.labels import CLASS_NAMES
from refseg.report.folder import Source
from refseg.registry import load_registry, patent_figure
from refseg.report.walkthrough import PATENT_WEIGHTS

INFRASTRUCTURE = "the results against the patent, as the reports show them"

__all__ = ["PATENT_ACCURACY", "PATENT_LOSS", "PATENT_SECONDS", "PATENT_WEIGHTS", "INDEX",
           "count", "percent", "RUN_COLUMNS", "run_rows", "SCORE_COLUMNS", "score_cells",
           "Comparison", "comparisons", "weight_rows", "index_markdown", "write_index"]

#: The patent's numbers the results are held against: pixel accuracy and loss after about 40
#: epochs ([0257]), prediction time per image ([0260]); the weld's operator weights ([0213])
#: are :data:`PATENT_WEIGHTS`.
PATENT_ACCURACY = patent_figure("accuracy")
PATENT_LOSS = patent_figure("loss")
PATENT_SECONDS = patent_figure("seconds_per_image")
#: The demo's Markdown summary, beside the claim chart.
INDEX = "index.md"


def count(n, noun: str) -> str:
    """The number with its noun, singular for 1: 1 epoch, 8 epochs."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def percent(value) -> str:
    return "-" if value is None else f"{value:.2%}"


def _fraction(value) -> str:
    return "-" if value is None else f"{value:.4f}"


# ------------------------------------------------------------------------------ the tables
#: The columns of the runs' training table.
RUN_COLUMNS = ("run", "input", "backbones", "epochs", "final training loss",
               "final validation loss", "final validation accuracy", "training time")


def run_rows(source: Source) -> list[tuple[str, ...]]:
    """One row of :data:`RUN_COLUMNS` per run that trained at least one epoch."""
    rows = []
    for run in source.runs:
        config, last = run["config"], (run["history"] or [None])[-1]
        if last is None:
            continue
        seconds = run["train_seconds"]
        rows.append((run["name"], config.get("input_kind", "?"),
                     " + ".join(config.get("branches", [])), str(len(run["history"])),
                     f"{last['train_loss']:.4f}", f"{last['val_loss']:.4f}",
                     percent(last["val_pixel_accuracy"]),
                     "-" if seconds is None else f"{seconds:.0f} s"))
    return rows


#: The columns of the test scores' table.
SCORE_COLUMNS = ("run", "pixel accuracy", *(f"IoU {n}" for n in CLASS_NAMES), "mIoU",
                 "boundary F1 (2 px)", "s/image")


def score_cells(row: dict) -> tuple[str, ...]:
    """One row of ``scores.json`` as the cells of :data:`SCORE_COLUMNS`."""
    return (row["run"], percent(row["pixel_accuracy"]), *map(_fraction, row["class_iou"]),
            _fraction(row["mean_iou"]), _fraction(row["boundary_f1"]),
            f"{row['seconds_per_image']:.3f}")


def weight_rows(source: Source) -> list[tuple[str, str]]:
    """(run, what became of its weights) for each run, with the commands that use them."""
    rows = []
    for run in source.runs:
        size = run["weight_bytes"]
        mb = "-" if size is None else f"{size / 1e6:.0f} MB"
        where = Path(source.shown) / "runs" / run["name"] if source.kind == "demo" \
            else source.shown
        if run["has_weights"]:
            status = (f"kept ({mb}): `refseg predict {where} IMAGE --out DIR` and "
                      f"`refseg evaluate {where} DATA` work on it")
        elif run["pruned"]:
            status = (f"removed to save {mb} (its metrics and curves are kept): "
                      f"`{run['pruned']['keep_with']}` keeps every run's")
        else:
            status = "not in this folder"
        rows.append((run["name"], status))
    return rows


# ------------------------------------------------------------------ against the patent
class Comparison(NamedTuple):
    """One quantity held against the patent, and the reading of the difference."""

    quantity: str
    patent: str
    here: str
    reading: str


def _settings(source: Source) -> dict:
    settings = source.record.get("settings", {})
    return {"epochs": settings.get("epochs", "?"), "count": settings.get("count", "?"),
            "tests": settings.get("test_count", "?")}


def _trained(source: Source) -> str:
    s = _settings(source)
    return f"{count(s['epochs'], 'epoch')} on {count(s['count'], 'synthetic weld')}"


def _accuracy_reading(source: Source, main: dict) -> str:
    gap = PATENT_ACCURACY - main["pixel_accuracy"]
    if gap <= 0:
        return f"Reached: {main['pixel_accuracy']:.2%} against {PATENT_ACCURACY:.2%}."
    return (f"{gap * 100:.1f} points below. The settings differ: here {_trained(source)}, with "
            "random backbones (no pretrained weights can be downloaded here: R-frozen, R-init), "
            f"scored on {count(_settings(source)['tests'], 'other synthetic weld')}; the patent "
            "trains about 40 epochs on its photographed welds and does not say which weights "
            "its backbones start from. The gap measures this demo's budget, not the method; "
            "docs/experiments.md has longer runs.")


def _loss_reading(last: dict) -> str:
    return (f"Here {last.get('val_loss', float('nan')):.3f} (validation) and "
            f"{last.get('train_loss', float('nan')):.3f} (training) after epoch "
            f"{last.get('epoch', '?')}; [0257] does not say which loss its {PATENT_LOSS} is, "
            "after about 40 epochs.")


def _time_reading(source: Source) -> str:
    hw, network = source.input_hw, source.record.get("network") or {}
    cores = source.record.get("machine", {}).get("cores", "?")
    where = f"{cores} CPU cores" + (f", input {hw[0]}x{hw[1]}" if hw else "")
    macs = sum(p["macs"] for p in network.get("parts", {}).values())
    if macs:
        where += f" ({macs / 1e9:.2f} G multiply-accumulates per image)"
    return ("Here the median over the test welds of the claim-1 extraction, the network and the "
            f"resizing back, on {where}. The patent names neither its hardware nor its input "
            "size, so only the order of magnitude compares.")


def _ablation_reading(source: Source, scores: dict) -> str:
    fusion, singles = scores.get("fusion-feature"), [
        scores[n] for n in ("resnet50v2-feature", "mobilenetv2-feature") if n in scores]
    if not (fusion and singles):
        return "The demo's single-backbone runs are not in this folder."
    beaten = [s["run"] for s in singles if s["pixel_accuracy"] > fusion["pixel_accuracy"]]
    verdict = ("Reproduced in this run: the fused network scores above each backbone alone. "
               if not beaten else
               f"Not reproduced in this run: {', '.join(beaten)} scores above the fused "
               "network. ")
    return verdict + (
        f"Here by pixel accuracy on {count(_settings(source)['tests'], 'test weld')} after "
        f"{_trained(source)}; the patent's comparison is of its four models trained alike on "
        "its welds, and it is qualitative (broken lines, incomplete seams), with no numbers. "
        "VGG16, its fourth model, is not claimed and not built.")


def _input_reading(scores: dict) -> str:
    fusion, gray = scores.get("fusion-feature"), scores.get("fusion-gray")
    if not (fusion and gray):
        return "The demo's gray-input run is not in this folder."
    better = fusion["pixel_accuracy"] >= gray["pixel_accuracy"]
    return (f"The feature image {'scores at or above' if better else 'scores below'} the gray "
            f"image here ({fusion['pixel_accuracy']:.2%} against {gray['pixel_accuracy']:.2%}). "
            "The patent gives no number for a gray-input network. The runs on 2640 welds with "
            "the backbones trained too (docs/experiments.md, \"Training the backbones too: "
            "2640 welds\") measured 97.31 % (feature) against 97.61 % (gray). "
            + (r_dataset_sentence() or "The R-dataset audit over seeds is not in this spec."))


def r_dataset_sentence() -> str:
    """The sentence on [0121] of ``spec/sensitivity.md``'s R-dataset block (the audit over
    training seeds of what the network sees), as the audit wrote it; "" when the spec has
    none."""
    from refseg.audit import network_inputs  # SciPy's statistics: only when a chart is drawn

    text = load_registry().sensitivity_text
    block = text[text.find(network_inputs.BEGIN):text.find(network_inputs.END)]
    return next((line for line in block.splitlines()
                 if line.startswith(network_inputs.SENTENCE_START)), "")


def comparisons(source: Source) -> list[Comparison]:
    """The demo's results held against the patent's figures, each with the reading of the
    difference: pixel accuracy, loss, prediction time, fig. 9's backbones against the fused
    network, the feature image against the gray image."""
    scores = {r["run"]: r for r in source.scores}
    main, s = source.scores[0], _settings(source)
    last = source.runs[0]["history"][-1] if source.runs[0]["history"] else {}
    ranking = sorted(source.scores, key=lambda r: -r["pixel_accuracy"])
    return [
        Comparison("pixel accuracy", f"{PATENT_ACCURACY:.2%} after about 40 epochs ([0257])",
                   f"{main['pixel_accuracy']:.2%} ({main['run']}, "
                   f"{count(s['tests'], 'test weld')}, {count(s['epochs'], 'epoch')})",
                   _accuracy_reading(source, main)),
        Comparison("loss", f"about {PATENT_LOSS} ([0257])",
                   f"{last.get('val_loss', float('nan')):.4f} (validation, last epoch)",
                   _loss_reading(last)),
        Comparison("prediction time per image", f"{PATENT_SECONDS} s ([0260])",
                   f"{main['seconds_per_image']:.3f} s", _time_reading(source)),
        Comparison("fig. 9: Res-Mobile Net against each backbone alone ([0259]-[0260])",
                   "Res-Mobile Net best: continuous lines, complete seam; MobileNetV2 broken "
                   "lines; ResNet50 incomplete, bent; VGG16 discontinuous",
                   " > ".join(f"{r['run']} {r['pixel_accuracy']:.2%}" for r in ranking),
                   _ablation_reading(source, scores)),
        Comparison("feature image against the gray image ([0121], [0264])",
                   "the feature-region images give high precision",
                   "fusion-feature against fusion-gray", _input_reading(scores)),
    ]


# ------------------------------------------------------------------------------ index.md
def _table(columns, rows) -> list[str]:
    def cells(row):
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |"
    return [cells(columns), "|" + "---|" * len(columns),
            *map(cells, rows)]


def _md_intro(record: dict) -> list[str]:
    s = record["settings"]
    backbones = ("No pretrained weights: the backbones start random, with batch norm "
                 "calibrated on training images, and are trained with the decoder "
                 "(`--train-backbone`, an extension: the patent freezes them; R-frozen)."
                 if s["train_backbone"] else
                 "No pretrained weights: the frozen backbones are random with batch norm "
                 "calibrated on training images (R-frozen).")
    return [
        "# refseg demo: the method of CN114419081B on synthetic weld seams", "",
        f"Made by `{record['command']}` in {record['seconds'] / 60:.1f} min "
        f"(refseg {record['refseg_version']}, {record['finished']}): {s['count']} synthetic "
        f"weld images (550x156, seeds {s['seed']}-{s['seed'] + s['count'] - 1}; 80 % "
        f"training, 20 % validation) and {s['test_count']} test images (other seeds); input "
        f"{s['input_hw'][0]}x{s['input_hw'][1]}, {s['epochs']} epochs, batch "
        f"{s['batch_size']}, Adam lr 0.001. {backbones}", "",
        "The claim chart, `index.html` beside this file, shows every claim element with the "
        "patent's Chinese text, the readings, the code, the tests and the images of each "
        "step; this file is its summary.", ""]


def _md_claim1(record: dict) -> list[str]:
    first = record["claim1_images"][0]
    return [
        "## 1. Claim 1: feature extraction", "",
        "`claim1/<name>/panel.png`, for the first two training images: the input image, the "
        "Canny, Sobel, Prewitt and LoG edge maps (each with its weight w and coefficient of "
        "variation V) and the feature map (F >= 0). The gray, blurred and mean images and the "
        "final weight are in `claim1/<name>/features.npz` and in the claim chart.", "",
        f"![claim 1: input, four edge maps, feature map](claim1/{first}/panel.png)", "",
        "Any image step by step, with who decided each pixel: `refseg explain claim1 --image "
        "IMAGE --out DIR`.", "",
        f"Of the labels' contour pixels, {record['contour_coverage']:.1%} lie within one pixel "
        "of a feature-map pixel (first 20 images): the rest of the seam's edges are lost by "
        "the vote before the network sees the image.", ""]


def _md_results(source: Source) -> list[str]:
    main = source.runs[0]["name"]
    return [
        "## 2. Training", "",
        f"Loss and pixel accuracy per epoch of {main} (the patent's network, feature input, "
        "both backbones; like fig. 8); each run's own are in `runs/<name>/curves.png`.", "",
        f"![training curves of {main}](curves.png)", "",
        *_table(RUN_COLUMNS, run_rows(source)), "",
        "## 3. Evaluation on the test set", "",
        "Pixel accuracy, IoU per class, mIoU, boundary F1 (2 px), median seconds per image "
        "(claim-1 extraction + network + resizing back).", "",
        *_table(SCORE_COLUMNS, map(score_cells, source.scores)), "",
        "`predictions.png`: one row per test image; its columns are the image, its label, then "
        "each run's prediction in the order of the table, coloured as the labels ([0263]: "
        "contour red, inside green, outside blue).", "",
        "![predictions: image, label, each run](predictions.png)", "",
        "## 4. Against the patent", "",
        *_table(("quantity", "patent", "here", "reading"), comparisons(source)), "",
        "## 5. The runs' weights", "",
        *(f"- `runs/{name}`: weights {status}." for name, status in weight_rows(source)), ""]


_MD_TRACEABILITY = [
    "## Traceability", "",
    "| stage | claim elements |", "|---|---|",
    "| synthetic data, labels | `claim1.step1.acquire`, `claim1.step2.dataset` |",
    "| feature extraction | `claim1.step2.*` (`refseg explain claim1.step2.cv`) |",
    "| network | `claim2.backbones`, `claim2.taps`, `claim2.fusion`, `claim3.formula` |",
    "| training | `claim1.step3.train`, `claim4.propagation`, `claim4.update` |",
    "| prediction, evaluation | `claim1.step4.predict`, `claim5.output_module` |", "",
    "Settings and raw numbers: `demo.json`, `scores.json`, `runs/<name>/config.json`, "
    "`runs/<name>/metrics.jsonl`.", ""]


def index_markdown(folder, shown_as=None) -> str:
    """``index.md`` of a demo folder: how it was made, claim 1, the training, the test scores,
    the results against the patent and the runs' weights, read from the folder's files (as
    the claim chart is)."""
    source = Source(Path(folder), Path(shown_as) if shown_as else Path(folder))
    if source.kind != "demo" or not source.record:
        raise InputError(f"{folder}: index.md summarises a demo folder with its demo.json")
    return "\n".join(_md_intro(source.record) + _md_claim1(source.record)
                     + _md_results(source) + _MD_TRACEABILITY)


def write_index(folder, shown_as=None) -> Path:
    """Write ``folder/index.md`` (:func:`index_markdown`) atomically; returns its path."""
    folder = Path(folder)
    publish.write_text(folder / INDEX, index_markdown(folder, shown_as))
    return folder / INDEX
