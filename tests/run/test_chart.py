"""The claim chart (index.html) of the demo and of `refseg report`: rendered in headless
Chromium from file:// (no console error, no failed request, every image decoded, every claim
element a section, a screenshot that is not blank), and self-contained."""
import html
import io
import re
import shutil

import numpy as np
import pytest
from PIL import Image

from refseg import __version__
from refseg.registry import load_registry

from browser import load_page
from checkout import SPEC, run_refseg

# the report is no claim element: it shows them
pytestmark = pytest.mark.infrastructure
REGISTRY = load_registry(SPEC)
#: The sections after the elements' own, in order.
TAIL = ["training", "predictions", "results", "weights", "errata", "claims"]


def problems(report, expected_sections) -> list[str]:
    """Everything that would make a reader's page wrong, as one line each."""
    found = [f"console error: {e}" for e in report.console_errors]
    found += [f"uncaught exception: {e}" for e in report.exceptions]
    found += [f"failed request: {e}" for e in report.failed_requests]
    found += [f"image not decoded: {src}" for src, w, h in report.images if w <= 0 or h <= 0]
    if not report.images:
        found.append("no image")
    if report.sections != expected_sections:
        missing = [s for s in expected_sections if s not in report.sections]
        found.append(f"sections differ from the registry's (missing {missing[:3]})")
    return found


def blank(screenshot: bytes) -> bool:
    """A screenshot with (almost) nothing drawn: under 2 % of its pixels differ from its most
    common colour, or it has fewer than 16 colours."""
    pixels = np.asarray(Image.open(io.BytesIO(screenshot)).convert("RGB")).reshape(-1, 3)
    colours, counts = np.unique(pixels, axis=0, return_counts=True)
    return counts.max() > 0.98 * len(pixels) or len(colours) < 16


@pytest.fixture(scope="module")
def chart(tiny_demo):
    out, _ = tiny_demo
    return out / "index.html", (out / "index.html").read_text(encoding="utf-8")


#: For each claim of the contents, the number of columns its list item is laid out in.
_CONTENTS_COLUMNS = """Array.from(document.querySelectorAll('nav ol.toc > li'))
  .filter(li => li.querySelector('ol')).map(li =>
  new Set(Array.from(li.querySelectorAll('li')).map(i => i.getBoundingClientRect().left)).size)"""


def test_the_chart_renders_in_chromium_without_cjk_fonts_and_prints_short(chart):
    """From file://, on a machine with no CJK font (a FONTCONFIG_FILE offering DejaVu only):
    no console error, no exception, no failed request; every image has a natural size; one
    section per claim element of the registry, in claim order, then the demo's own sections;
    the screenshot is not blank; every character of the patent's Chinese text is drawn (the
    probe finds one the embedded font lacks, so it can fail); printed on A4 it takes fewer
    than 20 pages; each claim's entry in the contents stays in one column."""
    path, _ = chart
    # 800 pixels wide: without the contents' column rule, claim 1's items split there
    report = load_page(path, width=800, no_cjk_fonts=True, pdf=True, glyphs="龘",
                       evaluate={"contents": _CONTENTS_COLUMNS})
    assert problems(report, list(REGISTRY.elements) + TAIL) == []
    assert len(report.images) >= 30  # the claim-1 steps of two welds, curves, predictions
    assert not blank(report.screenshot)
    image = Image.open(io.BytesIO(report.screenshot))
    assert image.size == (800, 900)
    assert report.glyphs_checked > 150 and report.missing_glyphs == "龘"
    assert report.pdf.startswith(b"%PDF") and 5 < report.pdf_pages < 20
    claims = {e.claim for e in REGISTRY.elements.values()}
    assert len(report.values["contents"]) == len(claims)
    assert set(report.values["contents"]) == {1}


