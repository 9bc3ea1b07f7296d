"""``refseg demo``: the whole method on synthetic weld seams, from nothing, in a few minutes.

1. Draw a synthetic weld-seam data set (images and [0263]-coloured labels) and a separate test
   set ([0201]-[0203]).
2. Claim 1 on the first images: every intermediate and the feature-region image.
3. Train the fusion network on the feature images (the patent's input, [0121]) and, for the
   patent's comparisons, on the plain gray images ([0121], [0264]) and with each backbone
   branch alone (fig. 9, [0259]-[0260]); random backbones with calibrated batch norm
   (R-frozen), since no pretrained weights can be downloaded here.
4. Evaluate every run on the test set, keep the weights of the runs worth predicting with
   (the patent's network and the best one; all with ``keep_checkpoints``), and write the claim
   chart ``index.html`` (:mod:`refseg.report.chart`), ``index.md`` with the figures and tables
   (:mod:`refseg.report.results`), and ``demo.json``, the record the chart is drawn from.
"""
from __future__ import annotations

import dataclasses
import shutil
import sys
import time
from datetime import datetime
from pathlib import Path

from refseg import publish
from refseg.images import read_image
from refseg._version import __version__
from refseg.claim1 import features, outputs
from refseg.data import dataset
from refseg.data.synthetic import write_synthetic_dataset
from refseg.models import ResMobileNet
from refseg.models.mobilenetv2 import TAPS as MOBILENET_TAPS
from refseg.models.resnet50v2 import TAPS as RESNET_TAPS
from refseg.models.summary import summarize
from refseg.run.config import DemoSettings, TrainConfig
from refseg.run.evaluation import comparison_panel, evaluate_runs
from refseg.run.metrics import contour_coverage
from refseg.run.records import machine
from refseg.run.training import PRUNED_RECORD, remove_cache, train
from refseg.cite import implements

#: The demo's record of itself, from which ``refseg report`` redraws the chart.
RECORD = "demo.json"
#: The name stem of the test welds (``test/images/test_weld_00000.png``, ...).
TEST_STEM = "test_weld"
#: The files of a run that hold its weights (what pruning removes).
WEIGHT_FILES = ("checkpoint.npz", "backbones.npz")


def _contour_coverage(data_dir) -> float:
    """Share of the labels' contour pixels within 1 pixel of a feature-map pixel: how much of
    the seam's edges the claim-1 vote keeps."""
    covered = total = 0
    for sample in list(dataset.load_dataset(data_dir))[:20]:
        rgb, classes = dataset.load_pair(sample)
        kept, all_ = contour_coverage(features.extract(rgb).feature_map, classes)
        covered, total = covered + kept, total + all_
    return covered / max(total, 1)


@implements("claim1.step1.acquire", "claim1.step3.train", "claim1.step4.predict",
            "claim5.output_module")
