"""Peak memory of ``refseg golden compare REFERENCE_DIR CANDIDATE_DIR`` in bytes per pixel, for
a candidate that passes and for one that fails (the diagnosis then runs: every flagged
alternative and library default computed for the image, the rounding masks, the shapes of the
differences).

Method
------
For each size, a reference folder of one image is written with ``refseg golden reference``
(in a process of its own). Two candidate folders are made in this process from the
reference's own input: refseg's arrays (``extract_variant`` with refseg's readings: it
passes) and the arrays of one alternative reading (``--reading``, default
``gauss-binomial``: it fails from the blurred image on, and the diagnosis names it). Each
comparison runs in a fresh interpreter (``python -m refseg``'s entry point, ``--jobs 1``),
whose peak resident set size, ``VmHWM`` of ``/proc/self/status`` read as it exits, is
measured as in ``bench_edges_memory.py``; the baseline, a process that imports what ``golden
compare`` imports and loads the compiled kernels with no image, is subtracted and the rest
divided by the image's pixels.

Images: ``skimage.data.astronaut`` tiled to each size and saved as JPEG (quality 95), as in
``bench_edges_memory.py``. The failing compare of a 6 MP image computes every flagged
alternative (tens of seconds); the machine's load changes the time, not the peak.

Usage::

    python benchmarks/bench_compare_memory.py [--sizes 1200x900,2000x1500,3000x2000]
        [--reading gauss-binomial]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import refseg  # noqa: F401  (before NumPy: refseg sets how OpenBLAS's idle threads wait)
import numpy as np

from _common import machine_lines
from bench_edges_memory import CHILD, parse_sizes, photograph

#: What ``refseg golden compare`` imports before it reads a file, with the compiled kernels.
BASELINE = ("import refseg.cli, refseg.golden.scale, refseg.golden.outputs\n"
            "from refseg.backend import kernels\n"
            "kernels('cython')\n")
#: The failing compare's target, bytes per pixel.
FAIL_TARGET = 90.0


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1200x900,2000x1500,3000x2000",
                        help="comma-separated WIDTHxHEIGHT (default 1.08, 3 and 6 MP)")
    parser.add_argument("--reading", default="gauss-binomial",
                        help="the alternative the failing candidate is made with")
    parser.add_argument("--keep", type=Path, default=None,
                        help="write the folders and reports here instead of a temporary folder")
    args = parser.parse_args(argv)
    try:
        args.sizes = parse_sizes(args.sizes)
    except ValueError as exc:
        parser.error(f"--sizes: {exc}")
    return args


def run_peak(code: str, cwd: Path) -> tuple[int, int, float]:
    """(peak resident bytes, exit status, seconds) of a fresh interpreter running ``code``."""
    report = cwd / "peak.txt"
    report.unlink(missing_ok=True)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-P", "-c", CHILD, str(report), code], cwd=cwd,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    if not report.exists():
        raise RuntimeError(f"{code!r} failed: {done.stderr[-2000:]}")
    return int(report.read_text()) * 1024, done.returncode, seconds


def command_code(*argv: str) -> str:
    """What ``python -m refseg ARGV...`` runs (its exit status through sys.exit)."""
    return f"import sys\nsys.argv = {['refseg', *argv]!r}\nimport refseg.__main__\n"


def candidate_arrays(rgb: np.ndarray, name: str, reading: str | None) -> dict:
    """A candidate file's arrays: ``input/<name>`` and every claim-1 array of the reference,
    whole, under refseg's readings (``reading`` None) or an alternative's."""
    from refseg.claim1.alternatives import alternative
    from refseg.golden.flagged import variant_arrays

    arrays = variant_arrays(rgb, None if reading is None else alternative(reading).variant)
    return {f"input/{name}": rgb, **{f"claim1/{name}/{k}": v for k, v in arrays.items()}}


def make_folders(image: Path, root: Path, reading: str) -> tuple[Path, dict]:
    """The reference folder of ``image`` and the candidate folders ``pass`` and ``fail``."""
    reference = root / "reference"
    _, status, _ = run_peak(command_code("golden", "reference", str(image), "--out",
                                         str(reference)), root)
    if status != 0:
        raise RuntimeError(f"golden reference {image}: exit status {status}")
    name = next(reference.glob("*.npz")).stem
    with np.load(reference / f"{name}.npz", allow_pickle=False) as npz:
        rgb = npz[f"input/{name}"]
    candidates = {}
    for kind, source in (("pass", None), ("fail", reading)):
        folder = root / kind
        folder.mkdir()
        np.savez(folder / f"{name}.npz", **candidate_arrays(rgb, name, source))
        candidates[kind] = folder
    return reference, candidates


def compare_memory(sizes, reading: str, keep: Path | None = None) -> dict:
    """Baseline bytes, and per size: pixels, and per candidate (``pass``, ``fail``) the peak
    bytes, bytes per pixel above the baseline, the exit status and the seconds."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        top = keep or Path(tmp)
        top.mkdir(parents=True, exist_ok=True)
        baseline, _, _ = run_peak(BASELINE, top)
        for width, height in sizes:
            root = top / f"{width}x{height}"
            root.mkdir()
            image = photograph(width, height, root)
            reference, candidates = make_folders(image, root, reading)
            row = {"size": (width, height), "pixels": width * height}
            for kind, folder in candidates.items():
                peak, status, seconds = run_peak(command_code(
                    "golden", "compare", str(reference), str(folder), "--jobs", "1",
                    "--report", str(root / f"report_{kind}.json")), root)
                row[kind] = {"peak": peak, "per_pixel": (peak - baseline) / row["pixels"],
                             "status": status, "seconds": seconds}
            rows.append(row)
    return {"baseline": baseline, "rows": rows}


def main(argv=None) -> None:
    args = parse_args(argv)
    memory = compare_memory(args.sizes, args.reading, args.keep)
    print("# Peak memory of `refseg golden compare`")
    print()
    print(*machine_lines(), sep="\n")
    print(f"- Python {sys.version.split()[0]}, numpy {np.__version__}; "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}; one process per "
          "figure; times on a shared machine")
    print(f"- baseline (imports of `golden compare` and the compiled kernels): "
          f"{memory['baseline'] / 2**20:.1f} MiB; failing candidate: `{args.reading}`; "
          f"target <= {FAIL_TARGET:.0f} B/px for it")
    print()
    print("| image | pixels | passing (B/px) | failing (B/px) | passing peak MiB "
          "| failing peak MiB | failing s | exit statuses |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for row in memory["rows"]:
        width, height = row["size"]
        good, bad = row["pass"], row["fail"]
        print(f"| astronaut tiles {width}x{height} | {row['pixels'] / 1e6:.2f} MP "
              f"| {good['per_pixel']:.1f} | {bad['per_pixel']:.1f} "
              f"| {good['peak'] / 2**20:.0f} | {bad['peak'] / 2**20:.0f} "
              f"| {bad['seconds']:.0f} | {good['status']}, {bad['status']} |")


if __name__ == "__main__":
    main()
