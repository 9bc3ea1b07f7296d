"""The files a check or a comparison writes besides its text: ``--report`` (JSON), ``--junit``
(:mod:`refseg.golden.junit`) and ``--html`` (:mod:`refseg.golden.failure_page`).

Every file is checked before the work (:func:`refseg.publish.check_single_output`: not an
input, not another output, not a user's file without ``--force``), built whole in memory, and
only then written, each atomically: a failure while building leaves none of them. Also here:
the table of array counts per image that a comparison's text ends with.
"""
from __future__ import annotations

from pathlib import Path

from refseg import publish
from refseg.errors import InputError

INFRASTRUCTURE = "golden files: the report, JUnit and HTML outputs"


def check_outputs(outputs: dict, inputs, force: bool) -> None:
    """Check the output files ``{option: path or None}`` before any work: each may be
    written, and no two options name the same file."""
    seen: dict[Path, str] = {}
    for option, path in outputs.items():
        if path is None:
            continue
        publish.check_single_output(path, inputs, force, "--force")
        real = Path(path).resolve()
        if real in seen:
            raise InputError(f"{path}: given to both {seen[real]} and {option}; choose "
                             "another file")
        seen[real] = option


def _write(files: dict) -> None:
    for path, (kind, content) in files.items():
        if kind == "json":
            publish.write_json(path, content)
        else:
            publish.write_text(path, content)


def write_check_outputs(report, report_path=None, junit=None, page=None,
                        seconds: float = 0.0) -> None:
    """Write a check's ``--report`` JSON, ``--junit`` XML and ``--html`` page (those not
    None)."""
    from refseg.golden.accepted import accepted_lines
    from refseg.golden.diagnosis import diagnosis_lines

    diagnosis = diagnosis_lines(report.diagnosis, report.rows)
    files = {}
    if report_path is not None:
        files[report_path] = ("json", report.as_dict())
    if junit is not None:
        from refseg.golden.junit import check_junit

        files[junit] = ("text", check_junit(report, diagnosis, seconds))
    if page is not None:
        from refseg.golden.failure_page import check_page, check_pictures

        files[page] = ("text", check_page(report, check_pictures(report), diagnosis,
                                          accepted_lines(report.accepted,
                                                         report.accept_unused)))
    _write(files)


def write_compare_outputs(summary: dict, results: list, folders: tuple, report_path=None,
                          junit=None, page=None, seconds: float = 0.0) -> None:
    """Write a comparison's ``--report`` JSON (the summary), ``--junit`` XML and ``--html``
    page (those not None)."""
    from refseg.golden.accepted import accepted_lines

    files = {}
    if report_path is not None:
        files[report_path] = ("json", summary)
    if junit is not None:
        from refseg.golden.junit import compare_junit

        files[junit] = ("text", compare_junit(summary, results, seconds, folders))
    if page is not None:
        from refseg.golden.failure_page import compare_page

        files[page] = ("text", compare_page(summary, results,
                                            accepted_lines([], summary["accept_unused"])))
    _write(files)


def per_image_lines(summary: dict, shown: int = 10) -> list[str]:
    """The table of array counts per image: the images with a failing or accepted array
    first (at most ``shown`` + 10 rows; the rest are counted)."""
    rows = sorted(summary.get("per_image", ()),
                  key=lambda r: 2 if r["status"] == "pass" and not r["accepted"] else
                  1 if r["status"] == "pass" else 0)
    if not rows:
        return []
    limit = shown + 10
    width = max(len("image"), *(len(r["image"]) for r in rows[:limit]))
    lines = ["", f"{'image':<{width}}  {'status':<7} {'arrays':>6} {'passed':>6} "
                 f"{'failed':>6} {'accepted':>8}"]
    lines += [f"{r['image']:<{width}}  {r['status']:<7} {r['checked']:>6} {r['passed']:>6} "
              f"{r['failed']:>6} {r['accepted']:>8}" for r in rows[:limit]]
    if len(rows) > limit:
        rest = rows[limit:]
        lines.append(f"... {len(rest)} more images ({sum(r['status'] == 'pass' for r in rest)}"
                     " passing); every image's counts are in --report's per_image")
    return lines
