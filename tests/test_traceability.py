"""Spec <-> code <-> tests: every citation resolves, every implemented element is implemented
and tested, every public function either implements an element or is marked as
infrastructure, every test cites what it tests, and spec/traceability.md is current."""
import inspect
import subprocess
import sys

import pytest

from refseg import trace

from checkout import ROOT

pytestmark = pytest.mark.infrastructure
REGISTRY = trace.load_registry(ROOT / "spec")
CODE = trace.code_citations()
TESTS = trace.scan_test_citations(ROOT / "tests")
#: The console-script shim, which defines nothing.
ENTRY_POINTS = {"refseg.__main__"}


def test_every_cited_id_exists():
    cited = {i for ids in [*CODE.values(), *TESTS.values()] for i in ids}
    assert sorted(cited - set(REGISTRY.elements)) == []


def test_every_implemented_element_has_a_function_and_a_test():
    functions = trace._invert(CODE)
    tests = trace._invert(TESTS)
    missing = [(e.id, "function" if e.id not in functions else "test")
               for e in REGISTRY.elements.values()
               if e.status == "implemented" and (e.id not in functions or e.id not in tests)]
    assert missing == []


def test_planned_elements_and_exceptions_give_a_reason():
    for e in REGISTRY.elements.values():
        if e.status in ("planned", "not-applicable"):
            assert e.reason.strip(), e.id


def test_every_reading_and_paragraph_cited_by_the_registry_exists():
    for e in REGISTRY.elements.values():
        assert set(e.readings) <= REGISTRY.reading_ids, e.id
        if e.status == "implemented":  # planned elements get their renderings with the code
            assert [p for p in e.paragraphs if p not in REGISTRY.paragraphs] == [], e.id
    # and every reading section is used by some element
    used = {r for e in REGISTRY.elements.values() for r in e.readings}
    assert REGISTRY.reading_ids - used == set()


def test_every_claim_is_covered_by_the_registry():
    assert {e.claim for e in REGISTRY.elements.values()} == {1, 2, 3, 4, 5, 6}


def test_every_element_maps_to_a_span_of_the_chinese_claims():
    """Each element's ``original`` spans are literal text of the claims, in the claim the
    element belongs to (claim n runs from "n." to "n+1.")."""
    text = REGISTRY.claims_text
    starts = [text.index(f"{n}.一种" if n in (1, 5, 6) else f"{n}.根据权利要求")
              for n in range(1, 7)] + [len(text)]
    for e in REGISTRY.elements.values():
        assert e.original, e.id
        begin, end = starts[e.claim - 1], starts[e.claim]
        for span in e.original:
            assert span in text[begin:end], (e.id, span)


def test_the_shipped_claims_are_the_seeds_claims():
    """claims_zh.txt is the seeds' claims file, byte for byte (its SHA-256, of the file as
    received), and claims_text joins only the breaks inside a sentence."""
    import hashlib

    raw = (ROOT / "spec" / trace.CLAIMS_FILE).read_bytes()
    assert hashlib.sha256(raw).hexdigest() == \
        "e72d0c79fd0f55255d8aa4fac51487990c41bbcc930fc7c72ceafc8665a6f7f7"
    assert trace.claims_text("甲；\n\n乙表\n\n示丙。\n\n6.丁：\n\n戊") == \
        "甲；\n\n乙表示丙。\n\n6.丁：\n\n戊"
    joined = trace.claims_text(raw.decode("utf-8"))
    assert len(joined) == len(raw.decode("utf-8")) - 2 * 6  # the six breaks inside sentences


def test_reading_ids_named_in_code_exist():
    """Docstrings cite readings as ``R-name``; each must be a section of readings.md."""
    import re

    for path in (ROOT / "refseg").glob("**/*.py"):
        for name in re.findall(r"\bR-[a-z0-9]+\b", path.read_text(encoding="utf-8")):
            assert name in REGISTRY.reading_ids, f"{path.name}: {name}"


