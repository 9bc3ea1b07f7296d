"""The ``refseg`` command line: it parses arguments and dispatches to one verb.

Each verb (``refseg edges``, ``refseg golden check``, ...) is a
:class:`~refseg.commands.verb.Verb` of :data:`refseg.commands.VERBS`: its arguments beside its
handler, which turns them into a library call. The commands are listed in README.md's command
table and docs/guide.md's command list (a test holds both to the parser).

Bad input ends with one line on stderr naming the file and the problem, exit status 2, and no
output left behind: outputs are staged inside their folder, under its lock, and moved into
place only when complete (``refseg.publish``). Nothing in refseg imports this module.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading

from refseg._version import __version__
from refseg.commands import FAMILIES, VERBS
from refseg.errors import InputError

INFRASTRUCTURE = "the command line: parsing and dispatch"

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


class _HelpFormatter(argparse.HelpFormatter):
    """``--help`` names each option's default, and marks the options that must be given."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.option_strings and action.required:
            return f"{text} (required)"
        if action.option_strings and "default" not in text and _shown(action.default):
            return f"{text} (default: %(default)s)"
        return text


def _shown(default) -> bool:
    """Whether ``--help`` names a default: not for None, a flag's False, argparse's SUPPRESS or
    an empty list (a repeatable option given no times); 0 is named (``0 in (False,)`` is
    true in Python, so the check is by identity)."""
    if default is None or default is False or default is argparse.SUPPRESS:
        return False
    return not (isinstance(default, (list, tuple)) and not default)


class _Parser(argparse.ArgumentParser):
    """Every parser and subparser of refseg: :class:`_HelpFormatter`, errors on one line."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        # on one line, like every other bad input
        self.exit(EXIT_BAD_INPUT, f"refseg: error: {self.prog}: {message}\n")


def _parser() -> argparse.ArgumentParser:
    """The parser of every verb of :data:`refseg.commands.VERBS`; the chosen one is
    ``args.verb``."""
    parser = _Parser(prog="refseg", description=(
        "Reference implementation of the image semantic segmentation method of patent "
        "CN114419081B."))
    parser.add_argument("--version", action="version", version=f"refseg {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    families = {}
    for verb in VERBS:
        if len(verb.path) == 1:
            verb_parser = commands.add_parser(verb.path[0], help=verb.help)
        else:
            family, name = verb.path
            if family not in families:
                families[family] = commands.add_parser(family, help=FAMILIES[family]) \
                    .add_subparsers(dest=f"{family}_command", required=True)
            verb_parser = families[family].add_parser(name, help=verb.help)
        verb.arguments(verb_parser)
        verb_parser.set_defaults(verb=verb)
    return parser


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised wherever the program is, so that it unwinds as on Ctrl-C: staged outputs
    are removed and every written file is whole."""


def _terminate(signum, frame):
    raise _Terminated()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``refseg`` console script; returns the exit status."""
    for stream in (sys.stdout, sys.stderr):
        # file names that are not UTF-8 are printed as the bytes they are
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="surrogateescape")
    args = _parser().parse_args(argv)
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if in_main_thread else None
    try:
        result = args.verb.dispatch(args)
        text, status = result if isinstance(result, tuple) else (result, 0)
        print(text)
        return status
    except InputError as exc:
        print(f"refseg: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"refseg: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as stop:
        # outputs are staged or written atomically: what exists is whole (the last checkpoint)
        terminated = isinstance(stop, _Terminated)
        print(f"\nrefseg: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    finally:
        if in_main_thread:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
