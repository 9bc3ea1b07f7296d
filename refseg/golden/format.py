"""The golden bundle's format: names, storage rules, tolerances, hashes, reading and writing.

A bundle is a folder with two files:

``manifest.json``
    The format and its version, the versions that wrote it (refseg, NumPy, Python, the C
    compiler), where each input came from, the network's seed and the SHA-256 of its
    regenerated weights, and one entry per array: shape, dtype, SHA-256, role (input or
    output), the tolerance a candidate must meet and why, the claim element and paragraphs,
    the refseg function and its parameters.
``arrays.npz``
    The arrays, one ``.npy`` member each, deflate-compressed, written with fixed zip timestamps
    so that the same refseg on the same machine writes the same bytes.

Array names are paths: ``input/<image>``, ``claim1/<image>/<step>``, ``net/...``,
``ops/<op>/<role>``. Arrays too large to store (the decoder's big gradient and Adam tensors)
are stored as two corner slices plus summary statistics.

References: claims 1-4; [0075]-[0119], [0122]-[0197], [0242]-[0255].
"""
from __future__ import annotations

import fnmatch
import functools
import hashlib
import io
import json
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from refseg import imageio
from refseg.errors import InputError
from refseg.trace import load_registry

INFRASTRUCTURE = "golden files: the bundle format"

FORMAT = "refseg-golden"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
ARRAYS = "arrays.npz"

#: Arrays with more elements than this are stored as slices and statistics, not in full.
FULL_LIMIT = 1 << 17
#: Edge of the corner blocks stored of a large array (along each of its last two axes).
SLICE_EDGE = 16

# -- tolerances ----------------------------------------------------------------------------------
#: ``exact``: equal values. ``relmax``: |candidate - golden| <= rtol * max|golden| at every
#: element (max|golden| taken as 1 when the golden array is all zero).
TOLERANCES = {
    "exact": {
        "rule": "exact", "rtol": 0.0,
        "why": "integer data (input pixels, labels) and the binary maps of claim 1: a decision "
               "either agrees or it does not; any difference is a different edge or vote."},
    "float64": {
        "rule": "relmax", "rtol": 1e-9,
        "why": "float64 results of sums and products whose order an independent "
               "implementation may change (e.g. 0.299 R + 0.587 G + 0.114 B against "
               "(299 R + 587 G + 114 B) / 1000, separable against 2-D filters): rounding "
               "differences are ~1e-15 of the largest value; 1e-9 leaves six orders of "
               "headroom and still catches any change of formula, constant or border."},
    "float32": {
        "rule": "relmax", "rtol": 1e-4,
        "why": "float32 network activations after up to ~50 layers of sums of up to 18,432 "
               "products (3x3x2048); float32 rounding (6e-8) accumulated over that depth and "
               "a different GEMM blocking stays below ~1e-5 of the largest value (measured: "
               "refseg float32 against refseg float64 on the same weights, taps <= 8.1e-7, "
               "decoder layers <= 6.5e-7; refseg against Keras <= 1.4e-6 per layer); 1e-4 "
               "catches any wrong weight layout, "
               "padding or activation, which give errors of order 1."},
    "float32_grad": {
        "rule": "relmax", "rtol": 1e-3,
        "why": "float32 gradients and Adam moments: as float32 activations, plus the "
               "backward pass through every decoder layer, whose ReLU masks can flip at "
               "values within rounding of 0 (measured float32 against float64: gradients <= 1.9e-6, "
               "Adam moments <= 3.6e-5); 1e-3 of the largest value."},
    "adam_param": {
        "rule": "relmax", "rtol": 1e-3,
        "why": "weights after Adam steps: each step moves a weight by lr * m_hat / "
               "(sqrt(v_hat) + eps), about +-lr (1e-3) wherever |g| >> eps but with a slope "
               "of up to lr / eps = 1e4 in g where |g| is near eps (1e-7), so rounding-level "
               "gradient differences are amplified; biases start at 0, so their largest value "
               "is ~lr. Measured refseg float32 against float64: 3.6e-5; 1e-3 of the largest "
               "weight still catches a wrong update rule, bias correction or eps placement "
               "(errors of order 1 relative to lr)."},
}

#: How SHA-256 digests are taken.
HASH_RULE = ("sha256 of the array's bytes in C order, little-endian, in its dtype; for the "
             "network weights: for each key in sorted order, the UTF-8 key, a NUL byte, the "
             "dtype string (e.g. '<f4'), a NUL byte, the shape as comma-separated integers, a "
             "NUL byte, then the array's bytes as above")


def _canonical(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array)
    # np.ascontiguousarray would turn a 0-d array into 1-d
    return np.asarray(array, dtype=array.dtype.newbyteorder("<"), order="C")


def array_sha256(array) -> str:
    """SHA-256 (hex) of an array's bytes in C order, little-endian (see :data:`HASH_RULE`).

    Parameters
    ----------
    array : array_like

    Returns
    -------
    str
    """
    return hashlib.sha256(_canonical(array).tobytes()).hexdigest()


