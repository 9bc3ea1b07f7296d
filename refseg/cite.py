"""Typed citations, as in duvet: which code implements which claim element.

- ``@implements("claim1.step2.cv")`` on a function or class that implements a claim element;
- ``@infrastructure("why")`` on a public function or class that implements none (file writing,
  hashing, formatting, validation), with the reason; a module whose every public function is
  such declares ``INFRASTRUCTURE = "why"`` instead.

A leaf module (standard library only), imported by every wing: recording a citation reads
nothing. The IDs are checked against ``spec/registry.toml`` by the test suite, and the matrix is
generated from what is recorded here, by :mod:`refseg.audit.trace`.
"""
from __future__ import annotations

INFRASTRUCTURE = "the citation machinery itself"

#: qualified name of each citing function or class -> the element IDs it cites
CITATIONS: dict[str, tuple[str, ...]] = {}
#: qualified name of each citing function or class -> the object, for its file and line
CITING_OBJECTS: dict[str, object] = {}


def implements(*element_ids: str):
    """Decorator: record that the decorated function or class implements these claim elements.

    The IDs are checked against ``spec/registry.toml`` by the test suite, not at import time,
    so that importing refseg never depends on reading the spec.
    """
    if not element_ids or not all(isinstance(i, str) and i for i in element_ids):
        raise TypeError("implements() takes one or more claim-element IDs as strings")

    def mark(obj):
        name = f"{obj.__module__}.{obj.__qualname__}"
        obj.__claims__ = tuple(element_ids)
        CITATIONS[name] = tuple(element_ids)
        CITING_OBJECTS[name] = obj
        return obj

    return mark


def infrastructure(reason: str):
    """Decorator: the decorated public function or class implements no claim element; it
    serves those that do (``reason`` says how, e.g. "atomic file writing")."""
    if not isinstance(reason, str) or not reason.strip():
        raise TypeError("infrastructure() takes the reason as a non-empty string")

    def mark(obj):
        obj.__infrastructure__ = reason
        return obj

    return mark
