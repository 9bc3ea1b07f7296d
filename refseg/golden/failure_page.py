"""The failure page of ``golden check --html`` and ``golden compare --html``: one self-contained
HTML file (no script, no request: every picture a ``data:`` PNG) showing, for each failing 2-D
array, where candidate and reference differ.

A picture has two colours: for a binary map, the pixels the candidate marks and the reference
does not (*candidate only*) against those the reference marks and the candidate does not
(*reference only*); for any other 2-D array, the elements beyond the tolerance where the
candidate is higher against those where it is lower. Pixels both maps mark are light gray, a
float array's reference shows faintly, and the border ring (:data:`BORDER_WIDTH` pixels, where
the 3x3 blur and the 3x3 gradient kernels reach past the image) is tinted, so that a border
rule shows as a frame. Beside each picture, the counts of each colour on the border ring and
in the interior.
"""
from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import numpy as np
from PIL import Image

from refseg.golden.format import ARRAYS, MANIFEST

INFRASTRUCTURE = "golden files: the failure page"

#: The width of the border ring in pixels: the 3x3 Gaussian reaches one pixel past the image,
#: and the 3x3 gradient kernels on the blurred image one more.
BORDER_WIDTH = 2
#: Colours (RGB): candidate only / higher, reference only / lower (a pair told apart with
#: any colour vision), pixels both mark, the border ring's tint, the background.
CANDIDATE_COLOUR = (230, 97, 0)
REFERENCE_COLOUR = (0, 114, 178)
BOTH_COLOUR = (200, 200, 200)
RING_COLOUR = (255, 246, 214)
BACKGROUND = (255, 255, 255)
#: ``golden compare --html`` draws the pictures of this many failing images (the others are
#: listed with their counts).
PICTURED_IMAGES = 50

_STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 70em;
       padding: 0 1em; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; border-top: 1px solid #ccc;
                              padding-top: .6em; }
