"""The ``refseg`` command line: it parses arguments and dispatches to library functions.

``refseg edges IMAGE... --out DIR``   claim-1 feature extraction, every intermediate written out
``refseg demo [--out DIR]``           the main job: the whole method on synthetic weld seams
``refseg report DIR``                 the claim chart (index.html) of a demo or run folder
``refseg synth --count N --out DIR [--seed S] [--size HxW]``  a synthetic weld data set:
                                      DIR/images/, DIR/labels/ ([0263] colours), DIR/synth.json
``refseg dataset check DIR``          check a data set folder (pairs, sizes, label colours)
``refseg trace [--write]``            print (or regenerate) the traceability matrix
``refseg explain ID``                 one claim element: text, readings, functions, tests
``refseg explain claim1 --image IMAGE --out DIR``  claim 1 step by step on an image (HTML)
``refseg weights convert FILE.h5 OUT.npz``  Keras HDF5 weights to refseg's .npz weight file
``refseg weights inspect FILE.npz``   the keys of a weight file against the expected weights
``refseg model summary [--input-size HxW]``  every layer of the fusion network, with totals
``refseg train DATA --out RUN [...]``  train the fusion network on a data set (claims 1, 4)
``refseg predict RUN IMAGE... --out DIR``  label and overlay PNGs of images, and their times
``refseg evaluate RUN DATA [--compare RUN...]``  scores on a data set, runs side by side
``refseg golden write DIR`` / ``golden candidate DIR OUT.npz`` / ``golden check DIR OUT.npz``
                                      golden-file bundles (and ``golden reference``,
                                      ``golden compare`` for image folders)

Bad input ends with one line on stderr naming the file and the problem, exit status 2, and no
output left behind: outputs are staged inside their folder, under its lock, and moved into
place only when complete (``refseg.publish``). Nothing in refseg imports this module.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from refseg._version import __version__
from refseg.data.kinds import INPUT_KINDS
from refseg.errors import InputError
from refseg.models.parts import BRANCHES

INFRASTRUCTURE = "the command line: parsing and dispatch"

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


_FORCE_HELP = ("replace an existing output file that refseg did not write (never an input of "
               "the command)")
_MAX_PIXELS_HELP = ("refuse larger images, before decoding them (default 40000000; about "
                    "70 bytes of memory per pixel, 24 with --arrays maps)")


class _HelpFormatter(argparse.HelpFormatter):
    """``--help`` names each option's default, and marks the options that must be given."""

    def _get_help_string(self, action):
        text = action.help or ""
        if action.option_strings and action.required:
            return f"{text} (required)"
        if (action.option_strings and "default" not in text
                and action.default not in (None, False, argparse.SUPPRESS, [])):
            return f"{text} (default: %(default)s)"
        return text


