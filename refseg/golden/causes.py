"""The root causes of a check: which failing arrays follow which (one home for
:func:`link_causes`, shared by :mod:`refseg.golden.check` and :mod:`refseg.golden.accepted`)."""
from __future__ import annotations

INFRASTRUCTURE = "golden files: the root causes of a check's failures"


def link_causes(rows: list, entries: dict) -> None:
    """Set each failing row's ``follows``: the root causes among the failing arrays it is
    computed from (transitively); a failure none of whose sources fails is a root cause."""
    status = {r.name: r for r in rows}
    roots: dict[str, list] = {}
    for r in rows:
        if r.status != "fail":
            continue
        found = []
        for source in entries[r.name]["computed_from"]:
            upstream = status.get(source)
            if upstream is not None and upstream.status == "fail":
                found += roots.get(source) or [source]
        r.follows = list(dict.fromkeys(found))
        roots[r.name] = r.follows
