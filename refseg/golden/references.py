"""The files of a reference folder (``refseg golden reference``), and their reading with every
check made before use.

``<image>.npz``, one per image, holds ``input/<image>`` (whole), every
``claim1/<image>/<step>`` array stored by the bundle's rule (whole up to
:data:`~refseg.golden.format.FULL_LIMIT` elements; beyond it, as a bundle stores it: corner
slices, a sample, block sums and statistics), and the member :data:`META`, JSON as UTF-8 bytes
(uint8): the format, the refseg that wrote it, the image (its name, the file it was read from,
the SHA-256 of the file's bytes and of its pixels), how it was read (mode, bit depth, EXIF
orientation, notes), claim 1's parameters, and one bundle-manifest entry per array (shape,
dtype, SHA-256, storage, tolerance, the arrays it is computed from).

``index.json`` lists every image the folder holds, each with its file and the file's SHA-256,
and the refseg that wrote them: a comparison knows what it has to compare, so that a file
deleted, added, renamed or changed by hand is reported, never passed over.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from refseg import publish
from refseg._version import __version__
from refseg.errors import InputError
from refseg.golden.claim1_arrays import add_claim1, add_input
from refseg.golden.format import (TOLERANCES, BundleBuilder, array_sha256, check_stored_arrays,
                                  read_npz)
from refseg.golden.own import READ_FUNCTION, as_rgb
from refseg.golden.schema import parse_document, schema, validate
from refseg.images import LoadedImage

INFRASTRUCTURE = "golden files: the files of a reference folder"

REFERENCE_FORMAT = "refseg-golden-reference"
INDEX_FORMAT = "refseg-golden-references"
#: The version of both formats: raised when a reader of the previous one could misread them.
REFERENCE_VERSION = 1
#: The member of ``<image>.npz`` holding its description (JSON, UTF-8, as uint8).
META = "reference"
INDEX = "index.json"
#: Image names as :func:`refseg.golden.own.image_name` makes them.
NAME = re.compile(r"[A-Za-z0-9_.+-]+")
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def reference_file(name: str, loaded: LoadedImage, file_sha256: str) -> tuple[dict, dict]:
    """(arrays, meta): the members of ``<name>.npz`` for one read image, :data:`META`
    included, and its description.

    Parameters
    ----------
    name : str
        The image's name (:func:`refseg.golden.own.image_name`).
    loaded : LoadedImage
        The image as :func:`refseg.images.read_image` read it.
    file_sha256 : str
        SHA-256 (hex) of the file's bytes.
    """
    rgb = np.ascontiguousarray(as_rgb(loaded.pixels))
    reading = {k: v for k, v in loaded.info().items() if k != "path"}
    source = {"file": Path(loaded.path).name, "file_sha256": file_sha256,
              "pixels_sha256": array_sha256(rgb)}
    bundle = BundleBuilder()
    add_input(bundle, name, rgb, READ_FUNCTION, {**source, **reading})
    extraction = add_claim1(bundle, name, rgb)
    meta = {"format": REFERENCE_FORMAT, "format_version": REFERENCE_VERSION,
            "refseg": __version__, "image": name, **source, "reading": reading,
            "parameters": extraction.params, "arrays": bundle.entries}
    text = json.dumps(meta, sort_keys=True, ensure_ascii=True)
    return {**bundle.arrays, META: np.frombuffer(text.encode("ascii"), np.uint8)}, meta


def write_reference(path: Path, arrays: dict) -> str:
    """Write ``<image>.npz`` atomically; returns the file's SHA-256."""
    publish.write_npz(path, compressed=True, **arrays)
    return _file_sha256(path)


@functools.lru_cache(maxsize=1)
def _template() -> dict:
    """The entries of a small image named ``x``: the arrays every reference holds, with what
    does not depend on the image (tolerance, role, sources)."""
    rgb = (np.arange(8 * 9 * 3) * 37 % 256).astype(np.uint8).reshape(8, 9, 3)
    bundle = BundleBuilder()
    add_input(bundle, "x", rgb, READ_FUNCTION, {})
    add_claim1(bundle, "x", rgb)
    return bundle.entries


def expected_entries(name: str) -> dict:
    """{array name: template entry} of image ``name``, in pipeline order."""
    def rename(key):
        return f"input/{name}" if key == "input/x" else f"claim1/{name}/" + key.split("/", 2)[2]

    return {rename(k): {**e, "computed_from": [rename(s) for s in e["computed_from"]]}
            for k, e in _template().items()}


