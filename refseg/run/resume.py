"""The checks that keep a run folder sound across starts and resumes: the run apart from its
data, the thread layout it was started with (for identical bits on resume), the epochs it
holds, its settings and its data set compared with the ones it started with, and a failed start
undone."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import zipfile
from pathlib import Path

import numpy as np

from refseg.cite import infrastructure
from refseg.errors import InputError, reason
from refseg.publish import is_reserved
from refseg.run.config import TrainConfig
from refseg.run.records import read_run_config

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
        raise InputError(f"{path}: not a thread layout record ("
                         f"{reason(exc)})") from None
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
        raise InputError(f"{path}: not a readable refseg checkpoint ("
                         f"{reason(exc)})") from None


def check_run_folder(run: Path, config: TrainConfig, resume: bool) -> TrainConfig | None:
    """Check the run folder against the resume policy: a resumed run keeps its settings
    (only more epochs and later learning-rate steps may be added), a new run starts in an
    empty folder. Returns the saved settings of a resumed run; writes nothing."""
    if run.exists() and not run.is_dir():
        raise InputError(f"{run}: exists and is not a folder")
    if not resume:
        if run.exists() and any(not is_reserved(e.name) for e in run.iterdir()):
            raise InputError(f"{run}: run folder exists and is not empty (use --resume)")
        return None
    if not (run / "config.json").is_file():
        raise InputError(f"{run}: nothing to resume (no config.json)")
    saved = read_run_config(run / "config.json")
    extendable = {"epochs", "learning_rate_steps"}
    old, new = saved.to_json(), config.to_json()
    for name in old:
        if name in PATH_SETTINGS and same_path(old[name], new[name]):
            continue
        if name not in extendable and old[name] != new[name]:
            raise InputError(f"{run}: --resume needs the run's own settings: {name} is "
                             f"{json.dumps(old[name])} in the run, {json.dumps(new[name])} now")
    done = trained_epochs(run / "checkpoint.npz")
    if done is not None and config.epochs < done:
        raise InputError(f"{run}: --epochs {config.epochs} is fewer than the {done} epochs "
                         "already trained; give the total to reach, at least "
                         f"{done}")
    return saved


#: The run's record of the data set it trains on.
DATA_RECORD = "data.json"


@infrastructure("the identity of a run's data set, for resuming")
def data_identity(data) -> dict:
    """What identifies a data set: its folder, and each pair's stem, file names, sizes and the
    SHA-256 of the image's and the label's bytes; ``sha256`` digests all of them in order."""
    digest, files = hashlib.sha256(), []
    for sample in data:
        entry = {"stem": sample.stem}
        for role, path in (("image", sample.image_path), ("label", sample.label_path)):
            content = path.read_bytes()
            entry[role] = {"name": path.name, "bytes": len(content),
                           "sha256": hashlib.sha256(content).hexdigest()}
            digest.update(entry[role]["sha256"].encode())
        files.append(entry)
    return {"folder": str(Path(data.folder).resolve()), "pairs": len(files),
            "sha256": digest.hexdigest(), "files": files}


def check_same_data(run: Path, identity: dict, log) -> None:
    """A resumed run trains on the data it started with: the same pairs with the same bytes
    (the folder may have moved). Runs from before this record are resumed unchecked."""
    path = run / DATA_RECORD
    if not path.is_file():
        print(f"{run}: no {DATA_RECORD} (a run of an older refseg): the data set is not "
              "checked", file=log)
        return
    saved = json.loads(path.read_text())
    if saved["sha256"] == identity["sha256"]:
        if saved["folder"] != identity["folder"]:
            print(f"data set moved: {saved['folder']} -> {identity['folder']} (same files)",
                  file=log)
        return
    before = {f["stem"]: f for f in saved["files"]}
    now = {f["stem"]: f for f in identity["files"]}
    gone, added = sorted(set(before) - set(now)), sorted(set(now) - set(before))
    changed = sorted(s for s in set(before) & set(now) if before[s] != now[s])
    what = "; ".join(part for part in (
        f"{len(gone)} pairs gone ({', '.join(gone[:3])})" if gone else "",
        f"{len(added)} pairs added ({', '.join(added[:3])})" if added else "",
        f"{len(changed)} pairs changed ({', '.join(changed[:3])})" if changed else "") if part)
    raise InputError(f"{identity['folder']}: not the data set the run {run} was trained on "
                     f"({what}); --resume needs the same images and labels")
