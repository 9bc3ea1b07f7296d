"""Claim 1 taught on one's own image: ``refseg explain claim1 --image IMAGE --out DIR`` writes
``DIR/<stem>/index.html``, one self-contained page (offline, like the claim chart).

The page takes the image through claim 1 step by step. Each step shows the claim's Chinese
text beside refseg's English rendering, the reading that fills the step's missing formula in
one paragraph, the picture of the step on this image, and the step's numbers (thresholds and
the rule that set them, pixel counts, the mean image, the σ/μ/V table, the weights beside
[0213]'s, the vote). Then who decided each feature pixel: the combination of operators whose
weights carried the vote, as a map and a table, said in words when one operator decides alone
or when operators that found an edge were outvoted. Last, the alternative readings (those the
sensitivity audit measures, :mod:`refseg.claim1.alternatives`) that would change this image's
feature map most, with the pixels they change.
"""
from __future__ import annotations

import os
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np

from refseg import images, memory, publish
from refseg._version import __version__
from refseg.claim1 import alternatives, features
from refseg.claim1.degenerate import DEGENERATE_SHARE, degenerate_thresholds
from refseg.claim1.features import STEP_CLAIMS
from refseg.claim1.outputs import WALKTHROUGH_PAGE
from refseg.claim1.operators import OPERATOR_NAMES, OPERATORS
from refseg.report import html as h
from refseg.report.who_decided import DecisionShares, decision_shares, decision_map
from refseg.registry import load_registry, markdown_section, patent_weights
from refseg.vocabulary import EXPLAIN_MEMORY

INFRASTRUCTURE = "the claim-1 walkthrough"

#: The page's file name in the image's folder.
WALKTHROUGH = WALKTHROUGH_PAGE
#: The patent's operator weights for its weld image ([0213]).
PATENT_WEIGHTS = patent_weights(OPERATORS)
#: How many alternative readings the page shows, those changing the most pixels.
READINGS_SHOWN = 3
#: Pictures wider than this are shown shrunk (an edge anywhere in a block stays visible).
DISPLAY_WIDTH = 720
#: The steps in claim order: the acquisition, then each intermediate of the extraction.
STEPS = ("claim1.step1.acquire", *STEP_CLAIMS.values())
#: Colours of the changes an alternative reading makes: kept by both, lost, gained.
CHANGE_COLOURS = {"both": (235, 235, 235), "lost": (230, 40, 160), "gained": (30, 190, 80)}


#: Rows of about this many pixels are coloured and shrunk for display (or counted) at a time,
#: so that a picture's float temporaries stay small whatever the image's size (F's colours
#: take 80 bytes per pixel of the band: 10 MB).
DISPLAY_BAND_PIXELS = 2 ** 17


def write_walkthrough(image, out, *, max_pixels: int | None = None) -> Path:
    """Write ``out/<stem>/index.html``, claim 1 step by step on the image file ``image``.

    The output folder is checked before the work, and published whole or not at all; files
    already in ``out/<stem>`` (``refseg edges``' outputs, say) are kept.

    Parameters
    ----------
    image, out : str or Path
    max_pixels : int or None
        Refuse larger images, from their header (None: :data:`refseg.images.MAX_PIXELS`).

    Returns
    -------
    Path
        The page.

    Notes
    -----
    Memory: the extraction with every intermediate, the pictures and numbers that need its
    float planes, then only the maps are kept while the alternative readings run one at a
    time, each keeping its maps only (:func:`render_walkthrough`); the peak is about that of
    ``refseg edges`` with every array kept.
    """
    image, out = Path(image), Path(out)
    limit = images.MAX_PIXELS if max_pixels is None else images.check_max_pixels(max_pixels)
    publish.check_output_folder(out)
    # freed arrays go back to the system at once, so that the decoder's and the extraction's
    # do not stay beside the alternative readings' (as in refseg edges)
    with memory.return_freed_memory():
        loaded = images.read_image(image, limit, f"{images.RAISE_HINT}; {EXPLAIN_MEMORY}")
        page = render_walkthrough(loaded)
    with publish.staged_folders(out) as staging:
        folder = staging.folder(image.stem)
        previous = staging.out / image.stem
        if previous.is_dir():
            shutil.copytree(previous, folder, symlinks=True, copy_function=os.link,
                            dirs_exist_ok=True)
        publish.write_text(folder / WALKTHROUGH, page)
    return out / image.stem / WALKTHROUGH


