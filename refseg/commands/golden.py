"""The verbs of golden-file bundles: ``golden write``, ``candidate``, ``check``, ``reference``,
``compare`` and ``weights``."""
from __future__ import annotations

from pathlib import Path

from refseg.commands.verb import Verb, add_force, add_jobs, add_max_pixels
from refseg.vocabulary import GOLDEN_PARTS

INFRASTRUCTURE = "the command line: the golden-file verbs"
PROCESSES_HELP = "processes (default: one per core)"


def _settled(bundle: Path) -> Path:
    """The bundle folder, its publication completed if a killed writer began it."""
    from refseg.publish import settle

    if bundle.is_dir():
        settle(bundle)
    return bundle


def _write_arguments(parser):
    parser.add_argument("folder", type=Path, help="bundle folder (created or replaced)")
    parser.add_argument("--with-weights", action="store_true",
                        help="also write the network's weights into the bundle (weights.npz, "
                             "about 195 MB)")
    parser.add_argument("--images", nargs="+", type=Path, default=(), metavar="IMAGE",
                        help="also the claim-1 arrays and flagged vectors of these image files")
    add_max_pixels(parser)


def _write(args) -> str:
    from refseg import golden

    done = golden.write_bundle(args.folder, with_weights=args.with_weights, images=args.images,
                               max_pixels=args.max_pixels)
    weights = (f", {golden.WEIGHTS} {done.weights_bytes / 1e6:.1f} MB"
               if args.with_weights else "")
    return (f"{done.folder}: {done.arrays} arrays, {golden.ARRAYS} "
            f"{done.npz_bytes / 1e6:.1f} MB{weights}, in {done.seconds:.1f} s")


def _bundle_to_file(destination_help: str):
    """The arguments of a verb that writes one file from a bundle: the bundle folder, the
    file, ``--force``."""
    def arguments(parser):
        parser.add_argument("folder", type=Path, help="bundle folder")
        parser.add_argument("destination", type=Path, help=destination_help)
        add_force(parser)
    return arguments


def _candidate(args) -> str:
    from refseg.golden.candidate import own_candidate
    from refseg.publish import check_single_output

    _settled(args.folder)
    check_single_output(args.destination, [args.folder], args.force)
    count, missing = own_candidate(args.folder, args.destination, args.part)
    note = (f"; this refseg does not compute {len(missing)} of the bundle's arrays "
            f"({missing[0]} ...)" if missing else "")
    parts = "".join(f" --part {part}" for part in dict.fromkeys(args.part or ()))
    return (f"{args.destination}: refseg's candidate, {count} arrays{note}; check it with "
            f"`refseg golden check {args.folder} {args.destination}{parts}`")


def _ci_arguments(parser, unit: str):
    """``--junit``, ``--html``, ``--accept`` and ``--force`` of ``golden check`` and
    ``golden compare``."""
    parser.add_argument("--junit", type=Path, default=None, metavar="FILE",
                        help=f"write JUnit XML for CI here: one testcase per {unit}")
    parser.add_argument("--html", type=Path, default=None, metavar="FILE",
                        help="write one self-contained page here: each failing 2-D array "
                             "as a picture of candidate-only against reference-only pixels")
    parser.add_argument("--accept", type=Path, default=None, metavar="FILE",
                        help="TOML list of accepted differences (array pattern, reading or "
                             "bound, reason): they are reported and do not fail")
    add_force(parser, " (--report, --junit, --html)")


def _outputs(args, inputs):
    """The accept file read and the output files checked, before any work."""
    from refseg.golden.accepted import read_accept_file
    from refseg.golden.outputs import check_outputs

    accept = read_accept_file(args.accept) if args.accept is not None else ()
    check_outputs({"--report": args.report, "--junit": args.junit, "--html": args.html},
                  [*inputs, *([args.accept] if args.accept is not None else [])], args.force)
    return accept


