"""Accepted differences: a TOML file naming the differences a candidate is allowed to keep.

``golden check --accept FILE`` and ``golden compare --accept FILE`` read a list of entries::

    [[accept]]
    array = "claim1/*/blurred"          # a shell pattern of array names
    reading = "border-replicate"        # the alternative reading accepted ...
    reason = "skimage's gaussian replicates the border"

    [[accept]]
    array = "claim1/coffee/edges/canny"
    max_elements = 12                   # ... or a bound: at most 12 elements beyond the
    max_rel = 1e-6                      # tolerance, and/or a largest error of 1e-6 of the
    reason = "rounding of our int16 gradients"   # array's largest value

A failing array that an entry's pattern names is *accepted* when it is the entry's reading's
array (the flagged vector of that alternative and image, within the array's tolerance) or when
its difference lies within the entry's bound. The arrays computed from an array accepted by
reading are then held against that reading's vectors: one the reading changes is accepted
where the candidate matches the reading's array; one the reading leaves alone keeps refseg's
array as its reference (a flagged vector holds only the arrays an alternative changes, of the
steps :data:`refseg.golden.flagged.STEPS`); the responses, thresholds and statistics, which no
vector holds, are accepted as *not compared* when all their sources pass or are accepted. An
accepted array does not fail the check and is no root cause; an entry that accepts nothing
(the difference no longer occurs, or its pattern names no array checked) is reported.
"""
from __future__ import annotations

import difflib
import fnmatch
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path

from refseg.errors import InputError

INFRASTRUCTURE = "golden files: accepted differences"

#: The keys of an entry; ``array`` and ``reason`` are required, with ``reading`` or a bound.
KEYS = ("array", "reading", "max_elements", "max_rel", "reason")
#: How an array is accepted, as the text says it: its entry names it (by reading or bound);
#: computed from an array accepted by reading, it matches that reading's array; or, so
#: computed, it is an array the flagged vectors do not hold (a response or a threshold,
#: :data:`refseg.golden.flagged.STEPS`), so that nothing can be compared, and each of its
#: sources passes or is accepted.
HOW = {"reading": "", "bound": "", "downstream": "downstream of an array it accepts",
       "uncovered": "downstream of an array it accepts; not compared: the bundle holds no "
                    "vector of this array"}
#: The statuses of a row that does not fail a check.
PASSING = ("pass", "accepted")


@dataclass(frozen=True)
class Acceptance:
    """One entry of an accept file: its number (from 1), the array pattern, the alternative
    accepted (its name, e.g. ``border-replicate``) or the bound (elements beyond the
    tolerance, largest error relative to the array's largest value), and the reason."""

    number: int
    array: str
    reason: str
    reading: str | None = None
    max_elements: int | None = None
    max_rel: float | None = None

    @property
    def what(self) -> str:
        """``reading border-replicate`` or ``at most 12 elements, rel 1e-06``."""
        if self.reading is not None:
            return f"reading {self.reading}"
        bounds = []
        if self.max_elements is not None:
            bounds.append(f"at most {self.max_elements} elements")
        if self.max_rel is not None:
            bounds.append(f"rel at most {self.max_rel:g}")
        return ", ".join(bounds)

    def as_dict(self) -> dict:
        return {"entry": self.number, "array": self.array, "reading": self.reading,
                "max_elements": self.max_elements, "max_rel": self.max_rel,
                "reason": self.reason}


def _alternative(text: str, where: str) -> str:
    """The alternative's name of ``border-replicate`` or ``R-border border-replicate``."""
    from refseg.claim1.alternatives import BY_NAME

    words = text.split()
    name = words[-1] if words else ""
    if name in BY_NAME and (len(words) == 1 or (len(words) == 2
                                                 and words[0] == BY_NAME[name].reading)):
        return name
    guess = difflib.get_close_matches(name, list(BY_NAME), n=1, cutoff=0.6)
    hint = f"; did you mean {guess[0]}?" if guess else " (`refseg audit readings` lists them)"
    raise InputError(f"{where}: reading {text!r} names no alternative reading{hint}")


