"""``refseg demo --seeds N``: the demo run with N seeds, and its scores as mean and spread.

One demo's table is one draw: its synthetic welds, its split, its shuffling and its random
weights all follow one seed. Run with seeds S, S+1, ..., each demo goes into ``OUT/seed-<s>/``
(a whole demo folder, claim chart included), and ``OUT/seeds.md`` and ``OUT/seeds.json``
give every score of every run as the mean, the sample standard deviation and the range over
the seeds, and, for the comparisons the README draws (gray against feature input, each branch
against the fusion), the difference per seed and whether it exceeds the spread.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np

from refseg import publish
from refseg.errors import InputError
from refseg.run.config import check_range
from refseg.cite import infrastructure

#: The scores of the table, as (column title, key of scores.json, index within it or None).
COLUMNS = (("pixel accuracy", "pixel_accuracy", None), ("IoU contour", "class_iou", 0),
           ("IoU inside", "class_iou", 1), ("IoU outside", "class_iou", 2),
           ("mIoU", "mean_iou", None), ("boundary F1", "boundary_f1", None))
#: The comparisons the README draws: (run, against run).
COMPARISONS = (("fusion-gray", "fusion-feature"), ("resnet50v2-feature", "fusion-feature"),
               ("mobilenetv2-feature", "fusion-feature"))
TABLE, RECORD = "seeds.md", "seeds.json"
#: Most seeds of one series (each is a whole demo).
MAX_SEEDS = 100


@infrastructure("the demo over several seeds (no claim element: its statistics)")
def run_demo_seeds(out, settings, seeds: int, log=None, pages=None) -> Path:
    """Run the demo with ``settings`` for seeds ``settings.seed`` .. ``+ seeds - 1`` into
    ``out/seed-<s>/`` (each with ``pages``, as ``run_demo``), then write ``out/seeds.md`` and
    ``out/seeds.json``; returns the table's path. A seed's folder that already holds a finished
    demo (its ``scores.json``) is kept, so that an interrupted series continues where it
    stopped. ``out`` must be new, empty or a folder refseg published
    (:func:`refseg.publish.check_output_folder`); it is locked while the series runs."""
    from refseg.run.demo import run_demo

    log = sys.stderr if log is None else log
    out = Path(out)
    if isinstance(seeds, bool) or not isinstance(seeds, int) or not 2 <= seeds <= MAX_SEEDS:
        raise InputError(f"demo: --seeds must be an integer from 2 (a spread needs two) to "
                         f"{MAX_SEEDS}, got {seeds!r}")
    check_range(settings.seed + seeds - 1, "seed")
    # the table is written into ``out``: a folder of the user's is refused before any demo
    publish.check_output_folder(out)
    folders = []
    with publish.locked_folder(out):
        for seed in range(settings.seed, settings.seed + seeds):
            folder = out / f"seed-{seed}"
            if not (folder / "scores.json").is_file():
                print(f"seed {seed} ({seed - settings.seed + 1}/{seeds}): {folder}", file=log)
                run_demo(folder, dataclasses.replace(settings, seed=seed), log=log, pages=pages)
            folders.append(folder)
        return write_seed_table(out, folders)


def _value(row: dict, key: str, index) -> float:
    value = row[key] if index is None else row[key][index]
    return float("nan") if value is None else float(value)


def _scores(folders) -> tuple[list[int], dict]:
    """{run: {column key: [value per seed]}}, with the seeds in folder order."""
    seeds, table = [], {}
    for folder in folders:
        record = json.loads((Path(folder) / "demo.json").read_text(encoding="utf-8"))
        seeds.append(int(record["settings"]["seed"]))
        for row in json.loads((Path(folder) / "scores.json").read_text(encoding="utf-8")):
            columns = table.setdefault(row["run"], {})
            for title, key, index in COLUMNS:
                columns.setdefault(title, []).append(_value(row, key, index))
    runs = {run: columns for run, columns in table.items()
            if all(len(v) == len(folders) for v in columns.values())}
    return seeds, runs


def _summary(values) -> dict:
    v = np.asarray(values, dtype=np.float64)
    return {"values": v.tolist(), "mean": float(v.mean()),
            "sd": float(v.std(ddof=1)) if len(v) > 1 else float("nan"),
            "min": float(v.min()), "max": float(v.max())}


@infrastructure("the demo over several seeds (no claim element: its statistics)")
def seed_statistics(folders) -> dict:
    """Mean, sample standard deviation and range of every score of every run over the demo
    folders ``folders`` (one seed each), and the per-seed differences of
    :data:`COMPARISONS`."""
    seeds, runs = _scores(folders)
    stats = {"seeds": seeds, "runs": {}, "comparisons": []}
    for run, columns in runs.items():
        stats["runs"][run] = {title: _summary(values) for title, values in columns.items()}
    for run, other in COMPARISONS:
        if run not in runs or other not in runs:
            continue
        for title in ("pixel accuracy", "mIoU"):
            difference = np.subtract(runs[run][title], runs[other][title])
            summary = _summary(difference)
            spread = max(stats["runs"][run][title]["sd"], stats["runs"][other][title]["sd"])
            summary.update(run=run, against=other, score=title, larger_spread=spread,
                           same_sign=int(max((difference > 0).sum(), (difference < 0).sum())),
                           exceeds_spread=bool(abs(summary["mean"]) > spread and (
                               (difference > 0).all() or (difference < 0).all())))
            stats["comparisons"].append(summary)
    return stats


def _cell(s: dict) -> str:
    return f"{s['mean']:.4f} ± {s['sd']:.4f}"


@infrastructure("the demo over several seeds (no claim element: its statistics)")
def format_seed_table(stats: dict) -> str:
    """The Markdown table of :func:`seed_statistics`: mean ± sample standard deviation, then
    the comparisons."""
    n = len(stats["seeds"])
    lines = [f"Test-set scores over {n} seeds ({', '.join(map(str, stats['seeds']))}): mean ± "
             "sample standard deviation.", "",
             "| run | " + " | ".join(t for t, _, _ in COLUMNS) + " |",
             "|---|" + "---:|" * len(COLUMNS)]
    for run, columns in stats["runs"].items():
        lines.append(f"| {run} | " + " | ".join(_cell(columns[t]) for t, _, _ in COLUMNS)
                     + " |")
    if stats["comparisons"]:
        lines += ["", "| difference | score | per seed | mean ± sd | larger run sd | "
                      "beyond the spread |", "|---|---|---|---:|---:|---|"]
        for c in stats["comparisons"]:
            per_seed = ", ".join(f"{v:+.4f}" for v in c["values"])
            verdict = "yes" if c["exceeds_spread"] else "no"
            lines.append(f"| {c['run']} - {c['against']} | {c['score']} | {per_seed} | "
                         f"{c['mean']:+.4f} ± {c['sd']:.4f} | {c['larger_spread']:.4f} | "
                         f"{verdict} ({c['same_sign']} of {n} seeds one way) |")
        lines += ["", "A difference is beyond the spread when its mean exceeds the larger of "
                      "the two runs' standard deviations and every seed gives it the same "
                      "sign."]
    return "\n".join(lines) + "\n"


@infrastructure("the demo over several seeds (no claim element: its statistics)")
def write_seed_table(out, folders) -> Path:
    """Write ``out/seeds.md`` and ``out/seeds.json`` for the demo folders ``folders``."""
    out = Path(out)
    stats = seed_statistics(folders)
    if not stats["runs"]:
        raise InputError(f"{out}: no run was scored in every seed's demo")
    machines = sorted({json.loads((Path(f) / "demo.json").read_text(encoding="utf-8"))
                       ["machine"].get("cpu", "?") for f in folders})
    stats["machines"] = machines
    publish.write_json(out / RECORD, stats)
    table = format_seed_table(stats) + f"\nMachines: {'; '.join(machines)}.\n"
    publish.write_text(out / TABLE, table)
    return out / TABLE
