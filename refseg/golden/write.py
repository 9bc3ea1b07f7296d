"""Writing a golden bundle (``manifest.json``, ``manifest.schema.json``, ``arrays.npz``,
``readings.md`` and, on request, ``weights.npz``) into a folder, whole or not at all, and
exporting the weights a bundle was computed with.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from refseg import publish
from refseg._version import __version__
from refseg.errors import InputError
import refseg.golden.produce as produce
from refseg.golden.format import (ARRAYS, BUNDLE_FILES, MANIFEST, READINGS, WEIGHTS,
                                  read_bundle, read_weights, weights_sha256,
                                  write_deterministic_npz)
from refseg.golden.own import read_user_images
from refseg.golden.schema import SCHEMA, schema_bytes
from refseg.models import ResMobileNet
from refseg.registry import load_registry

INFRASTRUCTURE = "golden files: writing a bundle"


@dataclass(frozen=True)
class WriteResult:
    """What :func:`write_bundle` wrote: the folder, the number of arrays, the bytes of
    ``arrays.npz`` (and of ``weights.npz``, 0 without it) and the seconds taken."""

    folder: Path
    arrays: int
    npz_bytes: int
    seconds: float
    kept: dict = field(default_factory=dict)
    weights_bytes: int = 0


def readings_text(ids) -> str:
    """The sections of the spec's readings whose IDs are in ``ids``, in the spec's order,
    with its preamble: the ``readings.md`` a bundle carries."""
    registry = load_registry()
    sections, current = [[]], None
    for line in registry.readings_text.splitlines(keepends=True):
        if line.startswith("## R-"):
            current = line[3:].split(":", 1)[0].strip()
            sections.append([])
        sections[-1].append((current, line))
    wanted = set(ids)
    missing = sorted(wanted - registry.reading_ids)
    if missing:
        raise AssertionError(f"golden: cited readings not in readings.md: {missing}")
    preamble = "".join(line for _, line in sections[0])
    body = "".join(line for section in sections[1:] for rid, line in section
                   if rid in wanted)
    return (f"<!-- the readings cited by this golden bundle's manifest, from refseg "
            f"{__version__}'s spec/readings.md -->\n" + preamble + body)



def write_bundle(folder, keep=(), with_weights: bool = False, images=(),
                 max_pixels: int | None = None) -> WriteResult:
    """Write a golden bundle (``manifest.json``, ``manifest.schema.json``, ``arrays.npz``,
    ``readings.md``, and with ``with_weights`` ``weights.npz``) into ``folder``.

    Parameters
    ----------
    folder : str or Path
        Created, or replaced when it holds an earlier bundle; a folder with other files in it
        is refused.
    keep
        See :func:`refseg.golden.produce.build_bundle`.
    with_weights : bool
        Also write the network's weights (``weights.npz``, about 195 MB).
    images : sequence of str or Path
        Image files (any that ``refseg edges`` reads): their claim-1 arrays and flagged
        vectors are added, and the manifest records each file's and pixels' SHA-256
        (:func:`refseg.golden.own.read_user_images`).
    max_pixels : int or None
        Refuse larger images (None: :data:`refseg.images.MAX_PIXELS`).

    Returns
    -------
    WriteResult

    Notes
    -----
    The folder is staged beside its destination and swapped into place in one step when
    every file is complete: an earlier bundle stays whole until then. The same refseg on the
    same machine writes byte-identical files, with or without the weights (the manifest holds
    their hash either way), on any thread count: the network part takes the reference route,
    whose sums run in a fixed order.

    References
    ----------
    Claims 1-4.
    """

    start = time.perf_counter()
    folder = Path(os.path.abspath(folder))
    if folder.exists():
        if not folder.is_dir():
            raise InputError(f"{folder}: exists and is not a folder")
        present = [p.name for p in folder.iterdir() if not publish.is_reserved(p.name)]
        others = sorted(name for name in present if name not in BUNDLE_FILES)
        if others or (present and not (folder / MANIFEST).is_file()):
            raise InputError(f"{folder}: exists and holds files that are not a golden bundle "
                             f"({', '.join(others[:3]) or 'no manifest.json'}); choose another "
                             "folder")
    extra = read_user_images(images, max_pixels) if images else None
    # looked up at call time: a stand-in computation can replace it (tests of the writing)
    manifest, arrays, kept = produce.build_bundle(keep=keep, extra=extra)
    readings = readings_text(r for e in manifest["arrays"].values() for r in e["readings"])
    weights = (ResMobileNet(tuple(manifest["network"]["input_hw"]),
                            seed=manifest["network"]["seed"]).weights()
               if with_weights else None)
    with publish.staged_folders(folder) as staging:
        target = staging.root
        with publish.naming(target / ARRAYS):
            write_deterministic_npz(target / ARRAYS, arrays)
        with publish.naming(target / READINGS):
            (target / READINGS).write_bytes(readings.encode("utf-8"))
        if weights is not None:
            with publish.naming(target / WEIGHTS):
                write_deterministic_npz(target / WEIGHTS, weights, compress=False)
        with publish.naming(target / SCHEMA):
            (target / SCHEMA).write_bytes(schema_bytes())
        manifest["files"] = {READINGS: hashlib.sha256(readings.encode("utf-8")).hexdigest(),
                             SCHEMA: hashlib.sha256(schema_bytes()).hexdigest()}
        manifest["arrays_file_sha256"] = hashlib.sha256(
            (target / ARRAYS).read_bytes()).hexdigest()
        with publish.naming(target / MANIFEST):
            (target / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n",
                                           encoding="utf-8")
    return WriteResult(folder, len(manifest["arrays"]), (folder / ARRAYS).stat().st_size,
                       time.perf_counter() - start, kept,
                       (folder / WEIGHTS).stat().st_size if with_weights else 0)


def export_weights(folder, out) -> str:
    """The network weights a bundle was computed with, verified against the manifest's
    SHA-256, written as an ``.npz`` keyed by Keras weight path: the bundle's ``weights.npz``
    when it has one, otherwise regenerated from the seed.

    Parameters
    ----------
    folder : str or Path
        The bundle.
    out : str or Path
        The ``.npz`` to write.

    Returns
    -------
    str
        The SHA-256 of the weights.

    Raises
    ------
    InputError
        The bundle's weights or the regenerated ones differ from the manifest's hash.
    """

    manifest, _ = read_bundle(folder)
    net = manifest["network"]
    if (Path(folder) / WEIGHTS).is_file():
        weights = read_weights(folder, manifest)
    else:
        weights = ResMobileNet(tuple(net["input_hw"]), seed=net["seed"]).weights()
    digest = weights_sha256(weights)
    if digest != net["weights_sha256"]:
        raise InputError(f"{folder}: the regenerated weights hash to {digest[:16]}..., the "
                         f"manifest says {net['weights_sha256'][:16]}...; this refseg does "
                         "not regenerate them")
    publish.write_npz(Path(out), **{k: np.ascontiguousarray(v) for k, v in weights.items()})
    return digest
