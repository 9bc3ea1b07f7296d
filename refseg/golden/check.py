"""Checking a candidate against a golden bundle, array by array, reported in pipeline order.

A candidate is an ``.npz`` whose keys are the bundle's array names
(``np.savez("candidate.npz", **{"claim1/coffee/gray": gray, ...})``); for arrays stored as
summaries the candidate still supplies the whole array, and the check compares it at the
stored slices and sample positions and recomputes the statistics and block sums.

Failures are listed per image (``claim1/<image>``), for the network (``net``) and per op
(``ops/<op>``), in pipeline order: the first failing step of each comes first and is marked
the root cause; a failure downstream of another names it (the manifest's ``computed_from``).
A candidate key that names no array of the bundle fails the check (``allow_extra`` relaxes
that) and is reported with the name it most probably meant.
"""
from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from refseg import publish
from refseg.errors import InputError
from refseg.golden.accepted import PASSING, accepted_lines, apply_acceptances, unused_entries
from refseg.golden.causes import link_causes
from refseg.golden.diagnosis import diagnosis_lines, explain
from refseg.golden.rounding import apply_rounding
from refseg.golden.format import (PARTS, array_sha256, block_sums, chosen_parts, part_of,
                                  read_bundle, read_npz, summary_statistics)

INFRASTRUCTURE = "golden files: checking a candidate"

#: How many positions of a failing array a row lists.
POSITIONS_SHOWN = 3
#: What a report names as the candidate when its arrays were given in memory.
IN_MEMORY = "<arrays in memory>"


@dataclass
class CheckRow:
    """The comparison of one array: status ``pass``/``fail``/``missing``/``extra``, the reason
    of a failure, the largest absolute and relative (to the tolerance's scale) errors, the first
    position beyond the tolerance (or, for a pass, the first that differs at all), how many
    elements are beyond it and the first of them, whether the candidate is bit-identical to
    refseg's array, and the root cause(s) a failure follows (empty: it is one itself)."""

    name: str
    status: str
    reason: str = ""
    max_abs: float | None = None
    max_rel: float | None = None
    position: tuple | None = None
    identical: bool = False
    count: int | None = None
    positions: list = field(default_factory=list)
    follows: list = field(default_factory=list)
    #: a pass by the rounding rule (refseg.golden.rounding): the rounding-level pixels that
    #: differ from refseg's map, or -1 for an array that agrees with the values recomputed
    #: from the candidate's own rounding-level maps; 0 otherwise
    rounding: int = 0

    @property
    def part(self) -> str:
        return part_of(self.name)

    @property
    def group(self) -> str:
        """``claim1/<image>``, ``net`` or ``ops/<op>``: the unit whose first failure is its
        root cause."""
        if self.status == "extra":
            return "extra"
        head, *rest = self.name.split("/")
        if head in ("input", "claim1"):
            return f"claim1/{rest[0]}" if rest else "claim1"
        if head == "ops" and rest:
            return f"ops/{rest[0]}"
        return head

    @property
    def root_cause(self) -> bool:
        return self.status == "fail" and not self.follows

    def as_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "reason": self.reason,
                "max_abs": self.max_abs, "max_rel": self.max_rel,
                "position": None if self.position is None else list(self.position),
                "identical": self.identical, "count": self.count,
                "positions": [list(p) for p in self.positions], "part": self.part,
                "group": self.group, "root_cause": self.root_cause,
                "follows": list(self.follows), "rounding": self.rounding}