def run_demo(out, settings: DemoSettings = DemoSettings(), log=None, pages=None) -> Path:
    """Run the demo into the folder ``out``; returns ``out / "index.html"``, the claim chart.

    Outputs are staged in a hidden folder and renamed into place at the end: an interrupted
    demo leaves nothing half-written, and the log (default: ``sys.stderr``) names the folders
    where they end up. ``pages(folder, shown_as)`` writes the pages that show the staged
    folder (``refseg.report.chart.write_demo_pages``, which the command passes), before it is
    renamed into place; None: no pages.

    Notes
    -----
    1. Draw the training and test welds ([0201]-[0203]).
    2. Claim 1 on the first two training images, every intermediate written out.
    3. Train each run of ``settings.runs`` ([0122], [0215], [0256]).
    4. Score every run on the test set ([0257]-[0260]); remove the weights of the runs other
       than the patent's network and the best one, unless ``keep_checkpoints``; write
       ``demo.json``, and the pages (``index.md`` and ``index.html``).

    References
    ----------
    Claims 1-5; [0201]-[0264].
    """
    started, clock = time.perf_counter(), datetime.now().astimezone()
    log = sys.stderr if log is None else log  # the stderr of the call, not of the import
    out = Path(out)
    with publish.staged_folders(out) as staging:
        root = staging.root
        print("1/4 synthetic weld-seam data", file=log)
        write_synthetic_dataset(root / "data", settings.count, settings.seed,
                                jobs=settings.jobs)
        # the test welds are named apart from the training welds: weld_00000 is one image
        write_synthetic_dataset(root / "test", settings.test_count, settings.seed + 100_000,
                                stem=TEST_STEM, jobs=settings.jobs)
        print("2/4 claim 1 on the first images", file=log)
        claim1 = staging.folder("claim1")
        shown = list(dataset.load_dataset(root / "data"))[:2]
        for sample in shown:
            loaded = read_image(sample.image_path)
            # the report names the image where it will be, not where it was staged
            loaded = dataclasses.replace(
                loaded, path=str(out / sample.image_path.relative_to(root)))
            folder = claim1 / sample.stem
            folder.mkdir()
            outputs.write_outputs(folder, loaded, features.extract(loaded.pixels))
        coverage = _contour_coverage(root / "data")
        timings = {}
        for index, (name, branches, kind) in enumerate(settings.runs, start=1):
            print(f"3/4 training {index}/{len(settings.runs)}: {name}", file=log)
            config = TrainConfig(epochs=settings.epochs, batch_size=settings.batch_size,
                                 input_hw=settings.input_hw, input_kind=kind,
                                 seed=settings.seed, branches=branches,
                                 train_backbone=settings.train_backbone)
            t = time.perf_counter()
            # a demo is not resumed (an interruption removes its staging): each run's
            # checkpoint is written once, after its last epoch
            train(root / "data", root / "runs" / name, config, jobs=settings.jobs, log=log,
                  shown_as=out / "runs" / name, checkpoint_every_epoch=False)
            timings[name] = time.perf_counter() - t
            remove_cache(root / "runs" / name)
        print("4/4 evaluation on the test set", file=log)
        run_dirs = [root / "runs" / name for name, _, _ in settings.runs]
        rows, pairs, predictions = evaluate_runs(root / "test", run_dirs)
        for row, (name, _, _) in zip(rows, settings.runs):
            row.name = name
        publish.write_png(root / "predictions.png", comparison_panel(
            pairs, predictions, titles=["image", "label", *(r.name for r in rows)]))
        shutil.copyfile(run_dirs[0] / "curves.png", root / "curves.png")
        publish.write_json(root / "scores.json", [r.as_dict() for r in rows])
        summary = summarize(ResMobileNet(settings.input_hw), settings.input_hw)
        kept = _prune(settings, rows, run_dirs, out)
        record = _record(settings, out, clock, time.perf_counter() - started, shown, coverage,
                         timings, kept, summary)
        publish.write_json(root / RECORD, record)
        if pages is not None:
            pages(root, out)
    print(f"demo done in {time.perf_counter() - started:.0f} s: {out / 'index.html'} "
          f"(the claim chart; open it in a browser), {out / 'index.md'}", file=log)
    return out / "index.html"


def _prune(settings, rows, run_dirs, out) -> dict:
    """Remove the weights of the runs not worth keeping; returns {run: its weights' bytes,
    and whether they were kept}. The patent's network (the first run) and the best run by
    test pixel accuracy keep theirs; all do with ``keep_checkpoints``."""
    best = max(rows, key=lambda r: r.scores.pixel_accuracy).name
    kept = {}
    for row, run in zip(rows, run_dirs):
        size = sum((run / f).stat().st_size for f in WEIGHT_FILES if (run / f).is_file())
        keep = settings.keep_checkpoints or row.name in (rows[0].name, best)
        kept[row.name] = {"weight_bytes": size, "kept": keep}
        if not keep:
            publish.write_json(run / PRUNED_RECORD, {
                "removed": list(WEIGHT_FILES), "bytes": size,
                "keep_with": _keep_command(settings, out)})
            for name in WEIGHT_FILES:
                (run / name).unlink(missing_ok=True)
    return kept


def _keep_command(settings, out) -> str:
    return dataclasses.replace(settings, keep_checkpoints=True).command(out)


def _record(settings, out, clock, seconds, shown, coverage, timings, kept, summary) -> dict:
    parts = {}
    for r in summary:
        part = parts.setdefault(r.part, {"parameters": 0, "trainable": 0, "macs": 0})
        part["parameters"] += r.parameters
        part["trainable"] += r.trainable
        part["macs"] += r.macs
    shapes = {r.name: list(r.output_shape) for r in summary}
    taps = [[name, shapes[name]] for name in RESNET_TAPS + MOBILENET_TAPS if name in shapes]
    return {
        "refseg_version": __version__, "command": settings.command(out),
        "keep_command": _keep_command(settings, out),
        "started": clock.isoformat(timespec="seconds"),
        "finished": datetime.now().astimezone().isoformat(timespec="seconds"),
        "seconds": seconds, "machine": machine(), "out": str(out),
        "settings": {"count": settings.count, "test_count": settings.test_count,
                     "epochs": settings.epochs, "batch_size": settings.batch_size,
                     "input_hw": list(settings.input_hw), "seed": settings.seed,
                     "jobs": settings.jobs, "train_backbone": settings.train_backbone,
                     "keep_checkpoints": settings.keep_checkpoints},
        "claim1_images": [s.stem for s in shown],
        "contour_coverage": coverage,
        "runs": [{"name": name, "branches": list(branches), "input": kind,
                  "train_seconds": timings[name], **kept[name]}
                 for name, branches, kind in settings.runs],
        "network": {"parts": parts, "taps": taps},
    }
