"""The golden bundle's own images: three photographs shipped with refseg (crops of
``skimage.data`` images, checked against the SHA-256 that ``photos/photos.json`` records) and
two synthetic welds drawn from their seeds.
"""
from __future__ import annotations

import json
from pathlib import Path

from refseg.errors import InputError
from refseg.golden.format import array_sha256
from refseg.data import synthetic
from refseg.images import read_image

INFRASTRUCTURE = "golden files: the bundle's own images"

#: The three photographs: crops of ``skimage.data`` images shipped in ``photos/`` beside this
#: module, with their provenance and licences (``photos/photos.json``, ``photos/LICENSES.md``).
PHOTOS = ("astronaut", "coffee", "chelsea")
PHOTO_FOLDER = Path(__file__).resolve().parent / "photos"
#: Synthetic welds: the function drawing them, seeds and size.
WELD_FUNCTION = "refseg.data.synthetic.weld_image"
WELD_SEEDS = (0, 1)
WELD_SHAPE = (96, 256)


def shipped_photos():
    """The shipped photographs as (rows, cols, 3) uint8 arrays, checked against the SHA-256
    that ``photos.json`` records for each crop, and their provenance."""
    records = json.loads((PHOTO_FOLDER / "photos.json").read_text(encoding="utf-8"))
    images, provenance = {}, {}
    for name in PHOTOS:
        path = PHOTO_FOLDER / f"{name}.png"
        rgb = read_image(path).pixels
        record = dict(records[name])
        if array_sha256(rgb) != record.pop("crop_sha256"):
            raise InputError(f"{path}: the photograph differs from the one photos.json "
                             "describes (SHA-256); reinstall refseg")
        images[name], provenance[name] = rgb, record
    return images, provenance


def synthetic_welds():
    """The synthetic welds of :data:`WELD_SEEDS` and their provenance."""
    samples = {f"weld{s}": synthetic.weld_image(s, WELD_SHAPE) for s in WELD_SEEDS}
    provenance = {name: {"source": WELD_FUNCTION, "seed": s.seed,
                         "shape": list(WELD_SHAPE), "license": "synthetic, drawn by refseg"}
                  for name, s in samples.items()}
    return samples, provenance