@dataclass
class CheckReport:
    """Every row of a check (manifest order, then the candidate keys the manifest does not
    name), the parts checked, and the bundle's array count per part."""

    bundle: Path
    #: the candidate file, or ``"<arrays in memory>"`` for a candidate given as a mapping
    candidate: Path | str
    rows: list
    unexpected: list
    parts: tuple = PARTS
    allow_extra: bool = False
    sizes: dict = field(default_factory=dict)
    diagnosis: list = field(default_factory=list)
    #: the arrays an accept file accepts, and its entries that accept none
    #: (:mod:`refseg.golden.accepted`)
    accepted: list = field(default_factory=list)
    accept_unused: list = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.status in PASSING or (r.status == "extra" and self.allow_extra)
                   for r in self.rows)

    def part_summary(self, part: str) -> dict:
        rows = [r for r in self.rows if r.part == part and r.status != "extra"]
        return {"checked": len(rows), "passed": sum(r.status == "pass" for r in rows),
                "identical": sum(r.identical for r in rows),
                "accepted": sum(r.status == "accepted" for r in rows),
                "failed": sum(r.status == "fail" for r in rows),
                "missing": sum(r.status == "missing" for r in rows),
                "root_causes": [r.name for r in rows if r.root_cause]}

    def as_dict(self) -> dict:
        return {"bundle": str(self.bundle), "candidate": str(self.candidate),
                "passed": self.passed, "checked": sum(r.status != "extra" for r in self.rows),
                "failed": sum(r.status not in (*PASSING, "extra") for r in self.rows),
                "parts": {p: self.part_summary(p) for p in self.parts},
                "unexpected": self.unexpected, "allow_extra": self.allow_extra,
                "diagnosis": self.diagnosis, "accepted": self.accepted,
                "accept_unused": self.accept_unused, "rows": [r.as_dict() for r in self.rows]}

    def write_json(self, path) -> None:
        """Write :meth:`as_dict` as JSON, atomically."""
        publish.write_json(path, self.as_dict())

    def text(self, verbose: bool = False) -> str:
        """Failures by group in pipeline order (each group's root causes marked), the keys
        that name no array, a summary line per part and a total; ``verbose`` lists the
        passing rows too."""
        lines = []
        groups: dict[str, list] = {}
        for r in self.rows:
            if r.status != "extra":
                groups.setdefault(r.group, []).append(r)
        width = max([len(r.name) for r in self.rows] + [5])
        for group, rows in groups.items():
            bad = [r for r in rows if r.status not in PASSING]
            if not bad and not verbose:
                continue
            roots = [r.name for r in rows if r.root_cause]
            head = f"{group}: {len(bad)} of {len(rows)} arrays fail"
            if roots:
                head += f"; root cause{'s' * (len(roots) > 1)}: {', '.join(roots)}"
            missing = [r for r in bad if r.status == "missing"]
            if not verbose and len(missing) == len(bad) > 1:
                lines.append(f"{group}: {len(bad)} of {len(rows)} output arrays are missing "
                             f"from the candidate ({bad[0].name} ... {bad[-1].name})")
                continue
            lines.append(head if bad else f"{group}: all {len(rows)} arrays pass")
            for r in (rows if verbose else bad):
                lines.append("  " + _row_line(r, width))
        extras = [r for r in self.rows if r.status == "extra"]
        if extras and self.allow_extra:
            lines.append(f"{len(extras)} candidate key{'s' * (len(extras) > 1)} that name no "
                         "array of the bundle, allowed by --allow-extra")
        elif extras:
            lines.append("candidate keys that name no array of the bundle:")
            lines += [f"  {r.status:<7}  {r.name}: {r.reason}" for r in extras]
        lines += diagnosis_lines(self.diagnosis, self.rows)
        lines += accepted_lines(self.accepted, self.accept_unused)
        for part in PARTS:
            if part not in self.parts:
                lines.append(f"part {part}: not checked")
                continue
            s = self.part_summary(part)
            if not s["checked"]:
                lines.append(f"part {part}: no array selected")
                continue
            line = (f"part {part}: {s['checked']} arrays checked, {s['passed']} passed "
                    f"({s['identical']} bit-identical), "
                    + (f"{s['accepted']} accepted, " if s["accepted"] else "")
                    + f"{s['failed']} failed, "
                    f"{s['missing']} missing")
            if s["root_causes"]:
                line += (f"; first failing step{'s' * (len(s['root_causes']) > 1)}: "
                         + ", ".join(s["root_causes"][:6])
                         + (" ..." if len(s["root_causes"]) > 6 else ""))
            present = [p for p in self.parts
                       if self.part_summary(p)["missing"] < self.part_summary(p)["checked"]]
            if s["missing"] == s["checked"] and present:
                line += (f" (the candidate holds no {part} array: --part "
                         f"{' --part '.join(present)} checks "
                         f"{'that part' if len(present) == 1 else 'those parts'} alone)")
            lines.append(line)
        checked = [r for r in self.rows if r.status != "extra"]
        failed = sum(r.status not in PASSING for r in checked)
        accepted = sum(r.status == "accepted" for r in checked)
        lines.append(f"{'PASS' if self.passed else 'FAIL'}: {len(checked)} arrays checked, "
                     f"{len(checked) - failed - accepted} passed, "
                     + (f"{accepted} accepted, " if accepted else "")
                     + f"{failed} failed or missing"
                     + (f", {len(extras)} unexpected keys" if extras and not self.allow_extra
                        else ""))
        return "\n".join(lines)


