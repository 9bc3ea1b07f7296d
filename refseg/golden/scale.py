"""Checks at scale: refseg's claim-1 arrays for a folder of images, one file per image, and
the comparison of a candidate folder with them.

``refseg golden reference IMAGE... --out REF_DIR`` writes ``REF_DIR/<image>.npz`` per image:
``input/<image>`` and every ``claim1/<image>/<step>`` array under the bundle's names, stored
by the bundle's rule, and ``REF_DIR/index.json`` listing them (:mod:`~refseg.golden.references`).
``refseg golden compare REF_DIR CAND_DIR`` compares ``CAND_DIR/<image>.npz`` (same keys) with
each, with the bundle's tolerances and root causes, diagnoses a failing image by the
alternative readings (computed for that image then), reports every image and key on either
side that it could not compare (as failing), and ends with a summary table.

:func:`generate_reference` and :func:`compare_image` are plain functions of paths that return
plain data, so that a process pool, or a Dask cluster (``examples/dask_compare.py``), can run
them; :func:`summarize` and :func:`summary_text` turn their results into the table. Files are
read one at a time per worker and never held after their image is done: memory is bounded
by ``jobs`` images, whatever the folder's size.
"""
from __future__ import annotations

import hashlib
import zipfile
import zlib
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from refseg import memory, publish
from refseg.images import (MAX_NPZ_BYTES, MAX_PIXELS, check_max_pixels, check_npz_members,
                           decode_image, read_bytes, read_image)
from refseg.errors import InputError
from refseg.workers import checked_jobs, worker_pool
from refseg.golden import references
from refseg.golden.accepted import accepted_lines
from refseg.golden.outputs import per_image_lines
from refseg.golden.check import CheckRow, _extra_row, check_array, link_causes
from refseg.golden.flagged import (FLAGGED, changed_steps, diagnose_image, image_vector,
                                    vector_matches, whole_entry)
from refseg.golden.own import image_name
from refseg.golden.rounding import apply_rounding

INFRASTRUCTURE = "golden files: folder-to-folder comparison"

#: File suffixes taken from a folder given as an image argument.
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".gif", ".webp", ".ppm",
                  ".pgm")


