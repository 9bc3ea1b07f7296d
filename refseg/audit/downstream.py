"""The downstream part of the sensitivity audit: demo-sized trainings on the network inputs of
the readings of R-dataset and of some claim-1 alternatives, against the gray input.

Each run is a ``refseg demo`` fusion run (frozen random backbones with calibrated batch norm,
the demo's synthetic welds, epochs, batch and input size; R-frozen) whose input is one kind of
:mod:`refseg.data.kinds`, built from the feature map of refseg's readings or of an alternative
(:func:`refseg.claim1.alternatives.feature_image`, ``TrainConfig.feature_reading``). All runs
are scored on the demo's test welds.

:func:`run_grid` trains the grid of R-dataset: every input kind (``refseg.data.kinds``) with
refseg's claim-1 readings and with :data:`PAIRED_READINGS`, over several training seeds, each
run recorded as it is scored, so that an interrupted grid resumes and a partial one is usable.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from refseg.data.kinds import FEATURE, FEATURE_KINDS, GRAY
from refseg.data.synthetic import write_synthetic_dataset
from refseg.errors import InputError
from refseg.run.config import DemoSettings, TrainConfig
from refseg.run.evaluation import evaluate_runs
from refseg.run.training import train

INFRASTRUCTURE = "the sensitivity audit's trainings"

#: Seed offset of the test welds (the demo's).
TEST_SEED_OFFSET = 100_000
#: The quick mode's trainings: as the demo's smallest test, seconds each.
QUICK = DemoSettings(count=6, test_count=2, epochs=1, input_hw=(32, 96))
#: The first line of a record file (:func:`run_grid`) names it so.
RECORD_KIND = "refseg audit readings --downstream"


# ------------------------------------------------------------------ the R-dataset grid
#: The claim-1 readings each input kind built from the feature map is trained with: refseg's
#: (None) and the two that raised the feature input most in the single-seed screen.
PAIRED_READINGS = (None, "weights-equal", "weights-inverse")
#: Training seeds of ``--downstream`` (each: the split, the random backbones and their
#: calibration, the decoder's initial weights, the shuffles).
DEFAULT_SEEDS = (0, 1, 2)


@dataclass(frozen=True)
class GridRun:
    """One training of the grid: its seed, input kind and claim-1 reading (None: refseg's)."""

    seed: int
    kind: str
    reading: str | None = None

    def key(self) -> tuple:
        return (self.seed, self.kind, self.reading)

    def name(self) -> str:
        return f"{self.kind}" + (f" + {self.reading}" if self.reading else "") + \
            f", seed {self.seed}"


def grid_runs(seeds, readings=PAIRED_READINGS, extras=()) -> list[GridRun]:
    """Every run of the grid in the order it is trained, so that a run cut short has the most
    useful part done: per reading (refseg's first), per seed, the gray input (once per seed)
    and each kind built from the feature map; then ``extras`` (more claim-1 readings, on the
    feature map alone) per seed."""
    runs = []
    for reading in readings:
        for seed in seeds:
            if reading is None:
                runs.append(GridRun(seed, GRAY))
            runs += [GridRun(seed, kind, reading) for kind in FEATURE_KINDS]
    runs += [GridRun(seed, FEATURE, reading) for reading in extras for seed in seeds]
    return runs


def settings_json(settings: DemoSettings) -> dict:
    """The settings a record and a block carry (JSON-ready)."""
    return {"count": settings.count, "test_count": settings.test_count,
            "epochs": settings.epochs, "batch_size": settings.batch_size,
            "input_hw": list(settings.input_hw), "seed": settings.seed,
            "test_seeds": [settings.seed + TEST_SEED_OFFSET,
                           settings.seed + TEST_SEED_OFFSET + settings.test_count - 1]}


def read_record(path, settings: DemoSettings) -> list[dict]:
    """The finished runs of a record file (JSON lines: the settings, then one run a line);
    [] when there is none. InputError when it holds other settings or is not a record."""
    path = Path(path)
    if not path.is_file():
        return []
    try:
        lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
                 if line.strip()]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{path}: not a downstream record ({e})") from None
    if not lines or lines[0].get("record") != RECORD_KIND:
        raise InputError(f"{path}: not a downstream record of refseg audit readings")
    if lines[0]["settings"] != settings_json(settings):
        raise InputError(f"{path}: recorded with other settings ({lines[0]['settings']})")
    return lines[1:]


