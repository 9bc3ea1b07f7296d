"""The spec's reader: the claim elements of ``spec/registry.toml``, the paragraphs' renderings,
the readings and errata beside them, the patent's Chinese text, and the figures the patent
reports for its own method.

A low module (standard library only): the wings, the golden files and the reports read the spec
through it. The traceability matrix, ``refseg explain`` and the golden pins, which need the
whole package, live above it in :mod:`refseg.audit.trace`.
"""
from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

STATUSES = ("implemented", "planned", "not-applicable")
#: The patent's claims in Chinese, a verbatim copy of the claims file of the seeds.
CLAIMS_FILE = "claims_zh.txt"
#: The patent's description in Chinese, paragraphs [0069]-[0273], a verbatim copy of the
#: description file of the seeds (one paragraph per line, a few continued on the next lines).
DESCRIPTION_FILE = "description_zh.txt"
#: The sensitivity audit of the readings (``refseg audit readings``), when present.
SENSITIVITY_FILE = "sensitivity.md"
INFRASTRUCTURE = "reading the spec that ships with refseg"


@dataclass(frozen=True)
class Element:
    """One claim element of the registry."""

    id: str
    claim: int
    title: str
    status: str
    paragraphs: tuple[str, ...]
    text: str
    readings: tuple[str, ...] = ()
    reason: str = ""
    #: the spans of the Chinese claims (:func:`claims_text`) this element renders
    original: tuple[str, ...] = ()


@dataclass
class Registry:
    """The parsed ``registry.toml``: elements by ID and paragraph renderings by number."""

    elements: dict[str, Element]
    paragraphs: dict[str, str]
    readings_text: str = ""
    errata_text: str = ""
    source: Path | None = None
    reading_ids: set[str] = field(default_factory=set)
    #: the Chinese claims, line breaks inside a sentence joined (:func:`claims_text`)
    claims_text: str = ""
    #: ``sensitivity.md`` when the spec has one, else ""
    sensitivity_text: str = ""
    #: the Chinese description, {paragraph number "0069": its text} (:func:`description_text`)
    description: dict[str, str] = field(default_factory=dict)


def spec_dir() -> Path:
    """The spec folder: ``refseg/_spec`` in an installed wheel, ``spec/`` in a checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "_spec", here.parent / "spec"):
        if (candidate / "registry.toml").is_file():
            return candidate
    raise FileNotFoundError("spec/registry.toml not found beside the refseg package")


def claims_text(raw: str) -> str:
    """The claims file's text with the line breaks that fall inside a sentence joined.

    The seeds' text breaks a few sentences where a formula image was lost ("分别表\\n\\n示");
    a break after "；", "。" or "：" ends a clause and is kept. Nothing else changes, so that
    every element's ``original`` span is a literal substring of the result.
    """
    out = []
    for piece in raw.split("\n\n"):
        if out and out[-1] and out[-1][-1] not in "；。：\n":
            out[-1] += piece
        else:
            out.append(piece)
    return "\n\n".join(out)


def description_text(raw: str) -> dict[str, str]:
    """{paragraph number: text} of the description file, whose paragraphs each begin a line
    with their number in brackets ("[0069] ..."); a line without a number continues the
    paragraph before it (joined with a line break). Text before the first number is refused."""
    paragraphs: dict[str, str] = {}
    last = None
    for line in raw.splitlines():
        if line.startswith("[") and line[1:5].isdigit() and line[5:6] == "]":
            last = line[1:5]
            if last in paragraphs:
                raise ValueError(f"{DESCRIPTION_FILE}: paragraph [{last}] twice")
            paragraphs[last] = line[6:].strip()
        elif line.strip():
            if last is None:
                raise ValueError(f"{DESCRIPTION_FILE}: text before the first paragraph")
            paragraphs[last] += "\n" + line.strip()
    return paragraphs


def _reading_ids(readings_text: str) -> set[str]:
    """IDs of the readings in readings.md: headings of the form ``## R-<name>: <title>``."""
    ids = set()
    for line in readings_text.splitlines():
        if line.startswith("## R-"):
            ids.add(line[3:].split(":", 1)[0].strip())
    return ids