def _pos(p) -> str:
    return str(list(p)).replace(" ", "")


def _row_line(r: CheckRow, width: int) -> str:
    errors = ("" if r.max_abs is None else
              f"abs {r.max_abs:.3e}  rel {r.max_rel:.3e}  ")
    if r.status == "pass" and r.rounding:
        note = {-1: "agrees with the values recomputed from the candidate's rounding-level "
                    "maps",
                -2: "rounding-level: the manifest's Otsu rule on the candidate's own response "
                    "(a value on a bin edge binned by rounding)"}.get(
            r.rounding, f"{r.rounding} rounding-level pixels differ (decisions within the "
                        "float tolerance of a tie or threshold; the manifest's rule on the "
                        "candidate's own arrays)")
    elif r.status == "pass":
        note = "bit-identical" if r.identical else (
            f"first difference at {_pos(r.position)}" if r.position is not None else "")
    else:
        note = r.reason
        if r.root_cause:
            note += "  <- root cause"
        elif r.follows:
            note += f"  (follows {', '.join(r.follows[:2])}{' ...' * (len(r.follows) > 2)})"
    return f"{r.status:<7}  {r.name:<{width}}  {errors:<32}{note}".rstrip()


def _unravel(flat, shape):
    return [tuple(int(i) for i in np.unravel_index(int(f), shape)) for f in flat]


def _beyond(golden, candidate, allowed):
    """Flat indices where |candidate - golden| > allowed, the differences, in float64."""
    diff = np.abs(candidate.astype(np.float64) - golden.astype(np.float64))
    return np.flatnonzero(diff > allowed), diff


def _what(shape, exact):
    unit = "pixels" if exact and len(shape) == 2 else "elements"
    return unit


#: Elements per block of a whole array's comparison (2 MiB of float64): its float64
#: temporaries are a block's, not the array's (an image's input is 24 bytes per pixel as
#: float64).
BLOCK = 1 << 18


def _blocks(*arrays):
    """(first flat index, the arrays' flat slices) of :data:`BLOCK` elements, C order."""
    flat = [a.reshape(-1) for a in arrays]
    for start in range(0, flat[0].size, BLOCK):
        yield start, [f[start:start + BLOCK] for f in flat]


class _Beyond:
    """The differences of a whole candidate array from refseg's, gathered a block at a time:
    ``count`` elements beyond ``allowed``, the first :data:`POSITIONS_SHOWN` of them (flat
    C-order indices), the largest difference and the first element that differs at all."""

    def __init__(self, golden, candidate, allowed):
        self.count, self.first, self.differs, worst = 0, [], None, []
        # buffers of a block, reused: no whole plane, and no fresh mapping per block
        buffer = np.empty(min(BLOCK, golden.size))
        above = np.empty(min(BLOCK, golden.size), bool)
        for start, (g, c) in _blocks(golden, candidate):
            diff = buffer[:g.size]
            np.abs(np.subtract(c, g, out=diff, dtype=np.float64), out=diff)
            bad = np.flatnonzero(np.greater(diff, allowed, out=above[:g.size]))
            self.count += bad.size
            self.first += [start + int(i) for i in bad[:POSITIONS_SHOWN - len(self.first)]]
            worst.append(diff.max())
            if self.differs is None:
                differ = np.flatnonzero(np.greater(diff, 0, out=above[:g.size]))
                self.differs = start + int(differ[0]) if differ.size else None
        self.max_abs = float(np.max(worst)) if worst else 0.0


