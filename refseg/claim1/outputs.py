"""The files ``refseg edges`` writes for one image: edge maps, mean image, feature map, arrays,
a JSON report and a panel figure in the spirit of the patent's figs. 3 and 7.

References: [0120], [0212]-[0214]; claim 5's feature extraction module ([0268]).
"""
from __future__ import annotations

import base64
import html
import io
import itertools
import os
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from refseg import allocator, publish
from refseg.images import MAX_PIXELS, check_max_pixels, read_image
from refseg._version import __version__
from refseg.claim1 import features, preprocess, weighting
from refseg.claim1.features import STEP_CLAIMS, FeatureResult
from refseg.claim1.operators import OPERATORS
from refseg.claim1.parameters import KEEP
from refseg.errors import InputError
from refseg.images import LoadedImage
from refseg.publish import write_json, write_npz, write_png
from refseg.cite import implements, infrastructure

#: Display names of the operators in figures and reports.
OPERATOR_NAMES = {"canny": "Canny", "sobel": "Sobel", "prewitt": "Prewitt", "log": "LoG"}
#: Tiles of the panel are scaled so that their width falls in this range (pixels).
PANEL_TILE_WIDTH = (360, 720)
_CAPTION_HEIGHT = 22


@infrastructure("the JSON report of an extraction")
def report_dict(result: FeatureResult, source: dict | None = None) -> dict:
    """The JSON report of one extraction: weights, CVs, thresholds, parameters, claim IDs.

    Parameters
    ----------
    result : FeatureResult
    source : dict or None
        Description of the input (``LoadedImage.info()``).

    Returns
    -------
    dict
        JSON-ready.

    References
    ----------
    [0212]-[0213].
    """
    return {
        "refseg_version": __version__,
        "patent": "CN114419081B",
        "source": source or {},
        "operator_order": list(OPERATORS),
        "weights": result.weights,
        "cv": result.cv,
        "std": result.std,
        "mean": result.mean,
        "intermediate_cv": result.intermediate_cv,
        "thresholds": result.thresholds,
        "edge_pixels": {k: int(result.edges[k].sum()) for k in OPERATORS},
        "feature_pixels": int(result.feature_map.sum()),
        "shape": list(result.feature_map.shape),
        "params": result.params,
        "claims": STEP_CLAIMS,
    }


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
    shown = rgb if rgb.dtype == np.uint8 else _rounded_uint8(rgb, 1)
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
    edge pixels, σ, μ, V and weights. A maps-only result (``extract(..., keep="maps")``) kept no
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
            f'<table style="border-collapse:collapse"><tr>{head}</tr>{rows}</table></div>')


def _rounded_uint8(image: np.ndarray, scale: float) -> np.ndarray:
    """``clip(round(image * scale), 0, 255)`` as uint8, a block of rows at a time: no float
    temporary of the whole image."""
    out = np.empty(image.shape, dtype=np.uint8)
    for block in weighting._row_blocks(*image.shape[:2]):
        scaled = np.asarray(image[block], dtype=np.float64) * scale
        out[block] = np.clip(np.round(scaled, out=scaled), 0, 255, out=scaled)
    return out


def _check_npz_contents(arrays: str) -> None:
    """``arrays``, what ``features.npz`` holds, is one of :data:`KEEP`; InputError otherwise."""
    if arrays not in KEEP:
        raise InputError(f"--arrays: expected one of {', '.join(KEEP)}, got {arrays!r}")


@infrastructure("writing one image's outputs")
def write_outputs(folder, loaded: LoadedImage, result: FeatureResult,
                  arrays: str = "all") -> list[str]:
    """Write every output of one image into ``folder`` (which must exist).

    Parameters
    ----------
    folder : str or Path
    loaded : LoadedImage
    result : FeatureResult
    arrays : {"all", "maps"}
        What ``features.npz`` holds: every intermediate array, or only the four edge maps,
        the feature map and the per-operator vectors.

    Returns
    -------
    list of str
        The file names written.

    Notes
    -----
    Files: ``canny.png``, ``sobel.png``, ``prewitt.png``, ``log.png`` (edge maps, 0/255),
    ``mean_image.png`` (Ē × 255, rounded), ``feature_map.png`` (0/255), ``panel.png``,
    ``features.npz`` (its binary maps deflated) and ``report.json``. Each file is written atomically.

    References
    ----------
    [0268].
    """
    _check_npz_contents(arrays)
    if arrays == "all" and result.gray is None:
        raise ValueError('arrays="all" needs a result extracted with keep="all"')
    folder = Path(folder)
    names = []
    for k in OPERATORS:
        write_png(folder / f"{k}.png", result.edges[k] * np.uint8(255))
        names.append(f"{k}.png")
    write_png(folder / "mean_image.png", _rounded_uint8(result.mean_image, 255))
    write_png(folder / "feature_map.png", result.feature_map * np.uint8(255))
    write_png(folder / "panel.png", panel(loaded.pixels, result))
    names += ["mean_image.png", "feature_map.png", "panel.png"]
    kept = {
        **{k: result.edges[k] for k in OPERATORS}, "feature_map": result.feature_map,
        "weights": result.vector("weights"), "cv": result.vector("cv"),
        "std": result.vector("std"), "mean": result.vector("mean"),
    }
    if arrays == "all":
        kept.update({
            "gray": result.gray, "blurred": result.blurred,
            **{f"{k}_response": result.responses[k] for k in OPERATORS},
            "mean_image": result.mean_image, "final_weight": result.final_weight})
    write_npz(folder / "features.npz", compressed=True, **kept)
    report = report_dict(result, loaded.info())
    report["files"] = sorted(names + ["features.npz", "report.json"])
    write_json(folder / "report.json", report)
    return report["files"]