def load_registry(directory: Path | None = None) -> Registry:
    """Parse ``registry.toml`` (and the readings and errata beside it)."""
    directory = directory or spec_dir()
    data = tomllib.loads((directory / "registry.toml").read_text(encoding="utf-8"))
    elements = {}
    for raw in data.get("element", []):
        element = Element(
            id=raw["id"], claim=int(raw["claim"]), title=raw["title"], status=raw["status"],
            paragraphs=tuple(raw.get("paragraphs", ())), text=raw["text"].strip(),
            readings=tuple(raw.get("readings", ())),
            reason=raw.get("reason", ""), original=tuple(raw.get("original", ())),
        )
        if element.status not in STATUSES:
            raise ValueError(f"{element.id}: status {element.status!r} not in {STATUSES}")
        if element.id in elements:
            raise ValueError(f"duplicate element ID {element.id}")
        elements[element.id] = element
    paragraphs = {p["id"]: p["text"].strip() for p in data.get("paragraph", [])}
    readings = (directory / "readings.md").read_text(encoding="utf-8")
    errata = (directory / "errata.md").read_text(encoding="utf-8")
    claims = claims_text((directory / CLAIMS_FILE).read_text(encoding="utf-8"))
    sensitivity = directory / SENSITIVITY_FILE
    description = description_text((directory / DESCRIPTION_FILE).read_text(encoding="utf-8"))
    return Registry(elements, paragraphs, readings, errata, directory, _reading_ids(readings),
                    claims, sensitivity.read_text(encoding="utf-8")
                    if sensitivity.is_file() else "", description)


def markdown_section(text: str, section_id: str) -> list[str]:
    """The lines of the section headed ``## <section_id>: ...`` (readings.md, sensitivity.md),
    its heading first; [] when there is none."""
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith("## "):
            inside = line[3:].split(":", 1)[0].strip() == section_id
        if inside:
            lines.append(line)
    return lines


def sensitivity_table(text: str, reading_id: str) -> list[str]:
    """The lines of the ``sensitivity.md`` table headed ``### <reading_id>``, [] if none."""
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith(("## ", "### ")):
            inside = line == f"### {reading_id}"
            continue
        if inside and line.startswith("|"):
            lines.append(line)
    return lines


@dataclass(frozen=True)
class PatentFigure:
    """A figure the patent reports for its own method (``[[figure]]`` in ``registry.toml``)."""

    id: str
    #: the figure as a number (a percentage as a fraction: 97.41 % is 0.9741)
    value: float
    #: the description paragraph that reports it, "0257"
    paragraph: str
    #: the figure as the Chinese text writes it, a literal substring of that paragraph
    source: str
    text: str = ""


@functools.cache
def _figures(path: Path) -> dict[str, PatentFigure]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    figures = {}
    for raw in data.get("figure", []):
        figure = PatentFigure(id=raw["id"], value=float(raw["value"]),
                              paragraph=raw["paragraph"], source=raw["source"],
                              text=raw.get("text", "").strip())
        if figure.id in figures:
            raise ValueError(f"duplicate figure ID {figure.id}")
        figures[figure.id] = figure
    return figures


def patent_figures(directory: Path | None = None) -> dict[str, PatentFigure]:
    """The figures the patent reports for its own method, by ID: ``accuracy`` and ``loss``
    ([0257]), ``seconds_per_image`` ([0260]), ``weight.canny``, ``weight.sobel``,
    ``weight.prewitt``, ``weight.log`` ([0213])."""
    return dict(_figures((directory or spec_dir()) / "registry.toml"))


def patent_figure(figure_id: str) -> float:
    """The value of one of :func:`patent_figures`."""
    return patent_figures()[figure_id].value


def patent_weights(operators) -> dict[str, float]:
    """[0213]'s operator weights, {operator: weight} in the order of ``operators``."""
    figures = patent_figures()
    return {k: figures[f"weight.{k}"].value for k in operators}
