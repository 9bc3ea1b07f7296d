"""Traceability: claim-element IDs, the ``@implements`` citation, and the generated matrix.

The registry of claim elements lives in ``spec/registry.toml`` (stable IDs such as
``claim1.step2.cv``, each with its paragraphs, status, English text and readings). Code cites an
element with ``@implements("claim1.step2.cv")``; tests cite it with
``@pytest.mark.claim("claim1.step2.cv")``. ``tests/test_traceability.py`` fails when a citation
points nowhere, when an implemented element has no function or no test, or when
``spec/traceability.md`` differs from :func:`render_matrix`.
"""
from __future__ import annotations

import ast
import importlib
import pkgutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

STATUSES = ("implemented", "planned", "not-applicable")
MATRIX_FILE = "traceability.md"

# qualified name of each citing function or class -> the element IDs it cites
_CITATIONS: dict[str, tuple[str, ...]] = {}


def implements(*element_ids: str):
    """Decorator: record that the decorated function or class implements these claim elements.

    The IDs are checked against ``spec/registry.toml`` by the test suite, not at import time,
    so that importing refseg never depends on reading the spec.
    """
    if not element_ids or not all(isinstance(i, str) and i for i in element_ids):
        raise TypeError("implements() takes one or more claim-element IDs as strings")

    def mark(obj):
        obj.__claims__ = tuple(element_ids)
        _CITATIONS[f"{obj.__module__}.{obj.__qualname__}"] = tuple(element_ids)
        return obj

    return mark


@dataclass(frozen=True)
class Element:
    """One claim element of the registry."""

    id: str
    claim: int
    title: str
    status: str
    paragraphs: tuple[str, ...]
    text: str
    readings: tuple[str, ...] = ()
    issue: int | None = None
    reason: str = ""


@dataclass
class Registry:
    """The parsed ``registry.toml``: elements by ID and paragraph renderings by number."""

    elements: dict[str, Element]
    paragraphs: dict[str, str]
    readings_text: str = ""
    errata_text: str = ""
    source: Path | None = None
    reading_ids: set[str] = field(default_factory=set)


def spec_dir() -> Path:
    """The spec folder: ``refseg/_spec`` in an installed wheel, ``spec/`` in a checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_spec", here.parent / "spec"):
        if (candidate / "registry.toml").is_file():
            return candidate
    raise FileNotFoundError("spec/registry.toml not found beside the refseg package")


def _reading_ids(readings_text: str) -> set[str]:
    """IDs of the readings in readings.md: headings of the form ``## R-<name>: <title>``."""
    ids = set()
    for line in readings_text.splitlines():
        if line.startswith("## R-"):
            ids.add(line[3:].split(":", 1)[0].strip())
    return ids


def load_registry(directory: Path | None = None) -> Registry:
    """Parse ``registry.toml`` (and the readings and errata beside it)."""
    directory = directory or spec_dir()
    data = tomllib.loads((directory / "registry.toml").read_text(encoding="utf-8"))
    elements = {}
    for raw in data.get("element", []):
        element = Element(
            id=raw["id"], claim=int(raw["claim"]), title=raw["title"], status=raw["status"],
            paragraphs=tuple(raw.get("paragraphs", ())), text=raw["text"].strip(),
            readings=tuple(raw.get("readings", ())), issue=raw.get("issue"),
            reason=raw.get("reason", ""),
        )
        if element.status not in STATUSES:
            raise ValueError(f"{element.id}: status {element.status!r} not in {STATUSES}")
        if element.id in elements:
            raise ValueError(f"duplicate element ID {element.id}")
        elements[element.id] = element
    paragraphs = {p["id"]: p["text"].strip() for p in data.get("paragraph", [])}
    readings = (directory / "readings.md").read_text(encoding="utf-8")
    errata = (directory / "errata.md").read_text(encoding="utf-8")
    return Registry(elements, paragraphs, readings, errata, directory, _reading_ids(readings))


def code_citations() -> dict[str, tuple[str, ...]]:
    """Import every refseg module and return {qualified name: cited IDs}."""
    import refseg

    for module in pkgutil.walk_packages(refseg.__path__, "refseg."):
        if module.name != "refseg.__main__":
            importlib.import_module(module.name)
    return dict(sorted(_CITATIONS.items()))


