"""The diagnosis of a failing candidate: for every root cause of a check, the known reading
that explains it, or ``no known reading``, and the shape of the difference where it has one.

Entries (the ``diagnosis`` list of a check's report), each with a ``verdict``:

- ``matches``: an alternative reading explains a root cause (:func:`~refseg.golden.flagged.
  diagnose`): the candidate agrees with the alternative at the first array the alternative
  changes, and no array upstream of it fails;
- ``not claimed``: the candidate agrees with an alternative at an array downstream of a
  failing one that the alternative leaves as refseg's (``contradicted_by``): shown so that
  the agreement is not mistaken for a cause, never counted as one;
- ``no known reading``: a claim-1 root cause that no alternative explains;
- ``not diagnosed``: a root cause of a part that carries no alternative readings (the
  network, the ops), or of a bundle without flagged vectors.

Every root cause gets exactly one entry of the last three kinds or is named by a ``matches``
entry (its ``array`` or ``also_matches``); each root-cause entry carries ``shape``, the shape of
the difference (:func:`~refseg.golden.shapes.difference_shape`) or None.

References: spec ``readings.md``, ``sensitivity.md``.
"""
from __future__ import annotations

import numpy as np

from refseg.golden.flagged import diagnose
from refseg.golden.format import TOLERANCES
from refseg.golden.shapes import difference_shape

INFRASTRUCTURE = "golden files: the diagnosis of a failing candidate"

#: Verdicts of a diagnosis entry.
VERDICTS = ("matches", "not claimed", "no known reading", "not diagnosed")
#: How many arrays a line lists before "...".
LISTED = 3


def shape_of(row, entry: dict, stored: dict, value) -> dict | None:
    """The shape of a failing array's difference from refseg's, for arrays stored whole."""
    if entry["storage"] != "full" or value is None or isinstance(value, Exception):
        return None
    golden = stored[row.name]
    tolerance = TOLERANCES[entry["tolerance"]["name"]]
    scale = (float(np.abs(golden.astype(np.float64)).max()) if golden.size else 0.0) or 1.0
    allowed = 0.0 if tolerance["rule"] == "exact" else tolerance["rtol"] * scale
    try:
        return difference_shape(golden, np.asarray(value), allowed)
    except (ValueError, TypeError):
        return None


def exact_zero_hint(row, shape: dict | None, stored: dict, value) -> dict | None:
    """The shape of a LoG map that lacks only refseg's pixels of an exact zero response: the
    manifest's rule for a response of exactly 0 between opposite signs is left out (a sign
    change test alone never marks such a pixel). None when that is not what differs."""
    if (shape is None or shape.get("kind") != "subset" or not row.name.endswith("/edges/log")
            or row.follows):
        return None
    response = stored.get(row.name[:-len("edges/log")] + "response/log")
    golden = stored.get(row.name)
    if (response is None or golden is None or value is None or isinstance(value, Exception)
            or response.shape != golden.shape or np.shape(value) != golden.shape):
        return None
    lost = (golden > 0) & (np.asarray(value) == 0)
    if not np.array_equal(lost, (golden > 0) & (response == 0)):
        return None
    missing = int(np.count_nonzero(lost))
    return {**shape, "kind": "exact-zero rule",
            "text": f"refseg's pixels less {missing}, each with a LoG response of exactly 0: "
                    "the rule for an exact 0 between opposite signs (edges/log's params) is "
                    "left out"}


def explain(manifest: dict, stored: dict, rows, values: dict) -> list:
    """The diagnosis entries of a check (see the module's docstring), root causes in
    pipeline order, each followed by the agreements it makes unclaimable."""
    entries = manifest["arrays"]
    flagged = manifest.get("flagged")
    found = (diagnose(flagged["vectors"], flagged["notes"], stored, rows, values, entries,
                      unclaimed=True) if flagged else [])
    explained = set()
    for d in found:
        if d["verdict"] == "matches":
            explained.update([d["array"], *d["also_matches"]])
    order = {name: i for i, name in enumerate(entries)}
    out = []
    for r in rows:
        if not r.root_cause:
            continue
        shape = shape_of(r, entries[r.name], stored, values.get(r.name))
        shape = exact_zero_hint(r, shape, stored, values.get(r.name)) or shape
        if r.name in explained:
            for d in found:
                if d["verdict"] == "matches" and r.name in (d["array"], *d["also_matches"]):
                    d.setdefault("shape", shape)
            continue
        image = r.group.split("/", 1)[1] if r.group.startswith("claim1/") else None
        verdict = "no known reading" if flagged and image else "not diagnosed"
        out.append({"verdict": verdict, "array": r.name, "image": image, "group": r.group,
                    "root_cause": True, "shape": shape})
    out += found
    out.sort(key=lambda d: (d["verdict"] == "not claimed", order[d["array"]]))
    return out


def _listed(names) -> str:
    names = list(names)
    return ", ".join(names[:LISTED]) + (f" (+{len(names) - LISTED} more)"
                                         if len(names) > LISTED else "")


def diagnosis_lines(diagnosis: list, rows=()) -> list[str]:
    """``diagnosis:`` lines: one per match (the arrays downstream where the candidate leaves
    the alternative, if any), one per image whose root causes no known reading matches (with
    the shape of each difference), and one per agreement that is not claimed with what
    contradicts it; ``difference:`` lines for the root causes of parts without readings."""
    lines = []
    for d in diagnosis:
        verdict = d.get("verdict", "matches")
        if verdict == "matches":
            line = (f"diagnosis: {d['array']}: matches {d['reading']} {d['alternative']} "
                    f"({d['does']}; {d['result']}"
                    + (f"; {d['apart']} elements apart, {d['from_golden']} from refseg's"
                       if d["apart"] else "") + ")")
            lines.append(line)
            if d.get("shape"):
                lines.append(f"  {d['array']}: {d['shape']['text']}")
            if d.get("own_sources"):
                lines.append(f"  a cause of its own: {d['alternative']} computes it from "
                             f"{_listed(d['own_sources'])}, which pass"
                             f"{'es' * (len(d['own_sources']) == 1)}, not from the failing "
                             "arrays the pipeline puts above it")
            if d.get("differs_at"):
                lines.append(f"  but the candidate then leaves {d['alternative']} at "
                             f"{_listed(d['differs_at'])}")
    unexplained: dict[str, list] = {}
    for d in diagnosis:
        if d.get("verdict") == "no known reading":
            unexplained.setdefault(d["group"], []).append(d)
    for group, found in unexplained.items():
        lines.append(f"diagnosis: {group}: no known reading matches (root cause "
                     f"{', '.join(d['array'] for d in found)})")
        lines += [f"  {d['array']}: {d['shape']['text']}" for d in found if d["shape"]]
    for d in diagnosis:
        if d.get("verdict") == "not claimed":
            lines.append(f"diagnosis: {d['array']}: agrees with {d['reading']} "
                         f"{d['alternative']} ({d['does']}), not claimed: upstream "
                         f"{_listed(d['contradicted_by'])} fail"
                         f"{'s' * (len(d['contradicted_by']) == 1)}, which "
                         f"{d['alternative']} leaves as refseg's")
    for d in diagnosis:
        if d.get("verdict") == "not diagnosed" and d["shape"]:
            lines.append(f"difference: {d['array']}: {d['shape']['text']}")
    return lines