@dataclass(frozen=True)
class Reference:
    """A reference file, checked: the image's name, its description (:data:`META`), the
    manifest entries of its arrays, and the stored members."""

    name: str
    meta: dict
    entries: dict
    stored: dict


def _version_problem(document: dict, what: str) -> str | None:
    if document.get("format_version") != REFERENCE_VERSION:
        return (f"{what} format version {document.get('format_version')!r}, not the one this "
                f"refseg reads ({REFERENCE_VERSION})")
    if document.get("refseg") != __version__:
        return (f"written by refseg {str(document.get('refseg'))[:20]!r}, this is refseg "
                f"{__version__}")
    return None


def read_reference(path, sha256: str | None = None) -> Reference:
    """A reference file, every part checked before use.

    Parameters
    ----------
    path : str or Path
        ``<image>.npz``.
    sha256 : str or None
        The file's SHA-256 as ``index.json`` records it (None: not checked).

    Raises
    ------
    InputError
        One line naming the file: changed since the index recorded it, not an .npz, no
        readable :data:`META`, another format or refseg version, the reference of another
        image (renamed), entries that are not this refseg's for the image (an array missing
        or added, a widened tolerance, a field of another type), a stored array missing or
        not hashing to its entry, pixels that are not the image the description names.
    """
    path = Path(path)
    if sha256 is not None and path.is_file() and _file_sha256(path) != sha256:
        raise InputError(f"{path}: its SHA-256 is not the one {INDEX} records; the file was "
                         "changed after it was written")
    stored = read_npz(path, "reference file")
    raw = stored.pop(META, None)
    if not isinstance(raw, np.ndarray) or raw.dtype != np.uint8 or raw.ndim != 1:
        raise InputError(f"{path}: no {META!r} member; not a reference file of "
                         "`refseg golden reference` (or of an older refseg: write it again)")
    try:
        text = raw.tobytes().decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: its {META!r} member is not UTF-8 text") from None
    meta = parse_document(text, f"{path} ({META})")
    if not isinstance(meta, dict) or meta.get("format") != REFERENCE_FORMAT:
        raise InputError(f"{path}: not a reference file of `refseg golden reference`")
    problem = _version_problem(meta, "reference")
    if problem:
        raise InputError(f"{path}: {problem}; write the references again with this refseg")
    name = meta.get("image")
    if not isinstance(name, str) or name != path.stem:
        raise InputError(f"{path}: holds the reference of image {str(name)[:40]!r}, not of "
                         f"{path.stem!r} (renamed?)")
    entries = _checked_entries(meta.get("arrays"), name, path)
    for key in ("file_sha256", "pixels_sha256"):
        if not isinstance(meta.get(key), str) or not _SHA256.fullmatch(meta[key]):
            raise InputError(f"{path}: {key} is not a SHA-256")
    unknown = sorted(set(stored) - set(_members(entries)))
    if unknown:
        raise InputError(f"{path}: holds a member that is not the reference's "
                         f"({unknown[0][:60]!r})")
    check_stored_arrays(entries, stored, path, f"its {META!r} member")
    for key, entry in entries.items():
        for part in entry.get("slices", ()) if entry["storage"] == "summary" else ():
            spans = [(a, b) for a, b in part["index"]]
            if not all(a <= b <= n for (a, b), n in zip(spans, entry["shape"])) or \
                    stored[part["member"]].shape != tuple(b - a for a, b in spans):
                raise InputError(f"{path}: a corner slice of {key!r} does not fit its shape")
    if entries[f"input/{name}"]["sha256"] != meta["pixels_sha256"]:
        raise InputError(f"{path}: input/{name} is not the image its description names "
                         "(pixels SHA-256)")
    return Reference(name, meta, entries, stored)