def _check_full(name, entry, golden, value, tolerance, identical):
    exact = tolerance["rule"] == "exact"
    scale = (float(np.max([np.abs(g, dtype=np.float64).max() for _, (g,) in _blocks(golden)]))
             if golden.size else 0.0) or 1.0
    allowed = 0.0 if exact else tolerance["rtol"] * scale
    beyond = _Beyond(golden, value, allowed)
    max_abs = beyond.max_abs
    if beyond.count and golden.ndim == 0:
        return CheckRow(name, "fail", f"value {float(value):.12g}, expected "
                        f"{float(golden):.12g}, off by {max_abs:.3g} (allowed {allowed:.3g})",
                        max_abs, max_abs / scale, (), count=1, positions=[()])
    if beyond.count:
        positions = _unravel(beyond.first, golden.shape)
        unit = _what(golden.shape, exact)
        rule = ("differ" if exact else
                f"beyond relmax tolerance {tolerance['rtol']:g} (allowed {allowed:.3g})")
        more = ", ..." if beyond.count > POSITIONS_SHOWN else ""
        return CheckRow(name, "fail", f"{beyond.count} of {golden.size} {unit} {rule}; first "
                        "at " + ", ".join(_pos(p) for p in positions) + more, max_abs,
                        max_abs / scale, positions[0], count=int(beyond.count),
                        positions=positions)
    differs = beyond.differs
    first = (_unravel([differs], golden.shape)[0] if differs is not None and not identical
             else None)
    return CheckRow(name, "pass", "", max_abs, max_abs / scale, first, identical, count=0)


