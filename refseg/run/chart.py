"""The claim chart: the claims on one side, what runs on the other, as one HTML page
(``index.html``) of a demo or run folder, written by ``refseg demo`` and by ``refseg report``.

The page is self-contained and opens from the file system (:mod:`refseg.report.html`): CSS
and a CJK font subset inline, images embedded as PNG data URIs, no script, no external URL (its
Content-Security-Policy forbids loading anything); the spec's Markdown links point at the page's
own sections or name the spec file. Printed, the folded lists stay folded. Its sections, in
order:

1. a header: the machine, the refseg version, the commands that made the outputs and the
   page, and when;
2. one section per claim element of ``spec/registry.toml``, in claim order: the patent's
   Chinese text of the element (``original`` spans of ``claims_zh.txt``) beside refseg's
   English rendering; the readings that fill its missing formulas, with the alternatives
   rejected; the errata that touch its paragraphs; the functions implementing it (file:line,
   each one's source folded beneath it); the tests checking it (folded); the golden arrays
   pinning it (``golden_pins.json``); under each
   reading, its table of ``spec/sensitivity.md``; and what ran here (for claim 1's steps, the
   images of the two welds at that step);
3. the training curves, the predictions, the results against the patent's own numbers with the
   reading of each difference, and which runs kept their weights;
4. the errata E1-E16, literal text and fix; the claims in Chinese.

Everything is read from the folder's files (``demo.json``, ``scores.json``, ``claim1/``,
``data/``, ``runs/*/``) and the shipped spec, so that the page can be redrawn at any time.
"""
from __future__ import annotations

import os
import platform
import re
from datetime import datetime
from pathlib import Path

import numpy as np
from PIL import Image

from refseg import publish
from refseg.audit import trace
from refseg.images import read_image
from refseg.backend import cpu_model
from refseg._version import __version__
from refseg.claim1.operators import OPERATORS
from refseg.data.labels import CLASS_NAMES, LABEL_COLOURS
from refseg.errors import InputError
from refseg.report import html as h
from refseg.report.walkthrough import OPERATOR_NAMES, PATENT_WEIGHTS
from refseg.cite import infrastructure
from refseg.run import records

#: The chart's file name in the folder it reports on.
CHART = "index.html"
#: The patent's numbers the results are held against: pixel accuracy and loss after about 40
#: epochs ([0257]), prediction time per image ([0260]), the weld's operator weights ([0213]).
PATENT_ACCURACY, PATENT_LOSS, PATENT_SECONDS = 0.9741, 0.062, 0.123
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
    try:
        page = render_chart(folder, shown_as, command)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        # a record the checks above let through, in a way nothing foresaw: still one line
        raise InputError(f"{folder}: a damaged refseg folder ({type(exc).__name__}: "
                         f"{exc})") from None
    publish.write_text(folder / CHART, page)
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
    with h.link_targets(_section_ids(registry, errata), source.folder):
        body = [_header(source, command), _cjk_note(registry), _contents(registry)]
        for element in registry.elements.values():
            body.append(_element(element, registry, source, citations, errata, seen_readings))
        body += [_training(source), _predictions(source), _results(source),
                 _weights_section(source), _errata_section(errata), _claims_section(registry)]
    return h.page(f"refseg claim chart: CN114419081B, {source.shown.name or '.'}",
                  "\n".join(body))


#: The sections after the claim elements', with their titles in the contents.
TAIL_SECTIONS = (("training", "Training curves"), ("predictions", "Predictions"),
                 ("results", "Results against the patent"), ("weights", "The runs' weights"),
                 ("errata", "Errata E1-E16"), ("claims", "The claims in Chinese"))


def _section_ids(registry, errata) -> list[str]:
    """Every id a link of the page can point at: elements, readings, errata, the tail."""
    readings = {r for e in registry.elements.values() for r in e.readings}
    return [*registry.elements, *readings, *errata, *(k for k, _ in TAIL_SECTIONS)]


