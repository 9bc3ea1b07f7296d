"""The files ``refseg edges`` writes for one image: edge maps, mean image, feature map, arrays,
a JSON report and a panel figure in the spirit of the patent's figs. 3 and 7.

References: [0120], [0212]-[0214]; claim 5's feature extraction module ([0268]).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from refseg import memory, publish
from refseg.images import MAX_PIXELS, RAISE_HINT, check_max_pixels, read_image
from refseg.vocabulary import EDGES_MEMORY
from refseg._version import __version__
from refseg.claim1 import features, preprocess
from refseg.claim1.panel import rounded_uint8, panel
from refseg.claim1.degenerate import degenerate_thresholds
from refseg.claim1.features import STEP_CLAIMS, FeatureResult
from refseg.claim1.operators import OPERATORS
from refseg.claim1.parameters import KEEP
from refseg.errors import InputError
from refseg.images import LoadedImage
from refseg.publish import write_json, write_npz, write_png
from refseg.cite import implements, infrastructure

@infrastructure("the JSON report of an extraction")
def report_dict(result: FeatureResult, source: dict | None = None) -> dict:
    """The JSON report of one extraction: weights, CVs, thresholds, parameters, claim IDs,
    and a warning for each automatic threshold that degenerated (marking more than half of
    the pixels, or none: :mod:`refseg.claim1.degenerate`), ``[]`` when none did.

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
        "warnings": [found.as_dict() for found in degenerate_thresholds(result)],
    }




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
    write_png(folder / "mean_image.png", rounded_uint8(result.mean_image, 255))
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
    with memory.return_freed_memory():
        loaded = [read_image(p, limit, f"{RAISE_HINT}; {EDGES_MEMORY}") for p in images]
        with publish.staged_folders(out) as staging:
            for stem, img in zip(stems, loaded):
                folder = staging.folder(stem)
                page = Path(out) / stem / WALKTHROUGH_PAGE
                if page.is_file() and not page.is_symlink():
                    os.link(page, folder / WALKTHROUGH_PAGE)
                write_outputs(folder, img, features.extract(img.pixels, **kwargs), arrays)
    return [Path(out) / s for s in stems]
