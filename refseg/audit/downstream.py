"""The downstream part of the sensitivity audit: demo-sized trainings on the feature images of
some alternative readings, against refseg's readings and the gray input, in one run.

Each run is a ``refseg demo`` fusion run (frozen random backbones with calibrated batch norm,
the demo's synthetic welds, epochs, batch and input size; R-frozen) whose feature input comes
from :func:`refseg.claim1.alternatives.feature_image` (``TrainConfig.feature_reading``). All
runs are scored on the demo's test welds.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from refseg.data.synthetic import write_synthetic_dataset
from refseg.run.config import DemoSettings, TrainConfig
from refseg.run.evaluation import evaluate_runs
from refseg.run.training import remove_cache, train

INFRASTRUCTURE = "the sensitivity audit's trainings"

#: Seed offset of the test welds (the demo's).
TEST_SEED_OFFSET = 100_000
#: The quick mode's trainings: as the demo's smallest test, seconds each.
QUICK = DemoSettings(count=6, test_count=2, epochs=1, input_hw=(32, 96))


def runs_for(alternatives) -> list[tuple[str, str, str | None]]:
    """(name, input kind, feature reading) of every run: the gray input, refseg's readings,
    then each alternative."""
    return ([("gray input", "gray", None), ("chosen readings", "feature", None)]
            + [(name, "feature", name) for name in alternatives])


def run_downstream(work, alternatives, settings: DemoSettings = DemoSettings(),
                   log=sys.stderr) -> dict:
    """Train and score every run of :func:`runs_for` in the folder ``work``.

    Parameters
    ----------
    work : path
        An empty or new folder for the data sets and runs (the caller removes it).
    alternatives : list of str
        Names of ``refseg.claim1.alternatives.ALTERNATIVES``.
    settings : DemoSettings
        Data set sizes, epochs, batch, input size, seed, extraction processes.
    log : file

    Returns
    -------
    dict
        ``settings`` (JSON-ready) and ``runs``: per run its name, input, reading, final
        validation accuracy, test pixel accuracy, per-class IoU, mIoU, boundary F1 and
        training seconds.
    """
    work = Path(work)
    write_synthetic_dataset(work / "data", settings.count, settings.seed)
    write_synthetic_dataset(work / "test", settings.test_count,
                            settings.seed + TEST_SEED_OFFSET)
    runs = runs_for(alternatives)
    histories, seconds = {}, {}
    for index, (name, kind, reading) in enumerate(runs, start=1):
        print(f"downstream {index}/{len(runs)}: {name}", file=log)
        config = TrainConfig(epochs=settings.epochs, batch_size=settings.batch_size,
                             input_hw=settings.input_hw, input_kind=kind, seed=settings.seed,
                             feature_reading=reading)
        folder = work / "runs" / f"run{index}"
        started = time.perf_counter()
        histories[name] = train(work / "data", folder, config, jobs=settings.jobs, log=log)
        seconds[name] = time.perf_counter() - started
        remove_cache(folder)
    rows, _, _ = evaluate_runs(work / "test", [work / "runs" / f"run{i}"
                                               for i in range(1, len(runs) + 1)])
    out = []
    for (name, kind, reading), row in zip(runs, rows):
        s = row.scores
        out.append({"name": name, "input": kind, "reading": reading,
                    "val_pixel_accuracy": histories[name][-1]["val_pixel_accuracy"],
                    "pixel_accuracy": float(s.pixel_accuracy),
                    "iou": [None if v != v else float(v) for v in s.class_iou],
                    "miou": float(s.mean_iou),
                    "boundary_f1": float(s.boundary_f1), "seconds": seconds[name]})
    return {"settings": {"count": settings.count, "test_count": settings.test_count,
                         "epochs": settings.epochs, "batch_size": settings.batch_size,
                         "input_hw": list(settings.input_hw), "seed": settings.seed,
                         "test_seeds": [settings.seed + TEST_SEED_OFFSET,
                                        settings.seed + TEST_SEED_OFFSET
                                        + settings.test_count - 1]},
            "runs": out}