def _cjk_note(registry) -> str:
    text = registry.claims_text + "".join(
        span for e in registry.elements.values() for span in e.original)
    return h.cjk_note(text)


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
        self.record = records.check_demo_record(folder / "demo.json", _json(
            folder / "demo.json")) if (folder / "demo.json").is_file() else {}
        self.scores = records.check_scores(folder / "scores.json", _json(
            folder / "scores.json"), folder / "runs") if self.kind == "demo" else []
        if self.kind == "demo":
            recorded = {r["name"]: r for r in self.record.get("runs", [])}
            names = [r["run"] for r in self.scores]
            self.runs = [self._run(folder / "runs" / n, n, recorded.get(n, {})) for n in names]
        else:
            self.runs = [self._run(folder, folder.name, {})]
        self.welds = self._welds() if self.kind == "demo" else []

    def _run(self, path: Path, name: str, recorded: dict) -> dict:
        config = _config(path / "config.json") if (path / "config.json").is_file() else {}
        history = records.read_history(path / "metrics.jsonl") \
            if (path / "metrics.jsonl").is_file() else []
        pruned = _json(path / "pruned.json") if (path / "pruned.json").is_file() else None
        if pruned is not None and (not isinstance(pruned, dict) or not isinstance(
                pruned.get("bytes"), int) or pruned["bytes"] < 0):
            raise InputError(f"{path / 'pruned.json'}: an object with a byte count expected")
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
                weld[key] = read_image(found[0]).pixels if found else None
            welds.append(weld)
        return welds

    @property
    def input_hw(self):
        hw = self.record.get("settings", {}).get("input_hw") or \
            (self.runs[0]["config"].get("input_hw") if self.runs else None)
        return tuple(hw) if hw else None


def _json(path: Path):
    return records.read_json(path)


def _config(path: Path) -> dict:
    """A run's settings as recorded, after checking them as ``TrainConfig`` does."""
    records.read_run_config(path)
    return _json(path)


# ---------------------------------------------------------------------------- HTML pieces
def _png_file(path: Path, alt: str, css: str = "") -> str:
    """An ``<img>`` embedding the PNG file at ``path``; a note when it is missing."""
    if not path.is_file():
        return f'<p class="missing">{h.escape(path.name)} is not in this folder.</p>'
    return h.png(np.asarray(Image.open(path).convert("RGB")), alt, css)


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
        made.append(f"<li>Outputs made by <code>{h.escape(record['command'])}</code>, "
                    f"{h.escape(record['started'])} to {h.escape(record['finished'])} "
                    f"({record['seconds'] / 60:.1f} min), refseg "
                    f"{h.escape(record['refseg_version'])}, on {h.escape(m.get('cpu'))} "
                    f"({h.escape(m.get('cores'))} cores), {h.escape(m.get('system'))}, Python "
                    f"{h.escape(m.get('python'))}, NumPy {h.escape(m.get('numpy'))}.</li>")
    elif source.kind == "demo":
        made.append("<li>Outputs made by <code>refseg demo</code> (an older one that kept no "
                    "<code>demo.json</code>: its command, machine and times are not "
                    "known).</li>")
    else:
        config = source.runs[0]["config"]
        made.append(f"<li>Outputs made by <code>refseg train</code>: the run "
                    f"<code>{h.escape(source.shown)}</code> "
                    f"({_count(len(source.runs[0]['history']), 'epoch')} trained of "
                    f"{config.get('epochs', '?')}, {h.escape(config.get('input_kind', '?'))} "
                    f"input, branches {h.escape(', '.join(config.get('branches', [])))}).</li>")
    m = machine()
    made.append(f"<li>This page written by <code>{h.escape(command or 'refseg demo')}</code>, "
                f"{now}, "
                f"refseg {__version__}, on {h.escape(m['cpu'])} ({m['cores']} cores), "
                f"{h.escape(m['system'])}. Redraw it with <code>refseg report "
                f"{h.escape(source.shown)}</code>.</li>")
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
        items.append(f'<li><a href="#{h.escape(e.id)}">{h.escape(e.id)}</a> '
                     f"{h.escape(e.title)}</li>")
    items.append("</ol></li>")
    rest = "".join(f'<li><a href="#{k}">{t}</a></li>' for k, t in TAIL_SECTIONS)
    return f'<nav><h2>Contents</h2><ol class="toc">{"".join(items)}{rest}</ol></nav>'


