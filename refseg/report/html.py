"""The pieces refseg's HTML pages share (the claim chart, the claim-1 walkthrough): escaping,
the spec's Markdown with its links resolved, embedded PNG images, a function's source one click
away, and the page itself with its stylesheet and the embedded CJK font.

Every page is one self-contained file that opens from the file system: the stylesheet
(``style.css``) and the font subset (``fonts/cjk-subset.woff2``, Noto Sans CJK SC under the SIL
Open Font License, ``fonts/OFL.txt``) are package data written into the page, images are PNG
data URIs, and the Content-Security-Policy forbids loading anything else.
"""
from __future__ import annotations

import base64
import contextlib
import contextvars
import html
import importlib
import inspect
import io
import re
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np
from PIL import Image


INFRASTRUCTURE = "the HTML pages"

#: The family name the pages give the embedded font.
CJK_FAMILY = "refseg Noto Sans CJK SC subset"
#: The longest source shown for one function or class (lines); the rest is named, not shown.
SOURCE_LINES = 150
#: A Markdown link of the spec: [label](target).
MARKDOWN_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")

#: The link targets of the page being written: ({ids of the page's sections}, the folder it
#: describes or None); set with :func:`link_targets`.
_TARGETS: contextvars.ContextVar = contextvars.ContextVar("link_targets", default=(frozenset(),
                                                                                   None))


@contextlib.contextmanager
def link_targets(ids, folder=None):
    """Within the block, Markdown links resolve to the page's own sections (``ids``) or to
    files ``folder`` holds; others are shown as the spec file they name, without a link."""
    token = _TARGETS.set((frozenset(ids), Path(folder) if folder is not None else None))
    try:
        yield
    finally:
        _TARGETS.reset(token)


def escape(text) -> str:
    return html.escape(str(text), quote=True)


def resolve(target: str) -> str | None:
    """The href a spec link's target gets in the page being written: ``#id`` of the section
    its fragment names (``sensitivity.md#r-cv`` -> ``#R-cv``; a longer GitHub-style fragment
    ``r-cv-the-coefficient...`` names the same), a file of the folder, or None."""
    ids, folder = _TARGETS.get()
    file, _, fragment = target.partition("#")
    fragment = fragment.lower()
    if fragment:
        named = [i for i in ids if fragment == i.lower() or fragment.startswith(i.lower() + "-")]
        if named:
            return "#" + max(named, key=len)
    if file and folder is not None and not file.startswith(("/", "..")) \
            and (folder / file).is_file():
        return target
    return None


def _link(label: str, target: str) -> str:
    href = resolve(target)
    if href is not None:
        return f'<a href="{escape(href)}">{escape(label)}</a>'
    file, _, fragment = target.partition("#")
    where = f"<code>{escape(file)}</code>" + (f", section {escape(fragment)}" if fragment
                                               else "")
    shown = "" if label == target else f"{escape(label)} "
    return f"{shown}(refseg's spec, {where})"


def _text(part: str) -> str:
    """Plain Markdown text: links resolved, **bold**, the rest escaped."""
    out, last = [], 0
    for match in MARKDOWN_LINK.finditer(part):
        out.append(escape(part[last:match.start()]))
        out.append(_link(match.group(1), match.group(2)))
        last = match.end()
    out.append(escape(part[last:]))
    return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", "".join(out))


def inline(text: str) -> str:
    """The spec's inline Markdown as HTML: `code`, **bold** and [links](target)."""
    return "".join(f"<code>{escape(part)}</code>" if i % 2 else _text(part)
                   for i, part in enumerate(str(text).split("`")))


def _table(rows: list[list[str]]) -> str:
    head, *rest = rows
    return ("<table><tr>" + "".join(f"<th>{inline(c)}</th>" for c in head) + "</tr>"
            + "".join("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in row) + "</tr>"
                      for row in rest) + "</table>")


def markdown(lines: list[str]) -> str:
    """The Markdown of readings.md and errata.md as HTML: paragraphs, lists, tables, code
    blocks and headings (rendered two levels below their Markdown level)."""
    blocks, i = [], 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            blocks.append(f"<pre>{escape(chr(10).join(lines[i + 1:j]))}</pre>")
            i = j + 1
        elif line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")) + 2, 6)
            blocks.append(f"<h{level}>{inline(line.lstrip('#').strip())}</h{level}>")
            i += 1
        elif line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
                if not all(set(c) <= set("-: ") for c in cells):
                    rows.append(cells)
                i += 1
            blocks.append(_table(rows))
        elif line.startswith("- "):
            items = []
            while i < len(lines) and (lines[i].startswith("- ") or (
                    lines[i].startswith("  ") and lines[i].strip() and items)):
                if lines[i].startswith("- "):
                    items.append(lines[i][2:].strip())
                else:
                    items[-1] += " " + lines[i].strip()
                i += 1
            blocks.append("<ul>" + "".join(f"<li>{inline(t)}</li>" for t in items) + "</ul>")
        else:
            text = []
            while i < len(lines) and lines[i].strip() and not lines[i].startswith(
                    ("- ", "|", "#", "```")):
                text.append(lines[i].strip())
                i += 1
            joined = " ".join(text)
            css = ' class="rejected"' if joined.startswith("Rejected") else ""
            blocks.append(f"<p{css}>{inline(joined)}</p>")
    return "\n".join(blocks)


