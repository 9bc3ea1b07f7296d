"""The checks that keep a run folder sound across starts and resumes: the run apart from its
data, the thread layout it was started with (for identical bits on resume), the epochs it
holds, its settings compared file by file, and a failed start undone."""
from __future__ import annotations

import json
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np

from refseg.errors import InputError

INFRASTRUCTURE = "keeping run folders sound across starts and resumes"

#: The run's record of the thread count its matrix products are cut into tiles for.
THREADS_RECORD = "threads.json"


def recorded_tiles(run: Path, log) -> int | None:
    """The tiling count a run started with (``threads.json``), which a resumed run must
    keep for identical bits; None (with a line) for a run from before the record."""
    path = run / THREADS_RECORD
    if not path.is_file():
        print(f"{path}: missing (a run from an older refseg); resuming with this machine's "
              "thread layout, so the bits may differ from an uninterrupted run", file=log)
        return None
    try:
        count = json.loads(path.read_text(encoding="utf-8"))["tiling_threads"]
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a thread layout record ({type(exc).__name__}: "
                         f"{exc})") from None
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 4096:
        raise InputError(f"{path}: tiling_threads must be an integer from 1 to 4096, got "
                         f"{count!r}")
    return count


def check_apart(run: Path, data: Path) -> None:
    """The run folder and the data set are apart: neither inside the other."""
    a, b = Path(os.path.realpath(run)), Path(os.path.realpath(data))
    if a == b or b in a.parents:
        raise InputError(f"{run}: is inside the data set {data}; choose a run folder outside it")
    if a in b.parents:
        raise InputError(f"{run}: holds the data set {data}; choose another run folder")


def clear_new_run(run: Path, fresh: bool) -> None:
    """After a failed start: the run folder, new or empty before, as it was (refseg alone wrote
    into it, under its lock)."""
    if fresh:
        shutil.rmtree(run, ignore_errors=True)
        return
    for entry in run.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


#: Settings naming files: the same file spelled another way (relative, absolute) is the same.
PATH_SETTINGS = ("weights", "init_from")


def same_path(a, b) -> bool:
    if a is None or b is None or not isinstance(a, str) or not isinstance(b, str):
        return a == b
    return os.path.realpath(a) == os.path.realpath(b)


def trained_epochs(path: Path) -> int | None:
    """The epoch of a run's checkpoint, read alone (None when there is none yet)."""
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as npz:
            epoch = npz["epoch"]
        if epoch.shape != () or epoch.dtype.kind not in "iu":
            raise ValueError(f"epoch {epoch.dtype} {epoch.shape}, a scalar integer expected")
        return int(epoch)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:
        raise InputError(f"{path}: not a readable refseg checkpoint ({type(exc).__name__}: "
                         f"{exc})") from None
