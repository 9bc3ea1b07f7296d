"""Spec <-> code <-> tests: every citation resolves, every implemented element is implemented
and tested, every public function cites its element, and spec/traceability.md is current."""
import inspect
import subprocess
import sys
from pathlib import Path


from refseg import trace

ROOT = Path(__file__).resolve().parents[1]
REGISTRY = trace.load_registry(ROOT / "spec")
CODE = trace.code_citations()
TESTS = trace.scan_test_citations(ROOT / "tests")
#: Modules whose public functions are tooling, not claim elements: the citation machinery
#: itself, the backend switch and the generic validators.
UNCITED_MODULES = {"refseg.trace", "refseg.backend", "refseg.errors", "refseg.cli",
                   "refseg.__main__"}


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


def test_planned_elements_name_their_issue_and_exceptions_give_a_reason():
    for e in REGISTRY.elements.values():
        if e.status == "planned":
            assert isinstance(e.issue, int), e.id
        if e.status == "not-applicable":
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


def test_reading_ids_named_in_code_exist():
    """Docstrings cite readings as ``R-name``; each must be a section of readings.md."""
    import re

    for path in (ROOT / "refseg").glob("**/*.py"):
        for name in re.findall(r"\bR-[a-z0-9]+\b", path.read_text(encoding="utf-8")):
            assert name in REGISTRY.reading_ids, f"{path.name}: {name}"


def test_every_public_function_cites_a_claim_element():
    import importlib
    import pkgutil

    import refseg

    uncited = []
    for info in pkgutil.walk_packages(refseg.__path__, "refseg."):
        if info.name in UNCITED_MODULES or info.name.split(".")[-1].startswith("_"):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            if inspect.isfunction(obj) and not getattr(obj, "__claims__", None):
                uncited.append(f"{info.name}.{name}")
    assert uncited == []


def test_matrix_is_current():
    expected = trace.render_matrix(REGISTRY, CODE, TESTS)
    current = (ROOT / "spec" / trace.MATRIX_FILE).read_text(encoding="utf-8")
    assert current == expected, "spec/traceability.md is stale: run `refseg trace --write`"


def test_marker_selects_the_tests_of_one_element():
    """`pytest -m claim1.step2.cv` collects exactly the tests that cite it (or a child)."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "claim1.step2.cv",
         "-p", "no:randomly", str(ROOT / "tests" / "test_weighting.py")],
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
        [sys.executable, "-m", "pytest", "-q", "--rootdir", str(ROOT), "-c",
         str(ROOT / "pyproject.toml"), "--confcutdir", str(ROOT / "tests"),
         "-p", "tests.conftest", str(bad)],
        capture_output=True, text=True, cwd=ROOT)
    assert result.returncode != 0 and "claim9.nope" in result.stdout + result.stderr