def png(array: np.ndarray, alt: str, css: str = "") -> str:
    """An ``<img>`` holding ``array`` (uint8 (M, N) or (M, N, 3)) as an embedded PNG."""
    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(array, dtype=np.uint8)).save(buffer, format="PNG")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    rows, cols = array.shape[:2]
    style = f' class="{css}"' if css else ""
    return (f'<img src="data:image/png;base64,{data}" width="{cols}" height="{rows}" '
            f'alt="{escape(alt)}"{style}>')


def gray8(values) -> np.ndarray:
    """A float image on the 0-255 scale as uint8, rounded and clipped, for display."""
    return np.clip(np.round(values), 0, 255).astype(np.uint8)


def final_weight_colours(f: np.ndarray) -> np.ndarray:
    """The final weight F in [-0.5, 0.5] as colours (M, N, 3) uint8: dark to light blue below
    0, orange to yellow from 0 on (the pixels the vote keeps)."""
    t = np.clip(f + 0.5, 0.0, 1.0)[..., None]
    low = np.array([10, 20, 70]) + (np.array([150, 190, 255]) - [10, 20, 70]) * (t / 0.5)
    high = np.array([230, 120, 0]) + (np.array([255, 240, 90]) - [230, 120, 0]) * \
        ((t - 0.5) / 0.5)
    return np.where(t >= 0.5, high, low).round().astype(np.uint8)


def figure(image_html: str, caption: str) -> str:
    return f"<figure>{image_html}<figcaption>{caption}</figcaption></figure>"


def _code_object(qualified: str):
    """The function or class named ``refseg.module.name`` (or ``...Class.method``)."""
    parts = qualified.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name, None)
        return inspect.unwrap(obj) if obj is not None else None
    return None


def function_source(qualified: str, where: str) -> str:
    """The function's name and file:line, its source one click away (a collapsed
    ``<details>``); without the source when it cannot be read."""
    head = f"<code>{escape(qualified)}</code> <span class=\"loc\">{escape(where)}</span>"
    try:
        lines, _ = inspect.getsourcelines(_code_object(qualified))
    except (TypeError, OSError):
        return head
    shown = "".join(lines[:SOURCE_LINES])
    more = (f"\n# ... {len(lines) - SOURCE_LINES} more lines in {where.split(':')[0]}"
            if len(lines) > SOURCE_LINES else "")
    # a printed page has no folds: it gets the name and place alone, inline
    return (f'<details class="source"><summary>{head}</summary>'
            f'<pre>{escape(shown.rstrip() + more)}</pre></details><span class="printed">'
            f"{head}</span>")


@lru_cache(maxsize=None)
def _package_text(name: str) -> str:
    return resources.files("refseg.report").joinpath(name).read_text(encoding="utf-8")


@lru_cache(maxsize=None)
def _font_face() -> str:
    data = resources.files("refseg.report").joinpath("fonts/cjk-subset.woff2").read_bytes()
    encoded = base64.b64encode(data).decode("ascii")
    return (f'@font-face {{ font-family: "{CJK_FAMILY}"; font-display: block; '
            f'src: url(data:font/woff2;base64,{encoded}) format("woff2"); }}\n')


def embedded_characters() -> frozenset:
    """The characters the embedded CJK font holds (``fonts/cjk-subset.txt``)."""
    return frozenset(_package_text("fonts/cjk-subset.txt").strip())


def characters_without_glyph(text: str) -> str:
    """The CJK characters of ``text`` (U+2E80 and up) that the embedded font lacks, sorted:
    a reader's own CJK font draws those, or the page shows boxes."""
    held = embedded_characters()
    return "".join(sorted({c for c in text if ord(c) >= 0x2E80 and c not in held}))


def cjk_note(text: str) -> str:
    """A visible note naming the characters of ``text`` the embedded font lacks; "" when it
    holds them all."""
    missing = characters_without_glyph(text)
    if not missing:
        return ""
    return (f'<p class="missing">The embedded font lacks {len(missing)} character(s) of this '
            f"page ({escape(missing)}); they show only with a CJK font installed.</p>")


def page(title: str, body: str) -> str:
    """One self-contained HTML document: the stylesheet, the CJK font, then ``body``."""
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "img-src data:; font-src data:; style-src 'unsafe-inline'\">\n"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
            f"<title>{escape(title)}</title>\n<style>\n{_font_face()}"
            f"{_package_text('style.css')}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n")
