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

The last epoch's checkpoint stores each trained array against the run's starting weights,
which the run regenerates anyway: the bits of the trained array XOR those of the starting one,
cut into byte planes (the most significant bytes of all values together, then the next ones)
and deflated. Training moves a weight by a small part of its size, so sign, exponent and the
first mantissa bits rarely change and their planes deflate to almost nothing, and a weight
training left alone is zeros in every plane. Reading it back XORs the same bits again and is
exact; the SHA-256 of the trained arrays, stored beside them, must match. The lower planes of
the values training moved stay noise: a trained decoder still takes over half its float32
size.
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
#: The prefixes of the trained arrays and of the optimizer's arrays in a checkpoint.
MODEL_PREFIX, OPTIMIZER_PREFIX = "model/", "optimizer/"
#: In a checkpoint whose trained arrays are stored against the starting weights: the SHA-256
#: of the trained arrays they rebuild.
AGAINST_START_KEY = "@against-start/sha256"


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


def _xor_planes(value: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """The bits of ``value`` XOR those of ``reference`` (same dtype and size) as byte planes:
    a (itemsize, size) uint8 array whose row i holds byte i of every value."""
    value = np.ascontiguousarray(value)
    reference = np.ascontiguousarray(reference, dtype=value.dtype)
    bits = value.reshape(-1).view(np.uint8) ^ reference.reshape(-1).view(np.uint8)
    return np.ascontiguousarray(bits.reshape(-1, value.itemsize).T)


@infrastructure("run storage: the trained weights against the starting weights")
def pack_against_start(arrays: dict[str, np.ndarray],
                       start: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The checkpoint's ``arrays`` with every trained array ``model/<key>`` replaced by the
    byte planes of its bits XOR those of ``start[key]`` (the run's starting weights), and the
    SHA-256 of the trained arrays under :data:`AGAINST_START_KEY`. Stored deflated, the planes
    that training hardly changes take almost no room."""
    packed, trained = {}, {}
    for name, value in arrays.items():
        if not name.startswith(MODEL_PREFIX):
            packed[name] = value
            continue
        key = name[len(MODEL_PREFIX):]
        trained[key] = value
        packed[name] = _xor_planes(value, start[key])
    packed[AGAINST_START_KEY] = np.frombuffer(weights_digest(trained).encode(), np.uint8)
    return packed


@infrastructure("run storage: the trained weights against the starting weights")
def unpack_against_start(planes: dict[str, np.ndarray], digest: np.ndarray,
                         start: dict[str, np.ndarray], path) -> dict[str, np.ndarray]:
    """The trained arrays (by key, without ``model/``) from their byte planes ``planes`` and
    the starting weights ``start`` they were packed against (:func:`pack_against_start`);
    InputError naming ``path`` when they do not fit or do not rebuild the recorded digest."""
    trained = {}
    for key, plane in planes.items():
        reference = start.get(key)
        if reference is None or plane.dtype != np.uint8 or plane.shape != (
                reference.itemsize, reference.size):
            raise InputError(f"{path}: a damaged refseg checkpoint ({key} does not fit the "
                             "run's starting weights)")
        shape, reference = reference.shape, np.ascontiguousarray(reference)  # 1-d if 0-d
        bits = np.ascontiguousarray(plane.T).reshape(-1) ^ reference.reshape(-1).view(np.uint8)
        trained[key] = bits.view(reference.dtype).reshape(shape)
    if weights_digest(trained) != digest.tobytes().decode("ascii", "replace"):
        raise InputError(f"{path}: its trained weights do not rebuild on the run's starting "
                         "weights (a damaged checkpoint, or starting weights of another run)")
    return trained