code, td.name { font-family: ui-monospace, monospace; font-size: .92em; }
table { border-collapse: collapse; margin: .4em 0 1em; }
td, th { border: 1px solid #ccc; padding: .15em .5em; text-align: left; vertical-align: top; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
figure { margin: 1em 0 2em; } figcaption { margin-bottom: .4em; }
img.map { image-rendering: pixelated; max-width: 100%; height: auto;
          border: 1px solid #999; }
.swatch { display: inline-block; width: .9em; height: .9em; border: 1px solid #777;
          vertical-align: -.1em; }
.fail { color: #a40000; font-weight: 600; } .pass { color: #1b6e20; font-weight: 600; }
ul.lines li { font-family: ui-monospace, monospace; font-size: .9em; }
"""


def _ring(shape) -> np.ndarray:
    ring = np.zeros(shape, bool)
    w = BORDER_WIDTH
    ring[:w], ring[-w:], ring[:, :w], ring[:, -w:] = True, True, True, True
    return ring


def array_picture(name: str, golden, value, tolerance: dict) -> dict | None:
    """The picture of one failing 2-D array, or None when it has none (not 2-D, another shape
    or dtype, not finite).

    Parameters
    ----------
    name : str
    golden, value : ndarray, (M, N)
        The reference's array and the candidate's.
    tolerance : dict
        The array's tolerance (``rule``; ``rtol`` of the relmax rule).

    Returns
    -------
    dict
        ``name``, ``shape``, ``binary``, ``labels`` (what the two colours are),
        ``counts`` ({label: {"border": int, "interior": int}}) and ``png`` (base64).

    Notes
    -----
    1. Elements differ where |value - golden| exceeds the tolerance (0 for exact arrays; the
       relmax rule's ``rtol`` times max|golden| otherwise).
    2. The first colour marks differing elements where the candidate is higher (a binary
       map: marks a pixel the reference does not), the second where it is lower.
    3. Each colour is counted on the border ring and inside it.
    """
    golden, value = np.asarray(golden), np.asarray(value)
    if golden.ndim != 2 or value.shape != golden.shape or value.dtype != golden.dtype:
        return None
    g, v = golden.astype(np.float64), value.astype(np.float64)
    if not (np.isfinite(g).all() and np.isfinite(v).all()):
        return None
    binary = golden.dtype.kind in "bu" and set(np.unique(golden)).issubset({0, 1}) and \
        set(np.unique(value)).issubset({0, 1})
    scale = (float(np.abs(g).max()) if g.size else 0.0) or 1.0
    allowed = 0.0 if tolerance["rule"] == "exact" else tolerance["rtol"] * scale
    beyond = np.abs(v - g) > allowed
    higher, lower = beyond & (v > g), beyond & (v < g)
    ring = _ring(golden.shape)
    labels = (("candidate only", "reference only") if binary else
              ("candidate higher", "candidate lower"))
    counts = {label: {"border": int(np.count_nonzero(mask & ring)),
                      "interior": int(np.count_nonzero(mask & ~ring))}
              for label, mask in zip(labels, (higher, lower))}
    rgb = np.empty((*golden.shape, 3), np.uint8)
    rgb[...] = BACKGROUND
    rgb[ring] = RING_COLOUR
    if binary:
        rgb[(g > 0) & (v > 0)] = BOTH_COLOUR
    else:
        span = float(g.max() - g.min()) or 1.0
        shade = (255 - 45 * (g - g.min()) / span).astype(np.uint8)
        rgb[~ring] = shade[~ring, None]
    rgb[higher], rgb[lower] = CANDIDATE_COLOUR, REFERENCE_COLOUR
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="PNG")
    return {"name": name, "shape": list(golden.shape), "binary": bool(binary),
            "labels": list(labels), "counts": counts,
            "png": base64.b64encode(buffer.getvalue()).decode("ascii")}


def _pictured(rows, entries: dict) -> list:
    return [r for r in rows if r.status == "fail" and r.count and r.name in entries
            and entries[r.name].get("storage", "full") == "full"
            and len(entries[r.name]["shape"]) == 2]


def row_pictures(rows, entries: dict, stored, values) -> list[dict]:
    """The pictures (:func:`array_picture`) of the failing 2-D arrays among ``rows``, whole
    in ``stored`` (the reference) and ``values`` (the candidate), in pipeline order."""
    out = []
    for row in _pictured(rows, entries):
        if row.name in stored and row.name in values:
            picture = array_picture(row.name, stored[row.name], values[row.name],
                                    entries[row.name]["tolerance"])
            if picture is not None:
                out.append(picture)
    return out


def check_pictures(report) -> list[dict]:
    """The pictures of a :class:`~refseg.golden.check.CheckReport`'s failing 2-D arrays,
    read again from its bundle and candidate file (only those arrays); none for a candidate
    given in memory."""
    from refseg.golden.schema import load_manifest

    if not isinstance(report.candidate, Path):
        return []
    entries = load_manifest(Path(report.bundle) / MANIFEST)["arrays"]
    rows = _pictured(report.rows, entries)
    if not rows:
        return []
    with np.load(Path(report.bundle) / ARRAYS, allow_pickle=False) as stored, \
            np.load(report.candidate, allow_pickle=False) as values:
        names = [r.name for r in rows]
        return row_pictures(rows, entries,
                            {n: stored[n] for n in names if n in stored.files},
                            {n: values[n] for n in names if n in values.files})


# -- the page ------------------------------------------------------------------------------------
def _e(text) -> str:
    # a file name that is not UTF-8 (surrogate escapes) is shown as its escapes
    return html.escape(str(text).encode("utf-8", "backslashreplace").decode("utf-8"),
                       quote=True)


def _figure(picture: dict, reason: str) -> str:
    rows, cols = picture["shape"]
    scale = max(1, min(8, 900 // max(cols, 1)))
    cells = []
    for label, colour in zip(picture["labels"], (CANDIDATE_COLOUR, REFERENCE_COLOUR)):
        c = picture["counts"][label]
        cells.append(f'<tr><td><span class="swatch" style="background:rgb{colour}"></span> '
                     f'{_e(label)}</td><td class="n">{c["border"]}</td>'
                     f'<td class="n">{c["interior"]}</td>'
                     f'<td class="n">{c["border"] + c["interior"]}</td></tr>')
    both = ('<span class="swatch" style="background:rgb{}"></span> both mark it; '
            .format(BOTH_COLOUR) if picture["binary"] else "the reference, faintly; ")
    return (f'<figure id="{_e(picture["name"])}"><figcaption><code>{_e(picture["name"])}'
            f'</code> ({rows}&times;{cols}): {_e(reason)}</figcaption>'
            f'<img class="map" alt="{_e(picture["name"])}: where candidate and reference '
            f'differ" width="{cols * scale}" height="{rows * scale}" '
            f'src="data:image/png;base64,{picture["png"]}">'
            f'<p>{both}<span class="swatch" style="background:rgb{RING_COLOUR}"></span> '
            f'the border ring ({BORDER_WIDTH} pixels)</p>'
            '<table><tr><th></th><th>border</th><th>interior</th><th>all</th></tr>'
            + "".join(cells) + "</table></figure>")


def _table(rows) -> str:
    body = "".join(f'<tr><td class="name">{_e(r["name"])}</td><td>{_e(r["status"])}</td>'
                   f'<td>{_e(r["reason"])}</td></tr>' for r in rows)
    return ("<table><tr><th>array</th><th>status</th><th>difference</th></tr>" + body
            + "</table>") if rows else ""


def _lines(lines) -> str:
    return ('<ul class="lines">' + "".join(f"<li>{_e(line)}</li>" for line in lines)
            + "</ul>") if lines else ""


def _page(title: str, verdict: bool, head: list[str], body: list[str]) -> str:
    word = '<span class="pass">PASS</span>' if verdict else '<span class="fail">FAIL</span>'
    legend = (f'<p><span class="swatch" style="background:rgb{CANDIDATE_COLOUR}"></span> '
              'candidate only (or higher) &nbsp; <span class="swatch" style="background:rgb'
              f'{REFERENCE_COLOUR}"></span> reference only (or lower)</p>')
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>"
            f"<h1>{_e(title)}: {word}</h1>" + "".join(f"<p>{_e(h)}</p>" for h in head)
            + legend + "".join(body) + "</body></html>\n")


def check_page(report, pictures: list[dict], diagnosis: list[str], extra: list[str]) -> str:
    """The page of a check: the verdict, the accepted differences and diagnosis lines
    (``diagnosis``, ``extra``), then per group with a failure its failing rows and the
    pictures of its 2-D arrays."""
    from refseg.golden.accepted import PASSING

    by_name = {p["name"]: p for p in pictures}
    groups: dict[str, list] = {}
    for r in report.rows:
        groups.setdefault(r.group, []).append(r)
    body = [_lines([*extra, *diagnosis])]
    for group, rows in groups.items():
        bad = [r for r in rows if r.status not in PASSING
               and not (r.status == "extra" and report.allow_extra)]
        if not bad:
            continue
        body.append(f'<section id="{_e(group)}"><h2>{_e(group)}: {len(bad)} of {len(rows)} '
                    "arrays fail</h2>")
        body.append(_table([{"name": r.name, "status": r.status, "reason": r.reason
                             + ("  (root cause)" if r.root_cause else "")} for r in bad]))
        body += [_figure(by_name[r.name], r.reason) for r in bad if r.name in by_name]
        body.append("</section>")
    checked = [r for r in report.rows if r.status != "extra"]
    head = [f"bundle {report.bundle}, candidate {report.candidate}",
            f"{len(checked)} arrays checked: "
            f"{sum(r.status == 'pass' for r in checked)} passed, "
            f"{sum(r.status == 'accepted' for r in checked)} accepted, "
            f"{sum(r.status not in PASSING for r in checked)} failed or missing; "
            f"{len(pictures)} failing 2-D arrays pictured"]
    return _page("refseg golden check", report.passed, head, body)


def compare_page(summary: dict, results: list, extra: list[str]) -> str:
    """The page of a folder comparison: the verdict and counts, then per image not passing
    its failing rows, diagnosis and pictures (drawn for the first :data:`PICTURED_IMAGES`
    failing images)."""
    body = [_lines(extra)]
    for r in results:
        if r["status"] == "pass" and not r.get("accepted"):
            continue
        bad = [row for row in r.get("rows", ()) if row["status"] not in ("pass", "accepted")]
        body.append(f'<section id="{_e(r["image"])}"><h2>{_e(r["image"])}: {_e(r["status"])}'
                    f' ({r["passed"]} passed, {r["failed"]} failed, {r["accepted"]} accepted'
                    f" of {r['checked']} arrays)</h2>")
        if r["error"]:
            body.append(f"<p>{_e(r['error'])}</p>")
        if r["status"] == "fail":
            found = ", ".join(r["diagnosis"]) or "no known reading matches"
            body.append(f"<p>diagnosis: {_e(found)}</p>")
        body.append(_table(bad))
        reasons = {row["name"]: row["reason"] for row in bad}
        body += [_figure(p, reasons.get(p["name"], "")) for p in r.get("pictures", ())]
        body.append("</section>")
    pictured = sum(bool(r.get("pictures")) for r in results)
    failing = sum(r["status"] == "fail" for r in results)
    head = [f"images: {summary['images']}, passed {summary['passed']}, failed "
            f"{summary['failed']}, missing {summary['missing']}, unreadable "
            f"{summary['errors']}",
            f"pictures drawn for {pictured} of {failing} failing images"
            + (f" (the first {PICTURED_IMAGES})" if failing > PICTURED_IMAGES else "")]
    return _page("refseg golden compare", summary["passed"] == summary["images"], head, body)


def keep_pictures(results):
    """The results, the pictures of all but the first :data:`PICTURED_IMAGES` images with
    pictures dropped as they come (memory stays bounded)."""
    kept = 0
    for r in results:
        if r.get("pictures"):
            if kept >= PICTURED_IMAGES:
                r = {**r, "pictures": []}
            else:
                kept += 1
        yield r
