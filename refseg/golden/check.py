"""Checking a candidate against a golden bundle, array by array.

A candidate is an ``.npz`` whose keys are the bundle's array names
(``np.savez("candidate.npz", **{"claim1/coffee/gray": gray, ...})``); for arrays stored as
slices the candidate still supplies the whole array, and the check slices it and recomputes the
statistics.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from refseg import imageio
from refseg.errors import InputError
from refseg.golden.format import array_sha256, read_bundle, read_npz, summary_statistics

INFRASTRUCTURE = "golden files: checking a candidate"

# -- checking a candidate ------------------------------------------------------------------------
@dataclass
class CheckRow:
    """The comparison of one array: status ``pass``/``fail``/``missing``, the reason of a
    failure, the largest absolute and relative (to the tolerance's scale) errors, the first
    position beyond the tolerance (or, for a pass, the first that differs at all), and whether
    the candidate is bit-identical to refseg's array."""

    name: str
    status: str
    reason: str = ""
    max_abs: float | None = None
    max_rel: float | None = None
    position: tuple | None = None
    identical: bool = False

    def as_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "reason": self.reason,
                "max_abs": self.max_abs, "max_rel": self.max_rel,
                "position": None if self.position is None else list(self.position),
                "identical": self.identical}


@dataclass
class CheckReport:
    """Every row of a check, and the candidate keys the manifest does not name."""

    bundle: Path
    candidate: Path
    rows: list
    unexpected: list

    @property
    def passed(self) -> bool:
        return all(r.status == "pass" for r in self.rows)

    def as_dict(self) -> dict:
        return {"bundle": str(self.bundle), "candidate": str(self.candidate),
                "passed": self.passed, "checked": len(self.rows),
                "failed": sum(r.status != "pass" for r in self.rows),
                "unexpected": self.unexpected, "rows": [r.as_dict() for r in self.rows]}

    def write_json(self, path) -> None:
        """Write :meth:`as_dict` as JSON, atomically."""
        imageio.write_json(path, self.as_dict())

    def text(self) -> str:
        width = max([len(r.name) for r in self.rows] + [5])
        lines = [f"{'array':<{width}}  status   max abs err  max rel err  first diff  note"]
        for r in self.rows:
            ma = "" if r.max_abs is None else f"{r.max_abs:.3e}"
            mr = "" if r.max_rel is None else f"{r.max_rel:.3e}"
            pos = "" if r.position is None else str(list(r.position)).replace(" ", "")
            note = r.reason or ("bit-identical" if r.identical else "")
            lines.append(f"{r.name:<{width}}  {r.status:<7}  {ma:>11}  {mr:>11}  {pos:<10}  "
                         f"{note}")
        failed = sum(r.status != "pass" for r in self.rows)
        lines.append(f"{len(self.rows)} arrays checked: {len(self.rows) - failed} passed, "
                     f"{failed} failed or missing" + (
                         f"; {len(self.unexpected)} candidate arrays not in the manifest "
                         f"(ignored): {', '.join(self.unexpected[:5])}"
                         if self.unexpected else ""))
        return "\n".join(lines)


def _first(mask: np.ndarray):
    flat = np.flatnonzero(mask)
    if flat.size == 0:
        return None
    return tuple(int(i) for i in np.unravel_index(flat[0], mask.shape))


def _compare(golden: np.ndarray, candidate: np.ndarray, tolerance: dict, offset=None,
             scale=None):
    """(max_abs, max_rel, first failing position or None, first differing position)."""
    g = golden.astype(np.float64)
    c = candidate.astype(np.float64)
    diff = np.abs(c - g)
    if golden.size == 0:
        return 0.0, 0.0, None, None
    scale = (float(np.abs(g).max()) if scale is None else scale) or 1.0
    max_abs = float(diff.max())
    allowed = 0.0 if tolerance["rule"] == "exact" else tolerance["rtol"] * scale
    bad = _first(diff > allowed)
    differ = _first(diff > 0)
    if offset is not None:
        bad = None if bad is None else tuple(a + o for a, o in zip(bad, offset))
        differ = None if differ is None else tuple(a + o for a, o in zip(differ, offset))
    return max_abs, max_abs / scale, bad, differ