class _Parser(argparse.ArgumentParser):
    """Every parser and subparser of refseg: :class:`_HelpFormatter`, errors on one line."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message):
        # on one line, like every other bad input
        self.exit(EXIT_BAD_INPUT, f"refseg: error: {self.prog}: {message}\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="refseg", description=(
        "Reference implementation of the image semantic segmentation method of patent "
        "CN114419081B."))
    p.add_argument("--version", action="version", version=f"refseg {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    e = sub.add_parser("edges", help="claim-1 feature extraction of images")
    e.add_argument("images", nargs="+", type=Path, help="image files (any format Pillow reads)")
    e.add_argument("--out", type=Path, required=True, help="output folder (one subfolder each)")
    e.add_argument("--sigma", type=float, default=None, help="Gaussian sigma (default 0.8)")
    e.add_argument("--max-pixels", type=int, default=None, help=_MAX_PIXELS_HELP)
    e.add_argument("--arrays", choices=("all", "maps"), default="all",
                   help="what features.npz keeps: every intermediate (default) or the binary "
                        "maps and the weights only")

    d = sub.add_parser("demo", help="the main job: the whole method on synthetic weld seams")
    d.add_argument("--out", type=Path, default=Path("demo-out"), help="report folder")
    d.add_argument("--count", type=int, default=160, help="synthetic training welds")
    d.add_argument("--test-count", type=int, default=40, help="synthetic test welds")
    d.add_argument("--epochs", type=int, default=8, help="training epochs of each run")
    d.add_argument("--input-size", default="64x224", help="network input HxW")
    d.add_argument("--seed", type=int, default=0, help="seed of the first weld")
    d.add_argument("--seeds", type=int, default=None,
                   help="run the demo with seeds S, S+1, ... (at least 2) into --out/seed-<s>/ "
                        "and write the scores' mean and spread (seeds.md, seeds.json)")
    d.add_argument("--jobs", type=int, default=None,
                   help="extraction processes (default: one per core)")
    d.add_argument("--train-backbone", action="store_true",
                   help="train the backbones too (an extension; the patent freezes them)")
    d.add_argument("--keep-checkpoints", action="store_true",
                   help="keep the weights of all four runs, about 280 MB (default: only the "
                        "patent's network and the best run keep theirs)")

    rp = sub.add_parser("report", help="(re)write the claim chart index.html of a demo or run "
                                       "folder")
    rp.add_argument("folder", type=Path, help="a folder of refseg demo or refseg train")

    t = sub.add_parser("trace", help="print the traceability matrix")
    t.add_argument("--write", action="store_true",
                   help="regenerate spec/traceability.md from the code and tests (checkout only)")

    x = sub.add_parser("explain", help="explain one claim element; or claim 1 step by step on "
                                       "an image (claim1 --image IMAGE --out DIR)")
    x.add_argument("element", help="claim-element ID, e.g. claim1.step2.cv; or claim1 with "
                                   "--image")
    x.add_argument("--golden", type=Path, default=None,
                   help="a bundle of `refseg golden write`: also list the arrays pinning it")
    x.add_argument("--image", type=Path, default=None,
                   help="with claim1: write DIR/<stem>/index.html, claim 1 step by step on "
                        "this image (one self-contained page)")
    x.add_argument("--out", type=Path, default=None,
                   help="the folder of the --image page")

    w = sub.add_parser("weights", help="convert and inspect backbone weight files")
    wsub = w.add_subparsers(dest="weights_command", required=True)
    wc = wsub.add_parser("convert", help="Keras HDF5 weights (.h5, .weights.h5) to .npz")
    wc.add_argument("source", type=Path, help="Keras HDF5 weight or model file")
    wc.add_argument("destination", type=Path, help="the .npz weight file to write")
    wc.add_argument("--force", action="store_true", help=_FORCE_HELP)
    wi = wsub.add_parser("inspect", help="keys, shapes and dtypes of an .npz weight file")
    wi.add_argument("path", type=Path, help="an .npz weight file")

    m = sub.add_parser("model", help="the fusion network of claims 2-4")
    msub = m.add_subparsers(dest="model_command", required=True)
    ms = msub.add_parser("summary", help="every layer: op, output shape, parameters, MACs, "
                                         "paragraphs; totals")
    ms.add_argument("--input-size", default="224x224", help="HxW, multiples of 32")
    ms.add_argument("--part", choices=(*BRANCHES, "decoder"), default=None,
                    help="only the layers of one part (totals still cover all)")

    # count, seed and size are parsed by write_synthetic_dataset, not argparse, so that a bad
    # value ends with refseg's one-line error like every other bad input
    sy = sub.add_parser("synth", help="write a synthetic weld data set (images and labels)")
    sy.add_argument("--count", required=True, help="number of image/label pairs (>= 1)")
    sy.add_argument("--out", type=Path, required=True, help="data set folder")
    sy.add_argument("--seed", default="0", help="seed of the first image; image i uses S+i")
    sy.add_argument("--size", default="156x550", help="HxW, rows x cols")

    ds = sub.add_parser("dataset", help="data set folders (images/ and labels/)")
    dsub = ds.add_subparsers(dest="dataset_command", required=True)
    dc = dsub.add_parser("check", help="check every image/label pair; print a summary")
    dc.add_argument("folder", type=Path, help="folder with images/ and labels/")

    tr = sub.add_parser("train", help="train the fusion network on a data set folder")
    tr.add_argument("data", type=Path, help="folder with images/ and labels/")
    tr.add_argument("--out", type=Path, required=True, help="run folder")
    tr.add_argument("--epochs", type=int, default=10, help="epochs to train (in all, when "
                                                           "resuming)")
    tr.add_argument("--batch-size", type=int, default=8, help="images per Adam step")
    tr.add_argument("--input-size", default="64x224", help="HxW, multiples of 32")
    tr.add_argument("--input", choices=INPUT_KINDS, default=INPUT_KINDS[0],
                    help="the claim-1 feature image (refseg's reading), the plain gray "
                         "image, or another reading of the feature regions (R-dataset: the "
                         "gray image masked by the map, undilated or dilated, or gray and "
                         "map as channels)")
    tr.add_argument("--branches", choices=("both", *BRANCHES),
                    default="both", help="both backbones (the patent's) or one alone")
    tr.add_argument("--weights", type=Path, default=None,
                    help=".npz of backbone weights, used as loaded: every weight of the "
                         "backbones must be in it, with its shape and finite values "
                         "(default: random backbones with calibrated batch norm)")
    tr.add_argument("--partial-weights", action="store_true",
                    help="load what fits of --weights and keep the rest random; the run's "
                         "weights.json records what was loaded")
    tr.add_argument("--recalibrate", action="store_true",
                    help="calibrate the batch norm of the --weights backbones too")
    tr.add_argument("--no-calibrate", action="store_true",
                    help="keep the random backbones' batch-norm statistics (mean 0, variance "
                         "1)")
    tr.add_argument("--train-backbone", action="store_true",
                    help="train the backbones too (an extension: the patent freezes them; "
                         "no tap cache, each step runs them)")
    tr.add_argument("--init-from", type=Path, default=None, metavar="RUN",
                    help="start from the last checkpoint of another run (backbones and "
                         "decoder; any input size) instead of random, calibrated backbones")
    tr.add_argument("--validation", type=float, default=0.2, help="validation fraction")
    tr.add_argument("--learning-rate", type=float, default=1e-3,
                    help="Adam's learning rate ([0247])")
    tr.add_argument("--learning-rate-step", type=_learning_rate_step, action="append",
                    default=[], metavar="EPOCH:RATE",
                    help="from EPOCH on, use RATE (repeatable; an extension: the patent keeps "
                         "0.001; a resumed run may add steps for epochs not yet trained)")
    tr.add_argument("--seed", type=int, default=0,
                    help="seed of the split, the shuffling and the random weights")
    tr.add_argument("--resume", action="store_true", help="continue the run in --out")
    tr.add_argument("--keep-optimizer-state", action="store_true",
                    help="keep Adam's state in the last checkpoint, so that --resume can train "
                         "the finished run for more epochs (dropped by default: two thirds of "
                         "checkpoint.npz)")
    tr.add_argument("--keep-cache", action="store_true",
                    help="keep the tap cache (cache/) when training ends")
    tr.add_argument("--jobs", type=int, default=None,
                    help="extraction processes (default: one per core)")

    pr = sub.add_parser("predict", help="predict label images with a trained run")
    pr.add_argument("run", type=Path, help="run folder of refseg train")
    pr.add_argument("images", nargs="+", type=Path, help="image files (any format Pillow "
                                                          "reads)")
    pr.add_argument("--out", type=Path, required=True, help="output folder (one per image)")
    pr.add_argument("--max-pixels", type=int, default=None, help=_MAX_PIXELS_HELP)

    ev = sub.add_parser("evaluate", help="score a run on a data set (and compare runs)")
    ev.add_argument("run", type=Path, help="run folder of refseg train")
    ev.add_argument("data", type=Path, help="folder with images/ and labels/")
    ev.add_argument("--compare", type=Path, nargs="*", default=[],
                    help="more runs to score side by side (branches alone, gray input)")
    ev.add_argument("--out", type=Path, default=None,
                    help="write table.md, scores.json and panel.png here")

    au = sub.add_parser("audit", help="audits of refseg's own choices")
    asub = au.add_subparsers(dest="audit_command", required=True)
    ar = asub.add_parser("readings", help="how much claim 1's outcome depends on each reading "
                                          "of a missing formula (spec/sensitivity.md)")
    ar.add_argument("--out", type=Path, default=None,
                    help="write sensitivity.md and sensitivity.json here (default: rewrite "
                         "spec/sensitivity.md of the source checkout)")
    ar.add_argument("--quick", action="store_true",
                    help="3 photographs and 4 welds instead of 40 (seconds); without --out, "
                         "print the quick-check block and write nothing")
    ar.add_argument("--downstream", action="store_true",
                    help="also train demo-sized networks on every input kind of R-dataset "
                         "with refseg's and the paired claim-1 readings, and on the gray "
                         "image, at each of --seeds (CPU hours; with --quick, tiny "
                         "trainings)")
    ar.add_argument("--seeds", type=_seed_list, default=None,
                    help="training seeds of --downstream, comma-separated (default 0,1,2)")
    ar.add_argument("--record", type=Path, default=None,
                    help="record each --downstream run in this file as it finishes and skip "
                         "the runs it holds (resume a killed audit); without --downstream, "
                         "render the R-dataset section from the runs it holds")
    ar.add_argument("--count", type=int, default=None,
                    help="training welds of --downstream (default: the demo's 160)")
    ar.add_argument("--test-count", type=int, default=None,
                    help="test welds of --downstream (default: the demo's 40)")
    ar.add_argument("--epochs", type=int, default=None,
                    help="epochs of --downstream (default: the demo's 8)")
    ar.add_argument("--jobs", type=int, default=None, help="extraction processes (trainings)")

    go = sub.add_parser("golden", help="golden-file bundles for cross-checking other "
                                       "implementations")
    gsub = go.add_subparsers(dest="golden_command", required=True)
    gw = gsub.add_parser("write", help="write DIR/manifest.json and DIR/arrays.npz")
    gw.add_argument("folder", type=Path, help="bundle folder (created or replaced)")
    gw.add_argument("--with-weights", action="store_true",
                    help="also write the network's weights into the bundle (weights.npz, "
                         "about 195 MB)")
    gw.add_argument("--images", nargs="+", type=Path, default=(), metavar="IMAGE",
                    help="also the claim-1 arrays and flagged vectors of these image files")
    gw.add_argument("--max-pixels", type=int, default=None, help=_MAX_PIXELS_HELP)
    gd = gsub.add_parser("candidate", help="write refseg's own candidate for a bundle (every "
                                           "array, whole): the self-check")
    gd.add_argument("folder", type=Path, help="bundle folder")
    gd.add_argument("destination", type=Path, help="the candidate .npz to write")
    gd.add_argument("--force", action="store_true", help=_FORCE_HELP)
    gc = gsub.add_parser("check", help="compare a candidate .npz with a bundle")
    gc.add_argument("folder", type=Path, help="bundle folder")
    gc.add_argument("candidate", type=Path, help=".npz keyed by the manifest's array names")
    gc.add_argument("--report", type=Path, default=None, help="write the rows as JSON here")
    gc.add_argument("--force", action="store_true", help=_FORCE_HELP + " (--report)")
    gc.add_argument("--part", action="append", default=None, choices=("claim1", "net", "ops"),
                    help="check only this part of the bundle (repeatable; default: all)")
    gc.add_argument("--select", action="append", default=None, metavar="PATTERN",
                    help="check only arrays matching this shell pattern (repeatable)")
    gc.add_argument("--allow-extra", action="store_true",
                    help="candidate keys that name no array of the bundle do not fail")
    gc.add_argument("--verbose", action="store_true",
                    help="list the passing arrays too, not only the failures")
    gr = gsub.add_parser("reference", help="refseg's claim-1 arrays of image files, one "
                                           "OUT/<image>.npz each, under the bundle's names")
    gr.add_argument("images", nargs="+", type=Path,
                    help="image files, or folders of them (any format `refseg edges` reads)")
    gr.add_argument("--out", type=Path, required=True, help="reference folder")
    gm = gsub.add_parser("compare", help="compare a folder of candidate .npz files with a "
                                         "reference folder, image by image")
    for sub_parser in (gr, gm):
        sub_parser.add_argument("--jobs", type=int, default=None,
                                help="processes (default: one per core)")
    gr.add_argument("--max-pixels", type=int, default=None, help=_MAX_PIXELS_HELP)
    gm.add_argument("reference", type=Path, help="folder of `refseg golden reference`")
    gm.add_argument("candidate", type=Path, help="folder of <image>.npz, the same keys")
    gm.add_argument("--report", type=Path, default=None,
                    help="write the summary and each failing image as JSON here")
    gm.add_argument("--force", action="store_true", help=_FORCE_HELP + " (--report)")
    gx = gsub.add_parser("weights", help="regenerate the bundle's network weights as .npz")
    gx.add_argument("folder", type=Path, help="bundle folder")
    gx.add_argument("destination", type=Path, help="the .npz weight file to write")
    gx.add_argument("--force", action="store_true", help=_FORCE_HELP)
    return p


def _edges(args) -> str:
    from refseg.claim1.outputs import write_edge_outputs

    return "\n".join(str(f) for f in write_edge_outputs(args.images, args.out, args.sigma,
                                                       max_pixels=args.max_pixels,
                                                       arrays=args.arrays))


def _demo(args) -> str:
    from refseg.run.config import DemoSettings

    # the settings check themselves before the network and the kernels are imported
    settings = DemoSettings(
        count=args.count, test_count=args.test_count, epochs=args.epochs,
        input_hw=_input_size(args.input_size), seed=args.seed, jobs=args.jobs,
        train_backbone=args.train_backbone, keep_checkpoints=args.keep_checkpoints)
    if args.seeds is not None:
        from refseg.run.seeds import run_demo_seeds

        return str(run_demo_seeds(args.out, settings, args.seeds))
    from refseg.run.demo import run_demo

    return str(run_demo(args.out, settings))


def _report(args) -> str:
    from refseg.report.chart import write_chart

    return str(write_chart(args.folder, command=f"refseg report {args.folder}"))


def _synth(args) -> str:
    from refseg.data.synthetic_options import check_synthetic_options

    check_synthetic_options(args.out, args.count, args.seed, args.size)
    from refseg.data.synthetic import write_synthetic_dataset

    out = write_synthetic_dataset(args.out, args.count, args.seed, args.size)
    return (f"{out}: {int(args.count)} synthetic weld images in {out / 'images'}, "
            f"labels in {out / 'labels'}")


def _dataset(args) -> str:
    from refseg.data.dataset import describe_dataset

    return describe_dataset(args.folder)


def _trace(args) -> str:
    from refseg.audit import trace

    return trace.write_matrix() if args.write else trace.matrix_text()


def _explain(args) -> str:
    from refseg.audit import trace

    if args.image is not None or args.out is not None:
        if args.element != "claim1" or args.image is None or args.out is None \
                or args.golden is not None:
            raise InputError("explain: --image and --out go together, with the element "
                             "claim1: refseg explain claim1 --image IMAGE --out DIR")
        from refseg.report.walkthrough import write_walkthrough

        return str(write_walkthrough(args.image, args.out))
    if args.element == "claim1":
        raise InputError("claim1: not one element; claim 1 step by step on an image is "
                         "refseg explain claim1 --image IMAGE --out DIR")
    pinned = None
    if args.golden is not None:
        from refseg.golden import pinned_elements, read_bundle

        pinned = pinned_elements(read_bundle(args.golden)[0])
    return trace.explain_element(args.element, pinned, args.golden)


def _weights(args) -> str:
    from refseg.models import h5, weights

    if args.weights_command == "convert":
        return h5.convert_h5(args.source, args.destination, force=args.force).text()
    return weights.inspect_npz(args.path).text()


def _model(args) -> str:
    from refseg.models import ResMobileNet
    from refseg.models.summary import format_summary

    size = _input_size(args.input_size)
    return format_summary(ResMobileNet(size), size, args.part)


def _input_size(text: str) -> tuple[int, int]:
    """"224x224" -> (224, 224); InputError otherwise (the ranges are the verbs' to check)."""
    try:
        h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise InputError(f"input size must be HxW, e.g. 224x224, got {text!r}") from None
    return h, w


def _learning_rate_step(text: str) -> tuple[int, float]:
    try:
        epoch, rate = text.split(":")
        return int(epoch), float(rate)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected EPOCH:RATE, got {text!r}") from None


def _seed_list(text: str) -> tuple[int, ...]:
    """"0,1,2" -> (0, 1, 2) (the audit checks the seeds themselves)."""
    try:
        return tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seeds such as 0,1,2, got {text!r}") from None


def _train(args) -> str:
    from refseg.run.config import TrainConfig

    config = TrainConfig(
        epochs=args.epochs, batch_size=args.batch_size, input_hw=_input_size(args.input_size),
        input_kind=args.input, seed=args.seed, learning_rate=args.learning_rate,
        learning_rate_steps=tuple(args.learning_rate_step),
        validation_fraction=args.validation,
        branches=BRANCHES if args.branches == "both" else (args.branches,),
        weights=None if args.weights is None else str(args.weights),
        partial_weights=args.partial_weights, recalibrate=args.recalibrate,
        calibrate=not args.no_calibrate, train_backbone=args.train_backbone,
        init_from=None if args.init_from is None else str(args.init_from))
    # the options are refused before the network and the kernels are imported
    config.check()
    from refseg.run.training import train

    history = train(args.data, args.out, config, resume=args.resume, jobs=args.jobs,
                    keep_optimizer_state=args.keep_optimizer_state,
                    keep_cache=args.keep_cache)
    return str(args.out / "metrics.jsonl") if history else str(args.out)


def _predict(args) -> str:
    from refseg.run.evaluation import write_predictions

    done = write_predictions(args.run, args.images, args.out, max_pixels=args.max_pixels)
    return "\n".join(f"{folder}  {seconds * 1e3:.0f} ms" for folder, seconds in done)


def _evaluate(args) -> str:
    from refseg.publish import check_output_folder
    from refseg.run.evaluation import evaluate_runs, format_table, write_evaluation

    if args.out is not None:
        check_output_folder(args.out)
    rows, pairs, predictions = evaluate_runs(args.data, [args.run, *args.compare])
    if args.out is not None:
        write_evaluation(args.out, rows, pairs, predictions)
    return format_table(rows)


def _audit(args) -> str:
    from refseg.audit.readings import run_audit

    return run_audit(args.out, quick=args.quick, downstream=args.downstream, jobs=args.jobs,
                     count=args.count, test_count=args.test_count, epochs=args.epochs,
                     seeds=args.seeds, record=args.record)


def _golden(args) -> tuple[str, int]:
    from refseg import golden
    from refseg.publish import check_single_output, settle, write_json

    if args.golden_command == "write":
        done = golden.write_bundle(args.folder, with_weights=args.with_weights,
                                   images=args.images, max_pixels=args.max_pixels)
        weights = (f", {golden.WEIGHTS} {done.weights_bytes / 1e6:.1f} MB"
                   if args.with_weights else "")
        return (f"{done.folder}: {done.arrays} arrays, {golden.ARRAYS} "
                f"{done.npz_bytes / 1e6:.1f} MB{weights}, in {done.seconds:.1f} s"), 0
    bundle = getattr(args, "folder", None)
    if args.golden_command != "write" and bundle is not None and bundle.is_dir():
        settle(bundle)  # a bundle whose publication a killed writer began is completed
    if args.golden_command == "candidate":
        from refseg.golden.candidate import own_candidate

        check_single_output(args.destination, [args.folder], args.force)
        count, missing = own_candidate(args.folder, args.destination)
        note = (f"; this refseg does not compute {len(missing)} of the bundle's arrays "
                f"({missing[0]} ...)" if missing else "")
        return (f"{args.destination}: refseg's candidate, {count} arrays{note}; check it with "
                f"`refseg golden check {args.folder} {args.destination}`"), 0
    if args.golden_command in ("reference", "compare"):
        from refseg.golden import scale

        if args.golden_command == "reference":
            names = scale.write_references(args.images, args.out, args.jobs, args.max_pixels)
            return f"{args.out}: reference arrays of {len(names)} images", 0
        if args.report is not None:
            check_single_output(args.report, [args.reference, args.candidate], args.force)
        summary = scale.summarize(scale.compare_folders(args.reference, args.candidate,
                                                        args.jobs))
        if args.report is not None:
            write_json(args.report, summary)
        return scale.summary_text(summary), 0 if summary["passed"] == summary["images"] else 1
    if args.golden_command == "weights":
        check_single_output(args.destination, [args.folder], args.force)
        digest = golden.export_weights(args.folder, args.destination)
        return f"{args.destination}: network weights, sha256 {digest}", 0
    if args.report is not None:
        check_single_output(args.report, [args.folder, args.candidate], args.force, "--force")
    report = golden.check_bundle(args.folder, args.candidate, args.select, args.part,
                                 args.allow_extra)
    if args.report is not None:
        report.write_json(args.report)
    return report.text(args.verbose), 0 if report.passed else 1


_COMMANDS = {"edges": _edges, "demo": _demo, "report": _report, "synth": _synth,
             "dataset": _dataset, "trace": _trace, "explain": _explain, "weights": _weights,
             "model": _model, "train": _train, "predict": _predict, "evaluate": _evaluate,
             "audit": _audit}


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
        if args.command == "golden":
            text, status = _golden(args)
            print(text)
            return status
        print(_COMMANDS[args.command](args))
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
