"""Traceability: the citations checked both ways, the generated matrix, ``refseg explain``,
the golden pins.

The registry of claim elements lives in ``spec/registry.toml`` (read by :mod:`refseg.registry`;
stable IDs such as ``claim1.step2.cv``, each with its paragraphs, status, English text and
readings). Citations are typed, as in duvet (the code's decorators live in :mod:`refseg.cite`):

- ``@implements("claim1.step2.cv")`` on a function or class that implements a claim element;
- ``@infrastructure("why")`` on a public function that implements none (file writing, hashing,
  formatting, validation), with the reason; a module whose every public function is such
  declares ``INFRASTRUCTURE = "why"`` instead;
- ``@pytest.mark.claim("claim1.step2.cv")`` on a test of an element, and
  ``@pytest.mark.infrastructure`` on a test of no element (kernel twins, anchors, the spec).

``tests/test_traceability.py`` fails when a citation points nowhere, when an implemented
element has no function or no test, when a public function carries neither citation, or when
``spec/traceability.md`` differs from :func:`render_matrix`.
"""
from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import re
from pathlib import Path

from refseg.cite import CITATIONS, CITING_OBJECTS
from refseg.errors import InputError
from refseg.registry import (SENSITIVITY_FILE, STATUSES, Registry, load_registry,
                             markdown_section, sensitivity_table, spec_dir)

#: The refseg package folder: this module is ``refseg/audit/trace.py``.
PACKAGE = Path(__file__).resolve().parent.parent

MATRIX_FILE = "traceability.md"
#: {claim element: names of the golden arrays that pin it}, generated with the matrix.
GOLDEN_PINS_FILE = "golden_pins.json"
INFRASTRUCTURE = "the citation machinery itself"


def _import_all() -> None:
    for module in pkgutil.walk_packages([str(PACKAGE)], "refseg."):
        if module.name != "refseg.__main__":
            importlib.import_module(module.name)


def code_citations() -> dict[str, tuple[str, ...]]:
    """Import every refseg module and return {qualified name: cited IDs}."""
    _import_all()
    return dict(sorted(CITATIONS.items()))


def code_locations() -> dict[str, str]:
    """{qualified name: "refseg/<path>.py:<line>"} of every function or class that cites a
    claim element, the line being that of its ``def`` or ``class`` statement."""
    import inspect

    _import_all()
    out = {}
    for name, obj in sorted(CITING_OBJECTS.items()):
        obj = inspect.unwrap(obj)  # a contextmanager's wrapper lives in contextlib
        try:
            path = Path(inspect.getsourcefile(obj)).resolve()
            lines, start = inspect.getsourcelines(obj)
        except (TypeError, OSError):
            continue
        offset = next((i for i, line in enumerate(lines)
                       if line.lstrip().startswith(("def ", "class ", "async def "))), 0)
        out[name] = f"refseg/{path.relative_to(PACKAGE).as_posix()}:{start + offset}"
    return out


def _claim_args(node: ast.AST) -> list[str]:
    """IDs in a ``pytest.mark.claim("...")`` call (or in a list of such calls)."""
    found = []
    for call in ast.walk(node):
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "claim"):
            found += [a.value for a in call.args if isinstance(a, ast.Constant)]
    return found


def scan_test_citations(tests_dir: Path, lines: dict | None = None
                        ) -> dict[str, tuple[str, ...]]:
    """Scan test sources: {"tests/<path>.py::test_name": cited IDs}. Module-level
    ``pytestmark`` and class decorators apply to every test inside. When ``lines`` is a dict,
    it receives {test id: "tests/<path>.py:<line of the def>"}."""
    result: dict[str, list[str]] = {}
    for path in sorted(tests_dir.rglob("test_*.py")):
        relative = path.relative_to(tests_dir).as_posix()
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
                        result[f"tests/{relative}::{prefix}{node.name}"] = ids
                        if lines is not None:
                            lines[f"tests/{relative}::{prefix}{node.name}"] = \
                                f"tests/{relative}:{node.lineno}"

        visit(tree.body, "", module_ids)
    return {k: tuple(dict.fromkeys(v)) for k, v in sorted(result.items())}


def _invert(citations: dict[str, tuple[str, ...]]) -> dict[str, list[str]]:
    by_id: dict[str, list[str]] = {}
    for name, ids in citations.items():
        for element_id in ids:
            by_id.setdefault(element_id, []).append(name)
    return by_id


