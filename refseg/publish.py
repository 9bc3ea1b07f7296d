"""Publishing outputs: a command's files appear whole or not at all, and a user's never change.

The rules, in one place (the guide's "publishing contract"):

1. Every output folder refseg publishes holds :data:`OUTPUT_MARKER`. The marker is also the
   folder's lock: a writer holds an exclusive ``flock`` on it from before it stages anything
   until its outputs are in place. A second writer into the same folder waits (saying so on
   stderr); a lock dies with its process, so liveness never depends on pids or names. The
   marker is opened only when it is a plain file (with other hard links, only when it holds
   refseg's record), and made again before publishing when it was removed meanwhile
   (:meth:`FolderLock.keep`).
2. A command stages its outputs in a folder *inside* the target (``.refseg-staging-*``, made
   with ``mkdtemp``), which holds :data:`STAGING_MARKER`, created with ``O_CREAT|O_EXCL`` and
   locked by the writer. Nothing is ever created, renamed or removed in the target's parent
   but the target itself (made when it does not exist, removed again when a failed command
   made it and left it empty).
3. Publishing moves the staged entries into the target one by one, after writing their list
   (:data:`JOURNAL`) into the staging folder. Only the entries a command writes are replaced;
   every other entry of the target stays.
4. Under the target's lock, a staging folder that holds :data:`STAGING_MARKER` whose lock no
   process holds is dead: the sweeper completes its publication when its list was written
   (roll forward) and removes it. Nothing else is ever swept. Before any verb runs, every
   folder its paths name or lie in is swept so (:func:`settle_paths`).
5. A single-file output (:func:`check_single_output`) never replaces an input of the same
   command, and replaces an existing file only when refseg wrote it (recorded in an extended
   attribute, where the file system keeps one) or the user passes ``--force``. Every file
   is written through ``write`` under a temporary name and renamed (:func:`atomic_files`),
   never over a link, folder, pipe or device.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import socket
import stat
import sys
import tempfile
from pathlib import Path

from refseg.atomic import (TEMP_TAG, WRITTEN_ATTRIBUTE, _atomic_write, _lstat,  # noqa: F401
                           atomic_files, check_replaceable_file, check_single_output,
                           default_mode, naming, what_it_is, write_json, write_npz, write_png,
                           write_text)
from refseg.errors import InputError
from refseg.cite import infrastructure

#: Every output folder refseg publishes holds this file; it is also the folder's lock.
OUTPUT_MARKER = ".refseg-output"
#: Staging folders are made inside the target, named with this prefix.
STAGING_PREFIX = ".refseg-staging-"
#: Inside a staging folder: locked by its live writer; proves the folder is refseg's.
STAGING_MARKER = ".refseg-staging"
#: Inside a staging folder: the entries to move into the target, written when all are staged.
JOURNAL = ".refseg-publishing"
_ASIDE = ".refseg-replaced"
_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)


@infrastructure("the names refseg keeps for itself")
def is_reserved(name: str) -> bool:
    """Whether ``name`` is one of the names refseg keeps for itself inside an output folder."""
    return name in (OUTPUT_MARKER, STAGING_MARKER, JOURNAL) or name.startswith(STAGING_PREFIX) \
        or (name.startswith(".") and TEMP_TAG in name and name.endswith(".tmp"))


# ---------------------------------------------------------------- locks

def _try_lock(fd: int, mode: int) -> bool | None:
    """True when the lock is taken, False when another process holds it, None when the file
    system keeps no locks."""
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as exc:
        if exc.errno in _NO_LOCKS:
            return None
        raise


class FolderLock:
    """The exclusive lock of an output folder: ``flock`` on its :data:`OUTPUT_MARKER`, taken
    by :meth:`acquire` (creating the folder and the marker when missing; waiting, with a line
    on stderr, while another process holds it) and released by :meth:`release` or by the
    process's end. ``held`` is False on a file system that keeps no locks."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.fd: int | None = None
        self.held = False
        self.made_marker = False

    def acquire(self) -> "FolderLock":
        self.fd, self.made_marker, taken = self._lock_marker(make_folder=True)
        self.held = bool(taken)
        if self.made_marker or self.held:
            _write_holder(self.fd)
        return self

    def _lock_marker(self, make_folder: bool) -> tuple[int, bool, bool | None]:
        """``(fd, made, taken)``: the marker opened (made when missing) and locked."""
        marker = self.folder / OUTPUT_MARKER
        while True:
            if make_folder:
                self.folder.mkdir(parents=True, exist_ok=True, mode=default_mode(folder=True))
            opened = _open_marker(marker)
            if opened is None:
                continue  # removed between two looks: look again
            taken = self._take(opened[0])
            if _same_file(opened[0], marker):
                return (*opened, taken)
            # the folder was removed by the writer we waited for: start again
            os.close(opened[0])

    def _take(self, fd: int) -> bool | None:
        """Lock ``fd``, waiting (with a line on stderr) while another process holds it."""
        taken = _try_lock(fd, fcntl.LOCK_EX)
        if taken is False:
            holder = _read_holder(fd)
            print(f"refseg: {self.folder}: another refseg command{holder} is writing "
                  "here; waiting for it to finish", file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
            taken = True
        return taken

    def keep(self) -> None:
        """Before the folder is left to the next command: its marker is still the file this
        lock holds. When it was removed (or replaced) while the command ran, a new marker is
        made and locked in its place, so that the folder stays one refseg published."""
        if self.fd is None or not self.folder.is_dir() or \
                _same_file(self.fd, self.folder / OUTPUT_MARKER):
            return
        fd, _, taken = self._lock_marker(make_folder=False)
        os.close(self.fd)
        self.fd, self.held = fd, bool(taken)
        _write_holder(fd)

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _refuse_marker(marker: Path, what: str):
    raise InputError(f"{marker}: this folder's lock file is {what}, not a plain file of "
                     "refseg's; refseg will not follow, open or write it")


def _open_marker(marker: Path) -> tuple[int, bool] | None:
    """``(fd, made)``: the marker opened for reading and writing, made when missing; None
    when it vanished between two looks. A marker that is a symbolic link, a folder, a named
    pipe, a device or a socket is refused before it is opened; one with other hard links
    only when it holds refseg's record (a copy of a refseg folder made with hard links), as
    writing it could otherwise change another file of the user's."""
    flags = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        return os.open(marker, flags | os.O_CREAT | os.O_EXCL, default_mode()), True
    except FileExistsError:
        pass
    found = _lstat(marker)
    if found is None:
        return None
    if what_it_is(found) is not None:
        _refuse_marker(marker, what_it_is(found))
    try:
        # no side effects of opening a special file swapped in since the look above
        fd = os.open(marker, flags | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        found = _lstat(marker)
        _refuse_marker(marker, what_it_is(found) or f"not openable ({exc.strerror})")
    opened = os.fstat(fd)
    what = what_it_is(opened)
    if what is None and opened.st_nlink > 1 and not _holds_holder_record(fd):
        what = f"a file with {opened.st_nlink} hard links that refseg did not write"
    if what is not None:
        os.close(fd)
        _refuse_marker(marker, what)
    os.set_blocking(fd, True)
    return fd, False


def _holds_holder_record(fd: int) -> bool:
    try:
        record = json.loads(os.pread(fd, 4096, 0))
    except (ValueError, OSError):
        return False
    return isinstance(record, dict) and record.get("written_by") == "refseg"


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.lstat(path)
    except FileNotFoundError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _write_holder(fd: int) -> None:
    from refseg._version import __version__

    record = {"written_by": "refseg", "version": __version__, "pid": os.getpid(),
              "host": socket.gethostname()}
    data = (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _read_holder(fd: int) -> str:
    """`` (pid P on HOST)`` from a marker, for the waiting line only: never used to judge."""
    try:
        record = json.loads(os.pread(fd, 4096, 0))
        pid, host = int(record["pid"]), str(record["host"])[:64]
    except (ValueError, KeyError, TypeError, OSError):
        return ""
    return f" (pid {pid} on {host})" if host.isprintable() else ""


@contextlib.contextmanager
@infrastructure("serialising writers into one folder")
def locked_folder(folder):
    """Hold ``folder``'s lock (created with its marker when missing) for the block, after
    sweeping what dead writers left in it (:func:`sweep_stale`); for commands that write
    into their folder directly, like ``refseg train`` into its run folder."""
    lock = FolderLock(Path(folder)).acquire()
    try:
        if lock.held:
            sweep_stale(folder)
        yield lock
        lock.keep()
    finally:
        lock.release()


# ---------------------------------------------------------------- sweeping and publishing

def _dead_staging(entry: Path) -> bool:
    """Whether ``entry`` is a refseg staging folder that no live process holds."""
    if not entry.name.startswith(STAGING_PREFIX) or entry.is_symlink() or not entry.is_dir():
        return False
    marker = entry / STAGING_MARKER
    if marker.is_symlink() or not marker.is_file():
        return False
    fd = os.open(marker, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        return _try_lock(fd, fcntl.LOCK_EX) is True
    finally:
        os.close(fd)


def _move_in(staged: Path, target: Path, aside: Path) -> None:
    """Put ``staged`` at ``target``; an old ``target`` goes into ``aside`` first. Each state
    between the steps is one :func:`_roll_forward` completes."""
    moved = None
    if target.is_dir() and not target.is_symlink():
        aside.mkdir(exist_ok=True)
        moved = aside / target.name
        os.rename(target, moved)
    try:
        os.replace(staged, target)
    except OSError:
        if moved is not None:
            os.rename(moved, target)  # the old entry back in place
        raise


def _roll_forward(root: Path, out: Path) -> None:
    """Finish the publication of a dead writer's staging folder whose list was written."""
    journal = root / JOURNAL
    if not journal.is_file():
        return
    try:
        names = json.loads(journal.read_text(encoding="utf-8"))["entries"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return
    for name in names if isinstance(names, list) else []:
        if not _plain_name(name):
            continue
        staged = root / name
        if staged.exists() or staged.is_symlink():
            _move_in(staged, out / name, root / _ASIDE)


def _plain_name(name) -> bool:
    """A name of one entry in a folder, not refseg's own."""
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name \
        and "\0" not in name and not is_reserved(name)


@infrastructure("removing what killed refseg processes left behind")
def sweep_stale(folder) -> list[str]:
    """In a folder whose lock the caller holds: complete the publications that a killed
    refseg process had begun, then remove its staging folders and the temporary files of its
    atomic writes. Only staging folders holding :data:`STAGING_MARKER` unlocked count as dead;
    temporary files count as dead because the caller holds the folder's lock. Returns the
    names removed."""
    folder = Path(folder)
    removed = []
    for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
        if _dead_staging(entry):
            _roll_forward(entry, folder)
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry.name)
        elif entry.name.startswith(".") and TEMP_TAG in entry.name and \
                entry.name.endswith(".tmp") and entry.is_file() and not entry.is_symlink():
            entry.unlink(missing_ok=True)
            removed.append(entry.name)
    return removed


def _foreign(out: Path) -> list[str]:
    return sorted(e.name for e in out.iterdir() if not is_reserved(e.name))


def _check_writable(out: Path) -> None:
    existing = next(p for p in (out, *out.parents) if p.exists())
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InputError(f"{out}: cannot write into {existing} (permission denied)")


@infrastructure("checking an output folder before the work that fills it")
def check_output_folder(out) -> Path:
    """``out`` as a Path, after checking that a refseg command may publish there: it does not
    exist yet (and its nearest existing folder is writable), or it is a writable folder that
    is empty or holds :data:`OUTPUT_MARKER`. Call it before heavy work, so that a wrong
    ``--out`` fails at once."""
    out = Path(out)
    if out.is_symlink() and not out.exists():
        raise InputError(f"{out}: is a link to nothing")
    if out.exists():
        if not out.is_dir():
            raise InputError(f"{out}: exists and is not a folder")
        found = _lstat(out / OUTPUT_MARKER)
        if what_it_is(found) is not None:
            _refuse_marker(out / OUTPUT_MARKER, what_it_is(found))
        if found is None and _foreign(out):
            others = _foreign(out)
            shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
            raise InputError(f"{out}: holds files that refseg did not write ({shown}); "
                             "choose a new or empty folder")
    _check_writable(Path(os.path.realpath(out)))
    return out


@infrastructure("checking an output folder before the work that fills it")
def check_replaceable(out: Path, names, files, command: str) -> None:
    """Each existing ``out/<name>`` that a command is about to replace holds nothing but the
    ``files`` that ``command`` writes there, and can be moved: a file of the user's is never
    deleted, and a permission problem is found before the work."""
    for name in names:
        if is_reserved(name):
            raise InputError(f"{Path(out) / name}: the name {name!r} is refseg's own; "
                             "rename the input")
        folder = Path(out) / name
        if not folder.exists() and not folder.is_symlink():
            continue
        foreign = sorted(p.name for p in folder.iterdir() if p.name not in files) \
            if folder.is_dir() and not folder.is_symlink() else [folder.name]
        if foreign:
            raise InputError(f"{folder}: exists and holds files {command} did not write "
                             f"({', '.join(foreign[:3])}); choose another --out")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise InputError(f"{folder}: cannot be replaced (permission denied)")


@infrastructure("all-or-nothing output folders")
class StagedFolders:
    """The staging of one command's outputs inside its output folder ``out`` (see the module
    notes): :attr:`root` is the staging folder; :meth:`folder` makes a folder in it."""

    def __init__(self, out: Path):
        out = check_output_folder(out)
        # a link to a folder: its target receives the outputs, the link stays
        self.out = Path(os.path.realpath(out))
        missing = [p for p in (self.out, *self.out.parents) if not p.exists()]
        self.created = missing[-1] if missing else None
        self.lock = FolderLock(self.out).acquire()
        self.root = None
        try:
            check_output_folder(self.out)  # again: another writer may have gone first
            if self.lock.held:
                sweep_stale(self.out)
            self.root = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=self.out))
            self._marker = os.open(self.root / STAGING_MARKER,
                                   os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            _try_lock(self._marker, fcntl.LOCK_EX)
        except BaseException:
            self.abandon()
            raise

    def folder(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(mode=default_mode(folder=True))
        return path

    def publish(self) -> None:
        root, out = self.root, self.out
        names = sorted(p.name for p in root.iterdir() if not is_reserved(p.name))
        for name in names:
            # a folder where a file is staged (or the reverse) is found before anything moves
            target, folder = out / name, (root / name).is_dir()
            found = _lstat(target)
            what = what_it_is(found)
            if what is not None and what != "a folder":
                raise InputError(f"{target}: is {what}; refseg replaces only what it wrote")
            if found is not None and stat.S_ISDIR(found.st_mode) != folder:
                raise InputError(f"{target}: exists as a {'file' if folder else 'folder'}; "
                                 f"refseg writes a {'folder' if folder else 'file'} there")
        self.lock.keep()  # a marker removed while the command ran is made again
        write_json(root / JOURNAL, {"entries": names})
        for name in names:
            _move_in(root / name, out / name, root / _ASIDE)
        self._close()
        shutil.rmtree(root)

    def _close(self) -> None:
        if getattr(self, "_marker", None) is not None:
            os.close(self._marker)
            self._marker = None

    def abandon(self) -> None:
        self._close()
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)
        if self.lock.made_marker and self.lock.fd is not None and \
                not _foreign(self.out):
            # nothing was ever published here: the folder is as the command found it
            (self.out / OUTPUT_MARKER).unlink(missing_ok=True)
        self.lock.release()
        if self.created is not None:
            # folders made only to hold ``out``, emptied again
            for folder in (self.out, *self.out.parents):
                try:
                    folder.rmdir()
                except OSError:
                    break
                if folder == self.created:
                    break

    def finish(self) -> None:
        self.lock.release()


def _named_for_the_user(exc: OSError, staging: StagedFolders) -> OSError:
    where = Path(exc.filename) if exc.filename else None
    if where is None:
        return OSError(exc.errno, exc.strerror or str(exc), str(staging.out))
    if staging.root is not None and where.is_relative_to(staging.root) and \
            where != staging.root:
        # named where the user will look for it, not by the staging folder's name
        return OSError(exc.errno, exc.strerror, str(staging.out / where.relative_to(
            staging.root)))
    return exc


@contextlib.contextmanager
@infrastructure("all-or-nothing output folders")
def staged_folders(out):
    """Stage outputs inside the folder ``out`` and publish them, or nothing.

    ``with staged_folders(out) as staging:`` yields a :class:`StagedFolders`: what the block
    writes into ``staging.root`` (or folders made with ``staging.folder(name)``) is moved into
    ``out`` when the block ends normally, replacing the entries of those names; every other
    entry of ``out`` stays. When the block raises (or is interrupted) the staging is removed
    and ``out`` is as it was. ``out`` must be new, empty or a folder refseg published
    (:func:`check_output_folder`); another writer into it is waited for.
    """
    staging = StagedFolders(Path(out))
    try:
        yield staging
        staging.publish()
    except OSError as exc:
        staging.abandon()
        raise _named_for_the_user(exc, staging) from None
    except BaseException:
        staging.abandon()
        raise
    staging.finish()


@infrastructure("reading a folder refseg publishes")
def settle(folder) -> None:
    """Before reading a folder refseg published: wait for a writer into it to finish, and
    complete a publication a killed writer began, so that a reader never takes a half-moved
    set for a whole one. A folder without :data:`OUTPUT_MARKER` is left alone."""
    folder = Path(folder)
    try:
        if _lstat(folder / OUTPUT_MARKER) is None or \
                not any(_dead_or_live_staging(e) for e in folder.iterdir()):
            return
    except PermissionError:
        return  # a folder that cannot be listed cannot be half-moved by refseg either
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{folder}: holds a publication that was cut short, and this "
                         "folder is not writable to complete it")
    with locked_folder(folder):
        pass


@infrastructure("reading a folder refseg publishes")
def settle_paths(paths) -> None:
    """:func:`settle` every folder refseg published among ``paths`` and the folders holding
    them, each once: what the command line does before any verb runs, so that every reader
    (and writer) sees the folders it names whole."""
    seen: set[Path] = set()
    for path in paths:
        for folder in (Path(os.path.abspath(path)), *Path(os.path.abspath(path)).parents):
            if folder in seen:
                break  # and so were the folders holding it
            seen.add(folder)
            if folder.is_dir():
                settle(folder)


def _dead_or_live_staging(entry: Path) -> bool:
    return entry.name.startswith(STAGING_PREFIX) and (entry / STAGING_MARKER).is_file()


@contextlib.contextmanager
@infrastructure("serialising writers into one folder")
def published_folder(folder, command: str):
    """Hold the lock of ``folder``, a folder refseg published (it holds
    :data:`OUTPUT_MARKER`), for the block; for a verb that rewrites a file of such a folder in
    place (``refseg report``). A folder refseg did not publish is refused (InputError): no
    verb replaces a file in it."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: no such folder")
    if _lstat(folder / OUTPUT_MARKER) is None:
        raise InputError(f"{folder}: not a folder refseg published (no {OUTPUT_MARKER}); "
                         f"{command} writes only into refseg's own folders")
    with locked_folder(folder) as lock:
        yield lock


__all__ = ["OUTPUT_MARKER", "STAGING_PREFIX", "FolderLock", "StagedFolders", "atomic_files",
           "check_output_folder", "check_replaceable", "check_replaceable_file",
           "check_single_output", "default_mode", "locked_folder", "published_folder",
           "settle", "settle_paths", "staged_folders", "sweep_stale", "what_it_is",
           "write_json", "write_npz", "write_png", "write_text"]