def _entry(number: int, raw, where: str) -> Acceptance:
    if not isinstance(raw, dict):
        raise InputError(f"{where}: expected a table of {', '.join(KEYS)}")
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise InputError(f"{where}: unknown key {unknown[0]!r} (keys: {', '.join(KEYS)})")
    for key in ("array", "reason"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise InputError(f"{where}: {key!r} must be a non-empty string")
    bound = [k for k in ("max_elements", "max_rel") if k in raw]
    if ("reading" in raw) == bool(bound):
        raise InputError(f"{where}: give either 'reading' or a bound ('max_elements', "
                         "'max_rel'), not both and not neither")
    reading = None
    if "reading" in raw:
        if not isinstance(raw["reading"], str):
            raise InputError(f"{where}: 'reading' must be a string")
        reading = _alternative(raw["reading"], where)
    elements = raw.get("max_elements")
    if elements is not None and (type(elements) is not int or elements < 0):
        raise InputError(f"{where}: 'max_elements' must be a whole number >= 0")
    rel = raw.get("max_rel")
    if rel is not None and (type(rel) not in (int, float) or not math.isfinite(rel)
                            or rel < 0):
        raise InputError(f"{where}: 'max_rel' must be a finite number >= 0")
    return Acceptance(number, raw["array"], raw["reason"].strip(), reading, elements,
                      None if rel is None else float(rel))


def read_accept_file(path) -> tuple[Acceptance, ...]:
    """The entries of an accept file; InputError naming the file, the entry and the problem
    on anything else than a TOML file of ``[[accept]]`` tables as the module shows."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no such file (accept file)") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a folder; expected a TOML accept file") from None
    except OSError as exc:
        raise InputError(f"{path}: unreadable accept file ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text (accept file)") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not TOML ({exc})") from None
    unknown = sorted(set(data) - {"accept"})
    if unknown:
        raise InputError(f"{path}: unknown table {unknown[0]!r}; entries are [[accept]] "
                         "tables")
    entries = data.get("accept")
    if not isinstance(entries, list) or not entries:
        raise InputError(f"{path}: no [[accept]] entries")
    return tuple(_entry(i, raw, f"{path}: accept entry {i}")
                 for i, raw in enumerate(entries, 1))


def _image(name: str) -> str | None:
    head, *rest = name.split("/")
    return rest[0] if head in ("claim1", "input") and rest else None


def _within(acceptance: Acceptance, row) -> bool:
    if acceptance.max_elements is not None and (row.count is None
                                                or row.count > acceptance.max_elements):
        return False
    if acceptance.max_rel is not None and (row.max_rel is None
                                           or row.max_rel > acceptance.max_rel):
        return False
    return True


def apply_acceptances(acceptances, rows, entries: dict, values: dict, vectors, members) -> list:
    """Mark the failing rows an accept file accepts, and link the root causes anew.

    Parameters
    ----------
    acceptances : sequence of Acceptance
    rows : list of CheckRow
        A check's rows, in pipeline order, their causes linked; changed in place: an accepted
        row gets status ``accepted`` and its reason says by which entry.
    entries : dict
        The manifest entries of the rows (tolerance, ``computed_from``).
    values : dict of str to ndarray
        The candidate's arrays.
    vectors : list of dict or None
        Flagged vectors (as :func:`refseg.golden.flagged.diagnose` takes them); None: no
        reading can be matched (a bound still can).
    members : dict of str to ndarray
        The arrays the vectors name.

    Returns
    -------
    list of dict
        Per accepted array: ``array``, ``entry`` (its number), ``how`` (a key of
        :data:`HOW`), ``accepted`` (what) and ``reason``.

    Notes
    -----
    1. In pipeline order, each failing row is held against each entry whose pattern names
       it: by reading, the candidate's array must match the alternative's array of its image
       within the array's tolerance (:func:`refseg.golden.flagged.vector_matches`, 0 elements
       apart); by bound, its count and relative error must lie within the bound.
    2. An array accepted by reading carries the reading to the arrays computed from it; a
       failing array carrying it is accepted where the reading changes it and the candidate
       matches the reading's array. A failing array the flagged vectors never hold (not one
       of :data:`~refseg.golden.flagged.STEPS`: a response, a threshold, a statistic) that
       carries it, none of its sources failing, is accepted as not compared.
    3. Causes are linked again with the accepted arrays no longer failing.
    """
    from refseg.golden.causes import link_causes
    from refseg.golden.flagged import vector_matches

    from refseg.golden.flagged import STEPS

    by_vector = {(v["flags"][1], v["image"]): v for v in (vectors or ())}
    status = {r.name: r.status for r in rows}

    def covered(name) -> bool:
        return name.split("/", 2)[-1] in STEPS
    carried: dict[str, list] = {}
    found = []

    def follows_reading(row, acceptance) -> bool:
        vector = by_vector.get((acceptance.reading, _image(row.name)))
        if vector is None or row.name not in vector["arrays"]:
            return False
        if "apart" in vector:  # matched as the vector was computed (golden compare)
            return vector["apart"][row.name] == 0
        kind = entries[row.name]["tolerance"]["name"]
        return vector_matches(vector["arrays"][row.name], members, values[row.name], kind,
                              row.count) == 0

    for row in rows:
        inherited = list(dict.fromkeys(a for source in entries.get(row.name, {}).get(
            "computed_from", ()) for a in carried.get(source, ())))
        if row.status == "pass" and row.name in values:
            # an array an entry names that the reading leaves as refseg's (no vector array
            # of its image) agrees with the reading: what it feeds is held to the reading too
            inherited += [a for a in acceptances
                          if a.reading is not None and a not in inherited
                          and fnmatch.fnmatchcase(row.name, a.array)
                          and (a.reading, _image(row.name)) in by_vector
                          and row.name not in by_vector[a.reading, _image(row.name)]["arrays"]]
        carried[row.name] = inherited
        if row.status != "fail":
            continue
        how = None
        for acceptance in acceptances:
            if not fnmatch.fnmatchcase(row.name, acceptance.array):
                continue
            if acceptance.reading is None and _within(acceptance, row):
                how = "bound"
            elif acceptance.reading is not None and follows_reading(row, acceptance):
                how = "reading"
                carried[row.name] = list(dict.fromkeys([*inherited, acceptance]))
            if how:
                break
        else:
            acceptance = next((a for a in inherited if follows_reading(row, a)), None)
            how = "downstream" if acceptance is not None else None
            if how is None and inherited and not covered(row.name) and not any(
                    status.get(s) in ("fail", "missing")
                    for s in entries.get(row.name, {}).get("computed_from", ())):
                acceptance, how = inherited[0], "uncovered"
        if how is None:
            continue
        row.status = status[row.name] = "accepted"
        row.reason += f"; accepted by entry {acceptance.number} ({acceptance.what}" + (
            HOW[how] and f", {HOW[how]}") + ")"
        found.append({"array": row.name, "entry": acceptance.number, "how": how,
                      "accepted": acceptance.what, "reason": acceptance.reason})
    for row in rows:
        row.follows = []
    link_causes(rows, entries)
    return found


def unused_entries(acceptances, used, names) -> list[dict]:
    """The entries (as dicts, with ``what`` and ``why``) whose numbers are not among
    ``used``: a difference that no longer occurs, or a pattern naming none of the arrays
    ``names`` checked."""
    used = set(used)
    out = []
    for a in acceptances:
        if a.number in used:
            continue
        named = any(fnmatch.fnmatchcase(n, a.array) for n in names)
        out.append({**a.as_dict(), "what": a.what,
                    "why": ("no longer occurs: the candidate has no such difference"
                            if named else "names no array checked")})
    return out


def accepted_lines(accepted: list, unused: list) -> list[str]:
    """The text's lines on accepted differences: per entry that accepted arrays, how many
    (each is listed by ``--verbose``, ``--report`` and ``--junit``), then one per entry that
    accepted nothing."""
    entries: dict[int, list] = {}
    for d in accepted:
        entries.setdefault(d["entry"], []).append(d)
    lines = []
    for number, found in entries.items():
        downstream = sum(d["how"] == "downstream" for d in found)
        uncovered = sum(d["how"] == "uncovered" for d in found)
        names = [d["array"] for d in found]
        notes = ([f"{downstream} downstream of an array it accepts, matching the reading's"]
                 * bool(downstream)
                 + [f"{uncovered} downstream and not compared (no vector of the reading)"]
                 * bool(uncovered))
        lines.append(f"accept entry {number} ({found[0]['accepted']}): {len(found)} "
                     f"array{'s' * (len(found) > 1)} accepted"
                     + (f" ({'; '.join(notes)})" if notes else "")
                     + f", {names[0]}{' ...' * (len(names) > 1)}: {found[0]['reason']}")
    lines += [f"accept entry {u['entry']} ({u['array']}, {u['what']}): {u['why']}"
              for u in unused]
    return lines
