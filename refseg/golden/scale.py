"""Checks at scale: refseg's claim-1 arrays for a folder of images, one file per image, and
the comparison of a candidate folder with them.

``refseg golden reference IMAGE... --out REF_DIR`` writes ``REF_DIR/<image>.npz`` per image:
``input/<image>`` and every ``claim1/<image>/<step>`` array under the bundle's names.
``refseg golden compare REF_DIR CAND_DIR`` compares ``CAND_DIR/<image>.npz`` (same keys) with
each, with the bundle's tolerances and root causes, diagnoses a failing image by the
alternative readings (computed for that image then), and ends with a summary table.

:func:`generate_reference` and :func:`compare_image` are plain functions of paths that return
plain data, so that a process pool, or a Dask cluster (``examples/dask_compare.py``), can run
them; :func:`summarize` and :func:`summary_text` turn their results into the table. Files are
read one at a time per worker and never held after their image is done: memory is bounded
by ``jobs`` images, whatever the folder's size.
"""
from __future__ import annotations

import functools
from collections import Counter
from pathlib import Path

import numpy as np

from refseg import publish
from refseg.images import MAX_PIXELS, check_max_pixels, decode_image, read_bytes, read_image
from refseg.errors import InputError
from refseg.workers import checked_jobs, worker_pool
from refseg.golden.check import CheckRow, check_array, link_causes
from refseg.golden.flagged import diagnose, image_vectors
from refseg.golden.format import BundleBuilder, array_sha256, read_npz
from refseg.golden.own import as_rgb, image_name
from refseg.golden.claim1_arrays import add_claim1, add_input
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


def reference_arrays(name: str, rgb: np.ndarray, provenance: dict | None = None):
    """(arrays, entries): ``input/<name>`` and the claim-1 arrays of one image, whole, with
    their manifest entries."""
    bundle = BundleBuilder()
    add_input(bundle, name, rgb, "refseg.images.read_image", provenance or {})
    add_claim1(bundle, name, rgb)
    arrays = {n: bundle.arrays.get(n) for n in bundle.entries}
    # the rounding-level masks of the binary maps (refseg.golden.rounding)
    arrays.update({n: a for n, a in bundle.arrays.items() if n.endswith("@rounding")})
    return arrays, bundle.entries


@functools.lru_cache(maxsize=1)
def _template() -> dict:
    """The claim-1 entries of a small image named ``x``: tolerance, role and sources per
    step (they do not depend on the image)."""
    rgb = (np.arange(8 * 9 * 3) * 37 % 256).astype(np.uint8).reshape(8, 9, 3)
    return reference_arrays("x", rgb)[1]


def _entries_for(name: str, arrays: dict) -> dict:
    """The entries of an image's arrays: the template's, renamed, with the arrays' own shape,
    dtype and SHA-256."""
    def rename(key):
        return f"input/{name}" if key == "input/x" else f"claim1/{name}/" + key.split("/", 2)[2]

    out = {}
    for key, entry in _template().items():
        new = rename(key)
        if new in arrays:
            a = arrays[new]
            out[new] = {**entry, "shape": list(a.shape), "dtype": a.dtype.str,
                        "sha256": array_sha256(a), "storage": "full",
                        "computed_from": [rename(s) for s in entry["computed_from"]]}
            out[new].pop("rounding", None)
            if f"{new}@rounding" in arrays:  # reference files of earlier versions have none
                out[new]["rounding"] = {"member": f"{new}@rounding",
                                        "count": int(arrays[f"{new}@rounding"].sum())}
    return out


def generate_reference(image, out_dir, max_pixels: int | None = None) -> str:
    """Read one image file and write ``out_dir/<name>.npz``: its claim-1 arrays under the
    bundle's names (atomically). Returns the name."""
    path = Path(image)
    limit = MAX_PIXELS if max_pixels is None else max_pixels
    loaded = read_image(path, limit)
    name = image_name(path)
    arrays, _ = reference_arrays(name, np.ascontiguousarray(as_rgb(loaded.pixels)))
    publish.write_npz(Path(out_dir) / f"{name}.npz", compressed=True, **arrays)
    return name


