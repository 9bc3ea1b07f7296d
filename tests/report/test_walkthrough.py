"""The claim-1 walkthrough of one's own image (``refseg explain claim1 --image IMAGE --out
DIR``), who decided each pixel, the readings that move an image's map, the notebook view of an
extraction, and the guide's notebook tutorial."""
import json
import re
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

import refseg
from refseg.claim1 import alternatives, features
from refseg.claim1.operators import OPERATORS
from refseg.report import html, walkthrough
from refseg.report.who_decided import (COMBINATION_COLOURS, OUTVOTED_COLOUR, decision_map,
                                       decision_shares)

from browser import load_page
from checkout import ROOT, run_refseg
from peak_memory import command_peak

pytestmark = pytest.mark.infrastructure


def square_image() -> np.ndarray:
    """A dark image with a red square and a gray band: the square's edges are weaker than
    the band's, the case where Canny's high threshold passes over an edge the others see."""
    img = np.full((156, 550, 3), 60, np.uint8)
    img[40:110, 200:300] = (200, 30, 30)
    img[70:80, :] = (120, 120, 120)
    return img


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    folder = tmp_path_factory.mktemp("walkthrough")
    Image.fromarray(square_image()).save(folder / "square.png")
    done = run_refseg("explain", "claim1", "--image", folder / "square.png", "--out",
                      folder / "out")
    assert done.returncode == 0, done.stderr
    path = folder / "out" / "square" / "index.html"
    assert done.stdout.strip() == str(path)
    return path, path.read_text(encoding="utf-8")


def test_the_walkthrough_renders_in_chromium_without_cjk_fonts(page):
    """From file://, with no CJK font on the machine: no console error, exception or failed
    request; one section per claim-1 step in order, then who decided and the readings; every
    image decoded, the who-decided map among them; every CJK character drawn, in the Chinese
    text and in the English text that quotes Chinese words (R-gray's 加权平均法), each in its
    own element's font (and the probe that says so finds a character the page's fonts
    lack); every CJK character the page shows is one the embedded subset holds."""
    path, text = page
    report = load_page(path, no_cjk_fonts=True, glyphs="龘")
    assert report.console_errors == [] and report.exceptions == []
    assert report.failed_requests == []
    assert report.sections == list(walkthrough.STEPS) + ["who-decided", "readings"]
    assert all(w > 0 and h > 0 for _, w, h in report.images)
    assert len(report.images) == 14  # 10 step pictures, the who-decided map, 3 readings
    assert 'alt="who decided"' in text
    assert report.glyphs_checked > 20
    assert set("加权平均法") <= set(report.glyphs_outside_chinese)
    assert report.missing_glyphs == "龘"
    shown = re.sub(r"<[^>]*>", "", text.split("<body>")[1])
    assert html.characters_without_glyph(shown) == ""
    assert 'class="missing"' not in text


def test_each_step_shows_its_chinese_text_reading_and_numbers(page):
    _, text = page
    result = features.extract(square_image())
    for step in walkthrough.STEPS:
        section = text.split(f'<section id="{step}">')[1].split("</section>")[0]
        assert 'lang="zh-Hans"' in section and "refseg's rendering" in section, step
        assert 'class="reading"' in section, step
    assert f"{result.intermediate_cv:.4f}" in text
    for op in OPERATORS:
        assert f"{result.weights[op]:.4f}" in text
        assert f"{int(result.edges[op].sum())} ({result.edges[op].mean():.2%})" in text
    assert f"{int(result.feature_map.sum())} feature pixels" in text
    assert "[sensitivity" not in text and "](" not in text  # no raw Markdown link


def test_who_decided_agrees_with_a_count_by_hand():
    """Each combination's pixels counted directly from the edge maps and the weights: kept
    where the weights of the operators marking a pixel reach 0.5 (within 1e-12), outvoted
    where they do not."""
    result = features.extract(square_image())
    shares = decision_shares(result)
    edges = np.stack([result.edges[op] for op in OPERATORS]).astype(bool)
    weights = np.array([result.weights[op] for op in OPERATORS])
    for row in shares.rows:
        pattern = np.array([op in row.operators for op in OPERATORS])
        where = np.all(edges == pattern[:, None, None], axis=0)
        assert row.weight == pytest.approx(weights[pattern].sum(), abs=1e-12)
        expected_kept = int(where.sum()) if weights[pattern].sum() >= 0.5 - 1e-12 else 0
        assert (row.kept, row.kept + row.outvoted) == (expected_kept, int(where.sum()))
    assert sum(r.kept for r in shares.rows) == int(result.feature_map.sum())
    assert sum(r.share for r in shares.rows) == pytest.approx(1.0, abs=1e-12)
    colours = decision_map(result)
    assert np.all(colours[(result.feature_map == 0) & edges.any(axis=0)] == OUTVOTED_COLOUR)
    assert np.all(colours[~edges.any(axis=0)] == COMBINATION_COLOURS[0])


