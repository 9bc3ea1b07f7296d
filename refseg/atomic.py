"""Single output files, written whole or not at all (the publishing contract's rule 5, see
:mod:`refseg.publish`): each is written through ``write`` into a temporary file beside it
(``.<name>.refseg-<random>.tmp``), synced, marked as refseg's (:data:`WRITTEN_ATTRIBUTE`)
and renamed over its path. Nothing is memory-mapped for writing, so a full disk is an OSError
naming the file, not a SIGBUS; a link, folder, named pipe or device where a file is to be
written is refused, never replaced or written through.
"""
from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

from refseg.cite import infrastructure
from refseg.errors import InputError
from refseg.zipwrite import write_npz_members

#: Temporary files of atomic writes: ``.<name>.refseg-<random>.tmp`` beside the file.
TEMP_TAG = ".refseg-"
#: The extended attribute recording that refseg wrote a single-file output.
WRITTEN_ATTRIBUTE = "user.refseg.written"


@infrastructure("file permissions of outputs")
def default_mode(folder: bool = False) -> int:
    """Permissions an ordinary new file (folder) gets under the current umask; temporary
    files start private (0600/0700) and are given these before they are renamed into place."""
    umask = os.umask(0)
    os.umask(umask)
    return (0o777 if folder else 0o666) & ~umask


@infrastructure("atomic output files")
def what_it_is(status: os.stat_result | None) -> str | None:
    """What a file of status ``status`` (from ``os.lstat``) is when it is not a plain file:
    "a symbolic link", "a folder", "a named pipe (FIFO)", "a device" or "a socket"; None for
    a plain file or none at all (``status`` None)."""
    mode = status.st_mode if status is not None else stat.S_IFREG
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a device"),
                       (stat.S_ISBLK, "a device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return None


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


@infrastructure("atomic output files")
def check_replaceable_file(path) -> None:
    """An existing ``path`` that an atomic write would replace is a plain file: a link, a
    folder, a named pipe, a device or a socket there is refused (InputError naming it). A
    plain file with other hard links is replaced, never written through: its other names
    keep its old content."""
    found = _lstat(Path(path))
    what = what_it_is(found)
    if what is not None:
        raise InputError(f"{path}: is {what}; refseg replaces only plain files it wrote")


def _atomic_write(path: Path, write) -> None:
    """Call ``write(file_object)`` on a temporary file beside ``path``, then rename it."""
    with atomic_files([path]) as (file,):
        write(file)


def _temporary_beside(path: Path) -> tuple[int, str]:
    try:
        return tempfile.mkstemp(prefix=f".{path.name}{TEMP_TAG}", suffix=".tmp",
                                dir=path.parent)
    except OSError as exc:
        if not path.parent.is_dir():
            raise OSError(exc.errno, "the output folder does not exist",
                          str(path.parent)) from None
        raise OSError(exc.errno, f"could not be written: {exc.strerror or exc}",
                      str(path)) from None


@contextlib.contextmanager
@infrastructure("atomic output files")
def atomic_files(paths):
    """Files written whole or not at all: yields a binary file object on a temporary file
    beside each of ``paths`` (in order); when the block ends normally each is synced, given
    :func:`default_mode` and renamed to its path, otherwise every one is removed.

    They are written through ``write``, never memory-mapped: a full disk is an OSError
    (ENOSPC) naming the file, not a SIGBUS. An OSError without a file name names the file
    when there is one; an existing path that is not a plain file is refused first
    (:func:`check_replaceable_file`)."""
    paths = [Path(p) for p in paths]
    for path in paths:
        check_replaceable_file(path)
    opened: list[tuple[Path, str, object]] = []
    try:
        for path in paths:
            fd, tmp = _temporary_beside(path)
            opened.append((path, tmp, os.fdopen(fd, "wb")))
        yield tuple(f for _, _, f in opened)
        for path, tmp, f in opened:
            f.flush()
            os.fsync(f.fileno())
            f.close()
            os.chmod(tmp, default_mode())
            with contextlib.suppress(OSError):
                os.setxattr(tmp, WRITTEN_ATTRIBUTE, b"1")
        for path, tmp, _ in opened:
            os.replace(tmp, path)
    except OSError as exc:
        _remove_temporaries(opened)
        # named by the file the user asked for, not by its temporary name
        where = {tmp: path for path, tmp, _ in opened}.get(exc.filename) if exc.filename \
            else (paths[0] if len(paths) == 1 else None)
        if where is None:
            raise
        raise OSError(exc.errno, f"could not be written: {exc.strerror or exc}",
                      str(where)) from None
    except BaseException:
        _remove_temporaries(opened)
        raise


def _remove_temporaries(opened) -> None:
    for _, tmp, f in opened:
        with contextlib.suppress(OSError):
            f.close()
        Path(tmp).unlink(missing_ok=True)


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

    # integer maps deflate 50-fold in moments; float planes hardly shrink and take seconds
    # per megapixel, so they are stored
    _atomic_write(Path(path), lambda f: write_npz_members(
        f, arrays, deflate=lambda value: value.dtype.kind not in "fc"))


@infrastructure("atomic output files")
def write_text(path, text: str) -> None:
    """Write UTF-8 text, atomically."""
    data = text.encode("utf-8")
    _atomic_write(Path(path), lambda f: f.write(data))


@infrastructure("atomic output files")
def write_json(path, data) -> None:
    """Write JSON (sorted keys, indented), atomically."""
    text = json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError:
        # a file name that is not UTF-8: kept exactly, as JSON escapes
        encoded = (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("ascii")
    _atomic_write(Path(path), lambda f: f.write(encoded))


def _written_by_refseg(path: Path) -> bool:
    try:
        return os.getxattr(path, WRITTEN_ATTRIBUTE, follow_symlinks=False) == b"1"
    except OSError:
        return False


@infrastructure("checking an output file before the work that fills it")
def check_single_output(path, inputs=(), force: bool = False, option: str = "--force") -> Path:
    """``path`` as a Path, after checking that a command may write that one file: it is not
    one of the command's ``inputs`` nor inside an input folder (never, not even with
    ``force``), not a folder, its folder exists and is writable, and it does not exist, or
    refseg wrote it, or ``force`` is given. InputError naming the file otherwise."""
    path = Path(path)
    real = Path(os.path.realpath(path))
    for given in inputs:
        source = Path(os.path.realpath(given))
        if real == source or source in real.parents:
            raise InputError(f"{path}: is an input of this command ({given}); "
                             "choose another output file")
    if path.is_dir():
        raise InputError(f"{path}: is a folder; expected a file name")
    folder = real.parent
    if not folder.is_dir():
        raise InputError(f"{path}: its folder {path.parent} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{path}: its folder {path.parent} is not writable")
    if (path.exists() or path.is_symlink()) and not force and not _written_by_refseg(path):
        raise InputError(f"{path}: exists and refseg did not write it; {option} replaces it")
    return path


@contextlib.contextmanager
@infrastructure("errors naming the file")
def naming(path):
    """An OSError raised in the block without a file name (a full disk inside a zip writer)
    names ``path``."""
    try:
        yield
    except OSError as exc:
        if exc.filename:
            raise
        raise OSError(exc.errno, f"could not be written: {exc.strerror or exc}",
                      str(path)) from None


__all__ = ["TEMP_TAG", "WRITTEN_ATTRIBUTE", "atomic_files", "check_replaceable_file",
           "check_single_output", "default_mode", "naming", "what_it_is", "write_json",
           "write_npz", "write_png", "write_text"]
