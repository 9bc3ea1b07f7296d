"""A verb of the command line, and the arguments and parsers several verbs share.

A :class:`Verb` holds one command's arguments (a function adding them to its parser) beside its
handler (a function turning the parsed arguments into one library call). Handlers import the
library lazily, so that a verb refuses a bad option before the network, the kernels or SciPy
are loaded.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from refseg.errors import InputError
from refseg.vocabulary import MAX_JOBS, MAX_PIXELS

INFRASTRUCTURE = "the command line: verbs and their shared arguments"

FORCE_HELP = ("replace an existing output file that refseg did not write (never an input of "
              "the command)")
MAX_PIXELS_HELP = f"refuse larger images, before decoding them (default {MAX_PIXELS}"
JOBS_HELP = "extraction processes (default: one per core)"


@dataclass(frozen=True)
class Verb:
    """One command: ``path`` ("edges", or a family and its verb: "golden", "check"), the help
    line of ``refseg --help``, the function adding its arguments to its parser, and its handler.

    The handler returns the text to print, or, for a verb whose outcome is a verdict
    (``golden check``, ``golden compare``), the text and the exit status.
    """

    path: tuple[str, ...]
    help: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], str | tuple[str, int]]

    @property
    def name(self) -> str:
        """The words after ``refseg``, e.g. "golden check"."""
        return " ".join(self.path)

    def dispatch(self, args: argparse.Namespace) -> str | tuple[str, int]:
        """Run the handler on ``args``, after completing every publication that a killed
        refseg command cut short in the folders the arguments' paths name or lie in
        (:func:`refseg.publish.settle_paths`): no verb reads (or writes into) a half-moved
        folder."""
        paths = [item for value in vars(args).values()
                 for item in (value if isinstance(value, (list, tuple)) else (value,))
                 if isinstance(item, Path)]
        if paths:
            from refseg.publish import settle_paths

            settle_paths(paths)
        return self.run(args)


def add_force(parser: argparse.ArgumentParser, what: str = "") -> None:
    """``--force``: replace an output file refseg did not write (``what`` names the output)."""
    parser.add_argument("--force", action="store_true", help=FORCE_HELP + what)


def add_max_pixels(parser: argparse.ArgumentParser, memory: str = "") -> None:
    """``--max-pixels N``: the image size limit, checked from each image's header; ``memory``
    says what the verb needs per pixel ("about 70 bytes of memory per pixel")."""
    parser.add_argument("--max-pixels", type=int, default=None,
                        help=MAX_PIXELS_HELP + (f"; {memory})" if memory else ")"))


def add_jobs(parser: argparse.ArgumentParser, text: str = JOBS_HELP) -> None:
    """``--jobs J``: the number of worker processes (1 to :data:`MAX_JOBS`, never more than
    the work items)."""
    parser.add_argument("--jobs", type=int, default=None, help=f"{text}; 1 to {MAX_JOBS}")


def input_size(text: str) -> tuple[int, int]:
    """"224x224" -> (224, 224); InputError otherwise (the ranges are the verbs' to check)."""
    try:
        h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise InputError(f"input size must be HxW, e.g. 224x224, got {text!r}") from None
    return h, w


def size_text(hw: tuple[int, int]) -> str:
    """(64, 224) -> "64x224", the form :func:`input_size` reads."""
    return f"{hw[0]}x{hw[1]}"


def optional_path(path: Path | None) -> str | None:
    """A path option as the string the settings record, or None when it was not given."""
    return None if path is None else str(path)