def render_walkthrough(loaded: images.LoadedImage,
                       result: features.FeatureResult | None = None) -> str:
    """The walkthrough page of one image (see the module) as an HTML document.

    ``result`` is ``features.extract(loaded.pixels)`` (None: extracted here). Extracted here,
    its float planes are dropped once the steps are drawn, before the alternative readings run.
    """
    registry = load_registry()
    name = Path(loaded.path).name
    if result is None:
        result = features.extract(loaded.pixels)
    ids = list(STEPS) + ["who-decided", "readings"]
    with h.link_targets(ids):
        header = _header(name, loaded, result)
        sections = [_step(registry, step, loaded, result) for step in STEPS]
        # what is left needs the maps only
        result = replace(result, gray=None, blurred=None, responses=None, mean_image=None,
                         final_weight=None)
        who = _who_decided(result, decision_shares(result))
        readings = _readings(registry, result.feature_map,
                             readings_that_move(loaded.pixels, result))
        body = [header, _contents(registry), *sections, who, readings]
    body.insert(1, h.cjk_note(_visible_text("".join(body))))
    return h.page(f"Claim 1 of CN114419081B on {name}", "\n".join(body))


def _visible_text(markup: str) -> str:
    """The text of ``markup`` without its tags and embedded images (what a reader sees)."""
    return re.sub(r"<[^>]*>", "", markup)


# ------------------------------------------------------------------------------ analysis
def readings_that_move(rgb, result, count: int = READINGS_SHOWN) -> list[tuple]:
    """The alternative readings that change the most pixels of this image's feature map:
    [(Alternative, its feature map, pixels changed)], most first, unchanged ones left out.

    The alternatives run one at a time, each keeping its maps only (those changing only the
    vote take this image's own edge maps, :func:`~refseg.claim1.alternatives.revote`), and
    only the ``count`` maps that change the most are held."""
    moved = []
    for alternative in alternatives.ALTERNATIVES:
        variant = alternative.variant
        if set(variant.changes()) <= set(alternatives.VOTE_FIELDS):
            fm = alternatives.revote(result.edges, variant)
        else:
            fm = alternatives.extract_variant(rgb, variant, keep="maps").feature_map
        changed = int(np.count_nonzero(fm != result.feature_map))
        if changed:
            moved.append((alternative, fm, changed))
            moved.sort(key=lambda m: -m[2])
            del moved[count:]
        del fm
    return moved


def change_map(chosen: np.ndarray, other: np.ndarray) -> np.ndarray:
    """RGB (M, N, 3) uint8: pixels both maps keep light grey, those only ``chosen`` keeps
    (lost under ``other``) magenta, those only ``other`` keeps (gained) green, the rest
    black."""
    out = np.zeros(chosen.shape + (3,), np.uint8)
    for key, mask in (("both", (chosen == 1) & (other == 1)),
                      ("lost", (chosen == 1) & (other == 0)),
                      ("gained", (chosen == 0) & (other == 1))):
        out[mask] = CHANGE_COLOURS[key]
    return out


# ------------------------------------------------------------------------------ pictures
def _shrunk(array: np.ndarray, binary: bool = False, convert=None) -> np.ndarray:
    """``convert(array)`` (uint8, (M, N) or (M, N, 3); ``array`` itself when None) at most
    :data:`DISPLAY_WIDTH` wide: a map by the maximum over each block (a one-pixel edge stays),
    an image by the block mean (:func:`_shrunk_bands`)."""
    return _shrunk_bands(array.shape[0], array.shape[1],
                         lambda rows: array[rows] if convert is None else convert(array[rows]),
                         binary)


