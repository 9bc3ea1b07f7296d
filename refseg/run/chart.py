"""The claim chart: the claims on one side, what runs on the other, as one HTML page
(``index.html``) of a demo or run folder, written by ``refseg demo`` and by ``refseg report``.

The page is self-contained and opens from the file system: CSS inline, images embedded as PNG
data URIs, no script, no external URL (its Content-Security-Policy forbids loading anything).
Its sections, in order:

1. a header: the machine, the refseg version, the commands that made the outputs and the
   page, and when;
2. one section per claim element of ``spec/registry.toml``, in claim order: the patent's
   Chinese text of the element (``original`` spans of ``claims_zh.txt``) beside refseg's
   English rendering; the readings that fill its missing formulas, with the alternatives
   rejected; the errata that touch its paragraphs; the functions implementing it (file:line);
   the tests checking it; the golden arrays pinning it (``golden_pins.json``); under each
   reading, its table of ``spec/sensitivity.md``; and what ran here (for claim 1's steps, the
   images of the two welds at that step);
3. the training curves, the predictions, the results against the patent's own numbers with the
   reading of each difference, and which runs kept their weights;
4. the errata E1-E16, literal text and fix; the claims in Chinese.

Everything is read from the folder's files (``demo.json``, ``scores.json``, ``claim1/``,
``data/``, ``runs/*/``) and the shipped spec, so that the page can be redrawn at any time.
"""
from __future__ import annotations

import base64
import html
import io
import json
import os
import platform
import re
from datetime import datetime
from pathlib import Path

import numpy as np
from PIL import Image

from refseg import imageio, trace
from refseg.backend import cpu_model
from refseg._version import __version__
from refseg.claim1.operators import OPERATORS
from refseg.data.labels import CLASS_NAMES, LABEL_COLOURS
from refseg.errors import InputError
from refseg.trace import infrastructure

#: The chart's file name in the folder it reports on.
CHART = "index.html"
#: The patent's numbers the results are held against: pixel accuracy and loss after about 40
#: epochs ([0257]), prediction time per image ([0260]), the weld's operator weights ([0213]).
PATENT_ACCURACY, PATENT_LOSS, PATENT_SECONDS = 0.9741, 0.062, 0.123
PATENT_WEIGHTS = {"canny": 0.4124, "sobel": 0.1316, "prewitt": 0.1339, "log": 0.3221}
#: Display names of the operators (as refseg.claim1.outputs writes them).
OPERATOR_NAMES = {"canny": "Canny", "sobel": "Sobel", "prewitt": "Prewitt", "log": "LoG"}
#: What implements each module of claim 5, as a command.
MODULE_COMMANDS = {
    "claim5.acquisition_module": "refseg synth --count N --out DIR (or any image file)",
    "claim5.feature_module": "refseg edges IMAGE... --out DIR",
    "claim5.training_module": "refseg train DATA --out RUN",
    "claim5.output_module": "refseg predict RUN IMAGE... --out DIR",
}


@infrastructure("the record of the machine a report was made on")
def machine() -> dict:
    """The machine, as a report's header states it: CPU model, cores, system, Python, NumPy."""
    cpu = cpu_model() or platform.processor() or platform.machine()
    return {"cpu": cpu, "cores": os.cpu_count(), "system": platform.platform(),
            "python": platform.python_version(), "numpy": np.__version__}


@infrastructure("the claim chart")
def write_chart(folder, shown_as=None, command: str | None = None) -> Path:
    """Write ``folder/index.html``, the claim chart of a demo or run folder, atomically.

    Parameters
    ----------
    folder : path
        A folder of ``refseg demo`` (``demo.json``, ``scores.json``, ``runs/``, ``claim1/``)
        or of ``refseg train`` (``config.json``, ``metrics.jsonl``).
    shown_as : path or None
        The folder as the page names it (default ``folder``): where a staged demo will be.
    command : str or None
        The command writing the page, for its header (None: the demo, as it ends).

    Returns
    -------
    Path
        ``folder/index.html``.
    """
    folder = Path(folder)
    page = render_chart(folder, shown_as, command)
    imageio.write_text(folder / CHART, page)
    return folder / CHART


