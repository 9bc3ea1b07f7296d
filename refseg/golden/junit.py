"""JUnit XML of ``golden check --junit`` and ``golden compare --junit``, the test-result file CI
systems read (Jenkins, GitLab, GitHub Actions' reporters, Azure Pipelines).

One ``<testsuite>`` per group of a check (``claim1/<image>``, ``net``, ``ops/<op>``) or per
image of a comparison, one ``<testcase>`` per array in pipeline order. A failing array is a
``<failure>`` whose ``message`` is one line (the difference, the root cause it follows or, for
a root cause, the diagnosis) and whose text gives the whole diagnosis; an array missing from
the candidate fails with ``type="missing"``; an unreadable candidate file of a comparison is an
``<error>``. An accepted difference passes, its acceptance in ``<system-out>``; an accept entry
that accepted nothing is a ``<skipped>`` case of the suite ``accept file``. ``time`` is the
whole run's seconds on ``<testsuites>`` and 0 on each suite and case (arrays are not timed
one by one).
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET

INFRASTRUCTURE = "golden files: JUnit XML for CI"

#: Characters XML 1.0 cannot carry (control characters but tab, newline, carriage return).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _text(value) -> str:
    # a file name that is not UTF-8 (surrogate escapes) is written as its escapes
    text = str(value).encode("utf-8", "backslashreplace").decode("utf-8")
    return _NOT_XML.sub("?", text)


def _one_line(text: str, limit: int = 1000) -> str:
    line = " ".join(_text(text).split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


class _Suites:
    """The tree being built: suites, their cases, the counts kept on each."""

    def __init__(self, name: str, seconds: float, properties: dict):
        self.root = ET.Element("testsuites", name=name)
        self.seconds, self.properties = seconds, properties
        self.suites: list[ET.Element] = []

    def suite(self, name: str) -> ET.Element:
        suite = ET.SubElement(self.root, "testsuite", name=_text(name))
        props = ET.SubElement(suite, "properties")
        for key, value in self.properties.items():
            ET.SubElement(props, "property", name=key, value=_text(value))
        self.suites.append(suite)
        return suite

    @staticmethod
    def case(suite, name: str, classname: str, outcome: str | None = None,
             message: str = "", kind: str = "", detail: str = "", out: str = "") -> None:
        case = ET.SubElement(suite, "testcase", name=_text(name), classname=_text(classname),
                             time="0")
        if outcome is not None:
            attributes = {"message": _one_line(message)}
            if outcome != "skipped":
                attributes["type"] = kind
            element = ET.SubElement(case, outcome, attributes)
            if detail:
                element.text = _text(detail)
        if out:
            ET.SubElement(case, "system-out").text = _text(out)

    def xml(self) -> str:
        totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
        for suite in self.suites:
            cases = suite.findall("testcase")
            counts = {"tests": len(cases),
                      "failures": sum(c.find("failure") is not None for c in cases),
                      "errors": sum(c.find("error") is not None for c in cases),
                      "skipped": sum(c.find("skipped") is not None for c in cases)}
            for key, value in counts.items():
                suite.set(key, str(value))
                totals[key] += value
            suite.set("time", "0")
        for key, value in totals.items():
            self.root.set(key, str(value))
        self.root.set("time", f"{self.seconds:.3f}")
        ET.indent(self.root)
        return ('<?xml version="1.0" encoding="UTF-8"?>\n'
                + ET.tostring(self.root, encoding="unicode") + "\n")


def _unused_suite(suites: _Suites, unused: list) -> None:
    if not unused:
        return
    suite = suites.suite("accept file")
    for u in unused:
        suites.case(suite, f"accept entry {u['entry']}: {u['array']}", "golden.accept",
                    "skipped", f"{u['what']}: {u['why']} ({u['reason']})")


def _classname(group: str) -> str:
    return "golden." + group.replace("/", ".")


def check_junit(report, diagnosis: list[str], seconds: float = 0.0) -> str:
    """The JUnit XML of a :class:`~refseg.golden.check.CheckReport`.

    Parameters
    ----------
    report : CheckReport
    diagnosis : list of str
        The check's diagnosis lines (``diagnosis: <array or group>: ...``); each failing
        array's failure carries those naming it, a root cause those naming its group too.
    seconds : float
        The run's duration, for ``<testsuites time>``.
    """
    suites = _Suites("refseg golden check", seconds,
                     {"bundle": report.bundle, "candidate": report.candidate})
    groups: dict[str, list] = {}
    for r in report.rows:
        groups.setdefault(r.group, []).append(r)
    for group, rows in groups.items():
        suite = suites.suite(group)
        for r in rows:
            if r.status == "pass":
                suites.case(suite, r.name, _classname(group))
            elif r.status == "accepted" or (r.status == "extra" and report.allow_extra):
                suites.case(suite, r.name, _classname(group), out=r.reason
                            or "allowed by --allow-extra")
            else:
                said = [line for line in diagnosis if f" {r.name}:" in line
                        or (r.root_cause and f" {group}:" in line)]
                cause = ("root cause" if r.root_cause else
                         f"follows {', '.join(r.follows)}" if r.follows else "")
                message = "; ".join(p for p in (r.reason, cause, *said[:1]) if p)
                detail = [f"{r.status}: {r.reason}"]
                if r.max_abs is not None:
                    detail.append(f"largest error: abs {r.max_abs:.6g}, rel {r.max_rel:.6g}")
                if r.positions:
                    detail.append("first positions: " + ", ".join(
                        str(list(p)) for p in r.positions))
                detail += [cause] * bool(cause) + said
                suites.case(suite, r.name, _classname(group), "failure", message, r.status,
                            "\n".join(detail))
    _unused_suite(suites, report.accept_unused)
    return suites.xml()


def compare_junit(summary: dict, results: list, seconds: float = 0.0,
                  folders: tuple = ()) -> str:
    """The JUnit XML of a folder comparison: per image (``results`` of
    :func:`refseg.golden.scale.compare_image`) a suite of its arrays; a missing candidate
    file a failing case, an unreadable file an error."""
    reference, candidate = (tuple(map(str, folders)) + ("", ""))[:2]
    suites = _Suites("refseg golden compare", seconds,
                     {"reference": reference, "candidate": candidate})
    for r in results:
        suite = suites.suite(r["image"])
        classname = _classname(f"compare/{r['image']}")
        if r["status"] in ("missing", "error"):
            suites.case(suite, f"{r['image']}.npz", classname,
                        "failure" if r["status"] == "missing" else "error", r["error"],
                        r["status"] if r["status"] == "missing" else "unreadable", r["error"])
            continue
        found = ", ".join(r["diagnosis"]) or "no known reading matches"
        for row in r["rows"]:
            if row["status"] == "pass":
                suites.case(suite, row["name"], classname)
            elif row["status"] == "accepted":
                suites.case(suite, row["name"], classname, out=row["reason"])
            else:
                cause = (f"follows {', '.join(row['follows'])}" if row["follows"] else
                         f"root cause; diagnosis: {found}" if row["status"] == "fail" else "")
                suites.case(suite, row["name"], classname, "failure",
                            "; ".join(p for p in (row["reason"], cause) if p), row["status"],
                            f"{row['status']}: {row['reason']}" + f"\n{cause}" * bool(cause))
    _unused_suite(suites, summary.get("accept_unused", ()))
    return suites.xml()
