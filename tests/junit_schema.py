"""What CI systems require of a JUnit XML file, written down twice: an XML Schema (the structure
of the Jenkins/Ant JUnit schema that Jenkins, GitLab and the GitHub reporters read, restricted to
the elements and attributes they require) and :func:`junit_problems`, the same rules checked
with ``xml.etree`` plus the counts each suite and the root must agree with."""
from __future__ import annotations

import xml.etree.ElementTree as ET

#: testsuites/testsuite(name, tests, failures, errors, skipped, time)/testcase(name,
#: classname, time)/failure|error(message, type), skipped(message?), system-out/-err.
JUNIT_XSD = """<?xml version="1.0" encoding="UTF-8"?>
<xs:schema xmlns:xs="http://www.w3.org/2001/XMLSchema" elementFormDefault="qualified">
  <xs:simpleType name="count"><xs:restriction base="xs:nonNegativeInteger"/></xs:simpleType>
  <xs:simpleType name="seconds"><xs:restriction base="xs:decimal">
    <xs:minInclusive value="0"/></xs:restriction></xs:simpleType>
  <xs:complexType name="problem"><xs:simpleContent><xs:extension base="xs:string">
    <xs:attribute name="message" type="xs:string" use="required"/>
    <xs:attribute name="type" type="xs:string" use="required"/>
  </xs:extension></xs:simpleContent></xs:complexType>
  <xs:element name="testsuites">
    <xs:complexType>
      <xs:sequence>
        <xs:element ref="testsuite" minOccurs="0" maxOccurs="unbounded"/>
      </xs:sequence>
      <xs:attribute name="name" type="xs:string"/>
      <xs:attribute name="tests" type="count"/>
      <xs:attribute name="failures" type="count"/>
      <xs:attribute name="errors" type="count"/>
      <xs:attribute name="skipped" type="count"/>
      <xs:attribute name="disabled" type="count"/>
      <xs:attribute name="time" type="seconds"/>
    </xs:complexType>
  </xs:element>
  <xs:element name="testsuite">
    <xs:complexType>
      <xs:sequence>
        <xs:element name="properties" minOccurs="0">
          <xs:complexType><xs:sequence>
            <xs:element name="property" minOccurs="0" maxOccurs="unbounded">
              <xs:complexType>
                <xs:attribute name="name" type="xs:string" use="required"/>
                <xs:attribute name="value" type="xs:string" use="required"/>
              </xs:complexType>
            </xs:element>
          </xs:sequence></xs:complexType>
        </xs:element>
        <xs:element ref="testcase" minOccurs="0" maxOccurs="unbounded"/>
        <xs:element name="system-out" type="xs:string" minOccurs="0"/>
        <xs:element name="system-err" type="xs:string" minOccurs="0"/>
      </xs:sequence>
      <xs:attribute name="name" type="xs:string" use="required"/>
      <xs:attribute name="tests" type="count" use="required"/>
      <xs:attribute name="failures" type="count" use="required"/>
      <xs:attribute name="errors" type="count" use="required"/>
      <xs:attribute name="skipped" type="count" use="required"/>
      <xs:attribute name="time" type="seconds" use="required"/>
      <xs:attribute name="disabled" type="count"/>
      <xs:attribute name="timestamp" type="xs:string"/>
      <xs:attribute name="hostname" type="xs:string"/>
      <xs:attribute name="id" type="xs:string"/>
      <xs:attribute name="package" type="xs:string"/>
    </xs:complexType>
  </xs:element>
  <xs:element name="testcase">
    <xs:complexType>
      <xs:sequence>
        <xs:choice minOccurs="0" maxOccurs="1">
          <xs:element name="skipped">
            <xs:complexType><xs:simpleContent><xs:extension base="xs:string">
              <xs:attribute name="message" type="xs:string"/>
            </xs:extension></xs:simpleContent></xs:complexType>
          </xs:element>
          <xs:element name="error" type="problem" maxOccurs="unbounded"/>
          <xs:element name="failure" type="problem" maxOccurs="unbounded"/>
        </xs:choice>
        <xs:element name="system-out" type="xs:string" minOccurs="0" maxOccurs="unbounded"/>
        <xs:element name="system-err" type="xs:string" minOccurs="0" maxOccurs="unbounded"/>
      </xs:sequence>
      <xs:attribute name="name" type="xs:string" use="required"/>
      <xs:attribute name="classname" type="xs:string" use="required"/>
      <xs:attribute name="time" type="seconds" use="required"/>
      <xs:attribute name="assertions" type="count"/>
      <xs:attribute name="status" type="xs:string"/>
    </xs:complexType>
  </xs:element>
</xs:schema>
"""

_SUITE = ("name", "tests", "failures", "errors", "skipped", "time")
_CASE = ("name", "classname", "time")
_OUTCOMES = {"failure": ("message", "type"), "error": ("message", "type"), "skipped": ()}


def _count(value) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def _seconds(value) -> bool:
    try:
        return value is not None and float(value) >= 0
    except ValueError:
        return False


def junit_problems(text: str) -> list[str]:
    """What a JUnit XML document lacks of the schema's required structure, and counts that
    disagree with its cases (empty: none)."""
    try:
        root = ET.fromstring(text.encode("utf-8"))
    except ET.ParseError as exc:
        return [f"not XML: {exc}"]
    if root.tag != "testsuites":
        return [f"root element {root.tag}, expected testsuites"]
    problems = []
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    for child in root:
        if child.tag != "testsuite":
            problems.append(f"testsuites holds {child.tag}")
    for suite in root.findall("testsuite"):
        where = f"testsuite {suite.get('name')!r}"
        problems += [f"{where}: no {a}" for a in _SUITE if suite.get(a) is None]
        if not _seconds(suite.get("time")):
            problems.append(f"{where}: time {suite.get('time')!r} is not seconds")
        counts = dict.fromkeys(totals, 0)
        for element in suite:
            if element.tag not in ("properties", "testcase", "system-out", "system-err"):
                problems.append(f"{where}: holds {element.tag}")
        for case in suite.findall("testcase"):
            here = f"{where}: testcase {case.get('name')!r}"
            problems += [f"{here}: no {a}" for a in _CASE if case.get(a) is None]
            if not _seconds(case.get("time")):
                problems.append(f"{here}: time {case.get('time')!r} is not seconds")
            outcomes = [e for e in case if e.tag in _OUTCOMES]
            if len({e.tag for e in outcomes}) > 1:
                problems.append(f"{here}: more than one kind of outcome")
            for e in outcomes:
                problems += [f"{here}: {e.tag} without {a}" for a in _OUTCOMES[e.tag]
                             if e.get(a) is None]
            for e in case:
                if e.tag not in (*_OUTCOMES, "system-out", "system-err"):
                    problems.append(f"{here}: holds {e.tag}")
            counts["tests"] += 1
            counts["failures"] += any(e.tag == "failure" for e in outcomes)
            counts["errors"] += any(e.tag == "error" for e in outcomes)
            counts["skipped"] += any(e.tag == "skipped" for e in outcomes)
        for key, value in counts.items():
            if suite.get(key) is not None and _count(suite.get(key)) != value:
                problems.append(f"{where}: {key}={suite.get(key)!r}, its cases give {value}")
            totals[key] += value
    for key, value in totals.items():
        if root.get(key) is not None and _count(root.get(key)) != value:
            problems.append(f"testsuites: {key}={root.get(key)!r}, its suites give {value}")
    return problems