# -------------------------------------------------------------------------------- elements
def _element(e, registry, source, citations, errata, seen_readings) -> str:
    status = f'<span class="status {h.escape(e.status)}">{h.escape(e.status)}</span>'
    paragraphs = ", ".join(f"[{p}]" for p in e.paragraphs)
    original = "".join(f"<p>{h.escape(span)}</p>" for span in e.original)
    parts = [f'<section id="{h.escape(e.id)}" class="element">',
             f"<h2><code>{h.escape(e.id)}</code> {h.escape(e.title)} {status}</h2>",
             f'<p class="where">Claim {e.claim}; paragraphs {h.escape(paragraphs)}</p>',
             '<div class="pair">',
             f'<div class="zh" lang="zh-Hans"><h3>Patent (original)</h3>{original}</div>',
             f'<div class="en"><h3>refseg\'s rendering</h3><p>{h.inline(e.text)}</p>'
             + (f'<p class="reason">{h.inline(e.reason)}</p>' if e.reason else "")
             + "</div></div>"]
    # each paragraph as published beside refseg's rendering, so that one can be held to the other
    rendered = [f'<li>[{p}] <span class="zh" lang="zh-Hans">'
                f'{h.escape(registry.description.get(p, ""))}</span><br>'
                f"{h.inline(registry.paragraphs[p])}</li>"
                for p in e.paragraphs if p in registry.paragraphs]
    if rendered:
        parts.append(f"<details><summary>The description's paragraphs, in Chinese and "
                     f"English ({len(rendered)})</summary><ul>{''.join(rendered)}</ul>"
                     "</details>")
    if e.readings:
        parts.append("<h3>Readings</h3>")
        for r in e.readings:
            if r in seen_readings:
                parts.append(f'<p class="seen"><a href="#{h.escape(r)}">{h.escape(r)}</a>: '
                             "given above, "
                             f"under {h.escape(seen_readings[r])}.</p>")
                continue
            seen_readings[r] = e.id
            lines = trace.markdown_section(registry.readings_text, r)
            table = trace.sensitivity_table(registry.sensitivity_text, r)
            # folded: the reading is read first, its audit on demand (and not printed)
            audit = (f'<details class="sensitivity"><summary>Sensitivity of {h.escape(r)} '
                     f"(spec/sensitivity.md): {_count(len(table) - 2, 'alternative')} held "
                     f"against it</summary>{h.markdown(table)}</details>" if table else "")
            parts.append(f'<div class="reading" id="{h.escape(r)}"><h4>{h.inline(lines[0][3:])}'
                         f"</h4>{h.markdown(lines[1:])}{audit}</div>")
    touching = [k for k, entry in errata.items() if e.id in entry["elements"]]
    if touching:
        parts.append("<p>Errata: " + ", ".join(
            f'<a href="#{k}">{k}</a> ({h.inline(errata[k]["title"])})' for k in touching)
            + "</p>")
    functions, tests, names = (c.get(e.id, []) for c in citations)
    parts.append('<div class="trace">'
                 f"<div><h3>Implemented by ({len(functions)})</h3><ul>"
                 + "".join(f"<li>{h.function_source(f, where)}</li>" for f, where in functions)
                 + f"</ul></div><div><h3>Tested by ({len(tests)})</h3>"
                 + _tests_list(tests)
                 + f"</div><div><h3>Pinned by golden arrays ({len(names)})</h3>"
                 + _golden_names(names) + "</div></div>")
    evidence = _EVIDENCE.get(e.id)
    shown = evidence(source, e) if evidence else ""
    if e.id in MODULE_COMMANDS:
        shown = f"<p>As a command: <code>{h.escape(MODULE_COMMANDS[e.id])}</code>.</p>" + shown
    if shown:
        parts.append(f'<div class="ran"><h3>What ran here</h3>{shown}</div>')
    parts.append("</section>")
    return "\n".join(parts)


def _tests_list(tests) -> str:
    """The tests, folded: a reader opens the list; a printed page shows only its count."""
    if not tests:
        return "<p>none</p>"
    items = "".join(f"<li><code>{h.escape(t)}</code>"
                    + (f' <span class="loc">{h.escape(where)}</span>' if where else "")
                    + "</li>" for t, where in tests)
    return (f"<details><summary>{_count(len(tests), 'test')} (open the list)</summary>"
            f"<ul>{items}</ul></details>")


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
        return ("<details><summary>" + ", ".join(f"<code>{h.escape(s)}</code>" for s in shown[:6])
                + f" and {len(shown) - 6} more</summary><ul>"
                + "".join(f"<li><code>{h.escape(s)}</code></li>" for s in shown[6:])
                + "</ul></details>")
    return "<ul>" + "".join(f"<li><code>{h.escape(s)}</code></li>" for s in shown) + "</ul>" \
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
        h.figure(h.png(image_of(w), f"{w['stem']}"), caption_of(w)) for w in source.welds) \
        + "</div>"