@infrastructure("the claim chart")
def render_chart(folder, shown_as=None, command: str | None = None) -> str:
    """The claim chart of a demo or run folder as one HTML document (see the module)."""
    source = _Source(Path(folder), Path(shown_as) if shown_as else Path(folder))
    registry = trace.load_registry()
    pins = trace.golden_pins()
    errata = _errata(registry)
    citations = (trace.functions_by_element(), trace.tests_by_element()[0], pins)
    seen_readings: dict[str, str] = {}
    body = [_header(source, command), _contents(registry)]
    for element in registry.elements.values():
        body.append(_element(element, registry, source, citations, errata, seen_readings))
    body += [_training(source), _predictions(source), _results(source), _weights_section(source),
             _errata_section(errata), _claims_section(registry)]
    title = f"refseg claim chart: CN114419081B, {html.escape(source.shown.name or '.')}"
    return (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            f"img-src data:; style-src 'unsafe-inline'\">\n"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{title}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")


# ------------------------------------------------------------------------------ the folder
class _Source:
    """What a demo or run folder holds, read once."""

    def __init__(self, folder: Path, shown: Path):
        self.folder, self.shown = folder, shown
        if (folder / "runs").is_dir() and (folder / "scores.json").is_file():
            self.kind = "demo"
        elif (folder / "config.json").is_file() and (folder / "metrics.jsonl").is_file():
            self.kind = "run"
        else:
            raise InputError(f"{folder}: not a folder of refseg demo (scores.json and runs/) "
                             "or of refseg train (config.json and metrics.jsonl)")
        self.record = _json(folder / "demo.json") if (folder / "demo.json").is_file() else {}
        self.scores = _json(folder / "scores.json") if self.kind == "demo" else []
        if self.kind == "demo":
            recorded = {r["name"]: r for r in self.record.get("runs", [])}
            names = [r["run"] for r in self.scores]
            self.runs = [self._run(folder / "runs" / n, n, recorded.get(n, {})) for n in names]
        else:
            self.runs = [self._run(folder, folder.name, {})]
        self.welds = self._welds() if self.kind == "demo" else []

    def _run(self, path: Path, name: str, recorded: dict) -> dict:
        config = _json(path / "config.json") if (path / "config.json").is_file() else {}
        history = [json.loads(line) for line in
                   (path / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
                   if line.strip()] if (path / "metrics.jsonl").is_file() else []
        pruned = _json(path / "pruned.json") if (path / "pruned.json").is_file() else None
        has_weights = (path / "checkpoint.npz").is_file()
        size = sum((path / f).stat().st_size for f in ("checkpoint.npz", "backbones.npz")
                   if (path / f).is_file())
        return {"name": name, "path": path, "config": config, "history": history,
                "pruned": pruned, "has_weights": has_weights,
                "weight_bytes": size if has_weights else (pruned or {}).get("bytes"),
                "train_seconds": recorded.get("train_seconds")}

    def _welds(self) -> list[dict]:
        stems = self.record.get("claim1_images") or sorted(
            p.name for p in (self.folder / "claim1").iterdir() if p.is_dir()) \
            if (self.folder / "claim1").is_dir() else []
        welds = []
        for stem in stems[:2]:
            where = self.folder / "claim1" / stem
            if not (where / "features.npz").is_file():
                continue
            with np.load(where / "features.npz", allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
            weld = {"stem": stem, "arrays": arrays, "report": _json(where / "report.json")}
            for key, sub in (("input", "images"), ("label", "labels")):
                found = sorted((self.folder / "data" / sub).glob(f"{stem}.*"))
                weld[key] = imageio.read_image(found[0]).pixels if found else None
            welds.append(weld)
        return welds

    @property
    def input_hw(self):
        hw = self.record.get("settings", {}).get("input_hw") or \
            (self.runs[0]["config"].get("input_hw") if self.runs else None)
        return tuple(hw) if hw else None


def _json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise InputError(f"{path}: not JSON ({exc})") from None


# ---------------------------------------------------------------------------- HTML pieces
def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _inline(text: str) -> str:
    """Markdown inline markup of the spec files: `code` and **bold**; the rest escaped."""
    out = []
    for i, part in enumerate(text.split("`")):
        if i % 2:
            out.append(f"<code>{_e(part)}</code>")
        else:
            out.append(re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", _e(part)))
    return "".join(out)


def _markdown(lines: list[str]) -> str:
    """The Markdown of readings.md and errata.md as HTML: paragraphs, lists, tables, code
    blocks and headings (rendered one level below the page's own)."""
    blocks, i = [], 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            blocks.append(f"<pre>{_e(chr(10).join(lines[i + 1:j]))}</pre>")
            i = j + 1
        elif line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            blocks.append(f"<h{min(level + 2, 6)}>{_inline(line.lstrip('#').strip())}"
                          f"</h{min(level + 2, 6)}>")
            i += 1
        elif line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
                if not all(set(c) <= set("-: ") for c in cells):
                    rows.append(cells)
                i += 1
            head, *rest = rows
            blocks.append("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head)
                          + "</tr>" + "".join("<tr>" + "".join(
                              f"<td>{_inline(c)}</td>" for c in row) + "</tr>" for row in rest)
                          + "</table>")
        elif line.startswith("- "):
            items = []
            while i < len(lines) and (lines[i].startswith("- ") or (
                    lines[i].startswith("  ") and lines[i].strip() and items)):
                if lines[i].startswith("- "):
                    items.append(lines[i][2:].strip())
                else:
                    items[-1] += " " + lines[i].strip()
                i += 1
            blocks.append("<ul>" + "".join(f"<li>{_inline(t)}</li>" for t in items) + "</ul>")
        else:
            text = []
            while i < len(lines) and lines[i].strip() and not lines[i].startswith(
                    ("- ", "|", "#", "```")):
                text.append(lines[i].strip())
                i += 1
            joined = " ".join(text)
            css = ' class="rejected"' if joined.startswith("Rejected") else ""
            blocks.append(f"<p{css}>{_inline(joined)}</p>")
    return "\n".join(blocks)


def _png(array: np.ndarray, alt: str, css: str = "") -> str:
    """An ``<img>`` holding ``array`` (uint8 (M, N) or (M, N, 3)) as an embedded PNG."""
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(array, dtype=np.uint8)).save(buffer, format="PNG")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    rows, cols = array.shape[:2]
    style = f' class="{css}"' if css else ""
    return (f'<img src="data:image/png;base64,{data}" width="{cols}" height="{rows}" '
            f'alt="{_e(alt)}"{style}>')


def _png_file(path: Path, alt: str, css: str = "") -> str:
    """An ``<img>`` embedding the PNG file at ``path``; a note when it is missing."""
    if not path.is_file():
        return f'<p class="missing">{_e(path.name)} is not in this folder.</p>'
    return _png(np.asarray(Image.open(path).convert("RGB")), alt, css)


def _figure(image_html: str, caption: str) -> str:
    return f"<figure>{image_html}<figcaption>{caption}</figcaption></figure>"


def _count(n, noun: str) -> str:
    """The number with its noun, singular for 1: 1 epoch, 8 epochs."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _percent(value) -> str:
    return "-" if value is None else f"{value:.2%}"


# ---------------------------------------------------------------------------------- header
def _header(source: _Source, command: str | None) -> str:
    record, now = source.record, datetime.now().astimezone().isoformat(timespec="seconds")
    made = []
    if record:
        m = record.get("machine", {})
        made.append(f"<li>Outputs made by <code>{_e(record['command'])}</code>, "
                    f"{_e(record['started'])} to {_e(record['finished'])} "
                    f"({record['seconds'] / 60:.1f} min), refseg "
                    f"{_e(record['refseg_version'])}, on {_e(m.get('cpu'))} "
                    f"({_e(m.get('cores'))} cores), {_e(m.get('system'))}, Python "
                    f"{_e(m.get('python'))}, NumPy {_e(m.get('numpy'))}.</li>")
    elif source.kind == "demo":
        made.append("<li>Outputs made by <code>refseg demo</code> (an older one that kept no "
                    "<code>demo.json</code>: its command, machine and times are not "
                    "known).</li>")
    else:
        config = source.runs[0]["config"]
        made.append(f"<li>Outputs made by <code>refseg train</code>: the run "
                    f"<code>{_e(source.shown)}</code> "
                    f"({_count(len(source.runs[0]['history']), 'epoch')} trained of "
                    f"{config.get('epochs', '?')}, {_e(config.get('input_kind', '?'))} "
                    f"input, branches {_e(', '.join(config.get('branches', [])))}).</li>")
    m = machine()
    made.append(f"<li>This page written by <code>{_e(command or 'refseg demo')}</code>, {now}, "
                f"refseg {__version__}, on {_e(m['cpu'])} ({m['cores']} cores), "
                f"{_e(m['system'])}. Redraw it with <code>refseg report "
                f"{_e(source.shown)}</code>.</li>")
    what = ("the synthetic weld-seam demo" if source.kind == "demo" else "one training run")
    return (f"<header><h1>Claim chart of CN114419081B: {what}</h1>"
            "<p>Each claim element of the patent, in claim order: the patent's own (Chinese) "
            "text beside refseg's English rendering, how its missing formulas are read, the "
            "code and tests that implement and check it, the golden arrays that pin it, and "
            "what ran here. The patent's formulas were images and are missing from its text: "
            "a blank in the Chinese text is where one stood.</p>"
            f"<ul class=\"made\">{''.join(made)}</ul></header>")


def _contents(registry) -> str:
    items, claim = [], None
    for e in registry.elements.values():
        if e.claim != claim:
            if claim is not None:
                items.append("</ol></li>")
            claim = e.claim
            items.append(f"<li>Claim {claim}<ol>")
        items.append(f'<li><a href="#{_e(e.id)}">{_e(e.id)}</a> {_e(e.title)}</li>')
    items.append("</ol></li>")
    rest = "".join(f'<li><a href="#{k}">{t}</a></li>' for k, t in (
        ("training", "Training curves"), ("predictions", "Predictions"),
        ("results", "Results against the patent"), ("weights", "The runs' weights"),
        ("errata", "Errata E1-E16"), ("claims", "The claims in Chinese")))
    return f'<nav><h2>Contents</h2><ol class="toc">{"".join(items)}{rest}</ol></nav>'


# -------------------------------------------------------------------------------- elements
def _element(e, registry, source, citations, errata, seen_readings) -> str:
    status = f'<span class="status {_e(e.status)}">{_e(e.status)}</span>'
    paragraphs = ", ".join(f"[{p}]" for p in e.paragraphs)
    original = "".join(f"<p>{_e(span)}</p>" for span in e.original)
    parts = [f'<section id="{_e(e.id)}" class="element">',
             f"<h2><code>{_e(e.id)}</code> {_e(e.title)} {status}</h2>",
             f'<p class="where">Claim {e.claim}; paragraphs {_e(paragraphs)}</p>',
             '<div class="pair">',
             f'<div class="zh" lang="zh-Hans"><h3>Patent (original)</h3>{original}</div>',
             f'<div class="en"><h3>refseg\'s rendering</h3><p>{_inline(e.text)}</p>'
             + (f'<p class="reason">{_inline(e.reason)}</p>' if e.reason else "")
             + "</div></div>"]
    rendered = [f"<li>[{p}] {_inline(registry.paragraphs[p])}</li>"
                for p in e.paragraphs if p in registry.paragraphs]
    if rendered:
        parts.append(f"<details><summary>The description's paragraphs, in English "
                     f"({len(rendered)})</summary><ul>{''.join(rendered)}</ul></details>")
    if e.readings:
        parts.append("<h3>Readings</h3>")
        for r in e.readings:
            if r in seen_readings:
                parts.append(f'<p class="seen"><a href="#{_e(r)}">{_e(r)}</a>: given above, '
                             f"under {_e(seen_readings[r])}.</p>")
                continue
            seen_readings[r] = e.id
            lines = trace.markdown_section(registry.readings_text, r)
            table = trace.sensitivity_table(registry.sensitivity_text, r)
            audit = (f"<h5>Sensitivity of {_e(r)} (spec/sensitivity.md)</h5>{_markdown(table)}"
                     if table else "")
            parts.append(f'<div class="reading" id="{_e(r)}"><h4>{_inline(lines[0][3:])}'
                         f"</h4>{_markdown(lines[1:])}{audit}</div>")
    touching = [k for k, entry in errata.items() if e.id in entry["elements"]]
    if touching:
        parts.append("<p>Errata: " + ", ".join(
            f'<a href="#{k}">{k}</a> ({_inline(errata[k]["title"])})' for k in touching)
            + "</p>")
    functions, tests, names = (c.get(e.id, []) for c in citations)
    parts.append('<div class="trace">'
                 f"<div><h3>Implemented by ({len(functions)})</h3><ul>"
                 + "".join(f"<li><code>{_e(f)}</code> <span class=\"loc\">{_e(where)}</span>"
                           "</li>" for f, where in functions)
                 + f"</ul></div><div><h3>Tested by ({len(tests)})</h3><ul>"
                 + "".join(f"<li><code>{_e(t)}</code>"
                           + (f' <span class="loc">{_e(where)}</span>' if where else "")
                           + "</li>" for t, where in tests)
                 + f"</ul></div><div><h3>Pinned by golden arrays ({len(names)})</h3>"
                 + _golden_names(names) + "</div></div>")
    evidence = _EVIDENCE.get(e.id)
    shown = evidence(source, e) if evidence else ""
    if e.id in MODULE_COMMANDS:
        shown = f"<p>As a command: <code>{_e(MODULE_COMMANDS[e.id])}</code>.</p>" + shown
    if shown:
        parts.append(f'<div class="ran"><h3>What ran here</h3>{shown}</div>')
    parts.append("</section>")
    return "\n".join(parts)


def _golden_names(names: list[str]) -> str:
    """The arrays' names, those differing only in the input's name written once with the
    inputs in braces (``claim1/{astronaut,weld0}/cv``)."""
    groups: dict[tuple, list[str]] = {}
    for name in names:
        parts = name.split("/")
        if parts[0] in ("claim1", "input") and len(parts) >= 2:
            key = (parts[0], tuple(parts[2:]))
            groups.setdefault(key, []).append(parts[1])
        else:
            groups.setdefault((name,), [])
    shown = []
    for key, inputs in groups.items():
        if len(key) == 1:
            shown.append(key[0])
        else:
            head, tail = key
            shown.append("/".join([head, "{" + ",".join(inputs) + "}", *tail]))
    if len(shown) > 12:
        return ("<details><summary>" + ", ".join(f"<code>{_e(s)}</code>" for s in shown[:6])
                + f" and {len(shown) - 6} more</summary><ul>"
                + "".join(f"<li><code>{_e(s)}</code></li>" for s in shown[6:])
                + "</ul></details>")
    return "<ul>" + "".join(f"<li><code>{_e(s)}</code></li>" for s in shown) + "</ul>" \
        if shown else "<p>none</p>"


# ------------------------------------------------------------ what ran, element by element
def _no_welds(source) -> str:
    if source.kind == "run":
        return ("<p>A training run keeps no claim-1 images; <code>refseg demo</code> and "
                "<code>refseg edges</code> write them.</p>")
    return "<p>This folder has no <code>claim1/</code> images.</p>"


def _per_weld(source, caption_of, image_of) -> str:
    if not source.welds:
        return _no_welds(source)
    return '<div class="welds">' + "".join(
        _figure(_png(image_of(w), f"{w['stem']}"), caption_of(w)) for w in source.welds) \
        + "</div>"


def _gray8(values) -> np.ndarray:
    return np.clip(np.round(values), 0, 255).astype(np.uint8)


def _edge_evidence(op):
    def show(source, e):
        def caption(w):
            r = w["report"]
            thresholds = ", ".join(f"{k} {v:.2f}" for k, v in r["thresholds"][op].items())
            pixels = r["edge_pixels"][op]
            share = pixels / (r["shape"][0] * r["shape"][1])
            return (f"{_e(w['stem'])}: {OPERATOR_NAMES[op]} edge map (white: edge), "
                    f"threshold {thresholds}; {pixels} edge pixels ({share:.1%}); weight "
                    f"w = {r['weights'][op]:.3f}")
        return _per_weld(source, caption, lambda w: w["arrays"][op] * np.uint8(255))
    return show


def _final_weight_image(f: np.ndarray) -> np.ndarray:
    """F in [-0.5, 0.5] as colours: dark to light blue below 0, orange to yellow from 0 on."""
    t = np.clip(f + 0.5, 0.0, 1.0)[..., None]
    low = np.array([10, 20, 70]) + (np.array([150, 190, 255]) - [10, 20, 70]) * (t / 0.5)
    high = np.array([230, 120, 0]) + (np.array([255, 240, 90]) - [230, 120, 0]) * \
        ((t - 0.5) / 0.5)
    return np.where(t >= 0.5, high, low).round().astype(np.uint8)


def _weights_chart(weights: dict, patent: bool = True) -> str:
    rows = []
    for op in OPERATORS:
        rows.append(f'<tr><th>{OPERATOR_NAMES[op]}</th><td class="bars">'
                    f'<div class="bar" style="width:{weights[op] * 100:.1f}%"></div>'
                    + (f'<div class="bar patent" style="width:{PATENT_WEIGHTS[op] * 100:.1f}%">'
                       "</div>" if patent else "")
                    + f"</td><td>{weights[op]:.4f}</td>"
                    + (f"<td>{PATENT_WEIGHTS[op]:.4f}</td>" if patent else "") + "</tr>")
    head = ("<tr><th>operator</th><th>w (bars: here, and the patent's [0213] in grey)</th>"
            "<th>here</th><th>[0213]</th></tr>")
    return f'<table class="weights">{head}{"".join(rows)}</table>'


def _statistics_table(source, keys) -> str:
    if not source.welds:
        return _no_welds(source)
    labels = {"mean": "μ (pixel mean)", "std": "σ (from the mean image)",
              "cv": "V = σ / μ", "weights": "w = V / ΣV"}
    out = []
    for w in source.welds:
        r = w["report"]
        head = "".join(f"<th>{labels[k]}</th>" for k in keys)
        rows = "".join(f"<tr><th>{OPERATOR_NAMES[op]}</th>"
                       + "".join(f"<td>{r[k][op]:.4f}</td>" for k in keys) + "</tr>"
                       for op in OPERATORS)
        out.append(f"<table><caption>{_e(w['stem'])}</caption><tr><th>operator</th>{head}"
                   f"</tr>{rows}</table>")
    return '<div class="welds">' + "".join(out) + "</div>"


def _acquire(source, e):
    def caption(w):
        rows, cols = w["input"].shape[:2]
        return f"{_e(w['stem'])}: the input image, {rows} rows x {cols} columns, RGB"
    if not source.welds or any(w["input"] is None for w in source.welds):
        return _no_welds(source)
    settings = source.record.get("settings", {})
    return (f"<p>{settings.get('count', '?')} synthetic training welds and "
            f"{settings.get('test_count', '?')} test welds were drawn "
            "(<code>refseg synth</code>). The first two:</p>"
            + _per_weld(source, caption, lambda w: w["input"]))


def _gray(source, e):
    return _per_weld(source, lambda w: f"{_e(w['stem'])}: gray = (299 R + 587 G + 114 B) / 1000 "
                     "(float64; rounded for display)", lambda w: _gray8(w["arrays"]["gray"]))


def _gauss(source, e):
    def caption(w):
        sigma = w["report"]["params"]["sigma"]
        return (f"{_e(w['stem'])}: the gray image after the 3x3 Gaussian, σ = {sigma:g}, "
                "border reflect-101")
    return _per_weld(source, caption, lambda w: _gray8(w["arrays"]["blurred"]))


def _mean_image(source, e):
    return _per_weld(source, lambda w: f"{_e(w['stem'])}: Ē, the per-pixel mean of the four "
                     "binary edge maps (0, ¼, ½, ¾, 1 shown as black to white)",
                     lambda w: _gray8(w["arrays"]["mean_image"] * 255))


def _std(source, e):
    return _statistics_table(source, ("mean", "std"))


def _cv(source, e):
    return _statistics_table(source, ("mean", "std", "cv"))


def _intermediate(source, e):
    if not source.welds:
        return _no_welds(source)
    return "<ul>" + "".join(
        f"<li>{_e(w['stem'])}: ΣV = {w['report']['intermediate_cv']:.4f} ("
        + " + ".join(f"{w['report']['cv'][op]:.4f}" for op in OPERATORS) + ")</li>"
        for w in source.welds) + "</ul>"


def _operator_weights(source, e):
    if not source.welds:
        return _no_welds(source)
    return '<div class="welds">' + "".join(
        f"<div><p>{_e(w['stem'])}</p>{_weights_chart(w['report']['weights'])}</div>"
        for w in source.welds) + "</div>"


def _final_weight(source, e):
    def caption(w):
        f = w["arrays"]["final_weight"]
        return (f"{_e(w['stem'])}: F = Σ w<sub>i</sub> X<sub>i</sub> − 1.5 (X = 2 on an edge "
                f"of operator i, else 1), from {f.min():.3f} to {f.max():.3f}: blue below 0 "
                "(darkest: no operator), orange to yellow from 0 up (the pixels the vote "
                "keeps)")
    return _per_weld(source, caption, lambda w: _final_weight_image(w["arrays"]["final_weight"]))


def _decision(source, e):
    def caption(w):
        fm = w["arrays"]["feature_map"]
        return (f"{_e(w['stem'])}: the feature map, 1 (white) where F ≥ 0: "
                f"{int(fm.sum())} pixels ({fm.mean():.1%})")
    return _per_weld(source, caption, lambda w: w["arrays"]["feature_map"] * np.uint8(255))


def _traverse(source, e):
    if not source.welds:
        return _no_welds(source)
    return "<ul>" + "".join(
        f"<li>{_e(w['stem'])}: input {w['report']['shape'][0]}x{w['report']['shape'][1]}, "
        f"feature map {w['arrays']['feature_map'].shape[0]}x"
        f"{w['arrays']['feature_map'].shape[1]}: every pixel decided, at the input's "
        "resolution (the map is under claim1.step2.decision).</li>"
        for w in source.welds) + "</ul>"


def _extract(source, e):
    if not source.welds or any(w["input"] is None for w in source.welds):
        return _no_welds(source)
    out = []
    for w in source.welds:
        out.append(_figure(_png(w["input"], w["stem"], "half"), f"{_e(w['stem'])}: input")
                   + _figure(_png(w["arrays"]["feature_map"] * np.uint8(255), w["stem"],
                                  "half"), f"{_e(w['stem'])}: its feature-region image"))
    coverage = source.record.get("contour_coverage")
    note = (f"<p>Of the labels' contour pixels, {coverage:.1%} lie within one pixel of a "
            "feature-map pixel (first 20 training images): the rest of the seam's edges are "
            "lost by the vote before the network sees the image.</p>"
            if coverage is not None else "")
    return '<div class="welds">' + "".join(out) + "</div>" + note


def _dataset(source, e):
    from refseg.data.inputs import network_input

    if not source.welds or source.input_hw is None or \
            any(w["input"] is None or w["label"] is None for w in source.welds):
        return _no_welds(source)
    h, w_ = source.input_hw
    out = []
    for w in source.welds:
        x = network_input(w["input"], source.input_hw, "feature")
        out.append(_figure(_png(_gray8((x[..., 0] + 1) * 127.5), w["stem"], "fit"),
                           f"{_e(w['stem'])}: the network's input, the feature image resized "
                           f"to {h}x{w_} (bilinear; in [-1, 1], shown black to white)")
                   + _figure(_png(w["label"], w["stem"], "half"),
                             f"{_e(w['stem'])}: its label ([0263] colours)"))
    return '<div class="welds">' + "".join(out) + "</div>"


def _train(source, e):
    main = source.runs[0]
    text = _runs_table(source)
    return (_figure(_png_file(main["path"] / "curves.png", "training curves"),
                    f"Loss and pixel accuracy per epoch of {_e(main['name'])} (training and "
                    "validation)") + text)


def _predict(source, e):
    if not source.scores:
        last = source.runs[0]["history"][-1] if source.runs[0]["history"] else None
        return (f"<p>Validation pixel accuracy after the last epoch: "
                f"{_percent(last and last['val_pixel_accuracy'])}. "
                "<code>refseg evaluate</code> scores the run on a test set.</p>")
    main = source.scores[0]
    return (f"<p>{_e(main['run'])} predicts the test welds with pixel accuracy "
            f"{_percent(main['pixel_accuracy'])} and mean IoU {main['mean_iou']:.4f} in "
            f"{main['seconds_per_image']:.3f} s per image: see <a href=\"#predictions\">the "
            "predictions</a> and <a href=\"#results\">the results</a>.</p>")


def _network(source, e):
    network = source.record.get("network")
    if not network:
        return "<p><code>refseg model summary</code> lists every layer.</p>"
    hw = source.input_hw
    rows = "".join(f"<tr><th>{_e(part)}</th><td>{v['parameters']:,}</td><td>"
                   f"{v['trainable']:,}</td><td>{v['macs'] / 1e9:.3f}</td></tr>"
                   for part, v in network["parts"].items())
    return (f"<table><caption>The fusion network at {hw[0]}x{hw[1]}</caption><tr><th>part</th>"
            "<th>parameters</th><th>trainable</th><th>G multiply-accumulates per image</th>"
            f"</tr>{rows}</table>")


def _taps(source, e):
    network = source.record.get("network")
    if not network:
        return ""
    hw = source.input_hw
    taps = network["taps"]
    return (f"<p>The {len(taps)} tapped layers at input {hw[0]}x{hw[1]} (H x W x C), "
            "ResNet50V2's then MobileNetV2's:</p><ul>"
            + "".join(f"<li><code>{_e(name)}</code> {'x'.join(map(str, shape))}</li>"
                      for name, shape in taps) + "</ul>")


def _update(source, e):
    main = source.runs[0]
    history = main["history"]
    if not history:
        return ""
    rates = sorted({h.get("learning_rate") for h in history if h.get("learning_rate")})
    return (f"<p>{_e(main['name'])}: training loss {history[0]['train_loss']:.4f} after epoch "
            f"1, {history[-1]['train_loss']:.4f} after epoch {history[-1]['epoch']}; Adam, "
            f"learning rate {', '.join(f'{r:g}' for r in rates)}.</p>")


_EVIDENCE = {
    "claim1.step1.acquire": _acquire, "claim1.step2.gray": _gray, "claim1.step2.gauss": _gauss,
    **{f"claim1.step2.edges.{op}": _edge_evidence(op) for op in OPERATORS},
    "claim1.step2.mean_image": _mean_image, "claim1.step2.std": _std, "claim1.step2.cv": _cv,
    "claim1.step2.intermediate_cv": _intermediate,
    "claim1.step2.weights": _operator_weights,
    "claim1.step2.final_weight": _final_weight, "claim1.step2.decision": _decision,
    "claim1.step2.traverse": _traverse, "claim1.step2.extract": _extract,
    "claim1.step2.dataset": _dataset, "claim1.step3.train": _train,
    "claim1.step4.predict": _predict, "claim2.backbones": _network, "claim2.taps": _taps,
    "claim2.fusion": _network, "claim4.propagation": _network, "claim4.update": _update,
}


# ------------------------------------------------------------------ the demo's global parts
def _runs_table(source) -> str:
    rows = []
    for run in source.runs:
        config, last = run["config"], (run["history"] or [None])[-1]
        if last is None:
            continue
        seconds = run["train_seconds"]
        rows.append(f"<tr><th>{_e(run['name'])}</th><td>{_e(config.get('input_kind', '?'))}</td>"
                    f"<td>{_e(' + '.join(config.get('branches', [])))}</td>"
                    f"<td>{len(run['history'])}</td><td>{last['train_loss']:.4f}</td>"
                    f"<td>{last['val_loss']:.4f}</td><td>{_percent(last['val_pixel_accuracy'])}"
                    f"</td><td>{'-' if seconds is None else f'{seconds:.0f} s'}</td></tr>")
    return ("<table><tr><th>run</th><th>input</th><th>backbones</th><th>epochs</th>"
            "<th>final training loss</th><th>final validation loss</th>"
            "<th>final validation accuracy</th><th>training time</th></tr>"
            + "".join(rows) + "</table>")


def _training(source) -> str:
    main, others = source.runs[0], source.runs[1:]
    small = "".join(_figure(_png_file(r["path"] / "curves.png", r["name"], "half"),
                            _e(r["name"])) for r in others)
    return ('<section id="training"><h2>Training curves</h2>'
            "<p>Loss (cross-entropy) and pixel accuracy per epoch, training (blue) and "
            "validation (red), like the patent's fig. 8 ([0257]: loss settling near 0.062 and "
            "accuracy near 97.41 % after about 40 epochs).</p>"
            + _figure(_png_file(main["path"] / "curves.png", "training curves"),
                      f"{_e(main['name'])}" + (" (the patent's network: feature input, both "
                                               "backbones)" if source.kind == "demo" else ""))
            + (f'<div class="welds">{small}</div>' if small else "")
            + _runs_table(source) + "</section>")


def _legend() -> str:
    return '<p class="legend">' + "".join(
        f'<span class="swatch" style="background:rgb({r},{g},{b})"></span> {name} '
        f"({r}, {g}, {b}) " for name, (r, g, b) in zip(CLASS_NAMES, LABEL_COLOURS.tolist())) \
        + "</p>"


def _predictions(source) -> str:
    if source.kind != "demo":
        return ('<section id="predictions"><h2>Predictions</h2><p>A training run holds no '
                "predictions: <code>refseg predict</code> and <code>refseg evaluate</code> "
                "write them.</p></section>")
    columns = ", ".join(["the image", "its label"] + [r["run"] for r in source.scores])
    return ('<section id="predictions"><h2>Predictions</h2>'
            f"<p>The first test welds, one per row; columns: {_e(columns)}. Each prediction "
            "is coloured as the labels are ([0263]):</p>" + _legend()
            + _figure(_png_file(source.folder / "predictions.png", "predictions"),
                      "Test welds: image, label, then each run's predicted classes")
            + "</section>")


def _results(source) -> str:
    if source.kind != "demo":
        last = source.runs[0]["history"][-1] if source.runs[0]["history"] else {}
        accuracy = last.get("val_pixel_accuracy")
        return ('<section id="results"><h2>Results against the patent</h2><table>'
                "<tr><th>quantity</th><th>patent</th><th>here</th></tr>"
                f"<tr><th>pixel accuracy</th><td>{PATENT_ACCURACY:.2%} after about 40 epochs "
                f"([0257])</td><td>{_percent(accuracy)} on the validation images after "
                f"{last.get('epoch', 0)} epochs</td></tr></table></section>")
    scores = {r["run"]: r for r in source.scores}
    main = source.scores[0]
    settings = source.record.get("settings", {})
    epochs, count = settings.get("epochs", "?"), settings.get("count", "?")
    tests = settings.get("test_count", "?")
    hw = source.input_hw
    cores = source.record.get("machine", {}).get("cores", "?")
    gap = PATENT_ACCURACY - main["pixel_accuracy"]
    trained = f"{_count(epochs, 'epoch')} on {_count(count, 'synthetic weld')}"
    accuracy_reading = (
        f"Reached: {main['pixel_accuracy']:.2%} against {PATENT_ACCURACY:.2%}." if gap <= 0 else
        f"{gap * 100:.1f} points below. The settings differ: here {trained}, with random "
        "backbones (no pretrained weights can be downloaded here: R-frozen, R-init), scored "
        f"on {_count(tests, 'other synthetic weld')}; the patent trains about 40 epochs on "
        "its photographed welds and does not say which weights its backbones start from. The "
        "gap measures this demo's budget, not the method; docs/experiments.md has longer runs.")
    last = source.runs[0]["history"][-1] if source.runs[0]["history"] else {}
    loss_reading = (
        f"Here {last.get('val_loss', float('nan')):.3f} (validation) and "
        f"{last.get('train_loss', float('nan')):.3f} (training) after epoch "
        f"{last.get('epoch', '?')}; [0257] does not say which loss its 0.062 is, after about "
        "40 epochs.")
    machine_text = f"{cores} CPU cores" + (f", input {hw[0]}x{hw[1]}" if hw else "")
    time_reading = (
        "Here the median over the test welds of the claim-1 extraction, the network and the "
        f"resizing back, on {machine_text}. The patent names neither its hardware nor its "
        "input size, so only the order of magnitude compares.")
    ranking = sorted(source.scores, key=lambda r: -r["pixel_accuracy"])
    order = " > ".join(f"{_e(r['run'])} {r['pixel_accuracy']:.2%}" for r in ranking)
    fusion, singles = scores.get("fusion-feature"), [
        scores[n] for n in ("resnet50v2-feature", "mobilenetv2-feature") if n in scores]
    if fusion and singles:
        beaten = [s["run"] for s in singles if s["pixel_accuracy"] > fusion["pixel_accuracy"]]
        ablation_reading = (
            "Reproduced in this run: the fused network scores above each backbone alone. "
            if not beaten else
            f"Not reproduced in this run: {', '.join(beaten)} scores above the fused network. ")
        ablation_reading += (
            f"Here by pixel accuracy on {_count(tests, 'test weld')} after {trained}; the "
            "patent's comparison is of its four models trained alike on its welds, and it is "
            "qualitative (broken lines, incomplete seams), with no numbers. VGG16, its fourth "
            "model, is not claimed and not built.")
    else:
        ablation_reading = "The demo's single-backbone runs are not in this folder."
    gray = scores.get("fusion-gray")
    if fusion and gray:
        better = fusion["pixel_accuracy"] >= gray["pixel_accuracy"]
        input_reading = (
            f"The feature image {'scores at or above' if better else 'scores below'} the gray "
            f"image here ({fusion['pixel_accuracy']:.2%} against {gray['pixel_accuracy']:.2%}). "
            "The patent gives no number for a gray-input network. The README's runs on 2640 "
            "welds with the backbones trained too measured 97.31 % (feature) against 97.61 % "
            "(gray). Over 3 training seeds at the demo's size (spec/sensitivity.md, R-dataset) "
            "no reading of what the network sees is shown to beat the gray image: the map alone "
            "scores 4.5 points below it (0.4 to 10.5 by seed; paired 95 % t interval -17.8 to "
            "+8.8), the gray image masked by the dilated map 3.5 below (-6.7 to -0.3), gray with "
            "the map as a channel 0.9 above (-0.9 to +2.7, not resolved).")
    else:
        input_reading = "The demo's gray-input run is not in this folder."
    rows = [
        ("pixel accuracy", f"{PATENT_ACCURACY:.2%} after about 40 epochs ([0257])",
         f"{main['pixel_accuracy']:.2%} ({_e(main['run'])}, {_count(tests, 'test weld')}, "
         f"{_count(epochs, 'epoch')})", accuracy_reading),
        ("loss", f"about {PATENT_LOSS} ([0257])",
         f"{last.get('val_loss', float('nan')):.4f} (validation, last epoch)", loss_reading),
        ("prediction time per image", f"{PATENT_SECONDS} s ([0260])",
         f"{main['seconds_per_image']:.3f} s", time_reading),
        ("fig. 9: Res-Mobile Net against each backbone alone ([0259]-[0260])",
         "Res-Mobile Net best: continuous lines, complete seam; MobileNetV2 broken lines; "
         "ResNet50 incomplete, bent; VGG16 discontinuous", order, ablation_reading),
        ("feature image against the gray image ([0121], [0264])",
         "the feature-region images give high precision", "fusion-feature against fusion-gray",
         input_reading),
    ]
    table = "".join(f"<tr><th>{a}</th><td>{b}</td><td>{c}</td><td>{d}</td></tr>"
                    for a, b, c, d in rows)
    head = ("<tr><th>run</th><th>pixel accuracy</th>"
            + "".join(f"<th>IoU {n}</th>" for n in CLASS_NAMES)
            + "<th>mIoU</th><th>boundary F1 (2 px)</th><th>s/image</th></tr>")
    body = "".join(
        f"<tr><th>{_e(r['run'])}</th><td>{_percent(r['pixel_accuracy'])}</td>"
        + "".join(f"<td>{'-' if v is None else f'{v:.4f}'}</td>" for v in r["class_iou"])
        + f"<td>{r['mean_iou']:.4f}</td><td>"
        + ('-' if r['boundary_f1'] is None else f"{r['boundary_f1']:.4f}")
        + f"</td><td>{r['seconds_per_image']:.3f}</td></tr>" for r in source.scores)
    return ('<section id="results"><h2>Results against the patent</h2>'
            f"<table><caption>The runs on the {tests} test welds</caption>{head}{body}</table>"
            "<table class=\"against\"><tr><th>quantity</th><th>patent</th><th>here</th>"
            f"<th>reading</th></tr>{table}</table></section>")


def _weights_section(source) -> str:
    rows = []
    for run in source.runs:
        size = run["weight_bytes"]
        mb = "-" if size is None else f"{size / 1e6:.0f} MB"
        where = Path(source.shown) / "runs" / run["name"] if source.kind == "demo" \
            else source.shown
        if run["has_weights"]:
            status = (f"kept ({mb}): <code>refseg predict {_e(where)} IMAGE --out DIR</code> "
                      f"and <code>refseg evaluate {_e(where)} DATA</code> work on it")
        elif run["pruned"]:
            status = (f"removed to save {mb} (its metrics and curves are kept): "
                      f"<code>{_e(run['pruned']['keep_with'])}</code> keeps every run's")
        else:
            status = "not in this folder"
        rows.append(f"<tr><th>{_e(run['name'])}</th><td>{status}</td></tr>")
    return ('<section id="weights"><h2>The runs\' weights</h2>'
            "<p>A run's weights are its <code>checkpoint.npz</code> (the trained decoder and "
            "Adam's state) and <code>backbones.npz</code> (the calibrated backbones).</p>"
            f"<table><tr><th>run</th><th>weights</th></tr>{''.join(rows)}</table></section>")


# ------------------------------------------------------------------------------- errata
def _errata(registry) -> dict:
    """{"E1": {"title", "lines", "elements"}} from errata.md; an entry touches the elements
    whose paragraphs its heading names."""
    out, current = {}, None
    for line in registry.errata_text.splitlines():
        match = re.match(r"^### (E\d+)\. (.*)$", line)
        if match:
            current = match.group(1)
            cited = set(re.findall(r"\[(\d{4})\]", match.group(2)))
            out[current] = {"title": match.group(2), "lines": [], "elements": [
                e.id for e in registry.elements.values() if cited & set(e.paragraphs)]}
        elif line.startswith("## "):
            current = None
        elif current:
            out[current]["lines"].append(line)
    return out


def _errata_section(errata) -> str:
    entries = "".join(
        f'<div class="erratum" id="{k}"><h3>{k}. {_inline(v["title"])}</h3>'
        f"{_marked(_markdown(v['lines']))}"
        + ("<p class=\"where\">Touches: " + ", ".join(
            f'<a href="#{_e(i)}">{_e(i)}</a>' for i in v["elements"]) + "</p>"
           if v["elements"] else "") + "</div>" for k, v in errata.items())
    return ('<section id="errata"><h2>Errata: where the text cannot be implemented as '
            "written</h2><p>Each entry quotes the literal text, says why it cannot be "
            f"implemented as it stands, and states what refseg does.</p>{entries}</section>")


def _marked(text: str) -> str:
    """An erratum's parts made visible: the literal text, the problem, refseg's fix."""
    for word, label in (("Literal:", "Literal:"), ("Problem:", "Problem:"),
                        ("refseg:", "The fix (refseg):")):
        text = text.replace(word, f'<strong class="mark">{label}</strong>', 1)
    return text


def _claims_section(registry) -> str:
    paragraphs = "".join(f"<p>{_e(p)}</p>" for p in registry.claims_text.split("\n\n")
                         if p.strip())
    return ('<section id="claims"><h2>The claims in Chinese</h2><details><summary>Claims 1-6 '
            "as published (the text shipped in refseg's spec, <code>claims_zh.txt</code>)"
            f'</summary><div lang="zh-Hans" class="zh">{paragraphs}</div></details></section>')


_CSS = """
body { font: 15px/1.45 "DejaVu Sans", "Helvetica Neue", Arial, sans-serif; margin: 0 auto;
  max-width: 1280px; padding: 0 18px 40px; color: #1d1d1d; background: #fff; }
header { border-bottom: 3px solid #333; margin-bottom: 12px; }
h1 { font-size: 26px; margin: 18px 0 6px; }
h2 { font-size: 20px; margin: 0 0 6px; }
h3 { font-size: 15px; margin: 12px 0 4px; color: #444; }
h4 { font-size: 14px; margin: 6px 0 2px; }
code { font-family: "DejaVu Sans Mono", Consolas, monospace; font-size: 13px;
  background: #f2f2f2; padding: 0 2px; }
section { border-top: 1px solid #bbb; padding: 12px 0; }
.where { color: #555; margin: 0 0 6px; }
.status { font-size: 12px; padding: 1px 6px; border-radius: 8px; vertical-align: middle; }
.status.implemented { background: #d7f0d2; } .status.not-applicable { background: #eee; }
.status.planned { background: #fbe7c6; }
.pair { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 16px; }
.zh { font-family: "Noto Sans CJK SC", "WenQuanYi Micro Hei", "Source Han Sans SC",
  "Microsoft YaHei", sans-serif; background: #fbf7ee; padding: 4px 10px; }
.en { background: #eef4fb; padding: 4px 10px; }
.reading { border-left: 3px solid #7aa6d8; padding-left: 10px; margin: 6px 0; }
.rejected { color: #6a4a1a; }
.seen { color: #555; }
.trace { display: grid; gap: 12px; font-size: 13px;
  grid-template-columns: minmax(0, 1fr) minmax(0, 1.5fr) minmax(0, 1fr); }
.trace code { overflow-wrap: anywhere; }
.trace ul { padding-left: 16px; margin: 2px 0; }
.loc { color: #666; }
.ran { background: #f7f7f7; padding: 4px 10px 8px; margin-top: 8px; }
.welds { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 12px;
  align-items: start; }
figure { margin: 6px 0; }
figure img { max-width: 100%; height: auto; image-rendering: pixelated;
  border: 1px solid #ccc; }
figure img.fit { width: 100%; }
figcaption { font-size: 13px; color: #333; }
table { border-collapse: collapse; margin: 6px 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; }
caption { text-align: left; font-weight: bold; }
table.weights { width: 100%; }
td.bars { width: 55%; }
.bar { height: 9px; background: #2f6db5; margin: 2px 0; }
.bar.patent { background: #aaa; }
.against td, .against th { max-width: 420px; }
.legend .swatch { display: inline-block; width: 14px; height: 14px; border: 1px solid #000;
  vertical-align: middle; margin-left: 8px; }
nav ol.toc { columns: 2; font-size: 13px; }
.missing { color: #a00; }
.erratum { margin: 8px 0; }
details { margin: 6px 0; }
"""
