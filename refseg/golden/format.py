"""The golden bundle's format: names, storage rules, tolerances, hashes, reading and writing.

A bundle is a folder with these files:

``manifest.json``
    The format and its version, the versions that wrote it (refseg, NumPy, Python, the C
    compiler), where each input came from, the network (seed, SHA-256 of its weights, every
    layer with its inputs and settings), the files of the bundle with their SHA-256, and one
    entry per array, in pipeline order: shape, dtype, SHA-256, role (input or output), what
    the array is (``meaning``), the arrays it is computed from, the tolerance a candidate
    must meet and why, the claim element and paragraphs, the spec readings (``R-...``) it
    follows, the refseg function and every parameter of its step.
``arrays.npz``
    The arrays, one ``.npy`` member each, deflate-compressed, written with fixed zip timestamps
    so that the same refseg on the same machine writes the same bytes.
``readings.md``
    The text of every spec reading an entry cites, so that the folder alone is the reference.
``manifest.schema.json``
    The JSON Schema of ``manifest.json`` (:mod:`~refseg.golden.schema`), with a versioned
    ``$id``.
``weights.npz`` (only when written with ``--with-weights``)
    The network's weights by Keras path, uncompressed; they hash (:data:`HASH_RULE`) to the
    manifest's ``network.weights_sha256``.

Array names are paths: ``input/<image>``, ``claim1/<image>/<step>``, ``net/...``,
``ops/<op>/<role>``; the first part (``input`` counting as ``claim1``) is the array's part.
Arrays too large to store (the decoder's big gradient and Adam tensors) are stored as two
corner slices, a seeded random sample of positions with their values, per-block sums and
summary statistics: an interior change then fails as surely as one at the corners.

References: claims 1-4; [0075]-[0119], [0122]-[0197], [0242]-[0255].
"""
from __future__ import annotations

import fnmatch
import functools
import hashlib
import json
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from refseg.images import check_npz_members
from refseg.errors import InputError
from refseg.golden.schema import SCHEMA, check_manifest, load_manifest
from refseg.registry import load_registry
from refseg.vocabulary import GOLDEN_PARTS

INFRASTRUCTURE = "golden files: the bundle format"

FORMAT = "refseg-golden"
#: The major version (changes when a reader of the previous one could misread a bundle) and
#: the minor one (additions a reader may ignore); see ``manifest.schema.json``.
FORMAT_VERSION = 4
FORMAT_MINOR = 0
MANIFEST = "manifest.json"
ARRAYS = "arrays.npz"
READINGS = "readings.md"
WEIGHTS = "weights.npz"
#: The files a bundle folder may hold.
BUNDLE_FILES = (MANIFEST, ARRAYS, READINGS, WEIGHTS, SCHEMA)
#: The parts of a bundle, in pipeline order (``golden check --part``).
PARTS = GOLDEN_PARTS

#: Arrays with more elements than this are stored as slices and statistics, not in full.
FULL_LIMIT = 1 << 17
#: Edge of the corner blocks stored of a large array (along each of its last two axes).
SLICE_EDGE = 16
#: Positions of a large array stored with their values (a seeded sample without repetition).
SAMPLE_COUNT = 2048
SAMPLE_SEED = 20
#: A large array's C-order elements are split into at most this many consecutive blocks,
#: each stored with its sum and sum of absolute values.
BLOCK_COUNT = 256

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
def chosen_parts(parts) -> tuple[str, ...]:
    """The parts a check or a candidate covers: ``parts`` in order without repeats, or every
    part of :data:`PARTS` for None or empty; InputError on a name that is not a part."""
    chosen = tuple(PARTS if not parts else dict.fromkeys(parts))
    unknown = [p for p in chosen if p not in PARTS]
    if unknown:
        raise InputError(f"--part {unknown[0]}: not a part of the bundle ({', '.join(PARTS)})")
    return chosen


def part_of(name: str) -> str:
    """The part of a bundle an array name belongs to: ``claim1`` (``input/*`` too), ``net``,
    ``ops``; another first component is returned as it is."""
    head = name.split("/", 1)[0]
    return "claim1" if head == "input" else head