def _claim_args(node: ast.AST) -> list[str]:
    """IDs in a ``pytest.mark.claim("...")`` call (or in a list of such calls)."""
    found = []
    for call in ast.walk(node):
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "claim"):
            found += [a.value for a in call.args if isinstance(a, ast.Constant)]
    return found


def scan_test_citations(tests_dir: Path) -> dict[str, tuple[str, ...]]:
    """Scan test sources: {"tests/file.py::test_name": cited IDs}. Module-level ``pytestmark``
    and class decorators apply to every test inside."""
    result: dict[str, list[str]] = {}
    for path in sorted(tests_dir.glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module_ids = []
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
                module_ids += _claim_args(node.value)

        def visit(body, prefix, inherited):
            for node in body:
                if isinstance(node, ast.ClassDef):
                    ids = inherited + [i for d in node.decorator_list for i in _claim_args(d)]
                    visit(node.body, f"{prefix}{node.name}::", ids)
                elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                        and node.name.startswith("test"):
                    ids = inherited + [i for d in node.decorator_list for i in _claim_args(d)]
                    if ids:
                        result[f"tests/{path.name}::{prefix}{node.name}"] = ids

        visit(tree.body, "", module_ids)
    return {k: tuple(dict.fromkeys(v)) for k, v in sorted(result.items())}


def _invert(citations: dict[str, tuple[str, ...]]) -> dict[str, list[str]]:
    by_id: dict[str, list[str]] = {}
    for name, ids in citations.items():
        for element_id in ids:
            by_id.setdefault(element_id, []).append(name)
    return by_id


def render_matrix(registry: Registry, code: dict[str, tuple[str, ...]],
                  tests: dict[str, tuple[str, ...]]) -> str:
    """The traceability matrix as Markdown: element -> paragraphs -> functions -> tests."""
    functions, test_names = _invert(code), _invert(tests)
    lines = [
        "# Traceability matrix",
        "",
        "Generated by `refseg trace --write` from `spec/registry.toml`, the `@implements`",
        "citations in `refseg/` and the `pytest.mark.claim` citations in `tests/`.",
        "Do not edit by hand: `tests/test_traceability.py` fails when it is stale.",
        "",
        "| element | status | paragraphs | readings | functions | tests |",
        "|---|---|---|---|---|---|",
    ]
    for element in registry.elements.values():
        paragraphs = ", ".join(f"[{p}]" for p in element.paragraphs)
        status = element.status + (f" (issue {element.issue})" if element.issue else "")
        fns = "<br>".join(f"`{f}`" for f in functions.get(element.id, [])) or "-"
        tst = "<br>".join(f"`{t}`" for t in test_names.get(element.id, [])) or "-"
        readings = ", ".join(element.readings) or "-"
        lines.append(f"| `{element.id}` {element.title} | {status} | {paragraphs} | "
                     f"{readings} | {fns} | {tst} |")
    counts = {s: sum(e.status == s for e in registry.elements.values()) for s in STATUSES}
    lines += ["", "Elements: " + ", ".join(f"{n} {s}" for s, n in counts.items()) + ".", ""]
    return "\n".join(lines)


def explain(registry: Registry, element_id: str, code: dict[str, tuple[str, ...]],
            tests: dict[str, tuple[str, ...]] | None = None) -> str:
    """A plain-text account of one element: text, paragraphs, readings, functions, tests."""
    if element_id not in registry.elements:
        raise KeyError(element_id)
    e = registry.elements[element_id]
    out = [f"{e.id}: {e.title}", f"claim {e.claim}; status {e.status}"
           + (f" (issue {e.issue})" if e.issue else ""), "", e.text, ""]
    for p in e.paragraphs:
        out.append(f"[{p}] {registry.paragraphs.get(p, '(not rendered)')}")
    for r in e.readings:
        out += ["", f"reading {r}: see readings.md"]
        out += _section(registry.readings_text, r)
    fns = _invert(code).get(e.id, [])
    out += ["", "functions: " + (", ".join(fns) or "none")]
    if tests is not None:
        out += ["tests: " + (", ".join(_invert(tests).get(e.id, [])) or "none")]
    if e.reason:
        out += ["", f"note: {e.reason}"]
    return "\n".join(out)


def _section(text: str, reading_id: str) -> list[str]:
    """The lines of the readings.md section headed ``## <reading_id>: ...``."""
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith("## "):
            inside = line[3:].split(":", 1)[0].strip() == reading_id
        if inside:
            lines.append(line)
    return lines