def _check_summary(name, entry, stored, value, tolerance, identical):
    """Slices and sample element by element, then block sums, then the whole-array
    statistics, then (exact tolerance) the SHA-256."""
    exact = tolerance["rule"] == "exact"
    shape = tuple(entry["shape"])
    scale = entry["stats"]["max_abs"] or 1.0
    rtol = tolerance["rtol"]
    allowed = 0.0 if exact else rtol * scale
    flat = value.reshape(-1)
    bad, max_abs, compared = [], 0.0, 0
    for part in entry["slices"]:
        index = tuple(slice(a, b) for a, b in part["index"])
        golden = stored[part["member"]]
        where, diff = _beyond(golden, value[index], allowed)
        compared += golden.size
        max_abs = max(max_abs, float(diff.max()) if diff.size else 0.0)
        offset = [a for a, _ in part["index"]]
        bad += [tuple(o + i for o, i in zip(offset, p)) for p in _unravel(where, golden.shape)]
    index = stored[entry["sample"]["index"]].astype(np.int64)
    where, diff = _beyond(stored[entry["sample"]["value"]], flat[index], allowed)
    compared += index.size
    max_abs = max(max_abs, float(diff.max()) if diff.size else 0.0)
    bad += _unravel(index[where], shape)
    if bad:
        bad = sorted(set(bad))
        rule = ("differ" if exact else
                f"beyond relmax tolerance {rtol:g} (allowed {allowed:.3g})")
        more = ", ..." if len(bad) > POSITIONS_SHOWN else ""
        return CheckRow(name, "fail", f"{len(bad)} of the {compared} stored elements (corner "
                        f"slices and sample) {rule}; first at "
                        + ", ".join(_pos(p) for p in bad[:POSITIONS_SHOWN]) + more,
                        max_abs, max_abs / scale, bad[0], count=len(bad),
                        positions=bad[:POSITIONS_SHOWN])
    length = entry["blocks"]["length"]
    golden_blocks = stored[entry["blocks"]["member"]]
    blocks = block_sums(value, length)
    limit = rtol * np.maximum(golden_blocks[:, 1], scale)
    off = np.abs(blocks - golden_blocks)
    failing = np.flatnonzero((off > limit[:, None]).any(axis=1))
    if failing.size:
        b = int(failing[0])
        k = 0 if off[b, 0] > limit[b] else 1
        label = ("sum", "sum of |x|")[k]
        lo, hi = b * length, min((b + 1) * length, flat.size)
        start = _unravel([lo], shape)[0]
        return CheckRow(name, "fail", f"block {b} of {golden_blocks.shape[0]} (C-order "
                        f"elements {lo}-{hi - 1}, from {_pos(start)}): {label} "
                        f"{blocks[b, k]:.9g}, expected {golden_blocks[b, k]:.9g}, off by "
                        f"{off[b, k]:.3g} (allowed {limit[b]:.3g}); {failing.size} of "
                        f"{golden_blocks.shape[0]} blocks off", float(off[b, k]),
                        float(off[b, k] / max(golden_blocks[b, 1], scale)), start,
                        count=int(failing.size), positions=[start])
    got, want = summary_statistics(value), entry["stats"]
    for key in ("sum", "abs_sum", "l2", "max_abs"):
        base = want["abs_sum" if key == "sum" else key] or 1.0
        delta = abs(got[key] - want[key])
        if delta > rtol * base:
            return CheckRow(name, "fail", f"statistic {key} {got[key]:.9g}, expected "
                            f"{want[key]:.9g}, off by {delta:.3g} (allowed "
                            f"{rtol * base:.3g})", delta, delta / base, None)
    if exact and not identical:
        return CheckRow(name, "fail", "bytes differ from the golden SHA-256 outside the "
                        "stored slices and sample", None, None, None)
    return CheckRow(name, "pass", "", max_abs, max_abs / scale, None, identical, count=0)


def check_array(name, entry, stored, value) -> CheckRow:
    """One candidate array against its manifest entry and the stored arrays: dtype, shape,
    finite values, then the entry's tolerance (whole arrays, or the summary's slices, sample,
    blocks and statistics)."""
    if isinstance(value, Exception):
        return CheckRow(name, "fail", f"unreadable without pickles ({value})")
    shape, dtype = tuple(entry["shape"]), np.dtype(entry["dtype"])
    # the byte order is how a file stores the values, not which values they are
    if value.dtype.newbyteorder("<") != dtype.newbyteorder("<"):
        return CheckRow(name, "fail", f"dtype {value.dtype}, expected {dtype}")
    if value.shape != shape:
        return CheckRow(name, "fail", f"shape {value.shape}, expected {shape}")
    if value.dtype.kind in "fc":
        finite = np.isfinite(value)
        if not finite.all():
            flat = np.flatnonzero(~finite)
            where = _unravel(flat[:1], shape)[0]
            kind = "NaN" if np.isnan(value[where]) else "infinite value"
            return CheckRow(name, "fail", f"{kind} at {list(where)}"
                            + (f" ({flat.size} non-finite)" if flat.size > 1 else ""),
                            position=where, count=int(flat.size), positions=[where])
    identical = array_sha256(value.astype(dtype, copy=False)) == entry["sha256"]
    if entry["storage"] == "full":
        return _check_full(name, entry, stored[name], value, entry["tolerance"], identical)
    return _check_summary(name, entry, stored, value, entry["tolerance"], identical)


def _extra_row(key: str, names) -> CheckRow:
    base = key.split("@", 1)[0]
    guess = difflib.get_close_matches(base, names, n=1, cutoff=0.75)
    if "@" in key and base in names:
        reason = (f"names no array (the candidate gives {base} whole; the bundle's "
                  "@slice/@sample members are not candidate keys)")
    elif guess:
        reason = f"names no array; did you mean {guess[0]}?"
    else:
        reason = "names no array of the bundle"
    return CheckRow(key, "extra", reason)