@dataclass
class BundleBuilder:
    arrays: dict = field(default_factory=dict)     # stored npz members
    entries: dict = field(default_factory=dict)    # manifest entries by array name, in order
    keep: tuple = ()                               # patterns of arrays to keep whole
    kept: dict = field(default_factory=dict)       # copies of summary-stored arrays

    def add(self, name, array, tolerance, *, claim, function, meaning, paragraphs=None,
            params=None, role="output", note="", also=(), readings=(), computed_from=(),
            whole=False):
        """Add one array, after those it is computed from; ``paragraphs`` defaults to the
        registry's for ``claim``, and the readings of ``claim`` and ``also`` are cited with
        ``readings``; ``whole``: stored in full whatever its size (the input images, which
        outside implementations start from)."""
        array = np.asarray(array)
        if paragraphs is None:
            paragraphs = element_paragraphs(claim)
        if name in self.entries:
            raise AssertionError(f"golden: duplicate array name {name}")
        for source in computed_from:
            if source not in self.entries:
                raise AssertionError(f"golden: {name} is computed from {source}, not yet added")
        cited = list(dict.fromkeys([*element_readings(claim),
                                    *(r for e in also for r in element_readings(e)),
                                    *readings]))
        entry = {"shape": list(array.shape), "dtype": array.dtype.str,
                 "sha256": array_sha256(array), "role": role, "meaning": meaning,
                 "computed_from": list(computed_from),
                 "tolerance": tolerance, "claim": claim, "paragraphs": paragraphs,
                 "readings": cited, "function": function}
        if also:
            # further claim elements this array pins: the result of a whole step (the feature
            # map: the traversal, the extraction, the feature module), not only its last formula
            entry["also_pins"] = list(also)
        if params:
            entry["params"] = params
        if note:
            entry["note"] = note
        if array.size <= FULL_LIMIT or whole:
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
            positions = sample_positions(name, array.size)
            self.arrays[f"{name}@sample_index"] = positions
            self.arrays[f"{name}@sample_value"] = _canonical(array.reshape(-1)[positions])
            entry["sample"] = {"index": f"{name}@sample_index", "value": f"{name}@sample_value",
                               "count": int(positions.size)}
            length = block_length(array.size)
            self.arrays[f"{name}@blocks"] = block_sums(array, length)
            entry["blocks"] = {"member": f"{name}@blocks", "length": length,
                               "count": int(self.arrays[f"{name}@blocks"].shape[0])}
        self.entries[name] = entry


@functools.lru_cache(maxsize=None)
def element_paragraphs(element_id: str) -> str:
    """The paragraphs of a claim element as the registry lists them: ``"[0082], [0083]"``."""
    element = load_registry().elements[element_id]
    return ", ".join(f"[{p}]" for p in element.paragraphs)


@functools.lru_cache(maxsize=None)
def element_readings(element_id: str) -> tuple[str, ...]:
    """The spec readings (``R-...``) the registry lists for a claim element."""
    return load_registry().elements[element_id].readings


def _corner_slices(shape):
    """The first and the last SLICE_EDGE x SLICE_EDGE block over the last two axes, whole
    leading axes (a 3x3 kernel's spatial axes) up to 3 elements."""
    first, last = [], []
    for axis, n in enumerate(shape):
        edge = SLICE_EDGE if axis >= len(shape) - 2 else 3
        first.append((0, min(n, edge)))
        last.append((max(0, n - edge), n))
    return [first, last]


def sample_positions(name: str, size: int, count: int = SAMPLE_COUNT) -> np.ndarray:
    """``count`` (default :data:`SAMPLE_COUNT`) distinct C-order positions of an array of
    ``size`` elements, sorted, drawn with a generator seeded by :data:`SAMPLE_SEED` and the
    CRC-32 of ``name`` (uint32; the bundle stores them, so a reader need not redraw them)."""
    rng = np.random.default_rng([SAMPLE_SEED, zlib.crc32(name.encode())])
    count = min(count, size)
    return np.sort(rng.choice(size, count, replace=False)).astype("<u4")