def test_a_broken_page_fails_the_checks(chart, tmp_path):
    """The checks catch what they are for: a missing image file (a failed request, a console
    error, no natural size), an undecodable embedded image, a missing section, a blank page."""
    _, page = chart
    sources = re.findall(r'src="(data:image/png;base64,[^"]+)"', page)
    broken = page.replace(sources[0], "missing.png", 1).replace(
        sources[1], "data:image/png;base64,iVBORw0KGgo=", 1).replace(
        'id="claim1.step2.cv"', 'id="claim1.step2.cv-gone"', 1)
    (tmp_path / "broken.html").write_text(broken, encoding="utf-8")
    report = load_page(tmp_path / "broken.html")
    found = problems(report, list(REGISTRY.elements) + TAIL)
    assert any(f.startswith("failed request: Image") for f in found), found
    assert any(f.startswith("console error") and "missing.png" in f for f in found), found
    assert sum(f.startswith("image not decoded") for f in found) == 2, found
    assert any("claim1.step2.cv" in f for f in found), found
    (tmp_path / "blank.html").write_text("<!DOCTYPE html><html><body></body></html>")
    report = load_page(tmp_path / "blank.html")
    assert blank(report.screenshot) and "no image" in problems(report, [])


def test_the_chart_is_self_contained(chart):
    """Nothing to fetch: every image is embedded, every link is within the page, no external
    URL anywhere in an attribute, a policy that forbids loading, and no script."""
    _, page = chart
    sources = re.findall(r'<img [^>]*src="([^"]*)"', page)
    assert sources and all(s.startswith("data:image/png;base64,") for s in sources)
    links = re.findall(r'href="([^"]*)"', page)
    assert links and all(link.startswith("#") for link in links)
    ids = set(re.findall(r' id="([^"]+)"', page))
    assert {link[1:] for link in links} <= ids
    assert not re.search(r'(src|href|url)\s*[=(]\s*"?(https?:)?//', page)
    assert "<script" not in page.lower()
    assert "Content-Security-Policy" in page and "default-src 'none'" in page


def test_links_are_links_and_each_functions_source_is_one_click_away(chart):
    """No Markdown link is left raw in the page's text; each implementing function's entry
    folds its source (the def or class line of that name) under its name and file:line; each
    element's tests are folded; the embedded font covers the spec's Chinese text."""
    from refseg.audit import trace
    from refseg.report.html import characters_without_glyph

    _, page = chart
    text = re.sub(r"<pre>.*?</pre>", "", page, flags=re.S)
    assert not re.search(r"\[[^\]<>]+\]\([^)\s<>]+\)", text)
    assert 'href="#R-cv"' in page
    functions = trace.functions_by_element()
    sections = dict(re.findall(r'<section id="([^"]+)" class="element">(.*?)</section>', page,
                               re.S))
    for element, body in sections.items():
        for name, where in functions.get(element, []):
            short = name.rsplit(".", 1)[-1]
            source = re.search(
                rf'<details class="source"><summary><code>{re.escape(name)}</code> '
                rf'<span class="loc">{re.escape(where)}</span></summary><pre>(.*?)</pre>',
                body, re.S)
            assert source and re.search(rf"(def|class) {short}\b", source.group(1)), name
        if "Tested by (0)" not in body:
            assert re.search(r"Tested by \(\d+\)</h3><details><summary>", body), element
    shipped = "".join(p.read_text(encoding="utf-8") for p in sorted(SPEC.iterdir())
                      if p.suffix in (".txt", ".toml", ".md"))
    assert characters_without_glyph(shipped) == ""  # else: python tools/build_cjk_font.py


def test_each_element_shows_its_chinese_text_readings_code_and_tests(chart):
    """Per element: the patent's Chinese spans, the English rendering, its readings, the
    functions with file:line, the tests, the golden arrays; the errata E1-E16; the header's
    version and command."""
    _, page = chart
    sections = dict(re.findall(r'<section id="([^"]+)" class="element">(.*?)</section>', page,
                               re.S))
    assert list(sections) == list(REGISTRY.elements)
    for element in REGISTRY.elements.values():
        body = sections[element.id]
        for span in element.original:
            assert html.escape(span) in body, (element.id, span)
        assert html.escape(element.text.split("\n")[0]) in body, element.id
        for reading in element.readings:
            assert f'id="{reading}"' in body or f'href="#{reading}"' in body, element.id
        if element.status == "implemented":
            assert re.search(r"refseg/[\w/]+\.py:\d+", body), element.id
            assert "tests/" in body and "Pinned by golden arrays (0)" not in body, element.id
    assert [f"E{i}" for i in range(1, 17)] == re.findall(r'class="erratum" id="(E\d+)"', page)
    assert f"refseg {__version__}" in page
    assert "refseg demo --out " in page and "--input-size 32x96" in page
    weights = re.search(r'<section id="claim1.step2.weights".*?</section>', page, re.S).group()
    assert weights.count('class="bar patent"') == 8  # four operators, two welds


