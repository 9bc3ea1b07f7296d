"""Reading input files: images (claim 1 step 1, the acquisition module of claim 5) and
``.npz`` archives.

Reading validates everything and raises :class:`~refseg.errors.InputError` with one line naming
the file and the problem. An image is read as a viewer shows it: its EXIF orientation is
applied (and recorded); a file of several frames (an animated GIF, a multi-page TIFF) is
refused with its frame count rather than silently read as its first frame. Spec reading
``R-input``. Writing outputs is :mod:`refseg.publish`'s.
"""
from __future__ import annotations

import io
import math
import warnings
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

from refseg.errors import InputError, reason
from refseg.cite import implements, infrastructure
from refseg.vocabulary import MAX_PIXELS, MAX_PIXELS_CEILING, MIN_SIZE


@infrastructure("argument validation")
def check_max_pixels(value) -> int:
    """``value`` as a pixel limit from 9 (3x3) to :data:`MAX_PIXELS_CEILING`; InputError
    otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or \
            not 9 <= value <= MAX_PIXELS_CEILING:
        raise InputError(f"--max-pixels: expected an integer from 9 to "
                         f"{MAX_PIXELS_CEILING}, got {value!r}")
    return int(value)


#: What a refusal of a large image tells the user of a command with ``--max-pixels``; a
#: command adds the memory it needs ("--max-pixels raises it; about 70 bytes ...":
#: :data:`refseg.vocabulary.EDGES_MEMORY`).
RAISE_HINT = "--max-pixels raises it"
#: Divisor taking 16-bit gray (0-65535) to the 0-255 scale: 65535 / 255 (R-input).
SIXTEEN_BIT_DIVISOR = 257.0
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_ALPHA_MODES = {"RGBA": "RGB", "LA": "L", "PA": "RGB", "RGBa": "RGB", "La": "L"}
_SIXTEEN_BIT_MODES = {"I;16", "I;16B", "I;16L", "I;16N", "I"}


@dataclass(frozen=True)
class LoadedImage:
    """An input image as refseg uses it.

    Attributes
    ----------
    pixels : ndarray
        (M, N, 3) uint8 RGB, (M, N) uint8 gray, or (M, N) float64 gray on the 0-255 scale
        (16-bit sources).
    path : str
    mode : str
        Pillow's mode of the file ("RGB", "P", "I;16", ...).
    bit_depth : int
        Bits per channel in the file (16 for 16-bit PNG/TIFF, else 8 or 1).
    notes : tuple of str
        What was done to the file's pixels (alpha dropped, palette expanded, 16-bit scaled,
        EXIF orientation applied...).
    exif_orientation : int
        The file's EXIF orientation tag (1-8), 1 when it has none; the pixels are already
        turned as it says (rows and cols are those of the turned image).
    """

    pixels: np.ndarray
    path: str
    mode: str
    bit_depth: int
    notes: tuple = ()
    exif_orientation: int = 1

    def info(self) -> dict:
        """JSON-ready description for reports."""
        rows, cols = self.pixels.shape[:2]
        return {"path": self.path, "mode": self.mode, "bit_depth": self.bit_depth,
                "rows": rows, "cols": cols, "exif_orientation": self.exif_orientation,
                "notes": list(self.notes)}


def _png_bit_depth(head: bytes) -> int | None:
    if head.startswith(_PNG_SIGNATURE) and len(head) >= 26 and head[12:16] == b"IHDR":
        return head[24]
    return None


@infrastructure("reading files with one-line errors")
def read_bytes(path, what: str = "file") -> bytes:
    """The whole content of a file that must exist and be non-empty; InputError naming the
    file otherwise (``what`` says what it should have been, e.g. "label file")."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such file")
    if p.is_dir():
        raise InputError(f"{p}: is a folder, not an {what}" if what[0] in "aeiou"
                         else f"{p}: is a folder, not a {what}")
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InputError(f"{p}: cannot be read ({exc.strerror or exc})") from None
    if not data:
        raise InputError(f"{p}: empty file (0 bytes)")
    return data


