"""The manifest's JSON Schema, and the validation of a manifest before any field is used.

``manifest.schema.json`` beside this module describes ``manifest.json`` (a copy ships in every
bundle). :func:`validate` checks a document against it with the subset of JSON Schema the
schema uses (``type``, ``const``, ``enum``, ``properties``, ``required``,
``additionalProperties``, ``propertyNames``, ``minProperties``, ``items``, ``minItems``,
``maxItems``, ``minimum``, ``maximum``, ``multipleOf``, ``minLength``, ``maxLength``,
``pattern``, local ``$ref``), so that the runtime needs no JSON Schema library; :func:`load_manifest` reads the
JSON refusing NaN, infinities and nesting deeper than a manifest has; :func:`check_manifest`
adds what a schema cannot say (tolerances equal the format's, references between entries,
storage fields, flagged vectors naming arrays of the manifest).
"""
from __future__ import annotations

import functools
import json
import math
import re
from pathlib import Path

import numpy as np

from refseg.errors import InputError
from refseg.jsontext import bracket_depth

INFRASTRUCTURE = "golden files: the manifest's schema and validation"

SCHEMA = "manifest.schema.json"
SCHEMA_PATH = Path(__file__).resolve().parent / SCHEMA
#: Deepest nesting of lists and tables a manifest may have (a manifest has 7).
MAX_DEPTH = 24
_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


@functools.lru_cache(maxsize=1)
def schema() -> dict:
    """The manifest's JSON Schema (``manifest.schema.json``)."""
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def schema_bytes() -> bytes:
    return SCHEMA_PATH.read_bytes()


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text} is out of range")
    return value


def _constant(text: str):
    raise ValueError(f"{text} is not a number JSON allows")


def _depth(value, limit: int) -> int:
    """Nesting depth of a parsed document, stopping past ``limit``."""
    stack, deepest = [(value, 1)], 0
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if deepest > limit:
            return deepest
        children = item.values() if isinstance(item, dict) else item if isinstance(
            item, list) else ()
        stack.extend((child, level + 1) for child in children
                     if isinstance(child, (dict, list)))
    return deepest


