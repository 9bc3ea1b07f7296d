"""Reading input images (claim 1 step 1, the acquisition module of claim 5) and writing outputs.

Reading validates everything and raises :class:`~refseg.errors.InputError` with one line naming
the file and the problem. Writing is atomic: a file is written under a temporary name in its
folder and renamed into place, so a crash never leaves a half-written file under a final name.
Spec reading ``R-input``.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import io
import json
import math
import os
import shutil
import stat
import tempfile
import warnings
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageFile, UnidentifiedImageError

from refseg.errors import InputError
from refseg.claim1.preprocess import MIN_SIZE
from refseg.trace import implements, infrastructure

#: The largest image (rows x cols) read unless a caller asks for more: ``refseg edges`` peaks
#: at about 120 bytes per pixel (0.72 GB for 3000x2000), so 25 megapixels (a 6000x4000
#: photograph) needs some 3 GB; a file's declared size is checked before any pixel is decoded.
MAX_PIXELS = 25_000_000

#: The most that ``max_pixels`` may be raised to.
MAX_PIXELS_CEILING = 10 ** 10


@infrastructure("argument validation")
def check_max_pixels(value) -> int:
    """``value`` as a pixel limit from 9 (3x3) to :data:`MAX_PIXELS_CEILING`; InputError
    otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or \
            not 9 <= value <= MAX_PIXELS_CEILING:
        raise InputError(f"--max-pixels: expected an integer from 9 to "
                         f"{MAX_PIXELS_CEILING}, got {value!r}")
    return int(value)


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
        What was done to the file's pixels (alpha dropped, palette expanded, 16-bit scaled...).
    """

    pixels: np.ndarray
    path: str
    mode: str
    bit_depth: int
    notes: tuple = ()

    def info(self) -> dict:
        """JSON-ready description for reports."""
        rows, cols = self.pixels.shape[:2]
        return {"path": self.path, "mode": self.mode, "bit_depth": self.bit_depth,
                "rows": rows, "cols": cols, "notes": list(self.notes)}


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
def decode_image(data: bytes, path, max_pixels: int = MAX_PIXELS) -> Image.Image:
    """A fully decoded Pillow image from a file's bytes; InputError naming ``path`` when the
    data is not an image, truncated, corrupt, or declares more than ``max_pixels`` pixels
    (checked from the header, before decoding)."""
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
                        f"{max_pixels:,} (--max-pixels raises it; about 120 bytes of memory "
                        "per pixel are needed)")
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
def read_image(path, max_pixels: int = MAX_PIXELS) -> LoadedImage:
    """Read an image file for claim-1 feature extraction.

    Parameters
    ----------
    path : str or Path
    max_pixels : int
        Refuse images with more pixels (rows x cols) than this, before decoding them
        (default :data:`MAX_PIXELS`).

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
    image = decode_image(data, p, max_pixels)
    cols, rows = image.size
    if rows < MIN_SIZE or cols < MIN_SIZE:
        raise InputError(f"{p}: image is {cols}x{rows} pixels (width x height); "
                         f"claim-1 operators need at least {MIN_SIZE}x{MIN_SIZE}")
    return _to_pixels(image, str(p), _png_bit_depth(data[:32]))


def _to_pixels(image: Image.Image, path: str, png_depth: int | None) -> LoadedImage:
    mode, notes = image.mode, []
    if mode in _SIXTEEN_BIT_MODES:
        values = np.asarray(image, dtype=np.float64)
        if values.min() < 0 or values.max() > 65535:
            raise InputError(f"{path}: {mode} image with values outside 0-65535 "
                             f"({values.min():g}..{values.max():g})")
        notes.append(f"16-bit gray divided by {SIXTEEN_BIT_DIVISOR:g} to the 0-255 scale")
        return LoadedImage(values / SIXTEEN_BIT_DIVISOR, path, mode, 16, tuple(notes))
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
    return LoadedImage(np.asarray(image, dtype=np.uint8).copy(), path, mode, depth, tuple(notes))


@infrastructure("file permissions of outputs")
def default_mode(folder: bool = False) -> int:
    """Permissions an ordinary new file (folder) gets under the current umask; temporary
    files start private (0600/0700) and are given these before they are renamed into place."""
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if folder else 0o666) & ~umask