@infrastructure("decoding image files with one-line errors")
def decode_image(data: bytes, path, max_pixels: int = MAX_PIXELS,
                 raise_hint: str | None = RAISE_HINT) -> Image.Image:
    """A fully decoded Pillow image from a file's bytes; InputError naming ``path`` when the
    data is not an image, truncated, corrupt, or declares more than ``max_pixels`` pixels
    (checked from the header, before decoding); ``raise_hint`` says how the caller's user
    raises the limit, and what memory the caller needs (None: they cannot raise it)."""
    ImageFile.LOAD_TRUNCATED_IMAGES = False
    try:
        with warnings.catch_warnings():
            # refseg's own limit decides; Pillow's bomb warning would be a second message
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as im:
                cols, rows = im.size
                if rows * cols > max_pixels:
                    raise InputError(
                        f"{path}: {cols}x{rows} pixels is more than the limit of "
                        f"{max_pixels:,}" + (f" ({raise_hint})" if raise_hint else ""))
                frames = getattr(im, "n_frames", 1)
                if frames > 1:
                    raise InputError(
                        f"{path}: holds {frames} frames (an animated or multi-page image); "
                        "refseg reads single images: save the frame you want as its own file")
                im.load()
                return im.copy()
    except InputError:
        raise
    except UnidentifiedImageError:
        raise InputError(f"{path}: not an image file Pillow can read") from None
    except Image.DecompressionBombError as exc:
        raise InputError(f"{path}: refused as a decompression bomb ({exc})") from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise InputError(f"{path}: truncated or corrupt image data ({exc})") from None


@implements("claim1.step1.acquire", "claim5.acquisition_module")
def read_image(path, max_pixels: int = MAX_PIXELS,
               raise_hint: str | None = RAISE_HINT) -> LoadedImage:
    """Read an image file for claim-1 feature extraction.

    Parameters
    ----------
    path : str or Path
    max_pixels : int
        Refuse images with more pixels (rows x cols) than this, before decoding them
        (default :data:`MAX_PIXELS`).
    raise_hint : str or None
        How the user raises ``max_pixels``, and the memory the command needs, for the message
        (None: a command without the option).

    Returns
    -------
    LoadedImage

    Raises
    ------
    InputError
        Missing file, a folder, not an image, truncated or corrupt data, more than
        ``max_pixels`` pixels, a floating-point image, 32-bit values outside 0-65535, or fewer than 3x3 pixels; the message names the
        file.

    Notes
    -----
    1. Decode fully with Pillow (truncated files fail here, not later).
    2. Drop alpha; expand palettes; convert other colour modes to RGB; bilevel to 0/255.
    3. 16-bit gray is divided by 257 to the 0-255 scale (float64, not rounded).

    References
    ----------
    [0073]-[0074], [0201]-[0202], [0266]-[0267]; spec ``R-input``.
    """
    p = Path(path)
    data = read_bytes(p, "image file")
    image = decode_image(data, p, max_pixels, raise_hint)
    image, orientation = upright(image, p)
    cols, rows = image.size
    if rows < MIN_SIZE or cols < MIN_SIZE:
        raise InputError(f"{p}: image is {cols}x{rows} pixels (width x height); "
                         f"claim-1 operators need at least {MIN_SIZE}x{MIN_SIZE}")
    return _to_pixels(image, str(p), _png_bit_depth(data[:32]), orientation)


#: What each EXIF orientation (tag 274) asks a viewer to do, for the notes of a report.
EXIF_ORIENTATIONS = {2: "mirrored left-right", 3: "turned 180 degrees",
                     4: "mirrored top-bottom", 5: "transposed",
                     6: "turned 90 degrees clockwise", 7: "transversed",
                     8: "turned 90 degrees counter-clockwise"}


@infrastructure("reading images as viewers show them")
def upright(image: Image.Image, path) -> tuple[Image.Image, int]:
    """``image`` turned as its EXIF orientation says (Pillow's ``ImageOps.exif_transpose``),
    and that orientation (1 when none or invalid: such a tag is ignored, as viewers do)."""
    try:
        orientation = int(image.getexif().get(0x0112, 1))
    except (ValueError, TypeError, OSError, SyntaxError):
        orientation = 1
    if orientation not in EXIF_ORIENTATIONS:
        return image, 1
    try:
        return ImageOps.exif_transpose(image), orientation
    except (ValueError, TypeError, OSError, SyntaxError) as exc:
        raise InputError(f"{path}: its EXIF orientation {orientation} cannot be applied "
                         f"({exc})") from None


