"""The verbs of data, training and results: ``demo``, ``report``, ``synth``, ``dataset check``,
``train``, ``predict`` and ``evaluate``.

Their defaults are those of :class:`~refseg.run.config.DemoSettings` and
:class:`~refseg.run.config.TrainConfig`; the settings check every value before the network and
the kernels are imported.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from refseg.commands.verb import (Verb, add_jobs, add_max_pixels, input_size, optional_path,
                                  size_text)
from refseg.data.kinds import INPUT_KINDS
from refseg.vocabulary import DEFAULT_ROUTE, ROUTES
from refseg.run.config import BRANCHES, DemoSettings, TrainConfig
from refseg.data.synthetic_options import WELD_SHAPE

INFRASTRUCTURE = "the command line: the data, training and result verbs"
#: ``train --branches``: both backbones (the patent's network) or one alone.
BOTH_BRANCHES = "both"


def _demo_arguments(parser):
    default = DemoSettings()
    parser.add_argument("--out", type=Path, default=Path("demo-out"), help="report folder")
    parser.add_argument("--count", type=int, default=default.count,
                        help="synthetic training welds")
    parser.add_argument("--test-count", type=int, default=default.test_count,
                        help="synthetic test welds")
    parser.add_argument("--epochs", type=int, default=default.epochs,
                        help="training epochs of each run")
    parser.add_argument("--input-size", default=size_text(default.input_hw),
                        help="network input HxW")
    parser.add_argument("--seed", type=int, default=default.seed, help="seed of the first weld")
    parser.add_argument("--seeds", type=int, default=None,
                        help="run the demo with seeds S, S+1, ... (at least 2) into "
                             "--out/seed-<s>/ and write the scores' mean and spread (seeds.md, "
                             "seeds.json)")
    add_jobs(parser, "processes that draw the welds and extract claim 1 (default: one per "
                     "core)")
    parser.add_argument("--train-backbone", action="store_true",
                        help="train the backbones too (an extension; the patent freezes them)")
    parser.add_argument("--keep-checkpoints", action="store_true",
                        help="keep the weights of all four runs, about 280 MB (default: only "
                             "the patent's network and the best run keep theirs)")


def _demo(args) -> str:
    # the settings check themselves before the network and the kernels are imported
    settings = DemoSettings(
        count=args.count, test_count=args.test_count, epochs=args.epochs,
        input_hw=input_size(args.input_size), seed=args.seed, jobs=args.jobs,
        train_backbone=args.train_backbone, keep_checkpoints=args.keep_checkpoints)
    from refseg.report.chart import write_demo_pages

    if args.seeds is not None:
        from refseg.run.seeds import run_demo_seeds

        return str(run_demo_seeds(args.out, settings, args.seeds, pages=write_demo_pages))
    from refseg.run.demo import run_demo

    return str(run_demo(args.out, settings, pages=write_demo_pages))


def _report_arguments(parser):
    parser.add_argument("folder", type=Path, help="a folder of refseg demo or refseg train")


def _report(args) -> str:
    from refseg.report.chart import rewrite_chart

    return str(rewrite_chart(args.folder, command=f"refseg report {args.folder}"))


def _synth_arguments(parser):
    # count, seed and size are parsed by write_synthetic_dataset, not argparse, so that a bad
    # value ends with refseg's one-line error like every other bad input
    parser.add_argument("--count", required=True, help="number of image/label pairs (>= 1)")
    parser.add_argument("--out", type=Path, required=True, help="data set folder")
    parser.add_argument("--seed", default="0", help="seed of the first image; image i uses S+i")
    parser.add_argument("--size", default=size_text(WELD_SHAPE), help="HxW, rows x cols")
    add_jobs(parser, "processes that draw the images (default: one per core)")


def _synth(args) -> str:
    from refseg.data.synthetic_options import check_synthetic_options

    check_synthetic_options(args.out, args.count, args.seed, args.size)
    from refseg.data.synthetic import write_synthetic_dataset

    out = write_synthetic_dataset(args.out, args.count, args.seed, args.size, jobs=args.jobs)
    return (f"{out}: {int(args.count)} synthetic weld images in {out / 'images'}, "
            f"labels in {out / 'labels'}")


def _dataset_check_arguments(parser):
    parser.add_argument("folder", type=Path, help="folder with images/ and labels/")


def _dataset_check(args) -> str:
    from refseg.data.dataset import describe_dataset

    return describe_dataset(args.folder)


def _learning_rate_step(text: str) -> tuple[int, float]:
    try:
        epoch, rate = text.split(":")
        return int(epoch), float(rate)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected EPOCH:RATE, got {text!r}") from None


def _train_arguments(parser):
    default = TrainConfig()
    parser.add_argument("data", type=Path, help="folder with images/ and labels/")
    parser.add_argument("--out", type=Path, required=True, help="run folder")
    parser.add_argument("--epochs", type=int, default=default.epochs,
                        help="epochs to train (in all, when resuming)")
    parser.add_argument("--batch-size", type=int, default=default.batch_size,
                        help="images per Adam step")
    parser.add_argument("--input-size", default=size_text(default.input_hw),
                        help="HxW, multiples of 32")
    parser.add_argument("--input", choices=INPUT_KINDS, default=default.input_kind,
                        help="the claim-1 feature image (refseg's reading), the plain gray "
                             "image, or another reading of the feature regions (R-dataset: "
                             "the gray image masked by the map, undilated or dilated, or gray "
                             "and map as channels)")
    parser.add_argument("--branches", choices=(BOTH_BRANCHES, *BRANCHES), default=BOTH_BRANCHES,
                        help="both backbones (the patent's) or one alone")
    _train_weights_arguments(parser)
    parser.add_argument("--init-from", type=Path, default=None, metavar="RUN",
                        help="start from the last checkpoint of another run (backbones and "
                             "decoder; any input size) instead of random, calibrated backbones")
    parser.add_argument("--validation", type=float, default=default.validation_fraction,
                        help="validation fraction")
    parser.add_argument("--learning-rate", type=float, default=default.learning_rate,
                        help="Adam's learning rate ([0247])")
    parser.add_argument("--learning-rate-step", type=_learning_rate_step, action="append",
                        default=[], metavar="EPOCH:RATE",
                        help="from EPOCH on, use RATE (repeatable; an extension: the patent "
                             "keeps 0.001; a resumed run may add steps for epochs not yet "
                             "trained)")
    parser.add_argument("--seed", type=int, default=default.seed,
                        help="seed of the split, the shuffling and the random weights")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out")
    parser.add_argument("--keep-optimizer-state", action="store_true",
                        help="keep Adam's state in the last checkpoint, so that --resume can "
                             "train the finished run for more epochs (dropped by default: two "
                             "thirds of checkpoint.npz)")
    parser.add_argument("--keep-cache", action="store_true",
                        help="keep the tap cache (cache/) when training ends")
    add_jobs(parser)


def _train_weights_arguments(parser):
    """The options of the backbones' starting weights."""
    parser.add_argument("--weights", type=Path, default=None,
                        help=".npz of backbone weights, used as loaded: every weight of the "
                             "backbones must be in it, with its shape and finite values "
                             "(default: random backbones with calibrated batch norm)")
    parser.add_argument("--partial-weights", action="store_true",
                        help="load what fits of --weights and keep the rest random; the run's "
                             "weights.json records what was loaded")
    parser.add_argument("--recalibrate", action="store_true",
                        help="calibrate the batch norm of the --weights backbones too")
    parser.add_argument("--no-calibrate", action="store_true",
                        help="keep the random backbones' batch-norm statistics (mean 0, "
                             "variance 1)")
    parser.add_argument("--train-backbone", action="store_true",
                        help="train the backbones too (an extension: the patent freezes them; "
                             "no tap cache, each step runs them)")