def _check_arguments(parser):
    parser.add_argument("folder", type=Path, help="bundle folder")
    parser.add_argument("candidate", type=Path, help=".npz keyed by the manifest's array names")
    parser.add_argument("--report", type=Path, default=None, help="write the rows as JSON here")
    _ci_arguments(parser, "array")
    parser.add_argument("--part", action="append", default=None, choices=GOLDEN_PARTS,
                        help="check only this part of the bundle (repeatable; default: all)")
    parser.add_argument("--select", action="append", default=None, metavar="PATTERN",
                        help="check only arrays matching this shell pattern (repeatable)")
    parser.add_argument("--allow-extra", action="store_true",
                        help="candidate keys that name no array of the bundle do not fail")
    parser.add_argument("--verbose", action="store_true",
                        help="list the passing arrays too, not only the failures")


def _check(args) -> tuple[str, int]:
    import time

    from refseg import golden
    from refseg.golden.outputs import write_check_outputs

    start = time.monotonic()
    _settled(args.folder)
    accept = _outputs(args, [args.folder, args.candidate])
    report = golden.check_bundle(args.folder, args.candidate, args.select, args.part,
                                 args.allow_extra, accept)
    write_check_outputs(report, args.report, args.junit, args.html, time.monotonic() - start)
    return report.text(args.verbose), 0 if report.passed else 1


def _reference_arguments(parser):
    parser.add_argument("images", nargs="+", type=Path,
                        help="image files, or folders of them (any format `refseg edges` reads)")
    parser.add_argument("--out", type=Path, required=True, help="reference folder")
    add_jobs(parser, PROCESSES_HELP)
    add_max_pixels(parser)


def _reference(args) -> str:
    from refseg.golden import scale

    names = scale.write_references(args.images, args.out, args.jobs, args.max_pixels)
    return f"{args.out}: reference arrays of {len(names)} images"


def _compare_arguments(parser):
    add_jobs(parser, PROCESSES_HELP)
    parser.add_argument("reference", type=Path, help="folder of `refseg golden reference`")
    parser.add_argument("candidate", type=Path, help="folder of <image>.npz, the same keys")
    parser.add_argument("--report", type=Path, default=None,
                        help="write the summary and each failing image as JSON here")
    _ci_arguments(parser, "image and array")


def _compare(args) -> tuple[str, int]:
    import time

    from refseg.golden import scale
    from refseg.golden.failure_page import keep_pictures
    from refseg.golden.outputs import write_compare_outputs

    start = time.monotonic()
    accept = _outputs(args, [args.reference, args.candidate])
    results = list(keep_pictures(scale.compare_folders(
        args.reference, args.candidate, args.jobs, accept, pictures=args.html is not None)))
    summary = scale.summarize(results, accept)
    write_compare_outputs(summary, results, (args.reference, args.candidate), args.report,
                          args.junit, args.html, time.monotonic() - start)
    return scale.summary_text(summary), 0 if summary["passed"] == summary["images"] else 1


def _weights(args) -> str:
    from refseg import golden
    from refseg.publish import check_single_output

    _settled(args.folder)
    check_single_output(args.destination, [args.folder], args.force)
    digest = golden.export_weights(args.folder, args.destination)
    return f"{args.destination}: network weights, sha256 {digest}"


WRITE = Verb(("golden", "write"), "write DIR/manifest.json and DIR/arrays.npz",
             _write_arguments, _write)


def _candidate_arguments(parser):
    _bundle_to_file("the candidate .npz to write")(parser)
    parser.add_argument("--part", action="append", default=None, choices=GOLDEN_PARTS,
                        help="only the arrays of this part of the bundle (repeatable; default: "
                             "all; the network part's whole arrays take about 650 MB)")


CANDIDATE = Verb(("golden", "candidate"), "write refseg's own candidate for a bundle (every "
                                          "array, whole): the self-check",
                 _candidate_arguments, _candidate)
CHECK = Verb(("golden", "check"), "compare a candidate .npz with a bundle",
             _check_arguments, _check)
REFERENCE = Verb(("golden", "reference"), "refseg's claim-1 arrays of image files, one "
                                          "OUT/<image>.npz each, under the bundle's names",
                 _reference_arguments, _reference)
COMPARE = Verb(("golden", "compare"), "compare a folder of candidate .npz files with a "
                                      "reference folder, image by image",
               _compare_arguments, _compare)
WEIGHTS = Verb(("golden", "weights"), "regenerate the bundle's network weights as .npz",
               _bundle_to_file("the .npz weight file to write"), _weights)