#: The files :func:`write_outputs` writes into an image's folder.
OUTPUT_FILES = frozenset({*(f"{k}.png" for k in OPERATORS), "mean_image.png", "feature_map.png",
                          "panel.png", "features.npz", "report.json"})
#: The page ``refseg explain claim1 --image`` writes into an image's folder: ``refseg edges``
#: keeps it when it writes that folder again (and the walkthrough keeps edges' files).
WALKTHROUGH_PAGE = "index.html"


def _stems(paths: list[Path]) -> list[str]:
    """The output folder name of each image: its file name's stem, which must be unique."""
    seen = {}
    for path in paths:
        if path.stem in seen:
            raise InputError(f"{path}: has the same name stem {path.stem!r} as {seen[path.stem]}; "
                             "outputs would collide")
        seen[path.stem] = path
    return list(seen)


@implements("claim5.feature_module")
def write_edge_outputs(images: list[Path], out: Path, sigma: float | None = None, *,
                       max_pixels: int | None = None, arrays: str = "all") -> list[Path]:
    """Claim 1 on image files: read every image (all are checked before anything is written),
    extract the features and write each image's outputs into ``out/<stem>/``.

    Parameters
    ----------
    images : list of Path
        Image files in any format Pillow reads; their name stems must differ.
    out : Path
        Output folder; the image folders appear in it together when all are written.
    sigma : float or None
        Gaussian sigma; None for the default of :func:`~refseg.claim1.features.extract`.
    max_pixels : int or None
        Refuse larger images (None: :data:`refseg.images.MAX_PIXELS`).
    arrays : {"all", "maps"}
        What each ``features.npz`` holds (:func:`write_outputs`).

    Returns
    -------
    list of Path
        The folders written, one per image, in the order given.

    Notes
    -----
    This is ``refseg edges``. Each folder holds what :func:`write_outputs` writes. The images
    are extracted one at a time, each just before its outputs are written, and with
    ``arrays="maps"`` the float planes are not kept (``features.extract(..., keep="maps")``).

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> import numpy as np
    >>> from PIL import Image
    >>> from refseg.claim1.outputs import write_edge_outputs
    >>> folder = Path(tempfile.mkdtemp())
    >>> step = np.zeros((5, 6), np.uint8)
    >>> step[:, 3:] = 200
    >>> Image.fromarray(step).save(folder / "step.png")
    >>> written = write_edge_outputs([folder / "step.png"], folder / "out")
    >>> [p.relative_to(folder).as_posix() for p in written]
    ['out/step']
    >>> sorted(p.name for p in written[0].iterdir())  # doctest: +NORMALIZE_WHITESPACE
    ['canny.png', 'feature_map.png', 'features.npz', 'log.png', 'mean_image.png',
     'panel.png', 'prewitt.png', 'report.json', 'sobel.png']
    >>> np.array_equal(np.asarray(Image.open(written[0] / "feature_map.png"))[0],
    ...                [0, 0, 255, 255, 0, 0])
    True
    >>> import shutil
    >>> shutil.rmtree(folder)

    References
    ----------
    [0266]-[0268].
    """
    images = [Path(p) for p in images]
    stems = _stems(images)
    limit = MAX_PIXELS if max_pixels is None else check_max_pixels(max_pixels)
    _check_npz_contents(arrays)
    out = publish.check_output_folder(out)
    publish.check_replaceable(out, stems, OUTPUT_FILES | {WALKTHROUGH_PAGE}, "refseg edges")
    kwargs = {"keep": arrays}
    if sigma is not None:
        preprocess.gaussian_kernel(sigma)  # a bad sigma is refused before any image is read
        kwargs["sigma"] = sigma
    # a few whole-image arrays, each made once: freed memory goes back at once, so that the
    # decoder's and each operator's do not add to the next step's peak
    with allocator.return_freed_memory():
        loaded = [read_image(p, limit) for p in images]
        with publish.staged_folders(out) as staging:
            for stem, img in zip(stems, loaded):
                folder = staging.folder(stem)
                page = Path(out) / stem / WALKTHROUGH_PAGE
                if page.is_file() and not page.is_symlink():
                    os.link(page, folder / WALKTHROUGH_PAGE)
                write_outputs(folder, img, features.extract(img.pixels, **kwargs), arrays)
    return [Path(out) / s for s in stems]