def _edge_evidence(op):
    def show(source, e):
        def caption(w):
            r = w["report"]
            thresholds = ", ".join(f"{k} {v:.2f}" for k, v in r["thresholds"][op].items())
            pixels = r["edge_pixels"][op]
            share = pixels / (r["shape"][0] * r["shape"][1])
            return (f"{h.escape(w['stem'])}: {OPERATOR_NAMES[op]} edge map (white: edge), "
                    f"threshold {thresholds}; {pixels} edge pixels ({share:.1%}); weight "
                    f"w = {r['weights'][op]:.3f}")
        return _per_weld(source, caption, lambda w: w["arrays"][op] * np.uint8(255))
    return show


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
        out.append(f"<table><caption>{h.escape(w['stem'])}</caption><tr><th>operator</th>{head}"
                   f"</tr>{rows}</table>")
    return '<div class="welds">' + "".join(out) + "</div>"


def _acquire(source, e):
    def caption(w):
        rows, cols = w["input"].shape[:2]
        return f"{h.escape(w['stem'])}: the input image, {rows} rows x {cols} columns, RGB"
    if not source.welds or any(w["input"] is None for w in source.welds):
        return _no_welds(source)
    settings = source.record.get("settings", {})
    return (f"<p>{settings.get('count', '?')} synthetic training welds and "
            f"{settings.get('test_count', '?')} test welds were drawn "
            "(<code>refseg synth</code>). The first two:</p>"
            + _per_weld(source, caption, lambda w: w["input"]))


def _gray(source, e):
    return _per_weld(source, lambda w: f"{h.escape(w['stem'])}: gray = (299 R + 587 G + 114 B) "
                     "/ 1000 "
                     "(float64; rounded for display)", lambda w: h.gray8(w["arrays"]["gray"]))


def _gauss(source, e):
    def caption(w):
        sigma = w["report"]["params"]["sigma"]
        return (f"{h.escape(w['stem'])}: the gray image after the 3x3 Gaussian, σ = {sigma:g}, "
                "border reflect-101")
    return _per_weld(source, caption, lambda w: h.gray8(w["arrays"]["blurred"]))


def _mean_image(source, e):
    return _per_weld(source, lambda w: f"{h.escape(w['stem'])}: Ē, the per-pixel mean of the four "
                     "binary edge maps (0, ¼, ½, ¾, 1 shown as black to white)",
                     lambda w: h.gray8(w["arrays"]["mean_image"] * 255))


def _std(source, e):
    return _statistics_table(source, ("mean", "std"))


def _cv(source, e):
    return _statistics_table(source, ("mean", "std", "cv"))


def _intermediate(source, e):
    if not source.welds:
        return _no_welds(source)
    return "<ul>" + "".join(
        f"<li>{h.escape(w['stem'])}: ΣV = {w['report']['intermediate_cv']:.4f} ("
        + " + ".join(f"{w['report']['cv'][op]:.4f}" for op in OPERATORS) + ")</li>"
        for w in source.welds) + "</ul>"


def _operator_weights(source, e):
    if not source.welds:
        return _no_welds(source)
    return '<div class="welds">' + "".join(
        f"<div><p>{h.escape(w['stem'])}</p>{_weights_chart(w['report']['weights'])}</div>"
        for w in source.welds) + "</div>"


def _final_weight(source, e):
    def caption(w):
        f = w["arrays"]["final_weight"]
        return (f"{h.escape(w['stem'])}: F = Σ w<sub>i</sub> X<sub>i</sub> − 1.5 (X = 2 on an "
                "edge "
                f"of operator i, else 1), from {f.min():.3f} to {f.max():.3f}: blue below 0 "
                "(darkest: no operator), orange to yellow from 0 up (the pixels the vote "
                "keeps)")
    return _per_weld(source, caption,
                     lambda w: h.final_weight_colours(w["arrays"]["final_weight"]))


def _decision(source, e):
    def caption(w):
        fm = w["arrays"]["feature_map"]
        return (f"{h.escape(w['stem'])}: the feature map, 1 (white) where F ≥ 0: "
                f"{int(fm.sum())} pixels ({fm.mean():.1%})")
    return _per_weld(source, caption, lambda w: w["arrays"]["feature_map"] * np.uint8(255))