def test_every_public_function_implements_an_element_or_is_infrastructure():
    """duvet's rule, typed: a public function of refseg either cites the claim elements it
    implements or says why it implements none (on itself, or for its whole module)."""
    import importlib
    import pkgutil

    import refseg

    unmarked, both = [], []
    for info in pkgutil.walk_packages(refseg.__path__, "refseg."):
        if info.name in ENTRY_POINTS or info.name.split(".")[-1].startswith("_"):
            continue
        module = importlib.import_module(info.name)
        module_reason = getattr(module, "INFRASTRUCTURE", "")
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            if not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            claims = getattr(obj, "__claims__", None)
            reason = getattr(obj, "__infrastructure__", None) or module_reason
            if claims and getattr(obj, "__infrastructure__", None):
                both.append(f"{info.name}.{name}")
            elif not claims and not reason and inspect.isfunction(obj):
                unmarked.append(f"{info.name}.{name}")
    assert unmarked == [] and both == []


def test_infrastructure_modules_implement_nothing():
    """A module declared infrastructure as a whole cites no claim element."""
    import importlib
    import pkgutil

    import refseg

    cited = []
    for info in pkgutil.walk_packages(refseg.__path__, "refseg."):
        if info.name in ENTRY_POINTS:
            continue
        module = importlib.import_module(info.name)
        if getattr(module, "INFRASTRUCTURE", ""):
            cited += [f"{info.name}.{n}" for n, o in vars(module).items()
                      if getattr(o, "__module__", None) == module.__name__
                      and getattr(o, "__claims__", None)]
    assert cited == []


def test_every_test_cites_an_element_or_is_infrastructure():
    """The other direction: a test says which claim element it checks, or that it checks
    none, so that no test counts for an element it does not test."""
    import ast

    unmarked = []
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))

        def marks(decorators):
            return {d.attr if isinstance(d, ast.Attribute) else
                    d.func.attr if isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute)
                    else "" for d in decorators}

        module_marks = set()
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                    isinstance(x, ast.Name) and x.id == "pytestmark" for x in node.targets):
                values = node.value.elts if isinstance(node.value, ast.List) else [node.value]
                module_marks |= marks(values)

        def visit(body, inherited):
            for node in body:
                if isinstance(node, ast.ClassDef):
                    visit(node.body, inherited | marks(node.decorator_list))
                elif isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
                    if not (inherited | marks(node.decorator_list)) & {"claim", "infrastructure"}:
                        unmarked.append(f"{path.relative_to(ROOT)}::{node.name}")

        visit(tree.body, module_marks)
    assert unmarked == []


def test_matrix_is_current():
    expected = trace.render_matrix(REGISTRY, CODE, TESTS)
    current = (ROOT / "spec" / trace.MATRIX_FILE).read_text(encoding="utf-8")
    assert current == expected, "spec/traceability.md is stale: run `refseg trace --write`"


def test_marker_selects_the_tests_of_one_element():
    """`pytest -m claim1.step2.cv` collects exactly the tests that cite it (or a child)."""
    result = subprocess.run(
        [sys.executable, "-P", "-m", "pytest", "--collect-only", "-q", "-m", "claim1.step2.cv",
         "-p", "no:randomly", str(ROOT / "tests" / "claim1" / "test_weighting.py")],
        capture_output=True, text=True, cwd=ROOT)
    collected = {line.split("[")[0] for line in result.stdout.splitlines() if "::" in line}
    expected = {t for t, ids in TESTS.items() if "test_weighting.py" in t and
                any(i == "claim1.step2.cv" or i.startswith("claim1.step2.cv.") for i in ids)}
    assert result.returncode == 0, result.stdout + result.stderr
    assert collected == expected and expected


def test_unknown_ids_fail_collection(tmp_path):
    bad = tmp_path / "test_bad_citation.py"
    bad.write_text("import pytest\n\n@pytest.mark.claim('claim9.nope')\ndef test_x():\n    pass\n")
    result = subprocess.run(
        [sys.executable, "-P", "-m", "pytest", "-q", "--rootdir", str(ROOT), "-c",
         str(ROOT / "pyproject.toml"), "-p", "conftest", str(bad)],
        capture_output=True, text=True, cwd=ROOT)
    assert result.returncode != 0 and "claim9.nope" in result.stdout + result.stderr
