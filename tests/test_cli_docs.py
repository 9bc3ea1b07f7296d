"""The one list of commands: README.md's command table and docs/guide.md's command list name
every verb of the parser and every option of each verb, with the parser's choices, and nothing
the parser does not have."""
import argparse
import re

import pytest

from checkout import ROOT
from refseg.cli import _parser

#: Where the guide's command list starts each description (its synopses end before it).
GUIDE_DESCRIPTION_COLUMN = 46
OPTION = re.compile(r"--[a-z][a-z0-9-]*")
#: ``--input feature|gray`` or ``--part=claim1|net``: an option and the choices shown for it.
CHOICES = re.compile(r"(--[a-z][a-z0-9-]*)[ =]([A-Za-z0-9_.-]+(?:\|[A-Za-z0-9_.-]+)+)")


def _verbs(parser, path=()):
    """{verb path: {option: choices or None}} of every verb of ``parser`` (the path () holds
    the options of ``refseg`` itself); ``--help`` left out."""
    found = {path: {}}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            del found[path]  # a family (``refseg golden``) is no verb of its own
            for name, sub in action.choices.items():
                found.update(_verbs(sub, path + (name,)))
        elif isinstance(action, argparse._HelpAction):
            continue
        else:
            for option in action.option_strings:
                found.setdefault(path, {})[option] = (
                    None if action.choices is None else set(action.choices))
    if path == ():
        found[()] = {o: None for a in parser._actions if isinstance(a, argparse._VersionAction)
                     for o in a.option_strings}
    return found


PARSER = _verbs(_parser())


def _documented(synopses):
    """{verb path: {option: choices shown or None}} of synopses such as ``refseg golden check
    DIR CANDIDATE.npz [--part claim1|net|ops]...``, each matched to the longest verb path its
    words begin with."""
    documented = {}
    for synopsis in synopses:
        words = synopsis.split()
        if words and words[0] == "refseg":
            words = words[1:]
        path = max((p for p in PARSER if p and tuple(words[:len(p)]) == p), key=len,
                   default=() if words and words[0].startswith("--") else None)
        assert path is not None, f"no such command: {synopsis}"
        options = documented.setdefault(path, {})
        for option in OPTION.findall(synopsis):
            options.setdefault(option, None)
        for option, shown in CHOICES.findall(synopsis):
            options[option] = set(shown.split("|"))
    return documented


def _readme_synopses():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("\n## Command line\n", 1)[1].split("\n## ", 1)[0]
    synopses = []
    for row in section.splitlines():
        if row.startswith("| `"):
            first_cell = row.replace("\\|", "\0").split("|")[1]
            synopses += [s.replace("\0", "|") for s in re.findall(r"`([^`]*)`", first_cell)]
    return synopses


def _guide_synopses():
    text = (ROOT / "docs" / "guide.md").read_text(encoding="utf-8")
    section = text.split("\n## Command line\n", 1)[1]
    block = section.split("```text\n", 1)[1].split("```", 1)[0]
    synopses = []
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        if not line.strip() or indent >= GUIDE_DESCRIPTION_COLUMN or line.startswith("python"):
            continue  # a description, or `python -m refseg ...`
        synopsis = re.split(r" {2,}", line.strip(), maxsplit=1)[0]
        if indent == 0:
            synopses.append(synopsis)
        else:
            synopses[-1] += " " + synopsis  # the synopsis continued
    return synopses


def _differences(documented):
    problems = []
    for path in PARSER.keys() - documented.keys():
        problems.append(f"refseg {' '.join(path)}: not documented")
    for path, options in documented.items():
        verb = "refseg " + " ".join(path)
        expected = PARSER[path]
        problems += [f"{verb} {o}: not documented" for o in expected.keys() - options.keys()]
        problems += [f"{verb} {o}: no such option" for o in options.keys() - expected.keys()]
        for option, shown in options.items():
            if shown is not None and option in expected and shown != expected[option]:
                problems.append(f"{verb} {option}: documents the choices {sorted(shown)}, the "
                                f"parser has {sorted(expected[option] or ())}")
    return sorted(problems)


@pytest.mark.infrastructure
@pytest.mark.parametrize("document, synopses", [("README.md", _readme_synopses),
                                                ("docs/guide.md", _guide_synopses)])
def test_the_documented_commands_are_the_parsers(document, synopses):
    assert _differences(_documented(synopses())) == [], document


@pytest.mark.infrastructure
def test_a_command_list_that_disagrees_with_the_parser_fails():
    """The comparison finds a missing verb, a missing option, an option the verb lacks and
    other choices than the parser's."""
    documented = _documented(["refseg edges IMAGE --out DIR --sigma S --max-pixels N "
                              "--arrays all|maps --jobs J"])
    assert "refseg edges --jobs: no such option" in _differences(documented)
    assert "refseg demo: not documented" in _differences(documented)
    documented = _documented(["refseg train DATA --input feature|gray"])
    problems = _differences(documented)
    assert "refseg train --out: not documented" in problems
    assert any(p.startswith("refseg train --input: documents the choices") for p in problems)
    with pytest.raises(AssertionError, match="no such command"):
        _documented(["refseg frobnicate X"])