def _traverse(source, e):
    if not source.welds:
        return _no_welds(source)
    return "<ul>" + "".join(
        f"<li>{h.escape(w['stem'])}: input {w['report']['shape'][0]}x{w['report']['shape'][1]}, "
        f"feature map {w['arrays']['feature_map'].shape[0]}x"
        f"{w['arrays']['feature_map'].shape[1]}: every pixel decided, at the input's "
        "resolution (the map is under claim1.step2.decision).</li>"
        for w in source.welds) + "</ul>"


def _extract(source, e):
    if not source.welds or any(w["input"] is None for w in source.welds):
        return _no_welds(source)
    out = []
    for w in source.welds:
        out.append(h.figure(h.png(w["input"], w["stem"], "half"), f"{h.escape(w['stem'])}: input")
                   + h.figure(h.png(w["arrays"]["feature_map"] * np.uint8(255), w["stem"],
                                  "half"), f"{h.escape(w['stem'])}: its feature-region image"))
    coverage = source.record.get("contour_coverage")
    note = (f"<p>Of the labels' contour pixels, {coverage:.1%} lie within one pixel of a "
            "feature-map pixel (first 20 training images): the rest of the seam's edges are "
            "lost by the vote before the network sees the image.</p>"
            if coverage is not None else "")
    note += ("<p>Any image, step by step, with who decided each pixel: <code>refseg explain "
             "claim1 --image IMAGE --out DIR</code>.</p>")
    return '<div class="welds">' + "".join(out) + "</div>" + note


def _dataset(source, e):
    from refseg.data.inputs import network_input

    if not source.welds or source.input_hw is None or \
            any(w["input"] is None or w["label"] is None for w in source.welds):
        return _no_welds(source)
    rows, cols = source.input_hw
    out = []
    for w in source.welds:
        x = network_input(w["input"], source.input_hw, "feature")
        out.append(h.figure(h.png(h.gray8((x[..., 0] + 1) * 127.5), w["stem"], "fit"),
                            f"{h.escape(w['stem'])}: the network's input, the feature image "
                            f"resized to {rows}x{cols} (bilinear; in [-1, 1], shown black to "
                            "white)")
                   + h.figure(h.png(w["label"], w["stem"], "half"),
                             f"{h.escape(w['stem'])}: its label ([0263] colours)"))
    return '<div class="welds">' + "".join(out) + "</div>"


def _train(source, e):
    main = source.runs[0]
    text = _runs_table(source)
    return (h.figure(_png_file(main["path"] / "curves.png", "training curves"),
                    f"Loss and pixel accuracy per epoch of {h.escape(main['name'])} (training and "
                    "validation)") + text)


def _predict(source, e):
    if not source.scores:
        last = source.runs[0]["history"][-1] if source.runs[0]["history"] else None
        return (f"<p>Validation pixel accuracy after the last epoch: "
                f"{_percent(last and last['val_pixel_accuracy'])}. "
                "<code>refseg evaluate</code> scores the run on a test set.</p>")
    main = source.scores[0]
    return (f"<p>{h.escape(main['run'])} predicts the test welds with pixel accuracy "
            f"{_percent(main['pixel_accuracy'])} and mean IoU {main['mean_iou']:.4f} in "
            f"{main['seconds_per_image']:.3f} s per image: see <a href=\"#predictions\">the "
            "predictions</a> and <a href=\"#results\">the results</a>.</p>")


def _network(source, e):
    network = source.record.get("network")
    if not network:
        return "<p><code>refseg model summary</code> lists every layer.</p>"
    hw = source.input_hw
    rows = "".join(f"<tr><th>{h.escape(part)}</th><td>{v['parameters']:,}</td><td>"
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
            + "".join(f"<li><code>{h.escape(name)}</code> {'x'.join(map(str, shape))}</li>"
                      for name, shape in taps) + "</ul>")