def block_length(size: int) -> int:
    """Elements per block: ceil(size / BLOCK_COUNT) (the last block may be shorter)."""
    return max(1, -(-size // BLOCK_COUNT))


def block_sums(array, length: int) -> np.ndarray:
    """(blocks, 2) float64: the sum and the sum of absolute values of each run of ``length``
    consecutive C-order elements, taken in float64."""
    flat = np.asarray(array, dtype=np.float64).reshape(-1)
    starts = np.arange(0, flat.size, length)
    return np.stack([np.add.reduceat(flat, starts), np.add.reduceat(np.abs(flat), starts)],
                    axis=1).astype("<f8")


def summary_statistics(array) -> dict:
    a = np.asarray(array, dtype=np.float64)
    return {"sum": float(a.sum()), "abs_sum": float(np.abs(a).sum()),
            "l2": float(np.sqrt(np.square(a).sum())), "max_abs": float(np.abs(a).max())}


def tolerance(kind):
    return {"name": kind, **TOLERANCES[kind]}


def write_deterministic_npz(path: Path, arrays: dict, compress: bool = True):
    """An .npz with fixed member timestamps and order: the same arrays give the same bytes
    (``compress=False``: members stored, for arrays that deflate cannot shrink)."""
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=method, compresslevel=6 if compress else None,
                         allowZip64=True) as zf:
        for name in sorted(arrays):
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = method
            info.external_attr = 0o644 << 16
            with zf.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, arrays[name], allow_pickle=False)