def _check_one(name, entry, stored, value) -> CheckRow:
    if isinstance(value, Exception):
        return CheckRow(name, "fail", f"unreadable without pickles ({value})")
    shape, dtype = tuple(entry["shape"]), np.dtype(entry["dtype"])
    if value.dtype != dtype:
        return CheckRow(name, "fail", f"dtype {value.dtype}, expected {dtype}")
    if value.shape != shape:
        return CheckRow(name, "fail", f"shape {value.shape}, expected {shape}")
    if value.dtype.kind in "fc":
        finite = np.isfinite(value)
        if not finite.all():
            where = _first(~finite)
            kind = "NaN" if np.isnan(value[where]) else "infinite value"
            return CheckRow(name, "fail", f"{kind} at {list(where)}", position=where)
    tolerance = entry["tolerance"]
    identical = array_sha256(value.astype(dtype, copy=False)) == entry["sha256"]
    if entry["storage"] == "full":
        parts = [(stored[name], value, None)]
        scale = None
    else:
        parts, scale = [], entry["stats"]["max_abs"]
        for part in entry["slices"]:
            index = tuple(slice(a, b) for a, b in part["index"])
            parts.append((stored[part["member"]], value[index],
                          tuple(a for a, _ in part["index"])))
    max_abs = max_rel = 0.0
    bad = differ = None
    for golden, candidate, offset in parts:
        a, r, b, d = _compare(golden, candidate, tolerance, offset, scale)
        max_abs, max_rel = max(max_abs, a), max(max_rel, r)
        bad = bad or b
        differ = differ or d
    if bad is not None:
        return CheckRow(name, "fail", f"beyond {tolerance['rule']} tolerance "
                        f"{tolerance['rtol']:g} at {list(bad)}", max_abs, max_rel, bad)
    if entry["storage"] == "summary":
        got, want = summary_statistics(value), entry["stats"]
        for key in ("sum", "abs_sum", "l2", "max_abs"):
            scale = want["abs_sum" if key == "sum" else key] or 1.0
            if abs(got[key] - want[key]) > tolerance["rtol"] * scale:
                return CheckRow(name, "fail", f"statistic {key} {got[key]:.9g}, expected "
                                f"{want[key]:.9g} (rtol {tolerance['rtol']:g})",
                                max_abs, max_rel, None)
    return CheckRow(name, "pass", "", max_abs, max_rel, None if identical else differ,
                    identical)


def check_bundle(folder, candidate, select=None) -> CheckReport:
    """Compare a candidate ``.npz`` with a golden bundle, array by array.

    Parameters
    ----------
    folder : str or Path
        The bundle.
    candidate : str or Path
        An ``.npz`` keyed by the manifest's array names; read with ``allow_pickle=False``.
    select : list of str or None
        Shell patterns (``claim1/*``): check only the arrays whose names match one of them.

    Returns
    -------
    CheckReport
        One row per checked array; ``passed`` is False on any failure or missing output.

    Notes
    -----
    An array fails on: another dtype or shape, a NaN or infinite value, an element beyond its
    tolerance (the first such position is reported), or, for arrays stored as slices, a
    statistic beyond it. Output arrays missing from the candidate fail as ``missing``; input
    arrays may be left out.
    """
    manifest, stored = read_bundle(folder)
    values = read_npz(Path(candidate), "candidate")
    entries = manifest["arrays"]
    names = [n for n in entries
             if not select or any(fnmatch.fnmatchcase(n, p) for p in select)]
    if select and not names:
        raise InputError(f"--select {' '.join(select)}: matches no array of the manifest")
    rows = []
    for name in names:
        entry = entries[name]
        if name not in values:
            if entry["role"] == "output":
                rows.append(CheckRow(name, "missing", "not in the candidate"))
            continue
        rows.append(_check_one(name, entry, stored, values[name]))
    unexpected = sorted(set(values) - set(entries))
    return CheckReport(Path(folder), Path(candidate), rows, unexpected)


