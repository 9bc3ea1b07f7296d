"""The figure of an extraction, in the spirit of the patent's figs. 3 and 7: the input, the four
edge maps with their weights and CVs, and the feature map; and its view in a notebook
(``FeatureResult._repr_html_``).

It reads a :class:`~refseg.claim1.features.FeatureResult` and never imports the module that
makes one, so that the result can show itself without an import cycle.
"""
from __future__ import annotations

import base64
import html
import io
import itertools
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from refseg.claim1 import weighting
from refseg.claim1.operators import OPERATOR_NAMES, OPERATORS
from refseg.cite import infrastructure

#: Tiles of the panel are scaled so that their width falls in this range (pixels).
PANEL_TILE_WIDTH = (360, 720)
_CAPTION_HEIGHT = 22


def _shrunk_colour(rgb: np.ndarray, width: int) -> Image.Image:
    """An RGB image box-shrunk to ``width`` one channel at a time: the same pixels as shrinking
    it whole, without Pillow's 4-byte-per-pixel copy of it."""
    height = max(1, round(rgb.shape[0] * width / rgb.shape[1]))
    return Image.merge("RGB", [
        Image.fromarray(np.ascontiguousarray(rgb[..., c])).resize((width, height),
                                                                 Image.Resampling.BOX)
        for c in range(3)])


def _tile(array: np.ndarray, width: int) -> Image.Image:
    """A display tile of an image or binary map, scaled to ``width`` (edges kept visible)."""
    if array.ndim == 3 and width < array.shape[1]:
        return _shrunk_colour(array, width)
    image = Image.fromarray(array)
    if image.width == width:
        return image.convert("RGB")
    if width > image.width:
        factor = width / image.width
        return image.resize((width, round(image.height * factor)), Image.Resampling.NEAREST) \
            .convert("RGB")
    # shrinking: a box average would fade 1-pixel edges, so any edge in a box shows
    height = max(1, round(image.height * width / image.width))
    shrunk = np.asarray(image.resize((width, height), Image.Resampling.BOX), dtype=np.float64)
    return Image.fromarray(np.where(shrunk > 0, 255, 0).astype(np.uint8)).convert("RGB")


def _panel_images(shown: np.ndarray, result: FeatureResult):
    """The panel's images in its order, each 0-255 map made only when its tile is."""
    yield shown
    for k in OPERATORS:
        yield result.edges[k] * np.uint8(255)
    yield result.feature_map * np.uint8(255)