def test_a_heavy_operator_is_said_to_decide_alone():
    """Canny with weight 0.6 keeps every pixel it marks: the sentences say so, and that the
    map is Canny's when the others mark nothing else."""
    blank = np.zeros((4, 4), np.uint8)
    canny = blank.copy()
    canny[1, 1:3] = 1
    sobel = blank.copy()
    sobel[2, 2] = 1
    result = features.FeatureResult(
        gray=blank * 1.0, blurred=blank * 1.0, responses={}, thresholds={},
        edges={"canny": canny, "sobel": sobel, "prewitt": blank, "log": blank},
        mean_image=blank * 1.0, std={}, mean={}, cv={}, intermediate_cv=0.0,
        weights={"canny": 0.6, "sobel": 0.4, "prewitt": 0.0, "log": 0.0},
        final_weight=blank * 1.0, feature_map=canny.copy(), params={})
    shares = decision_shares(result)
    words = " ".join(shares.sentences(walkthrough.OPERATOR_NAMES))
    assert "Canny decides alone" in words and "exactly Canny's edge map" in words
    assert "1 marked by Sobel only" in words
    assert [(r.operators, r.kept, r.outvoted) for r in shares.rows] == [
        (("canny",), 2, 0), (("sobel",), 0, 1)]


def test_the_offset_reading_moves_exactly_the_pixels_between_its_thresholds():
    """offset-1.6 keeps a pixel when F >= 0.1 instead of F >= 0: the pixels it changes are
    those with 0 <= F < 0.1, all lost (the change map paints them magenta)."""
    rgb = refseg.weld_image(5).rgb
    result = features.extract(rgb)
    moved = {a.name: (fm, n) for a, fm, n in
             walkthrough.readings_that_move(rgb, result, count=len(alternatives.ALTERNATIVES))}
    fm, changed = moved["offset-1.6"]
    band = (result.final_weight >= 0) & (result.final_weight < 0.1 - 1e-9)
    assert changed == int(band.sum()) > 0
    colours = walkthrough.change_map(result.feature_map, fm)
    assert np.all(colours[band] == walkthrough.CHANGE_COLOURS["lost"])
    counts = [n for _, n in moved.values()]
    assert counts == sorted(counts, reverse=True) and 0 not in counts


def test_links_resolve_to_the_pages_sections_or_name_the_spec_file(tmp_path):
    (tmp_path / "scores.json").write_text("[]")
    with html.link_targets(["R-cv", "R-border", "E3"], tmp_path):
        assert html.inline("[sensitivity.md#r-cv](sensitivity.md#r-cv)") == \
            '<a href="#R-cv">sensitivity.md#r-cv</a>'
        assert html.inline("([readings.md](readings.md#r-border-what-a-3x3))") == \
            '(<a href="#R-border">readings.md</a>)'
        assert html.inline("[the scores](scores.json)") == '<a href="scores.json">the scores</a>'
        assert html.inline("[x](sensitivity.md#not-audited)") == \
            "x (refseg's spec, <code>sensitivity.md</code>, section not-audited)"
    assert html.inline("[y](readings.md#r-cv)") == \
        "y (refseg's spec, <code>readings.md</code>, section r-cv)"


@pytest.mark.parametrize("args, problem", [
    (("claim1", "--image", "nowhere.png", "--out", "o"), "nowhere.png"),
    (("claim1.step2.cv", "--image", "x.png", "--out", "o"), "--image and --out go together"),
    (("claim1", "--image", "x.png"), "--image and --out go together"),
    (("claim1",), "refseg explain claim1 --image IMAGE --out DIR"),
])
def test_bad_walkthrough_arguments_fail_in_one_line(tmp_path, args, problem):
    done = run_refseg("explain", *args, cwd=tmp_path)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("refseg: error: ") and problem in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_explain_takes_max_pixels_and_its_refusal_names_only_its_own_options(tmp_path):
    """``explain claim1 --image`` has ``--max-pixels`` as the other verbs that read images do;
    an image over the limit (the given one, or the default 40 MP, read from the header) is
    refused in one line naming the file, the option and the memory needed, never an option
    explain does not take (``--arrays``), and nothing is written."""
    Image.fromarray(square_image()).save(tmp_path / "square.png")
    Image.new("1", (8000, 5001)).save(tmp_path / "large.png")  # 40,008,000 pixels, a few kB
    for args, limit in ((("square.png", "--max-pixels", "85799"), "85,799"),
                        (("large.png",), "40,000,000")):
        done = run_refseg("explain", "claim1", "--image", *args, "--out", "out", cwd=tmp_path)
        assert done.returncode == 2
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"refseg: error: {args[0]}: "), lines
        assert f"more than the limit of {limit} (--max-pixels raises it; about " in lines[0]
        assert "--arrays" not in lines[0]
        assert sorted(p.name for p in tmp_path.iterdir()) == ["large.png", "square.png"]
    done = run_refseg("explain", "claim1", "--image", "square.png", "--out", "out",
                      "--max-pixels", "85800", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "square" / "index.html").is_file()
    done = run_refseg("explain", "claim1.step2.cv", "--max-pixels", "100", cwd=tmp_path)
    assert done.returncode == 2 and "--max-pixels only with them" in done.stderr
    assert "--max-pixels" in run_refseg("explain", "--help").stdout