def load_manifest(path: Path) -> dict:
    """The manifest's JSON, refusing NaN, infinite or overflowing numbers and nesting deeper
    than :data:`MAX_DEPTH` (InputError naming the file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path.parent}: no {path.name}; not a golden bundle") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not readable ({exc})") from None
    return parse_document(text, path)


def parse_document(text: str, where) -> object:
    """JSON text as :func:`load_manifest` reads it (no NaN, infinite or overflowing numbers,
    nesting at most :data:`MAX_DEPTH`); InputError naming ``where`` otherwise."""
    # counting brackets first keeps the parser's recursion far from Python's limit
    if bracket_depth(text) > MAX_DEPTH:
        raise InputError(f"{where}: nested deeper than a manifest ({MAX_DEPTH} levels)")
    try:
        data = json.loads(text, parse_float=_finite, parse_constant=_constant)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{where}: not readable JSON ({exc})") from None
    if _depth(data, MAX_DEPTH) > MAX_DEPTH:
        raise InputError(f"{where}: nested deeper than a manifest ({MAX_DEPTH} levels)")
    return data


def _where(path: tuple) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" if re.fullmatch(
        r"[A-Za-z_][A-Za-z0-9_]*", p) else f"[{p!r}]" for p in path) or "the document"


def _is(value, kind: str) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value))
    return isinstance(value, _TYPES[kind])


def validate(value, node: dict, root: dict | None = None, path: tuple = ()) -> str | None:
    """The first way ``value`` breaks the schema ``node`` (None: it conforms)."""
    root = root or node
    if "$ref" in node:
        target = root
        for part in node["$ref"].lstrip("#/").split("/"):
            target = target[part]
        return validate(value, target, root, path)
    where = _where(path)
    if "const" in node and value != node["const"]:
        return f"{where} must be {json.dumps(node['const'])}, got {_short(value)}"
    if "enum" in node and value not in node["enum"]:
        return f"{where} must be one of {', '.join(map(json.dumps, node['enum']))}, got " \
               f"{_short(value)}"
    kinds = node.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not any(_is(value, k) for k in kinds):
            return f"{where} must be {' or '.join(kinds)}, got {_short(value)}"
    if isinstance(value, dict):
        return _validate_object(value, node, root, path)
    if isinstance(value, list):
        if len(value) < node.get("minItems", 0) or len(value) > node.get("maxItems", 1 << 62):
            return f"{where} has {len(value)} items, outside " \
                   f"[{node.get('minItems', 0)}, {node.get('maxItems', 'any')}]"
        if "items" in node:
            for i, item in enumerate(value):
                problem = validate(item, node["items"], root, path + (i,))
                if problem:
                    return problem
    if isinstance(value, str):
        if not node.get("minLength", 0) <= len(value) <= node.get("maxLength", 1 << 62):
            return f"{where} has length {len(value)}, outside the schema's"
        if "pattern" in node and not re.search(node["pattern"], value):
            return f"{where} {_short(value)} does not match {node['pattern']}"
    if _is(value, "number"):
        if value < node.get("minimum", -math.inf) or value > node.get("maximum", math.inf):
            return f"{where} {value} is out of range"
        if "multipleOf" in node and value % node["multipleOf"]:
            return f"{where} {value} is not a multiple of {node['multipleOf']}"
    return None


def _validate_object(value: dict, node: dict, root: dict, path: tuple) -> str | None:
    where = _where(path)
    if len(value) < node.get("minProperties", 0):
        return f"{where} must not be empty"
    for key in node.get("required", ()):
        if key not in value:
            return f"{where} has no {key!r}"
    properties = node.get("properties", {})
    extra = node.get("additionalProperties", True)
    for key, item in value.items():
        if "propertyNames" in node:
            problem = validate(key, node["propertyNames"], root, path + (key,))
            if problem:
                return f"{_where(path + (key,))}: not a valid name ({problem})"
        if key in properties:
            problem = validate(item, properties[key], root, path + (key,))
        elif extra is False:
            problem = f"{where} may not have {key!r}"
        elif isinstance(extra, dict):
            problem = validate(item, extra, root, path + (key,))
        else:
            problem = None
        if problem:
            return problem
    return None


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def check_manifest(manifest, path: Path, tolerances: dict) -> None:
    """A manifest conforms to the schema, and to what the schema cannot say.

    Raises
    ------
    InputError
        ``<path>: <problem>``, for the first problem found: a field missing or of another
        type or range, a tolerance other than the format's (a bundle cannot widen its own),
        a dtype NumPy does not know, an entry computed from an array the manifest does not
        list, storage fields missing for the entry's storage, a flagged vector naming an
        array or an alternative the manifest does not have, or of another shape.
    """
    problem = validate(manifest, schema())
    if problem:
        raise InputError(f"{path}: {problem}")
    entries = manifest["arrays"]
    for name, entry in entries.items():
        tolerance = entry["tolerance"]
        if tolerance != {"name": tolerance["name"], **tolerances[tolerance["name"]]}:
            raise InputError(f"{path}: entry {name!r}: tolerance {tolerance} is not one of "
                             f"the format's ({', '.join(tolerances)})")
        _check_dtype(entry["dtype"], f"{path}: entry {name!r}")
        unknown = [s for s in entry["computed_from"] if s not in entries]
        if unknown:
            raise InputError(f"{path}: entry {name!r}: computed from {unknown[0]!r}, which is "
                             "not an array of the manifest")
        needed = ("slices", "sample", "blocks", "stats") if entry["storage"] == "summary" else ()
        missing = [k for k in needed if k not in entry]
        if missing:
            raise InputError(f"{path}: entry {name!r}: storage summary without {missing[0]!r}")
    flagged = manifest["flagged"]
    for vector in flagged["vectors"]:
        if vector["flags"][1] not in flagged["notes"]:
            raise InputError(f"{path}: flagged vector {vector['id']!r}: no note for "
                             f"{vector['flags'][1]!r}")
        for name, array in vector["arrays"].items():
            where = f"{path}: flagged vector {vector['id']!r}, array {name!r}"
            if name not in entries or array["shape"] != entries[name]["shape"]:
                raise InputError(f"{where}: not an array of the manifest, or of another shape")
            _check_dtype(array["dtype"], where)
            needed = (("member",) if array["storage"] == "full"
                      else ("sample", "blocks", "stats"))
            if any(k not in array for k in needed):
                raise InputError(f"{where}: storage {array['storage']} without "
                                 f"{', '.join(needed)}")


def _check_dtype(text: str, where: str) -> None:
    try:
        np.dtype(text)
    except TypeError:
        raise InputError(f"{where}: dtype {text!r} is not valid") from None