def _atomic_write(path: Path, write) -> None:
    """Call ``write(file_object)`` on a temporary file beside ``path``, then rename it."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp",
                                   dir=path.parent)
    except OSError as exc:
        if not path.parent.is_dir():
            raise OSError(exc.errno, "the output folder does not exist",
                          str(path.parent)) from None
        raise OSError(exc.errno, f"could not be written: {exc.strerror or exc}",
                      str(path)) from None
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.chmod(tmp, default_mode())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        # named by the file the user asked for, not by its temporary name
        raise OSError(exc.errno, f"could not be written: {exc.strerror or exc}",
                      str(path)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@infrastructure("atomic output files")
def write_png(path, array) -> None:
    """Write a uint8 (M, N) or (M, N, 3) array as PNG, atomically."""
    image = Image.fromarray(np.ascontiguousarray(array, dtype=np.uint8))
    _atomic_write(Path(path), lambda f: image.save(f, format="PNG"))


@infrastructure("atomic output files")
def write_npz(path, compressed: bool = False, **arrays) -> None:
    """Write arrays to an .npz, atomically (no pickled objects); with ``compressed``, the
    integer and boolean arrays are deflated."""
    if not compressed:
        _atomic_write(Path(path), lambda f: np.savez(f, **arrays))
        return

    def save(f):
        with zipfile.ZipFile(f, "w") as archive:
            for name, value in arrays.items():
                value = np.asanyarray(value)
                # integer maps deflate 50-fold in moments; float planes hardly shrink and take
                # seconds per megapixel, so they are stored
                method = zipfile.ZIP_STORED if value.dtype.kind in "fc" else zipfile.ZIP_DEFLATED
                info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = method
                with archive.open(info, "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, value, allow_pickle=False)
    _atomic_write(Path(path), save)


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
                         f"({type(exc).__name__}: {exc})") from None


@infrastructure("atomic output files")
def write_text(path, text: str) -> None:
    """Write UTF-8 text, atomically."""
    data = text.encode("utf-8")
    _atomic_write(Path(path), lambda f: f.write(data))


@infrastructure("atomic output files")
def write_json(path, data) -> None:
    """Write JSON (sorted keys, indented), atomically."""
    text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    _atomic_write(Path(path), lambda f: f.write(text.encode("utf-8")))


#: Staging folders are named ``.refseg-staging-<pid>-<random>``, temporary files
#: ``.<name>.<pid>.<random>.tmp``: the pid tells a live writer's from a dead one's.
STAGING_PREFIX = ".refseg-staging-"
#: Every output folder refseg publishes holds this file; a later command may replace such a
#: folder (or add to it), never a folder of someone else's files.
OUTPUT_MARKER = ".refseg-output"
_TARGET_SUFFIX = ".target"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _dead(pid_text: str) -> bool:
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except (ValueError, PermissionError, OverflowError):
        return False  # not ours to judge: another user's process, or not a pid at all
    return False


def _writer_pid(name: str) -> str | None:
    """The pid in the name of a refseg staging folder, its journal, or a temporary file."""
    if name.startswith(STAGING_PREFIX):
        return name[len(STAGING_PREFIX):].split("-", 1)[0]
    if name.startswith(".") and name.endswith(".tmp") and name.count(".") >= 4:
        return name.rsplit(".", 3)[-3]
    return None


def _is_ours_in_progress(name: str) -> bool:
    pid = _writer_pid(name)
    return pid is not None and pid.isdigit()


@infrastructure("removing what killed refseg processes left behind")
def sweep_stale(folder) -> list[str]:
    """Remove the staging folders and temporary files that a refseg process killed outright
    (SIGKILL, power loss) left in ``folder``; those of live processes are kept. A publication
    that was cut between its two renames (only where the file system cannot swap two folders
    in one step) is completed first. Returns the names removed."""
    folder = Path(folder)
    removed = []
    entries = sorted(folder.iterdir()) if folder.is_dir() else []
    for journal in [e for e in entries if e.name.endswith(_TARGET_SUFFIX)]:
        pid = _writer_pid(journal.name)
        if pid and pid.isdigit() and _dead(pid):
            staged = journal.with_name(journal.name[:-len(_TARGET_SUFFIX)])
            target = folder / journal.read_text(encoding="utf-8").strip()
            if staged.is_dir() and not target.exists() and target.parent == folder:
                staged.rename(target)  # the new result was complete: finish publishing it
            journal.unlink(missing_ok=True)
    for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
        pid = _writer_pid(entry.name)
        if pid and pid.isdigit() and _dead(pid):
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() and \
                not entry.is_symlink() else entry.unlink(missing_ok=True)
            removed.append(entry.name)
    return removed


def _exchange(a: Path, b: Path) -> bool:
    """Swap the paths ``a`` and ``b`` in one step (Linux ``renameat2`` with
    ``RENAME_EXCHANGE``); False where the system or the file system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(b))


def _refseg_wrote(out: Path) -> bool:
    """Whether ``out`` may be replaced by a refseg command: it is empty (but for refseg's own
    leftovers) or holds :data:`OUTPUT_MARKER`."""
    if (out / OUTPUT_MARKER).is_file():
        return True
    return all(_is_ours_in_progress(entry.name) for entry in out.iterdir())