def _shrunk_bands(rows: int, cols: int, band, binary: bool = False) -> np.ndarray:
    """The picture whose rows ``band(slice)`` makes (uint8, (r, cols) or (r, cols, 3)) at most
    :data:`DISPLAY_WIDTH` wide, made and shrunk a band of rows at a time: the temporaries of
    making a picture are those of a band, and the pixels those of making it whole."""
    factor = max(1, -(-cols // DISPLAY_WIDTH))
    kept_rows, kept_cols = (rows // factor) * factor, (cols // factor) * factor
    if kept_rows == 0:
        return band(slice(0, rows))[:, ::factor]
    step = factor * max(1, DISPLAY_BAND_PIXELS // (factor * cols))
    parts = []
    for start in range(0, kept_rows, step):
        pixels = band(slice(start, min(start + step, kept_rows)))
        if factor == 1:
            parts.append(pixels)
            continue
        blocks = pixels[:, :kept_cols].reshape(pixels.shape[0] // factor, factor,
                                               kept_cols // factor, factor, *pixels.shape[2:])
        parts.append(blocks.max(axis=(1, 3)) if binary
                     else np.round(blocks.mean(axis=(1, 3))).astype(np.uint8))
    return np.concatenate(parts)


def _picture(array, alt, caption, binary=False, convert=None) -> str:
    return h.figure(h.png(_shrunk(np.asarray(array), binary, convert), alt, "fit"), caption)


def _change_picture(chosen, other) -> np.ndarray:
    """:func:`change_map` of the two maps, shrunk for display a band of rows at a time."""
    return _shrunk_bands(chosen.shape[0], chosen.shape[1],
                         lambda rows: change_map(chosen[rows], other[rows]), binary=True)


def _white(binary_map):
    """A 0/1 map as 0/255 pixels."""
    return binary_map * np.uint8(255)


# ------------------------------------------------------------------------------ the page
def _header(name, loaded, result) -> str:
    rows, cols = result.feature_map.shape
    return (f"<header><h1>Claim 1 of CN114419081B, step by step, on <code>{h.escape(name)}"
            f"</code></h1><p>The image ({rows} rows x {cols} columns, "
            f"{h.escape(loaded.info().get('mode', ''))}) taken through the patent's feature "
            "extraction: each step with the claim's Chinese text beside refseg's English "
            "rendering, the reading that fills its missing formula, the picture of the step and "
            "its numbers. Then <a href=\"#who-decided\">who decided each pixel</a> and <a "
            "href=\"#readings\">the readings that would change this image's map most</a>.</p>"
            f"<p class=\"where\">Written by <code>refseg explain claim1 --image "
            f"{h.escape(loaded.path)}</code>, refseg {__version__}.</p>"
            f"{_threshold_warnings(result)}</header>")


def _threshold_warnings(result) -> str:
    """The automatic thresholds that degenerated on this image, each linked to its step."""
    found = degenerate_thresholds(result)
    if not found:
        return ""
    items = "".join(f'<li><a href="#claim1.step2.edges.{d.operator}">'
                    f"{h.escape(OPERATOR_NAMES[d.operator])}</a>: {h.escape(d.text)}.</li>"
                    for d in found)
    return (f'<div class="note warning"><p><strong>Warning: {len(found)} automatic '
            f"threshold(s) degenerate on this image</strong> (mark more than "
            f"{DEGENERATE_SHARE:.0%} of the pixels, or none); the weights below are formed "
            f"from those maps.</p><ul>{items}</ul></div>")


def _contents(registry) -> str:
    items = "".join(f'<li><a href="#{h.escape(s)}">{h.escape(registry.elements[s].title)}</a>'
                    "</li>" for s in STEPS)
    return (f'<nav><h2>Contents</h2><ol class="toc">{items}<li><a href="#who-decided">Who '
            'decided each pixel</a></li><li><a href="#readings">The readings that move this '
            "map</a></li></ol></nav>")


def reading_paragraph(readings_text: str, reading_id: str) -> str:
    """A reading in one paragraph: its first paragraph from "Reading:" on (the whole first
    paragraph when it has no such word), without the rejected alternatives."""
    lines = markdown_section(readings_text, reading_id)[1:]
    block = []
    for line in lines:
        if not line.strip():
            if block:
                break
            continue
        block.append(line.strip().removeprefix("- "))
    text = " ".join(block)
    if "Reading:" in text:
        text = text[text.index("Reading:"):]
    for stop in (" Rejected:", " Sensitivity:", " Evidence"):
        text = text.split(stop)[0]
    return text


def _step(registry, step, loaded, result) -> str:
    e = registry.elements[step]
    number = STEPS.index(step) + 1
    shown = [f'<p class="reading"><strong>{h.escape(r)}</strong>: '
             f"{h.inline(reading_paragraph(registry.readings_text, r))}</p>" for r in e.readings]
    readings = "".join(shown[:1])
    if shown[1:]:
        readings += (f"<details><summary>The step's other readings: "
                     f"{h.escape(', '.join(e.readings[1:]))}</summary>{''.join(shown[1:])}"
                     "</details>")
    picture, numbers = _SHOWN[step](loaded, result) if step in _SHOWN else ("", "")
    return (f'<section id="{h.escape(step)}"><h2>{number}. {h.escape(e.title)} '
            f'<code class="where">{h.escape(step)}</code></h2>'
            f'<div class="pair"><div class="zh" lang="zh-Hans"><h3>Patent (claim 1)</h3>'
            + "".join(f"<p>{h.escape(span)}</p>" for span in e.original)
            + f'</div><div class="en"><h3>refseg\'s rendering</h3><p>{h.inline(e.text)}</p>'
            f"</div></div>{readings}"
            f'<div class="steps"><div>{picture}</div><div class="numbers">{numbers}</div>'
            "</div></section>")


def _table(head, rows) -> str:
    return ("<table><tr>" + "".join(f"<th>{c}</th>" for c in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
            + "</table>")


def _acquire(loaded, result):
    info = loaded.info()
    rows = [(h.escape(k), h.escape(v)) for k, v in info.items() if k != "path"]
    return (_picture(loaded.pixels, "the input image", "The input image"),
            _table(("property", "value"), rows))


def _gray(loaded, result):
    g = result.gray
    weights = ", ".join(f"{w:g}" for w in result.params["gray_weights"])
    return (_picture(g, "gray", "The gray image (float64, rounded for display)",
                     convert=h.gray8),
            f"<p>gray = R, G, B weighted by {weights}.</p>"
            + _table(("min", "mean", "max"), [(f"{g.min():.2f}", f"{g.mean():.2f}",
                                               f"{g.max():.2f}")]))


def _gauss(loaded, result):
    kernel = result.params["gaussian_kernel"]
    return (_picture(result.blurred, "blurred", "The gray image after the 3x3 Gaussian",
                     convert=h.gray8),
            f"<p>σ = {result.params['sigma']:g}, border {h.escape(result.params['border'])}; "
            "the template:</p>"
            + _table(("", "", ""), [[f"{v:.4f}" for v in row] for row in kernel]))


def _edges(op):
    def show(loaded, result):
        edges, response = result.edges[op], result.responses[op]
        pixels = int(edges.sum())
        rule = result.params["threshold_rules"][op]
        rule_text = {
            "canny": f"low = Otsu's threshold of the Sobel magnitude, high = "
                     f"{rule.get('high_ratio', '?')} x low",
            "sobel": "T = Otsu's threshold of the gradient magnitude",
            "prewitt": "T = Otsu's threshold of the gradient magnitude",
            "log": f"a zero crossing counts where its jump exceeds "
                   f"{rule.get('jump_ratio', '?')} x Otsu's threshold of |LoG|"}[op]
        thresholds = [(h.escape(k), f"{v:.2f}") for k, v in result.thresholds[op].items()]
        # |response| at its largest, without a whole |response| plane
        strength = max(float(response.max()), -float(response.min()))
        strongest = "strongest |LoG|" if op == "log" else "strongest gradient magnitude"
        rows = thresholds + [(strongest, f"{strength:.2f}"),
                             ("edge pixels", f"{pixels} ({pixels / edges.size:.2%})"),
                             ("weight w", f"{result.weights[op]:.4f}")]
        automatic = "automatic" if rule.get("automatic") else "given"
        note = ""
        if op == "canny" and "high" in result.thresholds[op]:
            high = result.thresholds[op]["high"]
            above = int(np.count_nonzero(result.responses["sobel"] > high))
            note = (f"<p>Canny keeps a chain of thinned Sobel edges only where it reaches the "
                    f"high threshold {high:.2f}: {above} pixels of this image have a gradient "
                    "magnitude above it. An edge whose strength stays below it is not "
                    "Canny's, however clear it looks.</p>")
        warning = "".join(f'<p class="note warning">{h.escape(d.text)}.</p>'
                          for d in degenerate_thresholds(result) if d.operator == op)
        return (_picture(edges, OPERATOR_NAMES[op],
                         f"{OPERATOR_NAMES[op]} edge map (white: edge)", binary=True,
                         convert=_white),
                f"<p>Thresholds ({automatic}; {h.escape(rule_text)}):</p>"
                + _table(("", "value"), rows) + note + warning)
    return show


def _mean_image(loaded, result):
    mean = result.mean_image
    counts = np.zeros(5, np.int64)
    step = max(1, DISPLAY_BAND_PIXELS // mean.shape[1])  # no whole-image temporaries
    for start in range(0, mean.shape[0], step):
        band = mean[start:start + step]
        counts += np.bincount(np.round(band * 4).astype(np.intp).ravel(), minlength=5)
    rows = [(f"{k} of 4 ({k / 4:g})", f"{counts[k]}", f"{counts[k] / mean.size:.2%}")
            for k in range(5)]
    return (_picture(mean, "mean image",
                     "Ē, the per-pixel mean of the four binary maps (black 0 to white 1)",
                     convert=lambda band: h.gray8(band * 255)),
            "<p>How many operators mark each pixel:</p>"
            + _table(("operators", "pixels", "share"), rows))


def _statistics(keys):
    labels = {"mean": "μ (pixel mean)", "std": "σ (about Ē)", "cv": "V = σ / μ"}

    def show(loaded, result):
        rows = [[OPERATOR_NAMES[op]] + [f"{getattr(result, k)[op]:.4f}" for k in keys]
                for op in OPERATORS]
        return "", _table(["operator"] + [labels[k] for k in keys], rows)
    return show


def _intermediate(loaded, result):
    terms = " + ".join(f"{result.cv[op]:.4f}" for op in OPERATORS)
    return "", f"<p>ΣV = {terms} = <strong>{result.intermediate_cv:.4f}</strong></p>"


def _weights(loaded, result):
    rows = []
    for op in OPERATORS:
        w, p = result.weights[op], PATENT_WEIGHTS[op]
        rows.append([OPERATOR_NAMES[op],
                     f'<div class="bar" style="width:{w * 100:.1f}%"></div>'
                     f'<div class="bar patent" style="width:{p * 100:.1f}%"></div>',
                     f"{w:.4f}", f"{p:.4f}"])
    table = _table(("operator", "w (blue: here; grey: the patent's weld, [0213])", "here",
                    "[0213]"), rows).replace("<table>", '<table class="weights">', 1)
    heavy = [OPERATOR_NAMES[op] for op in OPERATORS if result.weights[op] >= 0.5]
    note = (f"<p class=\"note\">{heavy[0]}'s weight is at least 0.5: it outvotes the other "
            "three together.</p>" if heavy else "")
    return "", table + note


def _final_weight(loaded, result):
    f = result.final_weight
    return (_picture(f, "final weight",
                     "F: blue below 0 (darkest: no operator), orange to yellow from 0 up",
                     convert=h.final_weight_colours),
            f"<p>F = Σ w<sub>i</sub> X<sub>i</sub> − {result.params['vote_offset']:g} "
            f"(X = {result.params['edge_value']:g} on an edge of operator i, else "
            f"{result.params['non_edge_value']:g}), from {f.min():.4f} to {f.max():.4f}: a "
            "pixel is kept when the weights of the operators marking it sum to at least "
            "0.5.</p>")


def _decision(loaded, result):
    fm = result.feature_map
    return (_picture(fm, "feature map", "The feature-region image (white: F ≥ 0)",
                     binary=True, convert=_white),
            f"<p>{int(fm.sum())} feature pixels ({fm.mean():.2%} of the image); every pixel "
            f"decided, at the input's resolution ({fm.shape[0]}x{fm.shape[1]}).</p>")


_SHOWN = {
    "claim1.step1.acquire": _acquire, "claim1.step2.gray": _gray, "claim1.step2.gauss": _gauss,
    **{f"claim1.step2.edges.{op}": _edges(op) for op in OPERATORS},
    "claim1.step2.mean_image": _mean_image,
    "claim1.step2.std": _statistics(("mean", "std")),
    "claim1.step2.cv": _statistics(("mean", "std", "cv")),
    "claim1.step2.intermediate_cv": _intermediate, "claim1.step2.weights": _weights,
    "claim1.step2.final_weight": _final_weight, "claim1.step2.decision": _decision,
}


def _who_decided(result, shares: DecisionShares) -> str:
    rows = []
    for row in shares.rows:
        swatch = '<span class="swatch" style="background:rgb({},{},{})"></span>'.format(
            *row.colour)
        rows.append([swatch + h.escape(" + ".join(OPERATOR_NAMES[op] for op in row.operators)),
                     f"{row.weight:.4f}", str(row.kept), f"{row.share:.2%}" if row.kept else "-",
                     str(row.outvoted)])
    table = _table(("operators marking the pixel", "Σw", "feature pixels",
                    "share of the feature pixels", "outvoted pixels (Σw < 0.5)"), rows)
    words = "".join(f"<p>{h.escape(s)}</p>" for s in shares.sentences(OPERATOR_NAMES))
    return ('<section id="who-decided"><h2>Who decided each pixel</h2>'
            "<p>A pixel is a feature pixel when the weights of the operators marking it sum to "
            "at least 0.5. The map colours each feature pixel by that combination; dark grey "
            "marks pixels some operator found but the vote dropped, black pixels no operator "
            "marked.</p>"
            + _picture(decision_map(result), "who decided",
                       "Who decided each pixel (colours as in the table)", binary=True)
            + f'{words}<div class="numbers">{table}</div></section>')


def _readings(registry, chosen, moved) -> str:
    if not moved:
        return ('<section id="readings"><h2>The readings that move this map</h2><p>No '
                "alternative reading the audit measures changes a pixel of this image's "
                "feature map.</p></section>")
    parts = []
    for alternative, fm, changed in moved:
        lost = int(np.count_nonzero((chosen == 1) & (fm == 0)))
        parts.append(h.figure(
            h.png(_change_picture(chosen, fm), alternative.name, "fit"),
            f"<strong>{h.escape(alternative.name)}</strong> (instead of refseg's reading "
            f"<a href=\"#{h.escape(_step_of(registry, alternative.reading))}\">"
            f"{h.escape(alternative.reading)}</a>): {h.escape(alternative.text)}. {changed} "
            f"pixels change ({changed / fm.size:.2%} of the image): {lost} lost, "
            f"{changed - lost} gained."))
    legend = " ".join(
        f'<span class="swatch" style="background:rgb({r},{g},{b})"></span>{text}'
        for (r, g, b), text in ((CHANGE_COLOURS["both"], "kept by both"),
                                (CHANGE_COLOURS["lost"], "lost under the alternative"),
                                (CHANGE_COLOURS["gained"], "gained under the alternative")))
    return ('<section id="readings"><h2>The readings that move this map</h2>'
            f"<p>Of the {len(alternatives.ALTERNATIVES)} alternative readings the sensitivity "
            "audit measures (each one choice away from refseg's), "
            + ("the one that changes pixels of this image's feature map" if len(moved) == 1 else
               f"the {len(moved)} that change the most pixels of this image's feature map")
            + ".</p>"
            f'<p class="legend swatches">{legend}</p><div class="welds">{"".join(parts)}</div>'
            "</section>")


def _step_of(registry, reading: str) -> str:
    """The first step whose element cites ``reading`` (the page's anchor for it)."""
    return next((s for s in STEPS if reading in registry.elements[s].readings), STEPS[0])
