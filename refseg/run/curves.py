"""Training curves as a PNG (loss and pixel accuracy per epoch, like the patent's fig. 8,
[0257]), drawn with Pillow alone."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from refseg.publish import write_png

INFRASTRUCTURE = "figures of training curves"

#: Colours of the training and validation lines.
TRAIN_COLOUR, VALIDATION_COLOUR = (31, 119, 180), (214, 39, 40)
PANEL_SIZE = (420, 260)
#: The band above the panels that names the run.
TITLE_HEIGHT = 22
MARGIN = (52, 18, 14, 34)  # left, top, right, bottom


def _panel(title, epochs, series, y_range=None, legend_below=False):
    """One panel; the legend sits in the upper right corner, or in the lower right one for
    curves that rise towards the upper right (accuracy)."""
    width, height = PANEL_SIZE
    left, top, right, bottom = MARGIN
    image = Image.new("RGB", PANEL_SIZE, "white")
    draw = ImageDraw.Draw(image)
    values = [v for _, _, ys in series for v in ys if v is not None]
    low, high = y_range or (min(values, default=0.0), max(values, default=1.0))
    if high - low < 1e-12:
        low, high = low - 0.5, high + 0.5
    x0, x1, y0, y1 = left, width - right, top, height - bottom
    last = max(epochs[-1], 2) if epochs else 2

    def point(epoch, value):
        x = x0 + (epoch - 1) / (last - 1) * (x1 - x0)
        y = y1 - (value - low) / (high - low) * (y1 - y0)
        return x, y

    draw.rectangle([x0, y0, x1, y1], outline=(0, 0, 0))
    for frac in np.linspace(0, 1, 5):
        value = low + frac * (high - low)
        _, y = point(1, value)
        draw.line([x0 - 3, y, x0, y], fill=(0, 0, 0))
        draw.text((2, y - 6), f"{value:.3g}", fill=(0, 0, 0))
    for epoch in sorted({1, last, *epochs}):
        x, _ = point(epoch, low)
        draw.line([x, y1, x, y1 + 3], fill=(0, 0, 0))
        draw.text((x - 4, y1 + 5), str(epoch), fill=(0, 0, 0))
    draw.text((x0, 2), title, fill=(0, 0, 0))
    draw.text(((x0 + x1) // 2 - 14, height - 14), "epoch", fill=(0, 0, 0))
    for row, (label, colour, ys) in enumerate(series):
        pts = [point(e, v) for e, v in zip(epochs, ys) if v is not None]
        if len(pts) > 1:
            draw.line(pts, fill=colour, width=2)
        for x, y in pts:
            draw.ellipse([x - 2, y - 2, x + 2, y + 2], fill=colour)
        y_label = y1 - 16 - 12 * (len(series) - 1 - row) if legend_below else y0 + 4 + 12 * row
        draw.text((x1 - 90, y_label), label, fill=colour)
    return image


def write_curves(history: list[dict], path, run: str | None = None) -> None:
    """Two panels, loss and pixel accuracy against epoch, training and validation, under a
    title naming the run.

    Parameters
    ----------
    history : list of dict
        ``metrics.jsonl`` entries (``epoch``, ``train_loss``, ``val_loss``,
        ``train_pixel_accuracy``, ``val_pixel_accuracy``).
    path : str or Path
        PNG written atomically.
    run : str or None
        The run's name for the title (None: the name of the folder holding ``path``).
    """
    epochs = [h["epoch"] for h in history]
    loss = _panel("loss (cross-entropy)", epochs, [
        ("training", TRAIN_COLOUR, [h["train_loss"] for h in history]),
        ("validation", VALIDATION_COLOUR, [h["val_loss"] for h in history])])
    accuracy = _panel("pixel accuracy", epochs, [
        ("training", TRAIN_COLOUR, [h["train_pixel_accuracy"] for h in history]),
        ("validation", VALIDATION_COLOUR, [h["val_pixel_accuracy"] for h in history])],
        legend_below=True)
    canvas = Image.new("RGB", (PANEL_SIZE[0] * 2, PANEL_SIZE[1] + TITLE_HEIGHT), "white")
    canvas.paste(loss, (0, TITLE_HEIGHT))
    canvas.paste(accuracy, (PANEL_SIZE[0], TITLE_HEIGHT))
    name = run if run is not None else Path(path).resolve().parent.name
    ImageDraw.Draw(canvas).text(
        (MARGIN[0], 6), f"run {name}: {len(history)} epoch{'s' * (len(history) != 1)}",
        fill=(0, 0, 0))
    write_png(path, np.asarray(canvas))