def weights_sha256(weights: dict) -> str:
    """SHA-256 (hex) of a set of named weight arrays, keys in sorted order (see
    :data:`HASH_RULE`).

    Parameters
    ----------
    weights : dict of str to ndarray

    Returns
    -------
    str
    """
    digest = hashlib.sha256()
    for key in sorted(weights):
        array = _canonical(weights[key])
        digest.update(key.encode() + b"\0" + array.dtype.str.encode() + b"\0"
                      + ",".join(str(n) for n in array.shape).encode() + b"\0")
        digest.update(array.tobytes())
    return digest.hexdigest()


# -- building the bundle -------------------------------------------------------------------------
@dataclass
class BundleBuilder:
    arrays: dict = field(default_factory=dict)     # stored npz members
    entries: dict = field(default_factory=dict)    # manifest entries by array name
    keep: tuple = ()                               # patterns of arrays to keep whole
    kept: dict = field(default_factory=dict)       # copies of summary-stored arrays

    def add(self, name, array, tolerance, *, claim, function, paragraphs=None, params=None,
            role="output", note="", also=()):
        """Add one array; ``paragraphs`` defaults to the registry's for ``claim``."""
        array = np.asarray(array)
        if paragraphs is None:
            paragraphs = element_paragraphs(claim)
        if name in self.entries:
            raise AssertionError(f"golden: duplicate array name {name}")
        entry = {"shape": list(array.shape), "dtype": array.dtype.str,
                 "sha256": array_sha256(array), "role": role,
                 "tolerance": tolerance, "claim": claim, "paragraphs": paragraphs,
                 "function": function}
        if also:
            # further claim elements this array pins: the result of a whole step (the feature
            # map: the traversal, the extraction, the feature module), not only its last formula
            entry["also_pins"] = list(also)
        if params:
            entry["params"] = params
        if note:
            entry["note"] = note
        if array.size <= FULL_LIMIT:
            entry["storage"] = "full"
            self.arrays[name] = _canonical(array)
        else:
            entry["storage"] = "summary"
            if any(fnmatch.fnmatchcase(name, p) for p in self.keep):
                self.kept[name] = array.copy()
            entry["stats"] = summary_statistics(array)
            entry["slices"] = []
            for i, index in enumerate(_corner_slices(array.shape)):
                key = f"{name}@slice{i}"
                self.arrays[key] = _canonical(array[tuple(slice(a, b) for a, b in index)])
                entry["slices"].append({"member": key, "index": [list(p) for p in index]})
        self.entries[name] = entry


@functools.lru_cache(maxsize=None)
def element_paragraphs(element_id: str) -> str:
    """The paragraphs of a claim element as the registry lists them: ``"[0082], [0083]"``."""
    element = load_registry().elements[element_id]
    return ", ".join(f"[{p}]" for p in element.paragraphs)


def _corner_slices(shape):
    """The first and the last SLICE_EDGE x SLICE_EDGE block over the last two axes, whole
    leading axes (a 3x3 kernel's spatial axes) up to 3 elements."""
    first, last = [], []
    for axis, n in enumerate(shape):
        edge = SLICE_EDGE if axis >= len(shape) - 2 else 3
        first.append((0, min(n, edge)))
        last.append((max(0, n - edge), n))
    return [first, last]


def summary_statistics(array) -> dict:
    a = np.asarray(array, dtype=np.float64)
    return {"sum": float(a.sum()), "abs_sum": float(np.abs(a).sum()),
            "l2": float(np.sqrt(np.square(a).sum())), "max_abs": float(np.abs(a).max())}


def tolerance(kind):
    return {"name": kind, **TOLERANCES[kind]}


