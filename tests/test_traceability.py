"""Spec <-> code <-> tests: every citation resolves, every implemented element is implemented
and tested, every public function either implements an element or is marked as
infrastructure, every test cites what it tests, and spec/traceability.md is current."""
import inspect
import re
import subprocess
import sys

import pytest

from refseg import registry
from refseg.audit import trace

from checkout import ROOT, run_refseg

pytestmark = pytest.mark.infrastructure
REGISTRY = registry.load_registry(ROOT / "spec")
CODE = trace.code_citations()
TEST_LINES: dict = {}
TESTS = trace.scan_test_citations(ROOT / "tests", TEST_LINES)
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

    raw = (ROOT / "spec" / registry.CLAIMS_FILE).read_bytes()
    assert hashlib.sha256(raw).hexdigest() == \
        "e72d0c79fd0f55255d8aa4fac51487990c41bbcc930fc7c72ceafc8665a6f7f7"
    assert registry.claims_text("甲；\n\n乙表\n\n示丙。\n\n6.丁：\n\n戊") == \
        "甲；\n\n乙表示丙。\n\n6.丁：\n\n戊"
    joined = registry.claims_text(raw.decode("utf-8"))
    assert len(joined) == len(raw.decode("utf-8")) - 2 * 6  # the six breaks inside sentences


def test_the_shipped_description_is_the_seeds_description():
    """description_zh.txt is the seeds' description file, byte for byte (its SHA-256, of the
    file as received), and description_text finds its 205 paragraphs [0069]-[0273], in order,
    each once, with the lines that continue a paragraph kept in it."""
    import hashlib

    raw = (ROOT / "spec" / registry.DESCRIPTION_FILE).read_bytes()
    assert hashlib.sha256(raw).hexdigest() == \
        "f791df2640f8f93412154328f7a80452004d9097d3a5394fb4bdfb1e72178b2d"
    paragraphs = registry.description_text(raw.decode("utf-8"))
    assert list(paragraphs) == [f"{n:04d}" for n in range(69, 274)]
    assert paragraphs["0213"].startswith("在焊接图像中焊缝区域比较微弱")
    assert "0.4124" in paragraphs["0213"]
    assert registry.description_text("[0001] 甲\n乙\n\n[0002] 丙\n") == \
        {"0001": "甲\n乙", "0002": "丙"}
    for bad in ("前言\n[0001] 甲\n", "[0001] 甲\n[0001] 乙\n"):
        with pytest.raises(ValueError):
            registry.description_text(bad)
    assert REGISTRY.description == paragraphs


def test_each_figure_of_the_patent_is_its_chinese_text():
    """Each figure of registry.toml's [[figure]] is written, as its ``source`` says, in the
    Chinese paragraph it cites; its value is that text's number (a percentage as a fraction);
    [0213]'s weights are the four operators', each after its number, and sum to 1 within the
    rounding of four 4-decimal numbers (2e-4)."""
    figures = registry.patent_figures(ROOT / "spec")
    operators = ("canny", "sobel", "prewitt", "log")
    assert set(figures) == {"accuracy", "loss", "seconds_per_image",
                            *(f"weight.{k}" for k in operators)}
    for figure in figures.values():
        assert figure.source in REGISTRY.description[figure.paragraph], figure.id
        number = re.match(r"\d+\.\d+", figure.source).group()
        scale = 100 if figure.source[len(number):].startswith("%") else 1
        assert figure.value == float(number) / scale, figure.id
    for k in operators:
        assert figures[f"weight.{k}"].source.lower().endswith(f"({k})")
    assert abs(sum(figures[f"weight.{k}"].value for k in operators) - 1) <= 2e-4
    assert figures["seconds_per_image"].source.endswith("秒")
    assert registry.patent_weights(operators) == {k: figures[f"weight.{k}"].value
                                                  for k in operators}


#: Editorial notes in a rendering ("[sic: ...; E7]", "(formula image, missing from the
#: text: ...)"), which carry numbers of their own.
_NOTE = re.compile(r"\[[^\]]*\]|\([^)]*missing from the text[^)]*\)")
#: A number standing alone: not part of a name (x7, beta1, ReLU6, E10), a size (3x3) or
#: "2-D".
_NUMBER = re.compile(r"(?<![A-Za-z0-9_.])\d+(?:\.\d+)?(?![A-Za-z0-9]|-[A-Za-z])")
_CHINESE_NUMERALS = "零一二三四五六七八九十"