def test_report_redraws_the_chart_of_a_demo_or_a_run(tiny_demo, tmp_path):
    """`refseg report` rewrites index.html from the outputs alone; it draws a training run's
    folder too; any other folder fails in one line and gets nothing."""
    out, _ = tiny_demo
    copy = tmp_path / "demo-copy"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("checkpoint.npz", "backbones.npz"))
    (copy / "index.html").unlink()
    result = run_refseg("report", copy)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(copy / "index.html")
    page = (copy / "index.html").read_text(encoding="utf-8")
    assert f"refseg report {copy}" in page
    assert re.findall(r'<section id="([^"]+)"', page) == list(REGISTRY.elements) + TAIL
    run = copy / "runs" / "fusion-feature"
    assert run_refseg("report", run).returncode == 0
    report = load_page(run / "index.html")
    assert problems(report, list(REGISTRY.elements) + TAIL) == []
    assert not blank(report.screenshot)
    (copy / "demo.json").unlink()  # a demo of an older refseg kept no record
    assert run_refseg("report", copy).returncode == 0
    assert "kept no <code>demo.json</code>" in (copy / "index.html").read_text(encoding="utf-8")
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_refseg("report", empty)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert str(empty) in result.stderr and not (empty / "index.html").exists()


def test_each_readings_sensitivity_table_is_shown_under_it(tiny_demo):
    """spec/sensitivity.md's table of a reading appears once, inside that reading's box in the
    section of the first element citing it; a reading without a table gets none."""
    from refseg import registry as spec
    from refseg.report import chart

    out, _ = tiny_demo
    page = chart.render_chart(out)
    registry = spec.load_registry()
    boxes = dict(re.findall(r'<div class="reading" id="([^"]+)">(.*?)</div>', page, re.S))
    audited = [r for r in boxes if spec.sensitivity_table(registry.sensitivity_text, r)]
    assert len(audited) >= 10 and "R-cv" in audited
    for reading, box in boxes.items():
        assert (f"Sensitivity of {reading} (spec/sensitivity.md)" in box) is (reading in audited)
        assert page.count(f"Sensitivity of {reading} (") == (reading in audited)
    first_row = spec.sensitivity_table(registry.sensitivity_text, "R-cv")[2]
    first_cell = first_row.strip("|").split("|")[0].strip()
    assert html.escape(first_cell, quote=False) in boxes["R-cv"]


def test_the_chart_and_index_md_show_the_same_results(tiny_demo):
    """One results module writes both: each comparison with the patent (quantity, the
    patent's figure, the demo's, the reading) and each run's scores and training appear in
    index.md as written and in the chart as HTML."""
    from refseg.report import html as h
    from refseg.report.folder import Source
    from refseg.report.results import comparisons, run_rows, score_cells

    out, _ = tiny_demo
    index = (out / "index.md").read_text(encoding="utf-8")
    page = (out / "index.html").read_text(encoding="utf-8")
    source = Source(out, out)
    rows = comparisons(source)
    assert len(rows) == 5 and rows[0].patent.startswith("97.41%")
    for row in rows:
        for cell in row:
            assert cell in index, cell
            assert h.inline(cell) in page, cell
    for cells in [*map(score_cells, source.scores), *run_rows(source)]:
        assert "| " + " | ".join(cells) + " |" in index, cells
        assert "".join(f"<td>{h.inline(c)}</td>" for c in cells[1:]) in page, cells


def test_the_chart_quotes_the_audits_sentence_on_0121(tiny_demo):
    """The comparison of the feature image with the gray image ends with the sentence on
    [0121] that ``refseg audit readings`` wrote into spec/sensitivity.md's R-dataset block,
    not with a copy of its numbers."""
    from refseg import registry as spec
    from refseg.audit import network_inputs
    from refseg.report.folder import Source
    from refseg.report.results import comparisons, r_dataset_sentence

    sentence = r_dataset_sentence()
    text = spec.load_registry().sensitivity_text
    block = text[text.index(network_inputs.BEGIN):text.index(network_inputs.END)]
    assert sentence.startswith("[0121] at the demo's size, as the paired difference")
    assert f"\n{sentence}\n" in block and "[95% t interval]" in sentence
    out, _ = tiny_demo
    assert comparisons(Source(out, out))[-1].reading.endswith(" " + sentence)