def check_bundle(folder, candidate, select=None, parts=None,
                 allow_extra: bool = False, accept=()) -> CheckReport:
    """Compare a candidate ``.npz`` with a golden bundle, array by array.

    Parameters
    ----------
    folder : str or Path
        The bundle.
    candidate : str, Path or mapping of str to ndarray
        An ``.npz`` keyed by the manifest's array names, read with ``allow_pickle=False``; or
        those arrays themselves, for an implementation checked in the same process (the
        network part's whole arrays take over 600 MB as a file).
    select : list of str or None
        Shell patterns (``claim1/*``): check only the arrays whose names match one of them.
    parts : list of str or None
        Check only the arrays of these parts (:data:`~refseg.golden.format.PARTS`); None:
        every part.
    allow_extra : bool
        Candidate keys that name no array of the bundle do not fail (and are only counted).
    accept : sequence of Acceptance
        Accepted differences (:func:`refseg.golden.accepted.read_accept_file`): the failing
        arrays they accept get status ``accepted`` and do not fail
        (:func:`~refseg.golden.accepted.apply_acceptances`).

    Returns
    -------
    CheckReport
        One row per checked array, in the manifest's (pipeline) order, then one per
        unexpected key (a key of a part not checked is not one); ``passed`` is False on any
        failure, missing output or (unless ``allow_extra``) unexpected key; ``diagnosis``:
        an entry per root cause (the alternative reading that explains it, or "no known
        reading", with the shape of the difference) and the agreements not claimed
        (:func:`refseg.golden.diagnosis.explain`).

    Notes
    -----
    An array fails on: another dtype or shape, a NaN or infinite value, an element beyond its
    tolerance (the count and the first positions are reported), or, for arrays stored as
    summaries, an element of a corner slice or of the sample beyond it, a block sum or a
    statistic beyond it (reported with its own values), or (exact tolerance) another
    SHA-256. Output arrays missing from the candidate fail as ``missing``; input arrays may be
    left out.
    """
    parts = chosen_parts(parts)
    manifest, stored = read_bundle(folder)
    if isinstance(candidate, Mapping):
        values, candidate = {str(k): np.asarray(v) for k, v in candidate.items()}, IN_MEMORY
    else:
        candidate = Path(candidate)
        values = read_npz(candidate, "candidate")
    entries = manifest["arrays"]
    names = [n for n in entries if part_of(n) in parts
             and (not select or any(fnmatch.fnmatchcase(n, p) for p in select))]
    if select and not names:
        raise InputError(f"--select {' '.join(select)}: matches no array of the manifest"
                         + (f" in part {', '.join(parts)}" if len(parts) < len(PARTS) else ""))
    rows = []
    for name in names:
        entry = entries[name]
        if name not in values:
            if entry["role"] == "output":
                rows.append(CheckRow(name, "missing", "not in the candidate"))
            continue
        rows.append(check_array(name, entry, stored, values[name]))
    apply_rounding(rows, entries, stored, values, check_array)
    link_causes(rows, entries)
    flagged = manifest.get("flagged")
    accepted = (apply_acceptances(accept, rows, entries, values,
                                  flagged and flagged["vectors"], stored) if accept else [])
    unused = unused_entries(accept, [d["entry"] for d in accepted], [r.name for r in rows])
    diagnosis = explain(manifest, stored, rows, values)
    # keys of parts not checked are another check's business
    unexpected = sorted(k for k in set(values) - set(entries)
                        if part_of(k) in parts or part_of(k) not in PARTS)
    rows += [_extra_row(key, list(entries)) for key in unexpected]
    sizes = {p: sum(part_of(n) == p for n in entries) for p in PARTS}
    return CheckReport(Path(folder), candidate, rows, unexpected, parts, allow_extra,
                       sizes, diagnosis, accepted, unused)