@infrastructure("the figure of an extraction")
def panel(rgb: np.ndarray, result: FeatureResult) -> np.ndarray:
    """A 2x3 figure: input, the four edge maps with weights and CVs, and the feature map.

    Parameters
    ----------
    rgb : ndarray of shape (M, N, 3) or (M, N)
        The input as read (uint8, or float on the 0-255 scale).
    result : FeatureResult

    Returns
    -------
    ndarray of shape (H, W, 3), uint8

    References
    ----------
    Figs. 3 and 7, [0120], [0214].
    """
    cols = rgb.shape[1]
    width = int(np.clip(cols, *PANEL_TILE_WIDTH))
    shown = rgb if rgb.dtype == np.uint8 else rounded_uint8(rgb, 1)
    captions = [f"input image ({rgb.shape[0]} rows, {cols} columns)"]
    captions += [f"{OPERATOR_NAMES[k]}  w={result.weights[k]:.3f}  V={result.cv[k]:.2f}"
                 for k in OPERATORS]
    captions.append(f"feature map (F >= 0): {int(result.feature_map.sum())} px")
    # made one at a time and pasted at once: every tile has the first one's size (the images
    # share one shape), so the canvas can be laid out from it
    tiles = (_tile(image, width) for image in _panel_images(shown, result))
    first = next(tiles)
    tile_h = first.height + _CAPTION_HEIGHT
    gap = 6
    canvas = Image.new("RGB", (3 * width + 4 * gap, 2 * tile_h + 3 * gap), (255, 255, 255))
    draw = ImageDraw.Draw(canvas)
    font = ImageFont.load_default()
    for i, (tile, caption) in enumerate(zip(itertools.chain([first], tiles), captions)):
        x = gap + (i % 3) * (width + gap)
        y = gap + (i // 3) * (tile_h + gap)
        draw.text((x + 2, y + 4), caption, fill=(0, 0, 0), font=font)
        canvas.paste(tile, (x, y + _CAPTION_HEIGHT))
    return np.asarray(canvas)


#: The gray level of the notebook panel's input tile when a result kept only its maps.
MAPS_ONLY_TILE = 128


@infrastructure("showing an extraction in a notebook")
def notebook_html(result: FeatureResult) -> str:
    """An extraction as HTML for Jupyter (``FeatureResult._repr_html_``): the step panel
    (:func:`panel`, its input tile the gray image) and the table of the operators' thresholds,
    edge pixels, σ, μ, V and weights, then a warning for each automatic threshold that
    degenerated (:attr:`FeatureResult.warnings`). A maps-only result (``extract(..., keep="maps")``) kept no
    gray image: its input tile is left mid-gray and the text says so."""
    if result.gray is None:
        gray = np.full(result.feature_map.shape, MAPS_ONLY_TILE, dtype=np.uint8)
        kept = " Only the maps were kept (keep=\"maps\"): the panel's input tile is blank."
    else:
        gray = np.clip(np.round(result.gray), 0, 255).astype(np.uint8)
        kept = ""
    buffer = io.BytesIO()
    Image.fromarray(panel(np.dstack([gray] * 3), result)).save(buffer, format="PNG")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    cell = 'style="border:1px solid #ccc;padding:2px 6px;text-align:right"'
    head = "".join(f"<th {cell}>{h}</th>" for h in (
        "operator", "thresholds", "edge pixels", "σ", "μ", "V = σ/μ", "weight w"))
    rows = "".join(
        f"<tr><th {cell}>{OPERATOR_NAMES[k]}</th><td {cell}>"
        + html.escape(", ".join(f"{n} {v:.2f}" for n, v in result.thresholds[k].items()))
        + f"</td><td {cell}>{int(result.edges[k].sum())}</td><td {cell}>{result.std[k]:.4f}</td>"
        f"<td {cell}>{result.mean[k]:.4f}</td><td {cell}>{result.cv[k]:.4f}</td>"
        f"<td {cell}>{result.weights[k]:.4f}</td></tr>" for k in OPERATORS)
    rows_, cols = result.feature_map.shape
    return (f"<div><p><strong>FeatureResult</strong>: claim 1 on a {rows_}x{cols} image, "
            f"{int(result.feature_map.sum())} feature pixels ({result.feature_map.mean():.2%}); "
            f"σ = {result.params['sigma']:g}, ΣV = {result.intermediate_cv:.4f}.{kept}</p>"
            f'<img src="data:image/png;base64,{data}" alt="claim-1 steps: the gray image, the '
            'four edge maps, the feature map" style="max-width:100%">'
            f'<table style="border-collapse:collapse"><tr>{head}</tr>{rows}</table>'
            + "".join(f'<p style="color:#a00">Warning: {html.escape(text)}.</p>'
                      for text in result.warnings) + "</div>")


@infrastructure("a float image as 8-bit pixels for display")
def rounded_uint8(image: np.ndarray, scale: float) -> np.ndarray:
    """``clip(round(image * scale), 0, 255)`` as uint8, a block of rows at a time: no float
    temporary of the whole image."""
    out = np.empty(image.shape, dtype=np.uint8)
    for block in weighting._row_blocks(*image.shape[:2]):
        scaled = np.asarray(image[block], dtype=np.float64) * scale
        out[block] = np.clip(np.round(scaled, out=scaled), 0, 255, out=scaled)
    return out