def ramp16(path, rows=60, cols=200):
    """A smooth horizontal 16-bit ramp (0 to 65535), saved as a 16-bit gray PNG."""
    ramp = np.round(np.linspace(0, 65535, cols)).astype(np.uint16)
    Image.fromarray(np.tile(ramp, (rows, 1))).save(path)


def test_degenerate_thresholds_are_recorded_and_shown(tmp_path, page):
    """On a smooth 16-bit ramp Otsu's rule finds no edges to set apart: Sobel and Prewitt mark
    all but the border columns, and so many pixels pass Canny's low threshold (Sobel's); a
    flat image leaves every map empty. The report of ``refseg edges`` records a warning for
    each such threshold, the walkthrough page shows them in its header and at each operator's
    step; the red square's image warns of nothing."""
    ramp16(tmp_path / "ramp.png")
    Image.fromarray(np.full((20, 30), 77, np.uint8)).save(tmp_path / "flat.png")
    Image.fromarray(square_image()).save(tmp_path / "square.png")
    assert run_refseg("edges", tmp_path / "ramp.png", tmp_path / "flat.png",
                      tmp_path / "square.png", "--out", tmp_path / "out").returncode == 0
    report = json.loads((tmp_path / "out" / "ramp" / "report.json").read_text())
    inside = 60 * 198  # every column but the two at the borders
    assert report["edge_pixels"]["sobel"] == report["edge_pixels"]["prewitt"] == inside
    assert 0 < report["edge_pixels"]["canny"] < 12000 / 2
    assert [(w["operator"], w["counted"], w["marked"], w["pixels"]) for w in
            report["warnings"]] == [("canny", "sobel", inside, 12000),
                                    ("sobel", "sobel", inside, 12000),
                                    ("prewitt", "prewitt", inside, 12000)]
    assert report["warnings"][1]["share"] == inside / 12000
    assert "its edge pixels are 99.0% of the image, more than 50%" in \
        report["warnings"][1]["text"]
    assert "Sobel magnitude exceeds its low threshold" in report["warnings"][0]["text"]
    flat = json.loads((tmp_path / "out" / "flat" / "report.json").read_text())
    assert [(w["operator"], w["marked"]) for w in flat["warnings"]] == [
        ("canny", 0), ("sobel", 0), ("prewitt", 0), ("log", 0)]
    assert all("marks no pixel" in w["text"] for w in flat["warnings"])
    square = json.loads((tmp_path / "out" / "square" / "report.json").read_text())
    assert square["warnings"] == []
    assert run_refseg("explain", "claim1", "--image", tmp_path / "ramp.png", "--out",
                      tmp_path / "out").returncode == 0
    text = (tmp_path / "out" / "ramp" / "index.html").read_text(encoding="utf-8")
    header = text.split("</header>")[0]
    assert "Warning: 3 automatic threshold(s) degenerate on this image" in header
    for op, name in walkthrough.OPERATOR_NAMES.items():
        step = text.split(f'<section id="claim1.step2.edges.{op}">')[1].split("</section>")[0]
        assert (f'<p class="note warning">{name}' in step) == (op != "log"), op
    assert 'class="note warning"' not in page[1]
    ramp = refseg.extract(np.tile(np.linspace(0.0, 255.0, 200), (60, 1)))
    shown = ramp._repr_html_()
    assert len(ramp.warnings) >= 3
    assert all(f"Warning: {html.escape(w)}." in shown for w in ramp.warnings)
    assert "Warning" not in refseg.extract(square_image())._repr_html_()


def test_the_walkthrough_keeps_the_files_already_in_the_images_folder(tmp_path):
    Image.fromarray(square_image()).save(tmp_path / "square.png")
    assert run_refseg("edges", tmp_path / "square.png", "--out", tmp_path / "out").returncode == 0
    before = sorted(p.name for p in (tmp_path / "out" / "square").iterdir())
    assert run_refseg("explain", "claim1", "--image", tmp_path / "square.png", "--out",
                      tmp_path / "out").returncode == 0
    after = sorted(p.name for p in (tmp_path / "out" / "square").iterdir())
    assert after == sorted(before + ["index.html"])