def _checked_entries(entries, name: str, path: Path) -> dict:
    """The entries of a reference file in pipeline order: exactly this refseg's arrays for
    the image, each a valid manifest entry with the format's tolerance and the template's
    sources."""
    expected = expected_entries(name)
    if not isinstance(entries, dict) or set(entries) != set(expected):
        got = set(entries) if isinstance(entries, dict) else set()
        odd = sorted(set(expected) ^ got)
        raise InputError(f"{path}: its arrays are not those of a reference"
                         + (f" ({odd[0][:60]!r})" if odd else ""))
    entries = {key: entries[key] for key in expected}  # pipeline order: sources first
    root = schema()
    for key, entry in entries.items():
        problem = validate(entry, root["$defs"]["entry"], root, ("arrays", key))
        if problem:
            raise InputError(f"{path}: {problem}")
        want = expected[key]
        if (entry["tolerance"] != want["tolerance"]
                or entry["tolerance"] != {"name": want["tolerance"]["name"],
                                          **TOLERANCES[want["tolerance"]["name"]]}
                or entry["computed_from"] != want["computed_from"]
                or entry["role"] != want["role"]
                or (entry["dtype"] != want["dtype"] and key != f"input/{name}")):
            raise InputError(f"{path}: entry {key!r} is not refseg's (tolerance, sources, "
                             "role or dtype)")
        try:
            np.dtype(entry["dtype"])
        except TypeError:
            raise InputError(f"{path}: entry {key!r}: dtype {entry['dtype']!r} is not "
                             "valid") from None
        needed = ("slices", "sample", "blocks", "stats") if entry["storage"] == "summary" else ()
        if any(k not in entry for k in needed):
            raise InputError(f"{path}: entry {key!r}: storage summary without its members")
        if entry["storage"] == "summary" and any(
                len(s["index"]) != len(entry["shape"]) for s in entry["slices"]):
            raise InputError(f"{path}: entry {key!r}: a slice of another rank than the array")
    return entries


def _members(entries: dict) -> list[str]:
    out = []
    for name, entry in entries.items():
        if entry["storage"] == "full":
            out.append(name)
        else:
            out += [*(s["member"] for s in entry["slices"]), entry["sample"]["index"],
                    entry["sample"]["value"], entry["blocks"]["member"]]
        if entry.get("rounding"):
            out.append(entry["rounding"]["member"])
    return out


def index_record(meta: dict, sha256: str) -> dict:
    """An image's line of ``index.json``: its file and the file's SHA-256, and where it came
    from."""
    return {"file": f"{meta['image']}.npz", "sha256": sha256, "source": meta["file"],
            "file_sha256": meta["file_sha256"], "pixels_sha256": meta["pixels_sha256"]}


def write_index(folder, records: dict, previous: dict | None = None) -> None:
    """Write ``folder/index.json``: ``records`` ({image: :func:`index_record`}) over the
    images of ``previous`` (an earlier index of the folder the new one replaces)."""
    images = {**(previous or {}), **records}
    publish.write_json(Path(folder) / INDEX, {
        "format": INDEX_FORMAT, "format_version": REFERENCE_VERSION, "refseg": __version__,
        "images": dict(sorted(images.items()))})


def read_index(folder) -> dict:
    """{image: record} of a reference folder's ``index.json``.

    Raises
    ------
    InputError
        No index (not a reference folder, or one of an older refseg), unreadable JSON,
        another format or refseg version, or a record that is not one (its file not
        ``<image>.npz``, a digest that is not a SHA-256).
    """
    path = Path(folder) / INDEX
    if not path.is_file():
        raise InputError(f"{folder}: no {INDEX}; not a reference folder of `refseg golden "
                         "reference` (or one of an older refseg): write it again")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not readable ({exc})") from None
    index = parse_document(text, path)
    if not isinstance(index, dict) or index.get("format") != INDEX_FORMAT:
        raise InputError(f"{path}: not the index of a reference folder")
    problem = _version_problem(index, "index")
    if problem:
        raise InputError(f"{path}: {problem}; write the references again with this refseg")
    images = index.get("images")
    if not isinstance(images, dict):
        raise InputError(f"{path}: 'images' is not a table of images")
    for name, record in images.items():
        if not (NAME.fullmatch(name) and isinstance(record, dict)
                and record.get("file") == f"{name}.npz"
                and isinstance(record.get("sha256"), str)
                and _SHA256.fullmatch(record["sha256"])):
            raise InputError(f"{path}: the record of image {name[:40]!r} is not one "
                             "(file <image>.npz and its SHA-256)")
    return images


def previous_index(folder) -> dict:
    """The images of an earlier index in ``folder`` that a new one keeps listing; none when
    there is no readable index of this refseg (its files are then reported as unlisted)."""
    try:
        return read_index(folder) if Path(folder).is_dir() else {}
    except InputError:
        return {}