def _members(entry: dict) -> list[str]:
    """The ``arrays.npz`` members that store one manifest entry."""
    if entry["storage"] == "full":
        return []
    return [*(part["member"] for part in entry["slices"]), entry["sample"]["index"],
            entry["sample"]["value"], entry["blocks"]["member"]]


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
        Missing or unreadable files, another format or format version, a malformed manifest
        (:func:`_check_manifest`), an ``arrays.npz`` or ``readings.md`` whose SHA-256 is not
        the manifest's, or an array whose SHA-256 is not.
    """
    folder = Path(folder)
    path = folder / MANIFEST
    manifest = load_manifest(path)
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise InputError(f"{path}: not a {FORMAT} manifest")
    version = manifest.get("format_version", 0)
    if version != FORMAT_VERSION:
        newer = isinstance(version, int) and version > FORMAT_VERSION
        raise InputError(f"{path}: format version {_short(version)} is "
                         f"{'newer than' if newer else 'not'} the one this refseg reads "
                         f"({FORMAT_VERSION})" + ("" if newer else "; write the bundle again"))
    check_manifest(manifest, path, TOLERANCES)
    for name in (SCHEMA,):
        file = folder / name
        if not file.is_file() or hashlib.sha256(file.read_bytes()).hexdigest() != \
                manifest["files"][name]:
            raise InputError(f"{file}: missing, or its SHA-256 is not the one {MANIFEST} "
                             "records; the bundle was changed after it was written")
    readings = folder / READINGS
    if not readings.is_file():
        raise InputError(f"{readings}: missing; the bundle carries the readings it cites")
    if hashlib.sha256(readings.read_bytes()).hexdigest() != manifest["files"][READINGS]:
        raise InputError(f"{readings}: its SHA-256 is not the one {MANIFEST} records; the "
                         "bundle was changed after it was written")
    arrays_path = folder / ARRAYS
    if arrays_path.is_file():
        digest = hashlib.sha256(arrays_path.read_bytes()).hexdigest()
        if digest != manifest["arrays_file_sha256"]:
            raise InputError(f"{arrays_path}: its SHA-256 is not the one {MANIFEST} records; "
                             "the bundle was changed after it was written")
    arrays = read_npz(arrays_path, "bundle arrays")
    check_stored_arrays(manifest["arrays"], arrays, arrays_path, MANIFEST)
    _check_flagged_members(manifest["flagged"], arrays, arrays_path)
    return manifest, arrays


def check_stored_arrays(entries: dict, arrays: dict, path: Path, listed_by: str) -> None:
    """The stored arrays of manifest ``entries`` are whole and unchanged: each member an entry
    names is a readable array, a whole array hashes to its entry's SHA-256, a summary's sample
    and blocks fit its shape; InputError naming ``path`` (and ``listed_by``, the file whose
    entries these are) otherwise."""
    for name, entry in entries.items():
        members = [name] if entry["storage"] == "full" else _members(entry)
        for member in members:
            if member not in arrays or isinstance(arrays[member], Exception):
                raise InputError(f"{path}: no readable array {member!r}, which "
                                 f"{listed_by} lists")
        if entry["storage"] == "full" and array_sha256(arrays[name]) != entry["sha256"]:
            raise InputError(f"{path}: array {name!r} does not hash to the SHA-256 "
                             f"{listed_by} records; the file was changed after it was written")
        if entry["storage"] == "summary":
            _check_summary_members(name, entry, arrays, path)
        rounding = entry.get("rounding")
        if rounding is not None:
            mask = arrays.get(rounding["member"])
            if not (isinstance(mask, np.ndarray) and list(mask.shape) == entry["shape"]
                    and mask.dtype == np.uint8):
                raise InputError(f"{path}: the rounding-level mask of {name!r} is missing "
                                 "or does not fit it")


def _check_flagged_members(flagged: dict, arrays: dict, path: Path) -> None:
    """Every member a flagged vector names is a readable array that fits it."""
    for vector in flagged["vectors"]:
        for name, a in vector["arrays"].items():
            size = int(np.prod(a["shape"]))
            if a["storage"] == "full":
                member = arrays.get(a["member"])
                ok = (isinstance(member, np.ndarray) and list(member.shape) == a["shape"]
                      and member.dtype == np.dtype(a["dtype"]))
            else:
                index, value, blocks = (arrays.get(a["sample"]["index"]),
                                        arrays.get(a["sample"]["value"]),
                                        arrays.get(a["blocks"]["member"]))
                ok = (all(isinstance(m, np.ndarray) for m in (index, value, blocks))
                      and index.ndim == 1 and index.dtype.kind == "u"
                      and value.shape == index.shape and value.dtype.kind == "f"
                      and (index.size == 0 or int(index.max()) < size)
                      and blocks.shape == (-(-size // a["blocks"]["length"]), 2)
                      and blocks.dtype == np.float64)
            if not ok:
                raise InputError(f"{path}: the stored arrays of flagged vector "
                                 f"{vector['id']!r} ({name}) are missing or do not fit it")


def _check_summary_members(name, entry, arrays, path):
    """The sample and the blocks of a summary-stored array fit its shape: positions inside the
    array, distinct and sorted, one value each, one row per block."""
    size = int(np.prod(entry["shape"]))
    index, value = arrays[entry["sample"]["index"]], arrays[entry["sample"]["value"]]
    blocks = arrays[entry["blocks"]["member"]]
    length = entry["blocks"]["length"]
    ok = (index.ndim == 1 and index.dtype.kind == "u" and value.shape == index.shape
          and value.dtype == np.dtype(entry["dtype"]) and index.size == entry["sample"]["count"]
          and (index.size == 0 or (int(index[-1]) < size and bool(np.all(np.diff(
              index.astype(np.int64)) > 0))))
          and isinstance(length, int) and length >= 1
          and blocks.shape == (-(-size // length), 2) and blocks.dtype == np.float64)
    if not ok:
        raise InputError(f"{path}: the sample or block sums of {name!r} do not fit its shape "
                         f"{tuple(entry['shape'])}")


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def read_weights(folder, manifest: dict) -> dict:
    """The network weights a bundle holds (``weights.npz``), verified against the manifest's
    ``network.weights_sha256``.

    Raises
    ------
    InputError
        No weights file (the bundle was written without ``--with-weights``), an unreadable
        one, or weights that do not hash to the manifest's digest.
    """
    path = Path(folder) / WEIGHTS
    if not path.is_file():
        raise InputError(f"{path}: no such file; the bundle was written without "
                         "--with-weights")
    weights = read_npz(path, "network weights")
    bad = [k for k, v in weights.items() if isinstance(v, Exception)]
    if bad:
        raise InputError(f"{path}: member {bad[0]!r} is not a readable array")
    if weights_sha256(weights) != manifest["network"]["weights_sha256"]:
        raise InputError(f"{path}: the weights do not hash to the network.weights_sha256 "
                         f"{MANIFEST} records; the bundle was changed after it was written")
    return weights


def read_npz(path: Path, what: str) -> dict:
    if not path.is_file():
        raise InputError(f"{path}: no such file ({what})")
    with open(path, "rb") as f:
        head = f.read(4)
    if head != b"PK\x03\x04":
        raise InputError(f"{path}: not an .npz archive ({what})")
    check_npz_members(path, objects_ok=True)
    arrays = {}
    try:
        with np.load(path, allow_pickle=False) as npz:
            for key in npz.files:
                try:
                    arrays[key] = npz[key]
                except ValueError as exc:
                    arrays[key] = exc  # object arrays: reported per array
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