def write_deterministic_npz(path: Path, arrays: dict):
    """An .npz with fixed member timestamps and order: the same arrays give the same bytes."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        for name in sorted(arrays):
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, arrays[name], allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, buffer.getvalue(), compresslevel=6)


def read_bundle(folder) -> tuple[dict, dict]:
    """The manifest and stored arrays of a bundle.

    Parameters
    ----------
    folder : str or Path

    Returns
    -------
    manifest : dict
    arrays : dict of str to ndarray

    Raises
    ------
    InputError
        Missing or unreadable files, another format or a newer format version, a malformed
        manifest (:func:`_check_manifest`), an ``arrays.npz`` whose SHA-256 or any of whose
        arrays' SHA-256 is not the manifest's.
    """
    folder = Path(folder)
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{folder}: no {MANIFEST}; not a golden bundle") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{folder / MANIFEST}: not readable JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise InputError(f"{folder / MANIFEST}: not a {FORMAT} manifest")
    if manifest.get("format_version", 0) > FORMAT_VERSION:
        raise InputError(f"{folder / MANIFEST}: format version "
                         f"{manifest.get('format_version')} is newer than this refseg "
                         f"reads ({FORMAT_VERSION})")
    path = folder / MANIFEST
    _check_manifest(manifest, path)
    arrays_path = folder / ARRAYS
    if arrays_path.is_file():
        digest = hashlib.sha256(arrays_path.read_bytes()).hexdigest()
        if digest != manifest["arrays_file_sha256"]:
            raise InputError(f"{arrays_path}: its SHA-256 is not the one {MANIFEST} records; "
                             "the bundle was changed after it was written")
    arrays = read_npz(arrays_path, "bundle arrays")
    for name, entry in manifest["arrays"].items():
        members = [name] if entry["storage"] == "full" else \
            [part["member"] for part in entry["slices"]]
        for member in members:
            if member not in arrays or isinstance(arrays[member], Exception):
                raise InputError(f"{arrays_path}: no readable array {member!r}, which "
                                 f"{MANIFEST} lists")
        if entry["storage"] == "full" and array_sha256(arrays[name]) != entry["sha256"]:
            raise InputError(f"{arrays_path}: array {name!r} does not hash to the SHA-256 "
                             f"{MANIFEST} records; the bundle was changed after it was written")
    return manifest, arrays


#: The fields every array entry of a manifest has, and their JSON types.
ENTRY_FIELDS = {"shape": list, "dtype": str, "sha256": str, "role": str, "tolerance": dict,
                "claim": str, "storage": str}


def _check_manifest(manifest: dict, path: Path) -> None:
    """The manifest's structure, before any array is read: the arrays file is the bundle's own
    ``arrays.npz`` (no path leads elsewhere), every entry has its fields with their types, and
    every tolerance is one of :data:`TOLERANCES` exactly (a bundle cannot widen its own)."""
    if manifest.get("arrays_file", ARRAYS) != ARRAYS:
        raise InputError(f"{path}: arrays_file must be {ARRAYS!r}, the bundle's own file, "
                         f"got {manifest.get('arrays_file')!r}")
    if not isinstance(manifest.get("arrays_file_sha256"), str):
        raise InputError(f"{path}: no arrays_file_sha256, so {ARRAYS} cannot be verified")
    entries = manifest.get("arrays")
    if not isinstance(entries, dict) or not entries:
        raise InputError(f"{path}: no 'arrays' table of array entries")
    allowed = {kind: {"name": kind, **rule} for kind, rule in TOLERANCES.items()}
    for name, entry in entries.items():
        if not isinstance(entry, dict):
            raise InputError(f"{path}: entry {name!r} is not a table")
        for key, kind in ENTRY_FIELDS.items():
            if not isinstance(entry.get(key), kind):
                raise InputError(f"{path}: entry {name!r}: {key!r} missing or not a "
                                 f"{kind.__name__}")
        try:
            np.dtype(entry["dtype"])
            shape = tuple(int(n) for n in entry["shape"])
        except (TypeError, ValueError):
            raise InputError(f"{path}: entry {name!r}: dtype {entry['dtype']!r} or shape "
                             f"{entry['shape']!r} is not valid") from None
        if any(n < 0 for n in shape):
            raise InputError(f"{path}: entry {name!r}: negative length in shape {shape}")
        if entry["tolerance"] != allowed.get(entry["tolerance"].get("name")):
            raise InputError(f"{path}: entry {name!r}: tolerance {entry['tolerance']} is not "
                             f"one of the format's ({', '.join(TOLERANCES)})")
        if entry["role"] not in ("input", "output"):
            raise InputError(f"{path}: entry {name!r}: role {entry['role']!r} is not input or "
                             "output")
        if entry["storage"] == "summary":
            slices, stats = entry.get("slices"), entry.get("stats")
            if not (isinstance(slices, list) and slices and isinstance(stats, dict)
                    and all(isinstance(s, dict) and isinstance(s.get("member"), str)
                            and isinstance(s.get("index"), list) for s in slices)
                    and all(isinstance(stats.get(k), (int, float))
                            for k in ("sum", "abs_sum", "l2", "max_abs"))):
                raise InputError(f"{path}: entry {name!r}: slices or statistics malformed")
        elif entry["storage"] != "full":
            raise InputError(f"{path}: entry {name!r}: storage {entry['storage']!r} is not "
                             "full or summary")


def read_npz(path: Path, what: str) -> dict:
    if not path.is_file():
        raise InputError(f"{path}: no such file ({what})")
    with open(path, "rb") as f:
        head = f.read(4)
    if head != b"PK\x03\x04":
        raise InputError(f"{path}: not an .npz archive ({what})")
    imageio.check_npz_members(path, objects_ok=True)
    arrays = {}
    try:
        with np.load(path, allow_pickle=False) as npz:
            for key in npz.files:
                try:
                    arrays[key] = npz[key]
                except ValueError as exc:
                    arrays[key] = exc  # object arrays: reported per array
                if not isinstance(arrays[key], (np.ndarray, Exception)):
                    arrays[key] = ValueError(f"member {key!r} is not a .npy array")
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise InputError(f"{path}: not a readable .npz archive ({what}: {exc})") from None
    return arrays


def pinned_elements(manifest: dict) -> dict[str, list[str]]:
    """{claim element: the names of the arrays that pin it} of a bundle's manifest (each
    array's ``claim`` and its ``also_pins``)."""
    out: dict[str, list[str]] = {}
    for name, entry in manifest["arrays"].items():
        for claim in [entry["claim"], *entry.get("also_pins", [])]:
            out.setdefault(claim, []).append(name)
    return out