def _update(source, e):
    main = source.runs[0]
    history = main["history"]
    if not history:
        return ""
    rates = sorted({e.get("learning_rate") for e in history if e.get("learning_rate")})
    return (f"<p>{h.escape(main['name'])}: training loss {history[0]['train_loss']:.4f} after "
            "epoch "
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
        rows.append(f"<tr><th>{h.escape(run['name'])}</th>"
                    f"<td>{h.escape(config.get('input_kind', '?'))}</td>"
                    f"<td>{h.escape(' + '.join(config.get('branches', [])))}</td>"
                    f"<td>{len(run['history'])}</td><td>{last['train_loss']:.4f}</td>"
                    f"<td>{last['val_loss']:.4f}</td><td>{_percent(last['val_pixel_accuracy'])}"
                    f"</td><td>{'-' if seconds is None else f'{seconds:.0f} s'}</td></tr>")
    return ("<table><tr><th>run</th><th>input</th><th>backbones</th><th>epochs</th>"
            "<th>final training loss</th><th>final validation loss</th>"
            "<th>final validation accuracy</th><th>training time</th></tr>"
            + "".join(rows) + "</table>")


def _training(source) -> str:
    main, others = source.runs[0], source.runs[1:]
    small = "".join(h.figure(_png_file(r["path"] / "curves.png", r["name"], "half"),
                            h.escape(r["name"])) for r in others)
    return ('<section id="training"><h2>Training curves</h2>'
            "<p>Loss (cross-entropy) and pixel accuracy per epoch, training (blue) and "
            "validation (red), like the patent's fig. 8 ([0257]: loss settling near 0.062 and "
            "accuracy near 97.41 % after about 40 epochs).</p>"
            + h.figure(_png_file(main["path"] / "curves.png", "training curves"),
                      f"{h.escape(main['name'])}" + (" (the patent's network: feature input, both "
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
            f"<p>The first test welds, one per row; columns: {h.escape(columns)}. Each prediction "
            "is coloured as the labels are ([0263]):</p>" + _legend()
            + h.figure(_png_file(source.folder / "predictions.png", "predictions"),
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
    order = " > ".join(f"{h.escape(r['run'])} {r['pixel_accuracy']:.2%}" for r in ranking)
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
            "The patent gives no number for a gray-input network. The runs on 2640 welds with "
            "the backbones trained too (docs/experiments.md, <em>Training the backbones too: "
            "2640 welds</em>) measured 97.31 % (feature) against 97.61 % "
            "(gray). Over 3 training seeds at the demo's size (spec/sensitivity.md, R-dataset) "
            "no reading of what the network sees is shown to beat the gray image: the map alone "
            "scores 4.5 points below it (0.4 to 10.5 by seed; paired 95 % t interval -17.8 to "
            "+8.8), the gray image masked by the dilated map 3.5 below (-6.7 to -0.3), gray with "
            "the map as a channel 0.9 above (-0.9 to +2.7, not resolved).")
    else:
        input_reading = "The demo's gray-input run is not in this folder."
    rows = [
        ("pixel accuracy", f"{PATENT_ACCURACY:.2%} after about 40 epochs ([0257])",
         f"{main['pixel_accuracy']:.2%} ({h.escape(main['run'])}, {_count(tests, 'test weld')}, "
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
        f"<tr><th>{h.escape(r['run'])}</th><td>{_percent(r['pixel_accuracy'])}</td>"
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
            status = (f"kept ({mb}): <code>refseg predict {h.escape(where)} IMAGE --out DIR</code> "
                      f"and <code>refseg evaluate {h.escape(where)} DATA</code> work on it")
        elif run["pruned"]:
            status = (f"removed to save {mb} (its metrics and curves are kept): "
                      f"<code>{h.escape(run['pruned']['keep_with'])}</code> keeps every run's")
        else:
            status = "not in this folder"
        rows.append(f"<tr><th>{h.escape(run['name'])}</th><td>{status}</td></tr>")
    return ('<section id="weights"><h2>The runs\' weights</h2>'
            "<p>A run's weights are its <code>checkpoint.npz</code> (the trained decoder) "
            "and <code>backbones.npz</code> (the calibrated batch-norm statistics, the seed "
            "that regenerates the rest of the starting weights, and their digest).</p>"
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
        f'<div class="erratum" id="{k}"><h3>{k}. {h.inline(v["title"])}</h3>'
        f"{_marked(h.markdown(v['lines']))}"
        + ("<p class=\"where\">Touches: " + ", ".join(
            f'<a href="#{h.escape(i)}">{h.escape(i)}</a>' for i in v["elements"]) + "</p>"
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
    paragraphs = "".join(f"<p>{h.escape(p)}</p>" for p in registry.claims_text.split("\n\n")
                         if p.strip())
    return ('<section id="claims"><h2>The claims in Chinese</h2><details><summary>Claims 1-6 '
            "as published (the text shipped in refseg's spec, <code>claims_zh.txt</code>)"
            f'</summary><div lang="zh-Hans" class="zh">{paragraphs}</div></details></section>')