def render_matrix(registry: Registry, code: dict[str, tuple[str, ...]],
                  tests: dict[str, tuple[str, ...]], test_lines: dict | None = None) -> str:
    """The traceability matrix as Markdown: element -> paragraphs -> functions -> tests.

    ``test_lines`` ({test id: "tests/<path>.py:<line>"}, from :func:`scan_test_citations`)
    puts each test's line beside it, ``(line N)``: an installed refseg has no tests/, and
    ``refseg explain`` reads the lines from here."""
    functions, test_names = _invert(code), _invert(tests)
    test_lines = test_lines or {}

    def test_cell(test_id):
        line = test_lines.get(test_id)
        return f"`{test_id}`" + (f" (line {line.rsplit(':', 1)[1]})" if line else "")

    lines = [
        "# Traceability matrix",
        "",
        "Generated by `refseg trace --write` from `spec/registry.toml`, the `@implements`",
        "citations in `refseg/` and the `pytest.mark.claim` citations in `tests/`",
        "(each test with the line of its `def`: `refseg explain` shows them where the tests",
        "are not installed).",
        "A linked reading has its sensitivity table in `sensitivity.md` (`refseg explain` "
        "prints it).",
        "Do not edit by hand: `tests/test_traceability.py` fails when it is stale.",
        "",
        "| element | status | paragraphs | readings | functions | tests |",
        "|---|---|---|---|---|---|",
    ]
    for element in registry.elements.values():
        paragraphs = ", ".join(f"[{p}]" for p in element.paragraphs)
        status = element.status
        fns = "<br>".join(f"`{f}`" for f in functions.get(element.id, [])) or "-"
        tst = "<br>".join(test_cell(t) for t in test_names.get(element.id, [])) or "-"
        readings = ", ".join(_reading_cell(registry, r) for r in element.readings) or "-"
        lines.append(f"| `{element.id}` {element.title} | {status} | {paragraphs} | "
                     f"{readings} | {fns} | {tst} |")
    counts = {s: sum(e.status == s for e in registry.elements.values()) for s in STATUSES}
    lines += ["", "Elements: " + ", ".join(f"{n} {s}" for s, n in counts.items()) + ".", ""]
    return "\n".join(lines)


def _reading_cell(registry: Registry, reading_id: str) -> str:
    """A reading's ID, linked to its table in ``sensitivity.md`` when it has one."""
    if sensitivity_table(registry.sensitivity_text, reading_id):
        return f"[{reading_id}]({SENSITIVITY_FILE}#{reading_id.lower()})"
    return reading_id


def explain(registry: Registry, element_id: str, code: dict[str, tuple[str, ...]] | None = None,
            tests: dict[str, tuple[str, ...]] | None = None) -> str:
    """A plain-text account of one element: text, paragraphs, readings, functions, tests."""
    if element_id not in registry.elements:
        raise KeyError(element_id)
    e = registry.elements[element_id]
    out = [f"{e.id}: {e.title}", f"claim {e.claim}; status {e.status}", "", e.text, ""]
    for p in e.paragraphs:
        out.append(f"[{p}] {registry.paragraphs.get(p, '(not rendered)')}")
    for r in e.readings:
        out += ["", f"reading {r}: see readings.md"]
        out += markdown_section(registry.readings_text, r)
        table = sensitivity_table(registry.sensitivity_text, r)
        if table:
            out += ["", f"sensitivity of {r} (see {SENSITIVITY_FILE}):"] + table
    if code is not None:
        out += ["", "functions: " + (", ".join(_invert(code).get(e.id, [])) or "none")]
    if tests is not None:
        out += ["tests: " + (", ".join(_invert(tests).get(e.id, [])) or "none")]
    if e.reason:
        out += ["", f"note: {e.reason}"]
    return "\n".join(out)


def checkout_folder() -> Path | None:
    """The source checkout to read tests from and write the matrix into: the working folder if
    it holds ``spec/registry.toml`` and ``tests/conftest.py``, else the folder above the
    imported package if that does (a package run from its source tree); None otherwise."""
    for candidate in (Path.cwd(), PACKAGE.parent):
        if (candidate / "spec" / "registry.toml").is_file() \
                and (candidate / "tests" / "conftest.py").is_file():
            return candidate
    return None


def tests_folder() -> Path | None:
    """The ``tests/`` folder of the source checkout (:func:`checkout_folder`), or None."""
    checkout = checkout_folder()
    return None if checkout is None else checkout / "tests"


def matrix_text() -> str:
    """The traceability matrix as shipped (``spec/traceability.md``)."""
    return (spec_dir() / MATRIX_FILE).read_text(encoding="utf-8")


def write_matrix() -> str:
    """Regenerate the checkout's ``spec/traceability.md`` from its registry and tests and the
    citations of the refseg that is imported (install it first), and ``spec/golden_pins.json``
    from the golden bundle that refseg builds; returns what was done, in one line."""
    checkout = checkout_folder()
    if checkout is None:
        raise InputError(f"{Path.cwd()}: not a refseg source checkout (no spec/registry.toml "
                         "and tests/conftest.py); --write works in one")
    from refseg.golden import build_bundle, pinned_elements
    from refseg.golden.flagged import flagged_pins

    registry = load_registry(checkout / "spec")
    lines: dict[str, str] = {}
    tests = scan_test_citations(checkout / "tests", lines)
    text = render_matrix(registry, code_citations(), tests, lines)
    # from building the bundle (about 15 s): the names, and the flagged vectors' hashes
    manifest = build_bundle()[0]
    pins = render_golden_pins(pinned_elements(manifest), flagged_pins(manifest))
    done = []
    for name, content in ((MATRIX_FILE, text), (GOLDEN_PINS_FILE, pins)):
        path = checkout / "spec" / name
        if path.is_file() and path.read_text(encoding="utf-8") == content:
            done.append(f"{path}: up to date")
        else:
            path.write_text(content, encoding="utf-8")
            done.append(f"wrote {path}")
    return "; ".join(done)


