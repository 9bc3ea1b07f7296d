"""The claim chart's HTML for what ran in the network's claims (2-4) and the demo's own
sections after the elements': the training curves, the predictions, the results against the
patent and the runs' weights. The numbers and readings come from
:mod:`refseg.report.results`, which writes them into ``index.md`` too.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from refseg.data.labels import CLASS_NAMES, LABEL_COLOURS
from refseg.report import html as h
from refseg.report.results import (PATENT_ACCURACY, PATENT_LOSS, RUN_COLUMNS, SCORE_COLUMNS,
                                   comparisons, count, percent, run_rows, score_cells,
                                   weight_rows)

INFRASTRUCTURE = "the claim chart"


def png_file(path: Path, alt: str, css: str = "") -> str:
    """An ``<img>`` embedding the PNG file at ``path``; a note when it is missing."""
    if not path.is_file():
        return f'<p class="missing">{h.escape(path.name)} is not in this folder.</p>'
    return h.png(np.asarray(Image.open(path).convert("RGB")), alt, css)


def table(columns, rows, caption: str = "", css: str = "") -> str:
    """A table of inline-Markdown cells: a header row, then rows led by a header cell."""
    head = "".join(f"<th>{h.inline(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(
        f"<{tag}>{h.inline(c)}</{tag}>" for tag, c in zip(("th",) + ("td",) * len(row), row))
        + "</tr>" for row in rows)
    css = f' class="{css}"' if css else ""
    return (f"<table{css}>" + (f"<caption>{h.escape(caption)}</caption>" if caption else "")
            + f"<tr>{head}</tr>{body}</table>")


# ------------------------------------------------------------ what ran, claims 1 (3-4) to 4
def _train(source, e):
    main = source.runs[0]
    return (h.figure(png_file(main["path"] / "curves.png", "training curves"),
                     f"Loss and pixel accuracy per epoch of {h.escape(main['name'])} (training "
                     "and validation)") + table(RUN_COLUMNS, run_rows(source)))


def _predict(source, e):
    if not source.scores:
        last = source.runs[0]["history"][-1] if source.runs[0]["history"] else None
        return (f"<p>Validation pixel accuracy after the last epoch: "
                f"{percent(last and last['val_pixel_accuracy'])}. "
                "<code>refseg evaluate</code> scores the run on a test set.</p>")
    main = source.scores[0]
    return (f"<p>{h.escape(main['run'])} predicts the test welds with pixel accuracy "
            f"{percent(main['pixel_accuracy'])} and mean IoU {main['mean_iou']:.4f} in "
            f"{main['seconds_per_image']:.3f} s per image: see <a href=\"#predictions\">the "
            "predictions</a> and <a href=\"#results\">the results</a>.</p>")


def _network(source, e):
    network = source.record.get("network")
    if not network:
        return "<p><code>refseg model summary</code> lists every layer.</p>"
    hw = source.input_hw
    rows = [(part, f"{v['parameters']:,}", f"{v['trainable']:,}", f"{v['macs'] / 1e9:.3f}")
            for part, v in network["parts"].items()]
    return table(("part", "parameters", "trainable", "G multiply-accumulates per image"), rows,
                 f"The fusion network at {hw[0]}x{hw[1]}")


def _taps(source, e):
    network = source.record.get("network")
    if not network:
        return ""
    hw = source.input_hw
    taps = network["taps"]
    return (f"<p>The {len(taps)} tapped layers at input {hw[0]}x{hw[1]} (H x W x C), "
            "ResNet50V2's then MobileNetV2's:</p><ul>"
            + "".join(f"<li><code>{h.escape(name)}</code> {'x'.join(map(str, shape))}</li>"
                      for name, shape in taps) + "</ul>")


def _update(source, e):
    main = source.runs[0]
    history = main["history"]
    if not history:
        return ""
    rates = sorted({e.get("learning_rate") for e in history if e.get("learning_rate")})
    return (f"<p>{h.escape(main['name'])}: training loss {history[0]['train_loss']:.4f} after "
            f"epoch 1, {history[-1]['train_loss']:.4f} after epoch {history[-1]['epoch']}; "
            f"Adam, learning rate {', '.join(f'{r:g}' for r in rates)}.</p>")


#: The renderer of each network element's "what ran here".
EVIDENCE = {
    "claim1.step3.train": _train, "claim1.step4.predict": _predict, "claim2.backbones": _network,
    "claim2.taps": _taps, "claim2.fusion": _network, "claim4.propagation": _network,
    "claim4.update": _update,
}


# ------------------------------------------------------------------ the demo's own sections
def training_section(source) -> str:
    main, others = source.runs[0], source.runs[1:]
    small = "".join(h.figure(png_file(r["path"] / "curves.png", r["name"], "half"),
                             h.escape(r["name"])) for r in others)
    return ('<section id="training"><h2>Training curves</h2>'
            "<p>Loss (cross-entropy) and pixel accuracy per epoch, training (blue) and "
            f"validation (red), like the patent's fig. 8 ([0257]: loss settling near "
            f"{PATENT_LOSS} and accuracy near {PATENT_ACCURACY * 100:.2f} % after about 40 "
            "epochs).</p>"
            + h.figure(png_file(main["path"] / "curves.png", "training curves"),
                       f"{h.escape(main['name'])}" + (" (the patent's network: feature input, "
                                                      "both backbones)"
                                                      if source.kind == "demo" else ""))
            + (f'<div class="welds">{small}</div>' if small else "")
            + table(RUN_COLUMNS, run_rows(source)) + "</section>")


def _legend() -> str:
    return '<p class="legend">' + "".join(
        f'<span class="swatch" style="background:rgb({r},{g},{b})"></span> {name} '
        f"({r}, {g}, {b}) " for name, (r, g, b) in zip(CLASS_NAMES, LABEL_COLOURS.tolist())) \
        + "</p>"


def predictions_section(source) -> str:
    if source.kind != "demo":
        return ('<section id="predictions"><h2>Predictions</h2><p>A training run holds no '
                "predictions: <code>refseg predict</code> and <code>refseg evaluate</code> "
                "write them.</p></section>")
    columns = ", ".join(["the image", "its label"] + [r["run"] for r in source.scores])
    return ('<section id="predictions"><h2>Predictions</h2>'
            f"<p>The first test welds, one per row; columns: {h.escape(columns)}. Each prediction "
            "is coloured as the labels are ([0263]):</p>" + _legend()
            + h.figure(png_file(source.folder / "predictions.png", "predictions"),
                       "Test welds: image, label, then each run's predicted classes")
            + "</section>")


def results_section(source) -> str:
    if source.kind != "demo":
        last = source.runs[0]["history"][-1] if source.runs[0]["history"] else {}
        here = (f"{percent(last.get('val_pixel_accuracy'))} on the validation images after "
                f"{last.get('epoch', 0)} epochs")
        return ('<section id="results"><h2>Results against the patent</h2>'
                + table(("quantity", "patent", "here"), [(
                    "pixel accuracy", f"{PATENT_ACCURACY:.2%} after about 40 epochs ([0257])",
                    here)]) + "</section>")
    tests = source.record.get("settings", {}).get("test_count", "?")
    return ('<section id="results"><h2>Results against the patent</h2>'
            + table(SCORE_COLUMNS, map(score_cells, source.scores),
                    f"The runs on the {count(tests, 'test weld')}")
            + table(("quantity", "patent", "here", "reading"), comparisons(source),
                    css="against") + "</section>")


def weights_section(source) -> str:
    return ('<section id="weights"><h2>The runs\' weights</h2>'
            "<p>A run's weights are its <code>checkpoint.npz</code> (the trained decoder) "
            "and <code>backbones.npz</code> (the calibrated batch-norm statistics, the seed "
            "that regenerates the rest of the starting weights, and their digest).</p>"
            + table(("run", "weights"), weight_rows(source)) + "</section>")
