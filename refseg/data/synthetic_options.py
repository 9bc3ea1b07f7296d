"""The options of a synthetic data set (``refseg synth``): their ranges and their checks.

A leaf of :mod:`refseg.data` (no SciPy, no kernels): ``refseg.run.config`` refuses an option out
of range with it before any heavy import, and :mod:`refseg.data.synthetic` draws the images.
"""
from __future__ import annotations

from refseg.errors import InputError
from refseg.cite import infrastructure

#: Weld image size (rows, cols) of [0202]: "550*156" (width x height).
WELD_SHAPE = (156, 550)
#: Most pairs one ``refseg.data.synthetic.write_synthetic_dataset`` call draws (about 10 GB
#: at 550x156): a typo in the count fails at once instead of filling the disk.
MAX_COUNT = 100_000
#: Smallest side of a synthetic weld image: the seam, its margins and its texture need room.
MIN_SIDE = 32
#: Largest side of a synthetic weld image: far above the patent's 550x156, low enough that a
#: typo cannot ask for gigabytes.
MAX_SIDE = 8192
#: Largest seed of any synthetic image (``seed + count - 1``).
MAX_SEED = 2 ** 32 - 1


def _integer(text, name: str, minimum: int) -> int:
    try:
        value = int(str(text).strip())
    except ValueError:
        raise InputError(f"{name}: expected an integer, got {text!r}") from None
    if value < minimum:
        raise InputError(f"{name}: expected at least {minimum}, got {value}")
    return value


@infrastructure("argument parsing")
def parse_image_size(text) -> tuple[int, int]:
    """``"HxW"`` (rows x cols) as two ints, each side from :data:`MIN_SIDE` to :data:`MAX_SIDE`,
    at most :data:`refseg.vocabulary.MAX_PIXELS` pixels in all."""
    parts = str(text).lower().split("x")
    try:
        rows, cols = (int(v) for v in parts)
    except ValueError:
        raise InputError(f"--size: expected HxW (rows x cols) such as 156x550, "
                         f"got {text!r}") from None
    if min(rows, cols) < MIN_SIDE or max(rows, cols) > MAX_SIDE:
        raise InputError(f"--size: each side must be {MIN_SIDE}-{MAX_SIDE} pixels, "
                         f"got {rows}x{cols}")
    from refseg.vocabulary import MAX_PIXELS

    if rows * cols > MAX_PIXELS:
        # `dataset check` and `train` read at most this many pixels per image
        raise InputError(f"--size: {rows}x{cols} is {rows * cols:,} pixels, more than the "
                         f"{MAX_PIXELS:,} that refseg reads per image")
    return rows, cols


@infrastructure("argument validation")
def check_synthetic_options(out, count, seed, size) -> tuple[int, int, tuple[int, int]]:
    """(count, seed, (rows, cols)) of a synthetic data set, each checked: ``out`` given,
    ``count`` from 1 to :data:`MAX_COUNT`, ``seed`` >= 0 with the last image's seed at most
    :data:`MAX_SEED`, ``size`` ``"HxW"`` or (rows, cols) as :func:`parse_image_size` takes it.
    InputError otherwise."""
    if out is None:
        raise InputError("--out: the data set folder is required")
    if count is None:
        raise InputError("--count: the number of images is required")
    count = _integer(count, "--count", 1)
    if count > MAX_COUNT:
        raise InputError(f"--count: expected at most {MAX_COUNT}, got {count}")
    seed = _integer(seed, "--seed", 0)
    if seed + count - 1 > MAX_SEED:
        raise InputError(f"--seed: the last image's seed {seed + count - 1} exceeds {MAX_SEED}")
    if not isinstance(size, str):
        size = f"{size[0]}x{size[1]}"
    return count, seed, parse_image_size(size)