def test_every_paragraph_rendering_is_of_a_paragraph_of_the_shipped_text():
    """Each English rendering of registry.toml sits under a paragraph id of the shipped
    description, and keeps that paragraph's numbers: every number standing alone in the
    rendering (notes aside) is in the Chinese paragraph, in digits or, up to ten, as a
    Chinese numeral. A rendering filed under the wrong id, or a number changed in
    rendering, fails."""
    description = REGISTRY.description
    assert set(REGISTRY.paragraphs) <= set(description)
    checked = 0
    for pid, english in REGISTRY.paragraphs.items():
        chinese = description[pid]
        for number in _NUMBER.findall(_NOTE.sub("", english)):
            checked += 1
            assert number in chinese or (number.isdigit() and int(number) <= 10 and
                                         _CHINESE_NUMERALS[int(number)] in chinese), \
                (pid, number, english)
    assert checked >= 100  # the check has numbers to hold (0.4124, 550, 156, 0.001, ...)
    assert _NUMBER.findall(_NOTE.sub("", "3x3, x7 [sic: E7] 2-D 0.4124 and 16 (formula "
                                          "image, missing from the text: 9)")) == \
        ["0.4124", "16"]


def test_every_cited_paragraph_is_in_the_shipped_description():
    """Every paragraph the registry's elements cite, and every "[0NNN]" written in the spec,
    the docs, the README and refseg's code, is a paragraph of the shipped description."""
    description = REGISTRY.description
    for element in REGISTRY.elements.values():
        for pid in element.paragraphs:
            assert pid in description, (element.id, pid)
    files = [*(ROOT / "spec").glob("*.md"), ROOT / "spec" / "registry.toml", ROOT / "README.md",
             *(ROOT / "docs").glob("*.md"), *(ROOT / "refseg").glob("**/*.py")]
    cited = 0
    for path in files:
        for pid in re.findall(r"\[(\d{4})\]", path.read_text(encoding="utf-8")):
            cited += 1
            assert pid in description, (path.relative_to(ROOT), pid)
    assert cited > 500


def test_the_spec_docs_and_code_name_no_file_outside_the_repository():
    """No path to the workbench the project was built beside ("../shared/", "shared/
    reference", "shared/seeds"), and every "spec/<file>" they name ships in spec/."""
    files = [*(ROOT / "spec").glob("*.*"), ROOT / "README.md", *(ROOT / "docs").glob("*.md"),
             *(ROOT / "refseg").glob("**/*.py"), *(ROOT / "tests").glob("**/*.py"),
             *(ROOT / "benchmarks").glob("*.py")]
    outside = re.compile(r"\.\./shared|shared/(?:reference|seeds)|NOTES\.md")
    for path in files:
        if path.suffix not in (".md", ".py", ".toml", ".txt", ".json"):
            continue
        if path.name == "test_traceability.py":  # this test names what it looks for
            continue
        text = path.read_text(encoding="utf-8")
        assert not outside.search(text), (path.relative_to(ROOT), outside.search(text)[0])
        for name in re.findall(r"\bspec/([\w.-]+\.(?:md|toml|txt|json|py))", text):
            assert (ROOT / "spec" / name).is_file(), (path.relative_to(ROOT), name)


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
    expected = trace.render_matrix(REGISTRY, CODE, TESTS, TEST_LINES)
    current = (ROOT / "spec" / trace.MATRIX_FILE).read_text(encoding="utf-8")
    assert current == expected, "spec/traceability.md is stale: run `refseg trace --write`"


def test_explain_outside_a_checkout_lists_each_test_with_its_file_and_line(tmp_path):
    """An installed refseg has no tests/: ``refseg explain`` run away from a checkout lists
    each test of the element with the file and line of its ``def``, as the checkout's
    tests/ have them (read from the shipped matrix), as it does inside a checkout."""
    done = run_refseg("explain", "claim1.step2.cv", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    section = done.stdout.split("\ntested by (")[1].split("\n\n")[0].splitlines()
    assert "the tests are not installed" in section[0]
    shown = [line.split() for line in section[1:]]
    expected = [[TEST_LINES[t], t.split("::", 1)[1]] for t, ids in TESTS.items()
                if "claim1.step2.cv" in ids]
    assert len(expected) > 5 and sorted(shown) == sorted(expected)
    for where, _ in shown:
        path, line = where.rsplit(":", 1)
        assert (ROOT / path).read_text(encoding="utf-8").splitlines()[int(line) - 1] \
            .lstrip().startswith("def test")


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