def compare_image(reference, candidate) -> dict:
    """Compare one candidate file with one reference file.

    Returns
    -------
    dict
        ``image``; ``status`` ("pass", "fail", "missing": no candidate file, "error": an
        unreadable file, with ``error``); ``checked`` and ``failed`` array counts;
        ``first_failing``: the root-cause steps (``gray``, ``edges/canny`` ...); ``diagnosis``:
        ``"<reading> <alternative>"`` of each alternative the image matches, root cause first.
    """
    reference, candidate = Path(reference), Path(candidate)
    out = {"image": reference.stem, "status": "pass", "checked": 0, "failed": 0,
           "first_failing": [], "diagnosis": [], "error": ""}
    try:
        stored = read_npz(reference, "reference arrays")
        inputs = [k for k in stored if k.startswith("input/")]
        if len(inputs) != 1 or any(isinstance(v, Exception) for v in stored.values()):
            raise InputError(f"{reference}: not a reference file of `refseg golden reference`")
        name = inputs[0].split("/", 1)[1]
        out["image"] = name
        if not candidate.is_file():
            return {**out, "status": "missing", "error": f"{candidate}: no such file"}
        values = read_npz(candidate, "candidate")
    except InputError as exc:
        return {**out, "status": "error", "error": str(exc)}
    entries = _entries_for(name, stored)
    rows = []
    for key, entry in entries.items():
        if key in values:
            rows.append(check_array(key, entry, stored, values[key]))
        elif entry["role"] == "output":
            rows.append(CheckRow(key, "missing", "not in the candidate"))
    apply_rounding(rows, entries, stored, values)
    link_causes(rows, entries)
    failed = [r for r in rows if r.status != "pass"]
    out.update(checked=len(rows), failed=len(failed),
               first_failing=[r.name.split("/", 2)[2] for r in rows if r.root_cause])
    if failed:
        out["status"] = "fail"
        vectors, notes, members = image_vectors(name, stored[f"input/{name}"])
        found = diagnose(vectors, notes, members, rows, values, entries)
        out["diagnosis"] = list(dict.fromkeys(f"{d['reading']} {d['alternative']}"
                                              for d in found))
    return out


def _run(function, work, jobs: int):
    """``function(*item)`` for each item, in order, at most ``2 * jobs`` in flight."""
    if jobs == 1:
        for item in work:
            yield function(*item)
        return
    with worker_pool(jobs) as pool:
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
    file each, the folder published whole (:func:`refseg.publish.staged_folders`)."""
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
    return done


def compare_folders(reference_dir, candidate_dir, jobs: int | None = None):
    """Yield :func:`compare_image` of every reference file against the candidate file of the
    same name, in name order, ``jobs`` processes at a time."""
    reference_dir, candidate_dir = Path(reference_dir), Path(candidate_dir)
    jobs = checked_jobs(jobs)
    if not reference_dir.is_dir():
        raise InputError(f"{reference_dir}: no such folder")
    if not candidate_dir.is_dir():
        raise InputError(f"{candidate_dir}: no such folder")
    files = sorted(reference_dir.glob("*.npz"))
    if not files:
        raise InputError(f"{reference_dir}: no reference files (.npz); write them with "
                         "`refseg golden reference`")
    yield from _run(compare_image, [(f, candidate_dir / f.name) for f in files], jobs)


def summarize(results) -> dict:
    """Counts over per-image results: images, by status, first failing steps, diagnoses."""
    results = list(results)
    status = Counter(r["status"] for r in results)
    steps = Counter(s for r in results for s in r["first_failing"][:1])
    diagnoses = Counter(d for r in results for d in r["diagnosis"])
    unexplained = sum(r["status"] == "fail" and not r["diagnosis"] for r in results)
    return {"images": len(results), "passed": status["pass"], "failed": status["fail"],
            "missing": status["missing"], "errors": status["error"],
            "first_failing_step": dict(steps.most_common()),
            "diagnosis": dict(diagnoses.most_common()), "no_known_reading": unexplained,
            "failing_images": [{k: r[k] for k in ("image", "status", "first_failing",
                                                  "diagnosis", "error")}
                               for r in results if r["status"] != "pass"]}


def summary_text(summary: dict, shown: int = 10) -> str:
    """The summary table of a comparison."""
    lines = [f"images: {summary['images']}, passed {summary['passed']}, failed "
             f"{summary['failed']}, missing {summary['missing']}, unreadable "
             f"{summary['errors']}"]
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
    failing = summary["failing_images"]
    if failing:
        lines += ["", f"failing images (first {min(shown, len(failing))} of {len(failing)}):"]
        for r in failing[:shown]:
            what = r["error"] or (", ".join(r["first_failing"][:2]) + (
                f"; {', '.join(r['diagnosis'])}" if r["diagnosis"] else ""))
            lines.append(f"  {r['image']}: {r['status']}: {what}")
    lines.append("PASS" if summary["passed"] == summary["images"] else "FAIL")
    return "\n".join(lines)