def _train(args) -> str:
    config = TrainConfig(
        epochs=args.epochs, batch_size=args.batch_size, input_hw=input_size(args.input_size),
        input_kind=args.input, seed=args.seed, learning_rate=args.learning_rate,
        learning_rate_steps=tuple(args.learning_rate_step),
        validation_fraction=args.validation,
        branches=BRANCHES if args.branches == BOTH_BRANCHES else (args.branches,),
        weights=optional_path(args.weights), partial_weights=args.partial_weights,
        recalibrate=args.recalibrate, calibrate=not args.no_calibrate,
        train_backbone=args.train_backbone, init_from=optional_path(args.init_from))
    # the options are refused before the network and the kernels are imported
    config.check()
    from refseg.run.training import train

    history = train(args.data, args.out, config, resume=args.resume, jobs=args.jobs,
                    keep_optimizer_state=args.keep_optimizer_state, keep_cache=args.keep_cache)
    return str(args.out / "metrics.jsonl") if history else str(args.out)


def _predict_arguments(parser):
    parser.add_argument("run", type=Path, help="run folder of refseg train")
    parser.add_argument("images", nargs="+", type=Path,
                        help="image files (any format Pillow reads)")
    parser.add_argument("--out", type=Path, required=True,
                        help="output folder (one per image)")
    add_max_pixels(parser)
    _add_route(parser)


def _add_route(parser):
    parser.add_argument("--route", choices=ROUTES, default=DEFAULT_ROUTE,
                        help="what runs the network: the engine's plan (default; packed "
                             "weights, fused layers) or the reference layer graph")


def _predict(args) -> str:
    from refseg.run.evaluation import write_predictions

    done = write_predictions(args.run, args.images, args.out, max_pixels=args.max_pixels,
                             route=args.route)
    return "\n".join(f"{folder}  {seconds * 1e3:.0f} ms" for folder, seconds in done)


def _evaluate_arguments(parser):
    parser.add_argument("run", type=Path, help="run folder of refseg train")
    parser.add_argument("data", type=Path, help="folder with images/ and labels/")
    parser.add_argument("--compare", type=Path, nargs="*", default=[],
                        help="more runs to score side by side (branches alone, gray input)")
    parser.add_argument("--out", type=Path, default=None,
                        help="write table.md, scores.json and panel.png here")
    _add_route(parser)


def _evaluate(args) -> str:
    from refseg.publish import check_output_folder
    from refseg.run.evaluation import evaluate_runs, format_table, write_evaluation

    if args.out is not None:  # refused before the runs are scored
        check_output_folder(args.out)
    rows, pairs, predictions = evaluate_runs(args.data, [args.run, *args.compare],
                                             route=args.route)
    if args.out is not None:
        write_evaluation(args.out, rows, pairs, predictions)
    return format_table(rows)


DEMO = Verb(("demo",), "the main job: the whole method on synthetic weld seams",
            _demo_arguments, _demo)
REPORT = Verb(("report",), "(re)write the claim chart index.html of a demo or run folder",
              _report_arguments, _report)
SYNTH = Verb(("synth",), "write a synthetic weld data set (images and labels)",
             _synth_arguments, _synth)
DATASET_CHECK = Verb(("dataset", "check"), "check every image/label pair; print a summary",
                     _dataset_check_arguments, _dataset_check)
TRAIN = Verb(("train",), "train the fusion network on a data set folder",
             _train_arguments, _train)
PREDICT = Verb(("predict",), "predict label images with a trained run",
               _predict_arguments, _predict)
EVALUATE = Verb(("evaluate",), "score a run on a data set (and compare runs)",
                _evaluate_arguments, _evaluate)