def test_an_extraction_shows_itself_in_a_notebook():
    """``_repr_html_``: the panel as a PNG that decodes to the panel's pixels, and one table
    row per operator with its weight and V."""
    import base64
    import io

    from refseg.claim1.panel import panel

    result = refseg.extract(square_image())
    shown = result._repr_html_()
    data = re.search(r'src="data:image/png;base64,([^"]+)"', shown).group(1)
    image = np.asarray(Image.open(io.BytesIO(base64.b64decode(data))))
    gray = np.clip(np.round(result.gray), 0, 255).astype(np.uint8)
    assert np.array_equal(image, panel(np.dstack([gray] * 3), result))
    for op, name in walkthrough.OPERATOR_NAMES.items():
        assert re.search(rf"<th[^>]*>{name}</th>.*?{result.weights[op]:.4f}", shown)
        assert f"{result.cv[op]:.4f}" in shown
    assert f"{int(result.feature_map.sum())} feature pixels" in shown


def test_a_maps_only_extraction_shows_itself_too():
    """A result that kept only its maps has no gray image: the view still draws the panel, with
    a blank input tile, says what was not kept, and keeps the operators' table."""
    import base64
    import io

    from refseg.claim1.panel import MAPS_ONLY_TILE, panel

    result = refseg.extract(square_image(), keep="maps")
    shown = result._repr_html_()
    data = re.search(r'src="data:image/png;base64,([^"]+)"', shown).group(1)
    image = np.asarray(Image.open(io.BytesIO(base64.b64decode(data))))
    blank = np.full(result.feature_map.shape + (3,), MAPS_ONLY_TILE, dtype=np.uint8)
    assert np.array_equal(image, panel(blank, result))
    assert 'Only the maps were kept (keep="maps")' in shown
    for op in walkthrough.OPERATOR_NAMES:
        assert f"{result.weights[op]:.4f}" in shown


def guide_cells() -> list[str]:
    text = (ROOT / "docs" / "guide.md").read_text(encoding="utf-8")
    section = text.split("## Claim 1 step by step: a walkthrough page and a notebook")[1]
    section = section.split("\n## ")[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_guides_notebook_tutorial_runs(tmp_path):
    """The guide's cells, run in order in a fresh interpreter, in a scratch folder: they
    finish, and the page they write exists."""
    cells = guide_cells()
    assert len(cells) == 4
    done = subprocess.run([sys.executable, "-P", "-c", "\n".join(cells)], cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "sum w = " in done.stdout
    assert (tmp_path / "walkthrough" / "weld3" / "index.html").is_file()


def test_a_flat_image_is_said_to_have_no_feature_pixel():
    """No operator marks a pixel of a constant image: the sentences say the map is empty and
    claim no operator's map for it."""
    result = features.extract(np.full((20, 30), 128, np.uint8))
    shares = decision_shares(result)
    words = shares.sentences(walkthrough.OPERATOR_NAMES)
    assert shares.rows == () and words == ["No pixel reaches 0.5: the feature map is empty."]


#: What ``refseg explain claim1 --image`` imports, and its kernels loaded.
_IMPORTS = ("import refseg.cli, refseg.report.walkthrough\n"
            "from refseg.backend import kernels\nkernels('cython')\n")


def test_the_walkthrough_of_a_3_megapixel_image_stays_within_100_bytes_per_pixel(tmp_path):
    """Peak resident memory of ``refseg explain claim1 --image`` on a 2000x1500 image (tiled
    welds), less what its imports leave resident in the same process: at most 100 bytes per
    pixel (82 measured here, 80 on 6 megapixels; 230 when the page kept every intermediate
    while the alternative readings ran whole). Memory, not time: the figure does not move
    with the machine's load."""
    weld = refseg.weld_image(3).rgb
    tiled = np.tile(weld, (1500 // weld.shape[0] + 1, 2000 // weld.shape[1] + 1, 1))
    Image.fromarray(tiled[:1500, :2000]).save(tmp_path / "welds.png")
    argv = ["refseg", "explain", "claim1", "--image", str(tmp_path / "welds.png"), "--out",
            str(tmp_path / "out")]
    status, above = command_peak(_IMPORTS, argv, tmp_path)
    assert status == 0, status
    assert (tmp_path / "out" / "welds" / "index.html").is_file()
    per_pixel = above / (2000 * 1500)
    assert 10 < per_pixel <= 100, per_pixel
