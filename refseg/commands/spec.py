"""The verbs about the spec: ``trace``, ``explain`` and ``audit readings``."""
from __future__ import annotations

import argparse
from pathlib import Path

from refseg.commands.verb import Verb, add_jobs, add_max_pixels
from refseg.errors import InputError
from refseg.vocabulary import EXPLAIN_MEMORY

INFRASTRUCTURE = "the command line: the traceability and audit verbs"


def _trace_arguments(parser):
    parser.add_argument("--write", action="store_true",
                        help="regenerate spec/traceability.md from the code and tests "
                             "(checkout only)")


def _trace(args) -> str:
    from refseg.audit import trace

    return trace.write_matrix() if args.write else trace.matrix_text()


def _explain_arguments(parser):
    parser.add_argument("element", help="claim-element ID, e.g. claim1.step2.cv; or claim1 "
                                        "with --image")
    parser.add_argument("--golden", type=Path, default=None,
                        help="a bundle of `refseg golden write`: also list the arrays pinning "
                             "it")
    parser.add_argument("--image", type=Path, default=None,
                        help="with claim1: write DIR/<stem>/index.html, claim 1 step by step "
                             "on this image (one self-contained page)")
    parser.add_argument("--out", type=Path, default=None, help="the folder of the --image page")
    add_max_pixels(parser, EXPLAIN_MEMORY)


def _explain(args) -> str:
    if args.image is not None or args.out is not None or args.max_pixels is not None:
        if args.element != "claim1" or args.image is None or args.out is None \
                or args.golden is not None:
            raise InputError("explain: --image and --out go together, with the element "
                             "claim1 (and --max-pixels only with them): refseg explain claim1 "
                             "--image IMAGE --out DIR [--max-pixels N]")
        from refseg.report.walkthrough import write_walkthrough

        return str(write_walkthrough(args.image, args.out, max_pixels=args.max_pixels))
    if args.element == "claim1":
        raise InputError("claim1: not one element; claim 1 step by step on an image is "
                         "refseg explain claim1 --image IMAGE --out DIR")
    from refseg.audit import trace

    pinned = None
    if args.golden is not None:
        from refseg.golden import pinned_elements, read_bundle

        pinned = pinned_elements(read_bundle(args.golden)[0])
    return trace.explain_element(args.element, pinned, args.golden)


def _seed_list(text: str) -> tuple[int, ...]:
    """"0,1,2" -> (0, 1, 2) (the audit checks the seeds themselves)."""
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seeds such as 0,1,2, got {text!r}") from None


def _audit_readings_arguments(parser):
    from refseg.run.config import DemoSettings

    demo = DemoSettings()
    parser.add_argument("--out", type=Path, default=None,
                        help="write sensitivity.md and sensitivity.json here (default: rewrite "
                             "spec/sensitivity.md of the source checkout)")
    parser.add_argument("--quick", action="store_true",
                        help="3 photographs and 4 welds instead of 40 (seconds); without "
                             "--out, print the quick-check block and write nothing")
    parser.add_argument("--downstream", action="store_true",
                        help="also train demo-sized networks on every input kind of R-dataset "
                             "with refseg's and the paired claim-1 readings, and on the gray "
                             "image, at each of --seeds (CPU hours; with --quick, tiny "
                             "trainings)")
    parser.add_argument("--seeds", type=_seed_list, default=None,
                        help="training seeds of --downstream, comma-separated (default 0,1,2)")
    parser.add_argument("--record", type=Path, default=None,
                        help="record each --downstream run in this file as it finishes and "
                             "skip the runs it holds (resume a killed audit); without "
                             "--downstream, render the R-dataset section from the runs it "
                             "holds")
    parser.add_argument("--count", type=int, default=None,
                        help=f"training welds of --downstream (default: the demo's "
                             f"{demo.count})")
    parser.add_argument("--test-count", type=int, default=None,
                        help=f"test welds of --downstream (default: the demo's "
                             f"{demo.test_count})")
    parser.add_argument("--epochs", type=int, default=None,
                        help=f"epochs of --downstream (default: the demo's {demo.epochs})")
    add_jobs(parser, "extraction processes of the trainings (default: one per core)")


def _audit_readings(args) -> str:
    from refseg.audit.readings import run_audit

    return run_audit(args.out, quick=args.quick, downstream=args.downstream, jobs=args.jobs,
                     count=args.count, test_count=args.test_count, epochs=args.epochs,
                     seeds=args.seeds, record=args.record)


TRACE = Verb(("trace",), "print the traceability matrix", _trace_arguments, _trace)
EXPLAIN = Verb(("explain",), "explain one claim element; or claim 1 step by step on an image "
                             "(claim1 --image IMAGE --out DIR)", _explain_arguments, _explain)
AUDIT_READINGS = Verb(("audit", "readings"), "how much claim 1's outcome depends on each "
                                             "reading of a missing formula "
                                             "(spec/sensitivity.md)",
                      _audit_readings_arguments, _audit_readings)