def render_golden_pins(pinned: dict[str, list[str]], flagged: dict | None = None) -> str:
    """``golden_pins.json``: {claim element: the sorted names of the golden arrays pinning it},
    from a bundle's manifest (:func:`refseg.golden.pinned_elements`), and under
    ``flagged_vectors`` the SHA-256 of each flagged vector's arrays
    (:func:`refseg.golden.flagged.flagged_pins`), so that expected data never moves
    silently with the code."""
    pins = {k: sorted(v) for k, v in sorted(pinned.items())}
    if flagged:
        pins["flagged_vectors"] = dict(sorted(flagged.items()))
    return json.dumps(pins, indent=1) + "\n"


def golden_pins(directory: Path | None = None) -> dict[str, list[str]]:
    """The shipped ``golden_pins.json``: which golden arrays pin each claim element."""
    path = (directory or spec_dir()) / GOLDEN_PINS_FILE
    return json.loads(path.read_text(encoding="utf-8"))


#: A test in the matrix's tests cell: `tests/<path>.py::<name>` and its line, ``(line N)``.
MATRIX_TEST = re.compile(r"`(?P<id>tests/(?P<file>[^`:]+\.py)::[^`]+)`"
                         r"(?: \(line (?P<line>\d+)\))?")


def _matrix_tests(element_id: str) -> list[tuple[str, str | None]]:
    """The tests the shipped matrix lists for an element, each with "tests/<path>.py:<line>"
    (None from a matrix written without lines): an installed refseg has no tests/."""
    for line in matrix_text().splitlines():
        if line.startswith(f"| `{element_id}` "):
            cell = line.rstrip(" |").rsplit(" | ", 1)[-1]
            return [(m["id"], f"tests/{m['file']}:{m['line']}" if m["line"] else None)
                    for m in MATRIX_TEST.finditer(cell)]
    return []


def functions_by_element() -> dict[str, list[tuple[str, str]]]:
    """{element: the functions and classes citing it, as (qualified name,
    "refseg/<path>.py:<line>")}."""
    locations = code_locations()
    return {element_id: [(f, locations.get(f, "?")) for f in names]
            for element_id, names in _invert(code_citations()).items()}


def tests_by_element() -> tuple[dict[str, list[tuple[str, str | None]]], bool]:
    """{element: the tests citing it, as (test id, "tests/<path>.py:<line>")}, read from the
    checkout's tests/ when there is one; in an installed refseg, which has no tests/, from the
    shipped matrix, which carries their lines. The flag says which (True: from the
    checkout)."""
    folder = tests_folder()
    if folder is None:
        registry = load_registry()
        return {e: _matrix_tests(e) for e in registry.elements}, False
    lines: dict[str, str] = {}
    tests = _invert(scan_test_citations(folder, lines))
    return {e: [(t, lines[t]) for t in names] for e, names in tests.items()}, True


#: A Markdown link of the spec files: [label](target).
MARKDOWN_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")


def plain_links(text: str, folder: Path | None = None) -> str:
    """The spec's Markdown links as a terminal shows them: the label, then the file it points
    at in ``folder`` (default: the spec folder) with its section, ``label (path#section)``, or
    the path alone when the label was the target."""
    folder = spec_dir() if folder is None else folder

    def shown(match):
        label, target = match.groups()
        file, _, section = target.partition("#")
        where = (str(folder / file) if file else "") + (f"#{section}" if section else "")
        return where if label == target else f"{label} ({where})"

    return MARKDOWN_LINK.sub(shown, text)


def explain_element(element_id: str, pinned: dict | None = None, golden=None) -> str:
    """``refseg explain``: one element's text, paragraphs and readings, then each implementing
    function and each test with its file and line, then (with ``pinned``, from a golden
    bundle's manifest) the golden arrays that pin it."""
    registry = load_registry()
    if element_id not in registry.elements:
        raise InputError(f"{element_id}: no such claim element (see `refseg trace`)")
    text = explain(registry, element_id)
    functions = functions_by_element().get(element_id, [])
    out = [text, "", f"implemented by ({len(functions)}):"]
    out += [f"  {where}  {f}" for f, where in functions] or ["  none"]
    tests, from_checkout = tests_by_element()
    tests = tests.get(element_id, [])
    source = "" if from_checkout else ("; the tests are not installed: as "
                                       "spec/traceability.md lists them")
    out += ["", f"tested by ({len(tests)}{source}):"]
    out += [f"  {where}  {t.split('::', 1)[1]}" if where else f"  {t}"
            for t, where in tests] or ["  none"]
    if pinned is not None:
        names = pinned.get(element_id, [])
        out += ["", f"golden arrays in {golden} ({len(names)}):"]
        out += [f"  {n}" for n in names] or ["  none"]
    return plain_links("\n".join(out))
