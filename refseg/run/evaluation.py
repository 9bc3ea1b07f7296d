"""Prediction with a trained run, and evaluation with the patent's comparisons (claim 1 step 4,
claim 5's output module; [0196]-[0197], [0257]-[0264]).

Prediction resizes each image's network input to the run's input size, predicts, resizes the
class probabilities back to the image's size (bilinear) and takes the most probable class
([0196]-[0197]). Evaluation scores those class maps against the labels at the labels' own size.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from refseg import publish
from refseg.images import MAX_PIXELS, check_max_pixels, read_image
from refseg.data import dataset
from refseg.run import metrics
from refseg.errors import InputError
from refseg.data.inputs import network_input, resize_probabilities
from refseg.data.labels import CLASS_NAMES, LABEL_COLOURS
from refseg.run.training import load_run
from refseg.trace import implements, infrastructure

#: Opacity of the class colours over the image in overlays.
OVERLAY_ALPHA = 0.45


@dataclass
class Prediction:
    """One image's prediction: class ids and probabilities at the image's size, and the time
    it took (input preparation, network, resizing back)."""

    classes: np.ndarray
    probabilities: np.ndarray
    seconds: float
    network_input: np.ndarray


@implements("claim1.step4.predict", "claim5.output_module")
def predict_image(model, config, rgb: np.ndarray) -> Prediction:
    """Predict the classes of one RGB image (M, N, 3) uint8 with a trained model.

    Parameters
    ----------
    model : refseg.models.ResMobileNet
    config : refseg.run.training.TrainConfig
        The run's settings (input size and kind).
    rgb : ndarray of shape (M, N, 3), uint8

    Returns
    -------
    Prediction
        ``classes`` (M, N) uint8: 0 contour, 1 inside, 2 outside ([0263]).

    Notes
    -----
    1. The network input: claim-1 feature image (or gray), resized to the input size ([0196]).
    2. The network's softmax probabilities (H, W, 3).
    3. Resized back to (M, N), bilinear; the class of highest probability ([0197]).
    """
    start = time.perf_counter()
    x = network_input(rgb, config.input_hw, config.input_kind, config.feature_reading)
    p = model.predict(x[None])[0]
    p_image = resize_probabilities(p, rgb.shape[:2])
    classes = p_image.argmax(axis=-1).astype(np.uint8)
    return Prediction(classes, p_image, time.perf_counter() - start, x)


@infrastructure("figures")
def overlay(rgb: np.ndarray, classes: np.ndarray, alpha: float = OVERLAY_ALPHA) -> np.ndarray:
    """The image with the class colours of [0263] laid over it (M, N, 3) uint8."""
    colours = LABEL_COLOURS[classes].astype(np.float32)
    base = rgb.astype(np.float32) if rgb.ndim == 3 else np.repeat(
        rgb.astype(np.float32)[:, :, None], 3, axis=2)
    return np.clip((1 - alpha) * base + alpha * colours + 0.5, 0, 255).astype(np.uint8)


@dataclass
class RunScores:
    """Scores of one run on a data set."""

    name: str
    scores: metrics.Scores
    seconds_per_image: float

    def as_dict(self) -> dict:
        return {"run": self.name, **self.scores.as_dict(),
                "seconds_per_image": self.seconds_per_image}


@infrastructure("evaluation measures (the patent claims none)")
def score_predictions(truths, predictions) -> metrics.Scores:
    """Pixel accuracy, per-class IoU and mIoU pooled over all pixels of all images, and the
    boundary F1 averaged over images, for images of any sizes."""
    cm = np.zeros((3, 3), np.int64)
    bf = []
    for true, predicted in zip(truths, predictions):
        cm += metrics.confusion_matrix(true, predicted)
        bf.append(metrics.boundary_f1(true, predicted))
    return metrics.Scores(pixel_accuracy=metrics.pixel_accuracy(cm),
                          class_iou=metrics.class_iou(cm), mean_iou=metrics.mean_iou(cm),
                          boundary_f1=float(np.mean(bf)) if bf else float("nan"),
                          confusion=cm, tolerance=metrics.BOUNDARY_TOLERANCE)


@infrastructure("tables")
def format_table(rows: list[RunScores]) -> str:
    """A Markdown table, one row per run."""
    head = ("| run | pixel accuracy | IoU contour | IoU inside | IoU outside | mIoU | "
            "boundary F1 | s/image |\n|---|---:|---:|---:|---:|---:|---:|---:|")
    lines = [head]
    for r in rows:
        s = r.scores
        ious = " | ".join("-" if np.isnan(v) else f"{v:.4f}" for v in s.class_iou)
        lines.append(f"| {r.name} | {s.pixel_accuracy:.4f} | {ious} | {s.mean_iou:.4f} | "
                     f"{s.boundary_f1:.4f} | {r.seconds_per_image:.3f} |")
    return "\n".join(lines)


def _run_label(config) -> str:
    branches = "+".join(config.branches) if len(config.branches) == 1 else "Res-Mobile Net"
    reading = "" if config.feature_reading is None else f" ({config.feature_reading})"
    return f"{branches}, {config.input_kind} input{reading}"


#: The files :func:`write_predictions` writes into an image's folder.
PREDICTION_FILES = frozenset({"label.png", "overlay.png", "prediction.json"})


@implements("claim1.step4.predict", "claim5.output_module")
def write_predictions(run_dir, images, out, *, max_pixels: int | None = None) -> list:
    """``refseg predict``: every image's label PNG ([0263] colours), overlay PNG and time in
    ``out/<stem>/``; all images are read before anything is written.

    Returns
    -------
    list of (Path, float)
        Each output folder and the image's prediction time in seconds.
    """
    limit = MAX_PIXELS if max_pixels is None else check_max_pixels(max_pixels)
    out = publish.check_output_folder(out)
    stems = [Path(p).stem for p in images]
    if len(set(stems)) != len(stems):
        raise InputError("two images share a name stem; their outputs would collide")
    publish.check_replaceable(out, stems, PREDICTION_FILES, "refseg predict")
    model, config = load_run(run_dir)
    loaded = [read_image(p, limit) for p in images]
    done = []
    with publish.staged_folders(out) as staging:
        for stem, path, image in zip(stems, images, loaded):
            rgb = image.pixels if image.pixels.ndim == 3 else np.repeat(
                image.pixels[:, :, None], 3, axis=2)
            rgb = np.clip(rgb + 0.5, 0, 255).astype(np.uint8)
            prediction = predict_image(model, config, rgb)
            folder = staging.folder(stem)
            publish.write_png(folder / "label.png", LABEL_COLOURS[prediction.classes])
            publish.write_png(folder / "overlay.png", overlay(rgb, prediction.classes))
            publish.write_json(folder / "prediction.json", {
                "image": str(path), "run": str(run_dir), "model": _run_label(config),
                "input_size": list(config.input_hw), "seconds": prediction.seconds,
                "class_shares": {name: float((prediction.classes == i).mean())
                                 for i, name in enumerate(CLASS_NAMES)}})
            done.append((Path(out) / stem, prediction.seconds))
    return done


@infrastructure("evaluation of trained runs on a data set (the patent claims none)")
def evaluate_runs(data_dir, runs, *, limit: int | None = None):
    """Score each run on the data set folder; returns (rows, samples, predictions).

    Parameters
    ----------
    data_dir : path
    runs : list of path
        The first is the main run; the others are its comparisons (single branches, gray
        input: fig. 9, [0259]-[0260]; [0121], [0264]).
    limit : int or None
        Score only the first ``limit`` images (sorted by name).
    """
    samples = list(dataset.load_dataset(data_dir))[:limit]
    pairs = [dataset.load_pair(s) for s in samples]
    rows, predictions = [], []
    for run in runs:
        model, config = load_run(run)
        predicted, seconds = [], []
        for rgb, _ in pairs:
            p = predict_image(model, config, rgb)
            predicted.append(p.classes)
            seconds.append(p.seconds)
        scores = score_predictions([c for _, c in pairs], predicted)
        rows.append(RunScores(f"{_run_label(config)} ({run})", scores, float(np.median(seconds))))
        predictions.append(predicted)
    return rows, pairs, predictions


#: Height of the title row and of the legend row of :func:`comparison_panel` (pixels).
PANEL_TEXT_ROW = 44


@infrastructure("figures")
def comparison_panel(pairs, predictions, count: int = 4, titles=None) -> np.ndarray:
    """Rows of images: the image, its label, then each run's prediction (uint8 RGB); rows of
    images of different sizes are padded with white to the widest.

    Parameters
    ----------
    pairs : list of (ndarray (M, N, 3) uint8, ndarray (M, N) uint8)
        Images and their class maps.
    predictions : list of list of ndarray (M, N) uint8
        Per run, the class map of each image.
    count : int
        Rows (images) shown.
    titles : list of str or None
        One title per column (image, label, each run), written above it; the legend of the
        class colours ([0263]) is written below the rows. None: neither.

    Returns
    -------
    ndarray of shape (H, W, 3), uint8
    """
    rows, widths = [], []
    for i, (rgb, classes) in enumerate(pairs[:count]):
        row = [rgb, LABEL_COLOURS[classes]] + [LABEL_COLOURS[p[i]] for p in predictions]
        widths = [t.shape[1] for t in row]
        gap = np.full((rgb.shape[0], 4, 3), 255, np.uint8)
        rows.append(np.concatenate([t for tile in row for t in (tile, gap)][:-1], axis=1))
    if not rows:
        return np.zeros((1, 1, 3), np.uint8)
    width = max(r.shape[1] for r in rows)
    tiles = []
    for r in rows:
        tiles.append(np.pad(r, ((0, 0), (0, width - r.shape[1]), (0, 0)), constant_values=255))
        tiles.append(np.full((4, width, 3), 255, np.uint8))
    grid = np.concatenate(tiles[:-1], axis=0)
    if titles is None:
        return grid
    if len(titles) != len(widths):
        raise ValueError(f"comparison_panel: {len(titles)} titles for {len(widths)} columns")
    canvas = Image.new("RGB", (grid.shape[1], grid.shape[0] + 2 * PANEL_TEXT_ROW), "white")
    canvas.paste(Image.fromarray(grid), (0, PANEL_TEXT_ROW))
    draw = ImageDraw.Draw(canvas)
    font = _font(30)

    def write(x, y_middle, text):
        """``text`` starting at x, centred vertically on y_middle; returns where it ends."""
        left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
        draw.text((x - left, y_middle - (top + bottom) // 2), text, fill=(0, 0, 0), font=font)
        return x + right - left

    x = 0
    for title, width in zip(titles, widths):
        shown = title
        while len(shown) > 4 and draw.textlength(shown, font=font) > width - 8:
            shown = shown[:-2] + "…"  # a long run name: its start is what tells runs apart
        write(x + (width - int(draw.textlength(shown, font=font))) // 2, PANEL_TEXT_ROW // 2,
              shown)
        x += width + 4
    y = canvas.height - PANEL_TEXT_ROW // 2
    x = write(4, y, "classes ([0263]):") + 12
    for name, colour in zip(CLASS_NAMES, LABEL_COLOURS):
        draw.rectangle([x, y - 13, x + 26, y + 13], fill=tuple(int(c) for c in colour),
                       outline=(0, 0, 0))
        x = write(x + 34, y, f"{name} {tuple(int(c) for c in colour)}") + 30
    return np.asarray(canvas)


def _font(size: int):
    """Pillow's own scalable font at ``size`` pixels (its fixed bitmap font on a Pillow without
    FreeType)."""
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError, ImportError):
        return ImageFont.load_default()


@infrastructure("writing an evaluation report")
def write_evaluation(out, rows: list[RunScores], pairs, predictions) -> Path:
    """Write the folder ``out``: ``table.md`` (:func:`format_table`), ``scores.json`` (one
    entry per run) and ``panel.png`` (:func:`comparison_panel`), all or nothing.

    Returns
    -------
    Path
        The folder written.
    """
    with publish.staged_folders(out) as staging:
        publish.write_text(staging.root / "table.md", format_table(rows) + "\n")
        publish.write_json(staging.root / "scores.json", [r.as_dict() for r in rows])
        publish.write_png(staging.root / "panel.png", comparison_panel(
            pairs, predictions, titles=["image", "label", *(r.name for r in rows)]))
    return Path(out)
