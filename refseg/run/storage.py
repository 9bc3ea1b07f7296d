"""What a run folder keeps of its weights: the starting weights as what regenerates them, and
a checkpoint without the optimizer's state once training has ended.

A run's starting weights (``backbones.npz``: the frozen backbones after the batch-norm
calibration, and the decoder's initial weights) are mostly what ``ResMobileNet(seed=...)``
draws again: of about 48 M values, calibration changes only the backbones' moving statistics.
The file therefore holds the arrays that differ from the seed's draw (the calibrated
statistics; every array, for weights loaded from a file or another run), the seed, and the
SHA-256 of all the starting weights, which the regenerated model must match when the run is
read back: a refseg whose initialisers draw other numbers is refused, never used silently. A
file of every array (as earlier refseg versions wrote) is read as it is.

Adam's moments are needed only to continue training exactly; when a run's last epoch is
written they are dropped from ``checkpoint.npz`` (two thirds of its size), unless kept.
"""
from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import numpy as np

from refseg.errors import InputError
from refseg.publish import write_npz
from refseg.models import ResMobileNet
from refseg.models.weights import read_weight_file
from refseg.cite import infrastructure

#: The starting weights of a run.
STARTING_FILE = "backbones.npz"
#: Keys of the regeneration record inside it (no weight path contains ``@``).
SEED_KEY, DIGEST_KEY = "@regenerate/seed", "@regenerate/sha256"
#: The prefix of the optimizer's arrays in a checkpoint.
OPTIMIZER_PREFIX = "optimizer/"


@infrastructure("run storage: a digest of a model's weights")
def weights_digest(weights: dict[str, np.ndarray]) -> str:
    """SHA-256 over every array's key, dtype, shape and bytes, in key order."""
    digest = hashlib.sha256()
    for key in sorted(weights):
        value = np.ascontiguousarray(weights[key])
        digest.update(f"{key}|{value.dtype.str}|{value.shape}|".encode())
        digest.update(memoryview(value).cast("B"))
    return digest.hexdigest()


@infrastructure("run storage: the starting weights as what regenerates them")
def write_starting_weights(model: ResMobileNet, path, seed: int) -> int:
    """Write ``model``'s weights to ``path`` as the arrays that differ from a fresh
    ``ResMobileNet`` of the same shape, branches and ``seed``, plus the seed and the digest of
    all of them. Returns the number of arrays stored."""
    weights = model.weights()
    fresh = ResMobileNet(model.input_shape, branches=model.branches, seed=seed,
                         dtype=model.dtype).weights()
    kept = {key: np.ascontiguousarray(value) for key, value in weights.items()
            if not np.array_equal(value, fresh[key])}
    del fresh
    write_npz(Path(path), **kept, **{SEED_KEY: np.array(seed, np.int64),
                                     DIGEST_KEY: np.frombuffer(
                                         weights_digest(weights).encode(), np.uint8)})
    return len(kept)


@infrastructure("run storage: reading the starting weights back")
def load_starting_weights(model: ResMobileNet, path, seed: int) -> None:
    """Set ``model`` (built with ``seed``) to the starting weights in ``path``: the stored
    arrays over the seed's draw, checked against the recorded digest; or, for a file of every
    array, those. InputError naming the file when they do not fit."""
    path = Path(path)
    arrays = read_weight_file(path)
    record = {key: arrays.pop(key) for key in (SEED_KEY, DIGEST_KEY) if key in arrays}
    if record and set(record) != {SEED_KEY, DIGEST_KEY}:
        raise InputError(f"{path}: a damaged run file (half of its regeneration record)")
    if record and int(record[SEED_KEY]) != seed:
        raise InputError(f"{path}: drawn with seed {int(record[SEED_KEY])}, the run's settings "
                         f"say {seed}")
    report = model.set_weights(arrays, strict=False, source=str(path))
    if set(report.problems) - {"missing"}:
        raise InputError(f"{path}: {report.problem_line()}")
    if record:
        expected = record[DIGEST_KEY].tobytes().decode("ascii", "replace")
        if weights_digest(model.weights()) != expected:
            raise InputError(f"{path}: the starting weights regenerated from seed {seed} differ "
                             "from the run's (a refseg whose initialisers draw other numbers?)")


@infrastructure("run storage: the checkpoint without the optimizer's state")
def drop_optimizer_state(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The checkpoint's arrays without Adam's moments and step."""
    return {k: v for k, v in arrays.items() if not k.startswith(OPTIMIZER_PREFIX)}


@infrastructure("run storage: checked before a resumed run does any work")
def check_resumable(checkpoint, epochs: int) -> None:
    """InputError when the checkpoint ``checkpoint`` cannot be trained on to ``epochs``: its
    training ended and Adam's state was dropped. Reads the archive's index and its epoch only;
    a missing or unreadable file is left to the full read that follows."""
    path = Path(checkpoint)
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
        with np.load(path, allow_pickle=False) as npz:
            epoch = int(npz["epoch"])
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        return
    if epoch < epochs and not any(n.startswith(OPTIMIZER_PREFIX) for n in names):
        raise InputError(f"{path}: training ended after epoch {epoch} and its optimizer state "
                         "was dropped; training it further needs a run trained with "
                         "--keep-optimizer-state (or a new run with --init-from)")