def _to_pixels(image: Image.Image, path: str, png_depth: int | None,
               orientation: int = 1) -> LoadedImage:
    mode, notes = image.mode, []
    if orientation != 1:
        notes.append(f"EXIF orientation {orientation} applied "
                     f"({EXIF_ORIENTATIONS[orientation]})")
    if mode in _SIXTEEN_BIT_MODES:
        values = np.asarray(image, dtype=np.float64)
        if values.min() < 0 or values.max() > 65535:
            raise InputError(f"{path}: {mode} image with values outside 0-65535 "
                             f"({values.min():g}..{values.max():g})")
        notes.append(f"16-bit gray divided by {SIXTEEN_BIT_DIVISOR:g} to the 0-255 scale")
        return LoadedImage(values / SIXTEEN_BIT_DIVISOR, path, mode, 16, tuple(notes),
                           orientation)
    if mode == "F":
        raise InputError(f"{path}: floating-point image (mode F): its value scale is unknown")
    if mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
        notes.append("palette expanded to RGB")
    if image.mode in _ALPHA_MODES:
        image = image.convert(_ALPHA_MODES[image.mode])
        notes.append("alpha channel ignored")
    if image.mode == "1":
        image = image.convert("L")
        notes.append("bilevel read as 0/255")
    if image.mode not in ("RGB", "L"):
        notes.append(f"{image.mode} converted to RGB by Pillow")
        image = image.convert("RGB")
    depth = 8 if mode != "1" else 1
    if png_depth == 16:
        depth = 16
        notes.append("16-bit colour PNG reduced to 8 bits by Pillow (high byte)")
    return LoadedImage(np.asarray(image, dtype=np.uint8).copy(), path, mode, depth,
                       tuple(notes), orientation)


#: The most the arrays of one ``.npz`` that refseg reads may declare, together: ten times the
#: largest file refseg writes (a checkpoint with both backbones trained).
MAX_NPZ_BYTES = 2 * 2 ** 30


@infrastructure("reading .npz archives without trusting their headers")
def check_npz_members(path, max_bytes: int = MAX_NPZ_BYTES, *,
                      objects_ok: bool = False) -> None:
    """Check an ``.npz`` archive's members from their headers, before anything is allocated.

    Each member must be a ``.npy`` array of a non-object dtype whose declared shape agrees
    with the bytes the archive records for it, and the declared sizes together may not exceed
    ``max_bytes``: a small file that declares a huge array (or inflates to one) is refused with
    one line naming the file, instead of a MemoryError. With ``objects_ok``, object-dtype
    members pass here, for a caller that reports them one by one (``np.load`` with
    ``allow_pickle=False`` refuses them).
    """
    total = 0
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                name = info.filename
                if not name.endswith(".npy"):
                    raise InputError(f"{path}: member {name!r} is not a .npy array")
                with archive.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(member)
                    elif version == (2, 0):
                        shape, _, dtype = np.lib.format.read_array_header_2_0(member)
                    else:
                        raise InputError(f"{path}: member {name!r}: .npy format version "
                                         f"{version} is not read")
                    header = member.tell()
                if dtype.hasobject and objects_ok:
                    continue
                if dtype.hasobject:
                    raise InputError(f"{path}: holds pickled objects ({name[:-4]}), which "
                                     "refseg never loads")
                declared = math.prod(shape) * dtype.itemsize
                if info.file_size != header + declared:
                    raise InputError(
                        f"{path}: member {name!r} declares {shape} {dtype} ({declared:,} "
                        f"bytes) but holds {info.file_size - header:,}: truncated or forged")
                total += declared
                if total > max_bytes:
                    raise InputError(f"{path}: its arrays declare more than {max_bytes:,} "
                                     f"bytes (at {name!r}); refused before loading")
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError,
            NotImplementedError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(f"{path}: not a readable .npz archive, truncated or corrupt "
                         f"({reason(exc)})") from None