def _append(path: Path, entry: dict) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(entry, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def run_grid(work, runs, settings: DemoSettings, record, log=sys.stderr,
             stamp: dict | None = None) -> dict:
    """Train and score every run of ``runs`` not yet in the record file, appending each
    result to it as it is scored; a killed grid resumes where it stopped.

    Parameters
    ----------
    work : path
        An empty or new folder for the data sets and runs (the caller removes it).
    runs : list of GridRun
    settings : DemoSettings
        Data set sizes (drawn once, from ``settings.seed``), epochs, batch, input size,
        extraction processes; each run's own seed is its training seed.
    record : path
        The record file (JSON lines), created when missing.
    log : file
    stamp : dict or None
        Recorded with each new run (the commit that trained it).

    Returns
    -------
    dict
        ``settings`` (JSON-ready) and ``runs``: per run of ``runs`` that the record holds, its
        seed, input kind, reading, final validation accuracy, test pixel accuracy, per-class
        IoU, mIoU, boundary F1 and training seconds.
    """
    work, record = Path(work), Path(record)
    done = {(r["seed"], r["kind"], r["reading"]): r for r in read_record(record, settings)}
    if not record.is_file():
        _append(record, {"record": RECORD_KIND, "settings": settings_json(settings)})
    todo = [run for run in runs if run.key() not in done]
    if todo:
        write_synthetic_dataset(work / "data", settings.count, settings.seed)
        write_synthetic_dataset(work / "test", settings.test_count,
                                settings.seed + TEST_SEED_OFFSET)
    for index, run in enumerate(todo, start=1):
        print(f"downstream {index}/{len(todo)} ({len(done)} recorded): {run.name()}",
              file=log, flush=True)
        config = TrainConfig(epochs=settings.epochs, batch_size=settings.batch_size,
                             input_hw=settings.input_hw, input_kind=run.kind, seed=run.seed,
                             feature_reading=run.reading)
        folder = work / "runs" / f"run{index}"
        started = time.perf_counter()
        history = train(work / "data", folder, config, jobs=settings.jobs, log=log)
        seconds = time.perf_counter() - started
        rows, _, _ = evaluate_runs(work / "test", [folder], route="reference")
        shutil.rmtree(folder)  # taps and checkpoints: hundreds of MB a run
        s = rows[0].scores
        entry = {"seed": run.seed, "kind": run.kind, "reading": run.reading,
                 "val_pixel_accuracy": history[-1]["val_pixel_accuracy"],
                 "pixel_accuracy": float(s.pixel_accuracy),
                 "iou": [None if v != v else float(v) for v in s.class_iou],
                 "miou": float(s.mean_iou), "boundary_f1": float(s.boundary_f1),
                 "seconds": seconds, **(stamp or {})}
        _append(record, entry)
        done[run.key()] = entry
        print(f"downstream: {run.name()}: test pixel accuracy {entry['pixel_accuracy']:.4f}, "
              f"contour IoU {entry['iou'][0] or 0:.4f}, boundary F1 "
              f"{entry['boundary_f1']:.4f} ({seconds / 60:.1f} min)", file=log, flush=True)
    return {"settings": settings_json(settings),
            "runs": [done[run.key()] for run in runs if run.key() in done]}


def grid_settings(quick: bool, seeds, record, **sizes) -> tuple[tuple[int, ...], DemoSettings]:
    """The seeds and the settings of an audit's grid, refused before any work: distinct seeds
    >= 0 (None: :data:`DEFAULT_SEEDS`); :data:`QUICK` or the demo's settings with ``sizes``
    (jobs, count, test_count, epochs; None keeps the mode's own); a ``record`` of other
    settings fails."""
    seeds = tuple(DEFAULT_SEEDS if seeds is None else seeds)
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise InputError(f"--seeds: expected distinct seeds >= 0, got {list(seeds)}")
    settings = QUICK if quick else DemoSettings()
    settings = DemoSettings(**{**settings.__dict__,
                               **{k: v for k, v in sizes.items() if v is not None}})
    if record is not None:
        read_record(record, settings)
    return seeds, settings


def train_grid(settings: DemoSettings, seeds, extras, record, commit: str,
               log=sys.stderr) -> dict:
    """:func:`run_grid` over the grid of ``seeds`` (:data:`PAIRED_READINGS`, then the readings
    of ``extras`` not among them), in a temporary folder; recorded in ``record`` (None: a
    temporary file), each new run stamped with ``commit``."""
    extras = [name for name in extras if name not in PAIRED_READINGS]
    runs = grid_runs(seeds, PAIRED_READINGS, extras)
    print(f"downstream: {len(runs)} runs (seeds {', '.join(map(str, seeds))})", file=log)
    with tempfile.TemporaryDirectory(prefix="refseg-audit-") as work:
        target = Path(work) / "record.jsonl" if record is None else Path(record)
        return run_grid(Path(work) / "grid", runs, settings, target, log,
                        stamp={"commit": commit})


def recorded_grid(settings: DemoSettings, seeds, record) -> dict:
    """The runs of ``seeds`` that the ``record`` file holds, as :func:`run_grid` returns them;
    nothing trained."""
    return {"settings": settings_json(settings),
            "runs": [r for r in read_record(record, settings) if r["seed"] in seeds]}
