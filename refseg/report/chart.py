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
``data/``, ``runs/*/``; :mod:`refseg.report.folder`) and the shipped spec, so that the page can
be redrawn at any time. What ran is shown by :mod:`refseg.report.claim1_evidence` (claim 1's
steps) and :mod:`refseg.report.sections` (the network, the demo's own sections), with the
numbers of :mod:`refseg.report.results`.
"""
from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from refseg import publish
from refseg import registry as spec
from refseg.audit import trace
from refseg._version import __version__
from refseg.cite import infrastructure
from refseg.errors import InputError, reason
from refseg.report import claim1_evidence, sections
from refseg.report import html as h
from refseg.report.folder import Source
from refseg.report.results import count, write_index
from refseg.run.records import machine

#: The chart's file name in the folder it reports on.
CHART = "index.html"
#: What implements each module of claim 5, as a command.
MODULE_COMMANDS = {
    "claim5.acquisition_module": "refseg synth --count N --out DIR (or any image file)",
    "claim5.feature_module": "refseg edges IMAGE... --out DIR",
    "claim5.training_module": "refseg train DATA --out RUN",
    "claim5.output_module": "refseg predict RUN IMAGE... --out DIR",
}


#: The renderer of each element's "what ran here" (claim 5's modules show their commands).
EVIDENCE = {**claim1_evidence.EVIDENCE, **sections.EVIDENCE}


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
    except InputError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        # a record the checks above let through, in a way nothing foresaw: still one line
        raise InputError(f"{folder}: a damaged refseg folder ({reason(exc)})") from None
    publish.write_text(folder / CHART, page)
    return folder / CHART


@infrastructure("the claim chart")
def rewrite_chart(folder, command: str | None = None) -> Path:
    """Rewrite ``folder/index.html`` (:func:`write_chart`) in a demo or run folder that refseg
    published, under its lock (``refseg report``); a folder refseg did not publish is refused
    (InputError) and nothing in it is replaced."""
    with publish.published_folder(folder, "refseg report"):
        return write_chart(folder, command=command)


@infrastructure("the claim chart")
def render_chart(folder, shown_as=None, command: str | None = None) -> str:
    """The claim chart of a demo or run folder as one HTML document (see the module)."""
    source = Source(Path(folder), Path(shown_as) if shown_as else Path(folder))
    registry = spec.load_registry()
    pins = trace.golden_pins()
    errata = _errata(registry)
    citations = (trace.functions_by_element(), trace.tests_by_element()[0], pins)
    seen_readings: dict[str, str] = {}
    with h.link_targets(_section_ids(registry, errata), source.folder):
        body = [_header(source, command), _cjk_note(registry), _contents(registry)]
        for element in registry.elements.values():
            body.append(_element(element, registry, source, citations, errata, seen_readings))
        body += [sections.training_section(source), sections.predictions_section(source),
                 sections.results_section(source), sections.weights_section(source),
                 _errata_section(errata), _claims_section(registry)]
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



def _header(source: Source, command: str | None) -> str:
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
                    f"({count(len(source.runs[0]['history']), 'epoch')} trained of "
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
            lines = spec.markdown_section(registry.readings_text, r)
            table = spec.sensitivity_table(registry.sensitivity_text, r)
            # folded: the reading is read first, its audit on demand (and not printed)
            audit = (f'<details class="sensitivity"><summary>Sensitivity of {h.escape(r)} '
                     f"(spec/sensitivity.md): {count(len(table) - 2, 'alternative')} held "
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
    evidence = EVIDENCE.get(e.id)
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
    return (f"<details><summary>{count(len(tests), 'test')} (open the list)</summary>"
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


@infrastructure("the demo's pages: how a demo folder is shown")
def write_demo_pages(folder, shown_as=None) -> None:
    """A demo folder's pages: ``index.md`` (:func:`refseg.report.results.write_index`) and the
    claim chart ``index.html`` (:func:`write_chart`), naming the folder ``shown_as`` (where a
    staged demo will be)."""
    write_index(folder, shown_as=shown_as)
    write_chart(folder, shown_as=shown_as)
