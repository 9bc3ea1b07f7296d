"""The main job's speed target for bench_model.py: ``refseg demo`` at its defaults, this
install against another (``--demo-against PYTHON``), in alternating child processes.

Each run is ``PYTHON -P -m refseg demo --out FOLDER`` in a temporary folder, timed from the
start of the process to its end (what a user waits for), with the cores other processes used
meanwhile. The runs alternate, the other install first in odd rounds, so that the host's drift
(on a shared machine the same run has taken 1.5 times as long an hour later) falls on both.
The target: the other install's median time over this one's >= TARGET_SPEEDUP; beside it, the
scores (each run's ``scores.json`` without its timings: the same runs and values).
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import OtherLoad, verdict

#: How many times faster than the other install the demo must run (at most 0.75 of its time).
TARGET_SPEEDUP = 1 / 0.75


def run_demo(python: str, folder: Path) -> dict:
    """One default demo by the interpreter ``python`` into ``folder`` (which must not exist):
    its wall-clock seconds, the other processes' load meanwhile and its scores."""
    load = OtherLoad()
    started = time.perf_counter()
    done = subprocess.run([python, "-P", "-m", "refseg", "demo", "--out", str(folder)],
                          cwd=folder.parent, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{python} -m refseg demo failed: {done.stderr[-2000:]}")
    scores = [{key: value for key, value in row.items() if not key.startswith("seconds")}
              for row in json.loads((folder / "scores.json").read_text())]
    return {"python": python, "seconds": seconds, "other_load": load.cores(),
            "scores": scores}


def demo_rounds(other: str, rounds: int, log=sys.stderr) -> list[list[dict]]:
    """``rounds`` rounds of one demo by ``other`` and one by this interpreter, alternating
    which runs first; each demo's folder is removed after its run."""
    runs = []
    for r in range(rounds):
        pythons = [other, sys.executable] if r % 2 == 0 else [sys.executable, other]
        pair = []
        for python in pythons:
            with tempfile.TemporaryDirectory(prefix="refseg-demo-bench-") as tmp:
                pair.append(run_demo(python, Path(tmp) / "demo-out"))
            print(f"demo round {r + 1}: {python} {pair[-1]['seconds']:.1f} s", file=log,
                  flush=True)
        runs.append(pair)
    return runs


def demo_lines(runs: list[list[dict]], other: str) -> list[str]:
    """The report's section: every demo run, in order."""
    lines = ["## The demo against another install (no neighbour)", "",
             f"`refseg demo` at its defaults, this install ({sys.executable}) and "
             f"{other}, alternating; time = the whole process, as a user waits for it.", "",
             "| round | install | seconds | other load (cores) | pixel accuracy by run |",
             "|---|---|---:|---:|---|"]
    for r, pair in enumerate(runs, start=1):
        for run in pair:
            which = "this" if run["python"] == sys.executable else "other"
            scores = ", ".join(f"{row['run']} {row['pixel_accuracy']:.4f}"
                               for row in run["scores"])
            lines.append(f"| {r} | {which} | {run['seconds']:.1f} | {run['other_load']:.2f} | "
                         f"{scores} |")
    return lines + [""]


def demo_target_rows(runs: list[list[dict]]) -> list[str]:
    """The demo's target as rows of the targets table: the speed-up (the other install's
    median time over this one's) and whether every run's scores equal."""
    this = [run["seconds"] for pair in runs for run in pair if run["python"] == sys.executable]
    other = [run["seconds"] for pair in runs for run in pair if run["python"] != sys.executable]
    speedup = statistics.median(other) / statistics.median(this)
    first = runs[0][0]["scores"]
    same = all(run["scores"] == first for pair in runs for run in pair)
    each = ", ".join(f"{o / t:.2f}" for o, t in zip(other, this))
    return [f"| refseg demo (defaults) | none | other install's time / this one's (rounds: "
            f"{each}) | {speedup:.2f} | >= {TARGET_SPEEDUP:.2f}: "
            f"{verdict(speedup >= TARGET_SPEEDUP)} |",
            f"| refseg demo (defaults) | none | the same scores in every run | "
            f"{'yes' if same else 'no'} | context (they may move where rounding does) |"]