def image_files(paths) -> list[Path]:
    """Image files, folders expanded to their image files (by suffix, sorted)."""
    out = []
    for path in map(Path, paths):
        if path.is_dir():
            out += sorted(p for p in path.iterdir()
                          if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
        else:
            out.append(path)
    if not out:
        raise InputError(f"{' '.join(map(str, paths))}: no image files")
    return out


def generate_reference(image, out_dir, max_pixels: int | None = None) -> dict:
    """Read one image file and write ``out_dir/<name>.npz``, its reference file
    (:mod:`refseg.golden.references`), atomically. Returns its line of ``index.json``
    (``image``, ``file``, ``sha256``, where it came from)."""
    path = Path(image)
    limit = MAX_PIXELS if max_pixels is None else max_pixels
    loaded = read_image(path, limit)
    name = image_name(path)
    arrays, meta = references.reference_file(name, loaded,
                                             hashlib.sha256(read_bytes(path)).hexdigest())
    del loaded
    digest = references.write_reference(Path(out_dir) / f"{name}.npz", arrays)
    return {"image": name, **references.index_record(meta, digest)}


class _Candidate(Mapping):
    """A candidate ``.npz`` read one array at a time (none kept), its members' headers
    checked first against ``max_bytes`` together."""

    def __init__(self, path: Path, max_bytes: int):
        if not path.is_file():
            raise InputError(f"{path}: no such file (candidate)")
        with open(path, "rb") as f:
            if f.read(4) != b"PK\x03\x04":
                raise InputError(f"{path}: not an .npz archive (candidate)")
        check_npz_members(path, max_bytes, objects_ok=True)
        self.path = path
        self._supplies: dict[str, bool] = {}
        try:
            self._npz = np.load(path, allow_pickle=False)
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
            raise InputError(f"{path}: not a readable .npz archive (candidate: {exc})") \
                from None

    def __getitem__(self, key):
        if key not in self._npz.files:
            raise KeyError(key)
        try:
            return self._npz[key]
        except ValueError as exc:
            return exc  # an object array: reported as its row
        except (OSError, zipfile.BadZipFile, EOFError, zlib.error) as exc:
            raise InputError(f"{self.path}: member {key!r} is not readable ({exc})") from None

    def supplies(self, key) -> bool:
        """Whether the file holds ``key`` as a readable array (read once, not kept)."""
        if key not in self._supplies:
            self._supplies[key] = key in self._npz.files and not isinstance(self[key],
                                                                               Exception)
        return self._supplies[key]

    def __iter__(self):
        return iter(self._npz.files)

    def __len__(self):
        return len(self._npz.files)

    def close(self):
        self._npz.close()


def _step(name: str) -> str:
    """``input`` or the claim-1 step of an array name (``gray``, ``edges/canny`` ...)."""
    return "input" if name.startswith("input/") else name.split("/", 2)[-1]


def _result(image: str, status: str, error: str) -> dict:
    """An image's result as :func:`compare_image` returns it, nothing compared yet."""
    return {"image": image, "status": status, "checked": 0, "passed": 0, "failed": 0,
            "accepted": 0, "first_failing": [], "why": "", "missing_steps": [],
            "unexpected": [], "diagnosis": [], "error": error, "rows": [], "accepted_by": [],
            "pictures": []}


def compare_image(reference, candidate, sha256: str | None = None, accept=(),
                  pictures: bool = False) -> dict:
    """Compare one candidate file with one reference file.

    Parameters
    ----------
    reference, candidate : str or Path
    sha256 : str or None
        The reference file's SHA-256 as ``index.json`` records it (None: not checked).
    accept : sequence of Acceptance
        Accepted differences (:mod:`refseg.golden.accepted`).
    pictures : bool
        Also a picture of each failing 2-D array stored whole
        (:func:`refseg.golden.failure_page.array_picture`).

    Returns
    -------
    dict
        ``image``; ``status`` ("pass", "fail", "missing": no candidate file, "error": a
        reference file that cannot be used or an unreadable candidate, with ``error``);
        ``checked`` arrays, ``passed``, ``accepted`` and ``failed`` ones (a failing, missing
        or unexpected array);
        ``first_failing``: the root-cause steps (``input``, ``gray``, ``edges/canny`` ...),
        ``why``: the reason of the first; ``missing_steps``: the steps the candidate lacks;
        ``unexpected``: candidate keys that name no array, each with its reason;
        ``diagnosis``: ``"<reading> <alternative>"`` of each alternative the image matches,
        root cause first; ``rows``: each array's name, status, reason and root causes;
        ``accepted_by``: the numbers of the accept entries used; ``pictures`` when asked.

    Notes
    -----
    The candidate's arrays are read one at a time, so that memory holds the reference file
    (whole arrays only up to the summary threshold), one candidate array and its comparison;
    a failing image's diagnosis holds a few planes of refseg's steps and of one
    alternative's (:func:`refseg.golden.flagged.diagnose_image`).
    """
    # whole-image arrays made and dropped one after the other (the reference file's, refseg's
    # steps beside an alternative's): freed memory goes back at once instead of adding to the
    # next peak
    with memory.return_freed_memory():
        return _compare_files(Path(reference), Path(candidate), sha256, accept, pictures)


def _compare_files(reference: Path, candidate: Path, sha256, accept, pictures) -> dict:
    out = _result(reference.stem, "pass", "")
    try:
        ref = references.read_reference(reference, sha256)
        out["image"] = ref.name
        if not candidate.is_file():
            return {**out, "status": "missing", "error": f"{candidate}: no such file"}
        expected = sum(int(np.prod(e["shape"])) * np.dtype(e["dtype"]).itemsize
                       for e in ref.entries.values())
        values = _Candidate(candidate, max(MAX_NPZ_BYTES, 2 * expected))
    except InputError as exc:
        return {**out, "status": "error", "error": str(exc)}
    try:
        return _compare(out, ref, values, accept, pictures)
    except InputError as exc:
        return {**out, "status": "error", "error": str(exc)}
    finally:
        values.close()


def _compare(out: dict, ref, values, accept, pictures) -> dict:
    from refseg.golden.accepted import PASSING, apply_acceptances
    from refseg.golden.failure_page import row_pictures

    name, entries = ref.name, ref.entries
    rows = []
    for key, entry in entries.items():
        if key in values:
            rows.append(check_array(key, entry, ref.stored, values[key]))
        elif entry["role"] == "output":
            rows.append(CheckRow(key, "missing", "not in the candidate"))
    apply_rounding(rows, entries, ref.stored, values, check_array)
    link_causes(rows, entries)
    rows += [_extra_row(key, list(entries)) for key in sorted(set(values) - set(entries))]
    same_image = not any(r.root_cause and _step(r.name) == "input" for r in rows)
    if accept and same_image and any(r.status == "fail" for r in rows):
        vectors = _accepted_vectors(name, ref.stored[f"input/{name}"], accept, rows, values,
                                    entries)
        used = apply_acceptances(accept, rows, entries, values, vectors, {})
        del vectors
        out["accepted_by"] = sorted({d["entry"] for d in used})
    roots = [r for r in rows if r.root_cause]
    out.update(checked=sum(r.status != "extra" for r in rows),
               passed=sum(r.status == "pass" for r in rows),
               accepted=sum(r.status == "accepted" for r in rows),
               failed=sum(r.status not in PASSING for r in rows),
               first_failing=[_step(r.name) for r in roots],
               why=roots[0].reason if roots else "",
               missing_steps=[_step(r.name) for r in rows if r.status == "missing"],
               unexpected=[f"{r.name}: {r.reason}" for r in rows if r.status == "extra"],
               rows=[{"name": r.name, "status": r.status, "reason": r.reason,
                      "follows": r.follows} for r in rows])
    if pictures:
        out["pictures"] = row_pictures(rows, entries, ref.stored, values)
    if out["failed"]:
        out["status"] = "fail"
    if roots and out["first_failing"][0] != "input":
        # the candidate's image is the reference's: which reading explains the failure. Of
        # the reference file only the input is needed from here on (the rounding masks and
        # summaries are used): the rest is dropped before the alternatives are computed
        rgb = ref.stored[f"input/{name}"]
        ref.stored.clear()
        found = diagnose_image(name, rgb, rows, values, entries)
        out["diagnosis"] = list(dict.fromkeys(f"{d['reading']} {d['alternative']}"
                                              for d in found))
    return out


def _accepted_vectors(name: str, rgb, accept, rows, values, entries) -> list:
    """The flagged vectors of the alternatives ``accept`` names, for one image, with no array
    kept: each array of theirs is matched with the candidate's as it is computed where the
    candidate fails (``apart``: the only arrays ``apply_acceptances`` matches), the others
    named only."""
    wanted = {a.reading for a in accept if a.reading}
    failing = {r.name: r for r in rows if r.status == "fail"}
    vectors = []
    for alt in FLAGGED:
        if alt.name not in wanted:
            continue
        described, apart = {}, {}
        for step, array in changed_steps(rgb, alt.variant):
            key = f"claim1/{name}/{step}"
            described[key] = whole_entry(key, array)
            if key in failing:
                apart[key] = vector_matches(described[key], {key: array}, values[key],
                                            entries[key]["tolerance"]["name"],
                                            failing[key].count)
            del array
        if described:
            vectors.append(image_vector(alt, name, described, apart=apart))
    return vectors


def _run(function, work: list, jobs: int):
    """``function(*item)`` for each item, in order, on at most ``min(jobs, len(work))``
    processes, at most ``2 * jobs`` items in flight."""
    if jobs == 1 or len(work) < 2:
        for item in work:
            yield function(*item)
        return
    with worker_pool(jobs, len(work)) as pool:
        pending = []
        for item in work:
            pending.append(pool.submit(function, *item))
            if len(pending) >= 2 * jobs:
                yield pending.pop(0).result()
        for future in pending:
            yield future.result()


def write_references(images, out, jobs: int | None = None,
                     max_pixels: int | None = None) -> list[str]:
    """``refseg golden reference``: every image read and checked first, then one reference
    file each and the folder's ``index.json`` (listing them beside the images an earlier run
    wrote there), the folder published whole (:func:`refseg.publish.staged_folders`)."""
    files = image_files(images)
    jobs = checked_jobs(jobs)
    limit = MAX_PIXELS if max_pixels is None else check_max_pixels(max_pixels)
    names = {}
    for path in files:
        name = image_name(path)
        if name in names:
            raise InputError(f"{path}: has the same name {name!r} as {names[name]}")
        names[name] = path
        decode_image(read_bytes(path), path, limit)  # readable, not too large
    out = publish.check_output_folder(out)
    with publish.staged_folders(out) as staging:
        done = list(_run(generate_reference, [(p, staging.root, limit) for p in files], jobs))
        references.write_index(staging.root, {r.pop("image"): r for r in done},
                               references.previous_index(staging.out))
    return list(names)


def compare_folders(reference_dir, candidate_dir, jobs: int | None = None, accept=(),
                    pictures: bool = False):
    """Yield, in name order, :func:`compare_image` of every image ``index.json`` lists
    against the candidate file of its name, ``jobs`` processes at a time, and a result for
    every image not compared: a listed reference file that is missing, a reference file the
    index does not list, a candidate file without a reference (status ``unreferenced``).
    ``accept`` and ``pictures`` as :func:`compare_image` takes them."""
    reference_dir, candidate_dir = Path(reference_dir), Path(candidate_dir)
    jobs = checked_jobs(jobs)
    if not reference_dir.is_dir():
        raise InputError(f"{reference_dir}: no such folder")
    if not candidate_dir.is_dir():
        raise InputError(f"{candidate_dir}: no such folder")
    index = references.read_index(reference_dir)
    on_disk = {p.stem for p in reference_dir.glob("*.npz")}
    candidates = {p.stem for p in candidate_dir.glob("*.npz")}
    if not index and not on_disk:
        raise InputError(f"{reference_dir}: no reference files (.npz); write them with "
                         "`refseg golden reference`")
    listed = [n for n in sorted(index) if n in on_disk]
    compared = _run(compare_image, [(reference_dir / f"{n}.npz", candidate_dir / f"{n}.npz",
                                     index[n]["sha256"], accept, pictures)
                                    for n in listed], jobs)
    where = references.INDEX
    for name in sorted(set(index) | on_disk | candidates):
        if name in index and name in on_disk:
            yield next(compared)
        elif name in index:
            yield _result(name, "error", f"{reference_dir / (name + '.npz')}: listed in "
                             f"{where} but missing (deleted?); not compared")
        elif name in on_disk:
            yield _result(name, "error", f"{reference_dir / (name + '.npz')}: not listed "
                             f"in {where} (copied in by hand?); not compared")
        else:
            yield unreferenced(name, candidate_dir, reference_dir)


def unreferenced(name: str, candidate_dir, reference_dir) -> dict:
    """The result of a candidate file ``<name>.npz`` for which ``reference_dir`` holds no
    reference: status ``unreferenced``, nothing compared (it fails the comparison)."""
    return _result(name, "unreferenced", f"{Path(candidate_dir) / (name + '.npz')}: no "
                   f"reference file for image {name!r} in {reference_dir}; not compared")


def summarize(results, accept=()) -> dict:
    """Counts over per-image results: images, by status, first failing steps, diagnoses,
    array counts per image, and the accept entries (``accept``) no image used."""
    from refseg.golden.accepted import unused_entries

    results = list(results)
    status = Counter(r["status"] for r in results)
    steps = Counter(s for r in results for s in r["first_failing"][:1])
    diagnoses = Counter(d for r in results for d in r["diagnosis"])
    unexplained = sum(r["status"] == "fail" and bool(r["first_failing"])
                      and not r["diagnosis"] for r in results)
    return {"images": len(results), "passed": status["pass"], "failed": status["fail"],
            "missing": status["missing"], "errors": status["error"],
            "unreferenced": status["unreferenced"],
            "first_failing_step": dict(steps.most_common()),
            "diagnosis": dict(diagnoses.most_common()), "no_known_reading": unexplained,
            "failing_images": [{k: r[k] for k in ("image", "status", "first_failing", "why",
                                                  "missing_steps", "unexpected", "diagnosis",
                                                  "error")}
                               for r in results if r["status"] != "pass"],
            "per_image": [{k: r.get(k, 0) for k in ("image", "status", "checked", "passed",
                                                    "failed", "accepted")} for r in results],
            "accept_unused": unused_entries(
                accept, [n for r in results for n in r.get("accepted_by", ())],
                [row["name"] for r in results for row in r.get("rows", ())])}


def summary_text(summary: dict, shown: int = 10) -> str:
    """The summary table of a comparison."""
    accepted = sum(r["status"] == "pass" and r["accepted"] > 0
                   for r in summary.get("per_image", ()))
    lines = [f"images: {summary['images']}, passed {summary['passed']}"
             + (f" ({accepted} with accepted differences)" if accepted else "")
             + f", failed {summary['failed']}, missing {summary['missing']}, unreadable "
             f"{summary['errors']}" + (f", without reference {summary['unreferenced']}"
                                       if summary["unreferenced"] else "")]
    width = max([len(k) for k in (*summary["first_failing_step"], *summary["diagnosis"])]
                + [len("no known reading matches")])
    if summary["first_failing_step"]:
        lines += ["", f"{'first failing step':<{width + 2}} images"]
        lines += [f"  {step:<{width}} {count:>6}" for step, count in
                  summary["first_failing_step"].items()]
    if summary["failed"]:
        lines += ["", f"{'diagnosis':<{width + 2}} images"]
        lines += [f"  {d:<{width}} {count:>6}" for d, count in summary["diagnosis"].items()]
        lines.append(f"  {'no known reading matches':<{width}} {summary['no_known_reading']:>6}")
    lines += per_image_lines(summary, shown)
    failing = summary["failing_images"]
    if failing:
        lines += ["", f"failing images (first {min(shown, len(failing))} of {len(failing)}):"]
        for r in failing[:shown]:
            lines.append(f"  {r['image']}: {r['status']}: {_failure_text(r)}")
    lines += accepted_lines([], summary.get("accept_unused", []))
    lines.append("PASS" if summary["passed"] == summary["images"] else "FAIL")
    return "\n".join(lines)


def _failure_text(r: dict) -> str:
    """Why one image did not pass: its error, or its first failing steps (the reason, for a
    candidate image that is not the reference's), the steps missing from the candidate, its
    keys naming no array, and its diagnoses."""
    if r["error"]:
        return r["error"]
    parts = []
    if r["first_failing"]:
        first = ", ".join(r["first_failing"][:2])
        if r["first_failing"][0] == "input":
            first += (f" (the candidate's image is not the one the reference was made from: "
                      f"{r['why']})")
        parts.append(first)
    if r["missing_steps"]:
        steps = r["missing_steps"]
        parts.append(f"missing from the candidate: {', '.join(steps[:4])}"
                     + (f" ... ({len(steps)} steps)" if len(steps) > 4 else ""))
    if r["unexpected"]:
        parts.append(f"{len(r['unexpected'])} key{'s' * (len(r['unexpected']) > 1)} naming "
                     f"no array ({r['unexpected'][0]})")
    if r["diagnosis"]:
        parts.append(", ".join(r["diagnosis"]))
    return "; ".join(parts)
