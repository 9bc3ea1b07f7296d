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
from refseg.engine import DEFAULT_ROUTE, predictor
from refseg.run.training import load_run
from refseg.cite import implements, infrastructure

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
    model : refseg.models.ResMobileNet, or a plan of it (``refseg.engine.plan``)
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
    ``model`` is what :func:`refseg.engine.predictor` returns: the engine's plan or the
    reference's model.
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
def write_predictions(run_dir, images, out, *, max_pixels: int | None = None,
                      route: str = DEFAULT_ROUTE) -> list:
    """``refseg predict``: every image's label PNG ([0263] colours), overlay PNG and time in
    ``out/<stem>/``; all images are read before anything is written.

    ``route``: "engine" (a plan of the run's network, :mod:`refseg.engine`) or "reference"
    (the network's layer graph as the claims read).

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
    model = predictor(model, route, len(loaded))
    done = []
    with publish.staged_folders(out) as staging:
        for stem, path, image in zip(stems, images, loaded):
            rgb = image.pixels if image.pixels.ndim == 3 else np.repeat(
                image.pixels[:, :, None], 3, axis=2)
            rgb = np.clip(rgb + 0.5, 0, 255).astype(np.uint8)
            prediction = predict_image(model, config, rgb)
            folder = staging.folder(stem)
            publish.write_png(folder / "label.png", LABEL_COLOURS[prediction.classes])
            publish.write_png(folder / "overlay.png", overlay_with_legend(rgb, prediction.classes))
            publish.write_json(folder / "prediction.json", {
                "image": str(path), "run": str(run_dir), "model": _run_label(config),
                "input_size": list(config.input_hw), "seconds": prediction.seconds,
                "class_shares": {name: float((prediction.classes == i).mean())
                                 for i, name in enumerate(CLASS_NAMES)}})
            done.append((Path(out) / stem, prediction.seconds))
    return done


@infrastructure("evaluation of trained runs on a data set (the patent claims none)")
def evaluate_runs(data_dir, runs, *, limit: int | None = None, route: str = DEFAULT_ROUTE):
    """Score each run on the data set folder; returns (rows, samples, predictions).

    Parameters
    ----------
    data_dir : path
    runs : list of path
        The first is the main run; the others are its comparisons (single branches, gray
        input: fig. 9, [0259]-[0260]; [0121], [0264]).
    limit : int or None
        Score only the first ``limit`` images (sorted by name).
    route : {"engine", "reference"}
        What predicts: a plan of each run's network, or its layer graph.
    """
    samples = list(dataset.load_dataset(data_dir))[:limit]
    pairs = [dataset.load_pair(s) for s in samples]
    rows, predictions = [], []
    for run in runs:
        model, config = load_run(run)
        model = predictor(model, route, len(pairs))
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
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    headings = [_fitted_title(measure, title, width) for title, width in zip(titles, widths)]
    # one size for every column: the largest at which each title fits
    smallest = min(size for size, _ in headings)
    headings = [_fitted_title(measure, title, width, smallest)
                for title, width in zip(titles, widths)]
    title_row = max(PANEL_TEXT_ROW, *(len(lines) * (size + 6) + 8 for size, lines in headings))
    legend = class_legend(grid.shape[1], 30)
    canvas = Image.new("RGB", (grid.shape[1], grid.shape[0] + title_row + legend.shape[0]),
                       "white")
    canvas.paste(Image.fromarray(grid), (0, title_row))
    draw = ImageDraw.Draw(canvas)
    x = 0
    for (size, lines), width in zip(headings, widths):
        small = _font(size)
        top = (title_row - len(lines) * (size + 6)) // 2
        for i, line in enumerate(lines):
            length = int(draw.textlength(line, font=small))
            draw.text((x + max(0, (width - length) // 2), top + i * (size + 6)), line,
                      fill=(0, 0, 0), font=small)
        x += width + 4
    canvas.paste(Image.fromarray(legend), (0, canvas.height - legend.shape[0]))
    return np.asarray(canvas)


@infrastructure("figures")
def class_legend(width: int, size: int = 30) -> np.ndarray:
    """A white band ``width`` pixels wide naming the class colours of [0263] beside their
    swatches, in text at most ``size`` pixels high (smaller until it fits, down to the
    smallest of :data:`TITLE_SIZES`, then on as many lines as it takes): (rows, width, 3)
    uint8."""
    measure = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    entries = [f"{name} {tuple(int(c) for c in colour)}"
               for name, colour in zip(CLASS_NAMES, LABEL_COLOURS)]
    sizes = [s for s in TITLE_SIZES if s <= size] or [TITLE_SIZES[-1]]

    def layout(s):
        """[(x, line, swatch colour or None, text)] at size ``s``, and the lines used."""
        font, half = _font(s), s * 13 // 30
        placed, x, line = [], 4, 0
        for colour, text in [(None, "classes ([0263]):")] + list(zip(LABEL_COLOURS, entries)):
            span = (2 * half + s // 4 if colour is not None else 0) + int(
                measure.textlength(text, font=font))
            if x > 4 and x + span > width - 4:
                x, line = 4, line + 1
            placed.append((x, line, colour, text))
            x += span + s
        return placed, line + 1

    size = next((s for s in sizes if layout(s)[1] == 1), sizes[-1])
    placed, lines = layout(size)
    row = int(size * 1.5)
    band = Image.new("RGB", (width, row * lines), "white")
    draw = ImageDraw.Draw(band)
    font, half = _font(size), size * 13 // 30
    for x, line, colour, text in placed:
        y = line * row + row // 2
        if colour is not None:
            draw.rectangle([x, y - half, x + 2 * half, y + half],
                           fill=tuple(int(c) for c in colour), outline=(0, 0, 0))
            x += 2 * half + size // 4
        left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
        draw.text((x - left, y - (top + bottom) // 2), text, fill=(0, 0, 0), font=font)
    return np.asarray(band)


@infrastructure("figures")
def overlay_with_legend(rgb: np.ndarray, classes: np.ndarray) -> np.ndarray:
    """:func:`overlay` with the legend of the class colours below it (``overlay.png``)."""
    shown = overlay(rgb, classes)
    return np.concatenate([shown, class_legend(shown.shape[1], 30)], axis=0)


#: Title sizes tried, largest first, until a column's title fits its width (in lines).
TITLE_SIZES = (30, 24, 20, 16, 13, 11)


def _fitted_title(draw, title: str, width: int, largest: int = TITLE_SIZES[0]
                  ) -> tuple[int, list[str]]:
    """The largest font size (at most ``largest``) and the lines (broken after hyphens, then
    anywhere) in which ``title`` fits ``width`` pixels: a run's name shown whole, never cut."""
    for size in (s for s in TITLE_SIZES if s <= largest):
        font = _font(size)
        if draw.textlength(title, font=font) <= width - 4:
            return size, [title]
        words = [w + "-" for w in title.split("-")[:-1]] + [title.split("-")[-1]]
        if all(draw.textlength(w, font=font) <= width - 4 for w in words):
            return size, words
    font, lines, line = _font(TITLE_SIZES[-1]), [], ""
    for char in title:
        if line and draw.textlength(line + char, font=font) > width - 4:
            lines.append(line)
            line = ""
        line += char
    return TITLE_SIZES[-1], lines + [line]


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
