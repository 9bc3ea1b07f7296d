"""A bundle on the user's own images: ``refseg golden write DIR --images A.png ...`` adds the
claim-1 arrays and flagged vectors of the user's images (read as ``refseg edges`` reads them)
to the bundle. Refseg's own candidate for a bundle is :mod:`refseg.golden.candidate`.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

import numpy as np

from refseg.images import MAX_PIXELS, check_max_pixels, read_bytes, read_image
from refseg.errors import InputError
from refseg.golden.format import array_sha256

INFRASTRUCTURE = "golden files: the user's images"

#: The function a user image's input entry names (how the bundle read it).
READ_FUNCTION = "refseg.images.read_image"


def image_name(path: Path) -> str:
    """The bundle name of an image file: its stem, each character outside ``A-Z a-z 0-9 _ . +
    -`` replaced by ``_``."""
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", path.stem) or "_"


def as_rgb(pixels: np.ndarray) -> np.ndarray:
    """(M, N, 3): a gray image's plane repeated (refseg's gray of R = G = B is the plane)."""
    return pixels if pixels.ndim == 3 else np.repeat(pixels[:, :, None], 3, axis=2)


def read_user_images(paths, max_pixels: int | None = None) -> dict:
    """{name: (rgb, provenance)} of image files, every file read and checked first.

    Raises
    ------
    InputError
        An unreadable or too large image (as ``refseg edges``), or two files of one name.
    """
    limit = MAX_PIXELS if max_pixels is None else check_max_pixels(max_pixels)
    out, seen = {}, {}
    for path in map(Path, paths):
        name = image_name(path)
        if name in seen:
            raise InputError(f"{path}: has the same bundle name {name!r} as {seen[name]}; "
                             "rename one of them")
        seen[name] = path
        loaded = read_image(path, limit)
        rgb = np.ascontiguousarray(as_rgb(loaded.pixels))
        record = {"source": "refseg golden write --images", "file": path.name,
                  "file_sha256": hashlib.sha256(read_bytes(path)).hexdigest(),
                  "pixels_sha256": array_sha256(rgb), **loaded.info()}
        record.pop("path", None)
        out[name] = (rgb, record)
    return out