@infrastructure("checking an output folder before the work that fills it")
def check_output_folder(out) -> Path:
    """``out`` as a Path, after checking that a refseg command may publish there: it does not
    exist yet, is empty, or was published by refseg (it holds :data:`OUTPUT_MARKER`). Call it
    before heavy work, so that a wrong ``--out`` fails at once."""
    out = Path(out)
    if out.is_symlink() and not out.exists():
        raise InputError(f"{out}: is a link to nothing")
    if out.exists():
        if not out.is_dir():
            raise InputError(f"{out}: exists and is not a folder")
        if not _refseg_wrote(out):
            others = sorted(e.name for e in out.iterdir() if not _is_ours_in_progress(e.name))
            shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
            raise InputError(f"{out}: holds files that refseg did not write ({shown}); "
                             "choose a new or empty folder")
    return out


@infrastructure("checking an output folder before the work that fills it")
def check_replaceable(out: Path, names, files, command: str) -> None:
    """Each existing ``out/<name>`` that a command is about to replace holds nothing but the
    ``files`` that ``command`` writes there: a file of the user's is never deleted."""
    for name in names:
        folder = Path(out) / name
        if not folder.exists():
            continue
        foreign = sorted(p.name for p in folder.iterdir() if p.name not in files) \
            if folder.is_dir() else [folder.name]
        if foreign:
            raise InputError(f"{folder}: exists and holds files {command} did not write "
                             f"({', '.join(foreign[:3])}); choose another --out")


@infrastructure("all-or-nothing output folders")
class StagedFolders:
    """Stage the whole next state of an output folder ``out`` in a hidden sibling folder, then
    swap it into place in one step: a failed or killed command leaves ``out`` as it was, and a
    reader never sees a mix of old and new outputs.

    Entries of an existing ``out`` that the command does not write again are carried over
    (hard links, no copying), so that ``edges a.png`` after ``edges b.png`` keeps ``b/``.
    ``out`` itself is a new folder afterwards: a shell whose working folder was ``out`` must
    ``cd`` into it again.
    """

    def __init__(self, out: Path):
        # a link to a folder: its target is the folder replaced, the link stays
        self.out = out = Path(os.path.realpath(check_output_folder(out)))
        missing = [p for p in (out.parent, *out.parent.parents) if not p.exists()]
        self.created = missing[-1] if missing else None
        out.parent.mkdir(parents=True, exist_ok=True)
        sweep_stale(out.parent)
        if out.is_dir():
            sweep_stale(out)
        self.root = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-",
                                          dir=out.parent))

    def folder(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(mode=default_mode(folder=True))
        return path

    def publish(self) -> None:
        out, root = self.out, self.root
        if out.is_dir():
            for entry in sorted(out.iterdir()):
                if not (root / entry.name).exists() and not _is_ours_in_progress(entry.name):
                    _carry_over(entry, root / entry.name)
        write_json(root / OUTPUT_MARKER, {"written_by": "refseg", "version": _version()})
        os.chmod(root, stat.S_IMODE(out.stat().st_mode) if out.is_dir()
                 else default_mode(folder=True))
        if not out.exists():
            root.rename(out)
        elif _exchange(root, out):
            shutil.rmtree(root)  # now the previous state of out
        else:
            journal = root.with_name(root.name + _TARGET_SUFFIX)
            write_text(journal, out.name)
            old = root.with_name(root.name + "-old")
            out.rename(old)
            root.rename(out)
            journal.unlink()
            shutil.rmtree(old)

    def abandon(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        if self.created is not None:
            # folders made only to hold ``out``, emptied again
            for folder in (self.out.parent, *self.out.parent.parents):
                if folder == self.created.parent:
                    break
                try:
                    folder.rmdir()
                except OSError:
                    break


def _carry_over(source: Path, destination: Path) -> None:
    if source.is_dir() and not source.is_symlink():
        shutil.copytree(source, destination, symlinks=True, copy_function=os.link)
    else:
        os.link(source, destination, follow_symlinks=False)


def _version() -> str:
    from refseg._version import __version__
    return __version__


@contextlib.contextmanager
@infrastructure("all-or-nothing output folders")
def staged_folders(out):
    """Stage the next state of the folder ``out`` and publish it in one step, or not at all.

    ``with staged_folders(out) as staging:`` yields a :class:`StagedFolders`: what the block
    writes into ``staging.root`` (or folders made with ``staging.folder(name)``) becomes
    ``out`` when the block ends normally, together with what ``out`` held that the block did
    not write again; when the block raises (or is interrupted) it is removed and ``out`` is
    untouched. ``out`` must be new, empty or a folder refseg published
    (:func:`check_output_folder`).
    """
    staging = StagedFolders(Path(out))
    try:
        yield staging
        staging.publish()
    except OSError as exc:
        staging.abandon()
        staged = Path(exc.filename) if exc.filename else None
        if staged is not None and staged.is_relative_to(staging.root):
            # named where the user will look for it, not by the staging folder's name
            final = staging.out / staged.relative_to(staging.root)
            raise OSError(exc.errno, exc.strerror, str(final)) from None
        raise
    except BaseException:
        staging.abandon()
        raise
