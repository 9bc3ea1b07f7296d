"""Peak memory of ``refseg edges`` in bytes per pixel, with ``--arrays maps`` and ``--arrays all``.

Method
------
Each measurement is a fresh process that runs ``refseg edges IMAGE --out DIR --arrays A``
(``python -m refseg``'s entry point). Its peak resident set size is the kernel's high-water
mark for that process, ``VmHWM`` of ``/proc/self/status``, read as the process exits (the
figure ``/usr/bin/time -v`` prints as "Maximum resident set size"; ``ru_maxrss`` of a child
would also count the pages it shared with this script between fork and exec). From it the
baseline is subtracted: the peak of a process that imports what ``refseg edges``
imports and loads the compiled kernels, with no image (the interpreter, NumPy, SciPy, Pillow,
refseg and its kernels: a fixed cost, not a per-pixel one). The rest, divided by the image's
pixels, is the figure reported. Reading the image is part of it, and the table shows its own
share: a process that imports as above and reads the image (``refseg.images.read_image``),
minus the baseline.

Budget of ``--arrays all``: the bytes per pixel of the arrays ``features.extract`` returns
(each buffer of its FeatureResult counted once; Canny's response is Sobel's magnitude) plus
the input pixels it was given, measured on a small image in this process. The target is a peak
no more than 10 % above it; with ``--arrays maps``, at most 40 bytes per pixel.

Images: ``skimage.data.astronaut`` tiled to each size and saved as JPEG (quality 95), the form
a camera delivers, in a temporary folder. Peak memory hardly depends on the machine's load, but
a neighbour that fills the memory can push pages out; the header names the CPU.

Usage::

    python benchmarks/bench_edges_memory.py [--sizes 3000x2000,6000x4000] [--repeat N]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

from _common import machine_lines

#: What a process imports before it reads or extracts: the imports of ``refseg edges`` and its
#: compiled kernels.
BASELINE = ("import refseg.cli, refseg.claim1.outputs\n"
            "from refseg.backend import kernels\n"
            "kernels('cython')\n")
READ = BASELINE + "from refseg.images import read_image\nread_image({path!r})\n"
IMPORT_ONLY = "import refseg\n"
ARRAYS = ("maps", "all")
#: The targets (bytes per pixel with --arrays maps; the margin over the returned arrays).
MAPS_TARGET = 40.0
ALL_MARGIN = 1.10


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="3000x2000,6000x4000",
                        help="comma-separated WIDTHxHEIGHT (default 3000x2000,6000x4000)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="processes per measurement; the median is reported (default 1)")
    args = parser.parse_args(argv)
    try:
        args.sizes = [tuple(int(v) for v in s.lower().split("x")) for s in args.sizes.split(",")]
    except ValueError:
        parser.error(f"--sizes: expected WIDTHxHEIGHT,..., got {args.sizes!r}")
    if args.repeat < 1 or any(len(s) != 2 or min(s) < 3 for s in args.sizes):
        parser.error("--repeat must be >= 1 and every size at least 3x3")
    return args


#: Runs the code in argv[2] and writes the process's peak resident kilobytes to argv[1] as it
#: exits (also through sys.exit, as the command line ends).
CHILD = """
import atexit, sys
report, code = sys.argv[1], sys.argv[2]
def write_peak():
    with open('/proc/self/status') as status:
        peak = next(line for line in status if line.startswith('VmHWM:')).split()[1]
    with open(report, 'w') as out:
        out.write(peak)
atexit.register(write_peak)
exec(compile(code, '<measured>', 'exec'))
"""


def edges_code(image: Path, out: Path, arrays: str) -> str:
    """What ``python -m refseg edges IMAGE --out OUT --arrays ARRAYS`` runs."""
    argv = ["refseg", "edges", str(image), "--out", str(out), "--arrays", arrays]
    return f"import sys\nsys.argv = {argv!r}\nimport refseg.__main__\n"


def peak_rss(code: str, cwd: Path) -> int:
    """Peak resident bytes of a fresh interpreter running ``code`` (it must succeed)."""
    report = cwd / "peak.txt"
    report.unlink(missing_ok=True)
    done = subprocess.run([sys.executable, "-P", "-c", CHILD, str(report), code], cwd=cwd,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{code!r} failed: {done.stderr[-2000:]}")
    return int(report.read_text()) * 1024


def median_peak(code, cwd, repeat) -> float:
    return statistics.median(peak_rss(code, cwd) for _ in range(repeat))


def photograph(width: int, height: int, folder: Path) -> Path:
    import skimage.data

    tile = skimage.data.astronaut()
    reps = (height // tile.shape[0] + 1, width // tile.shape[1] + 1, 1)
    path = folder / f"astronaut_{width}x{height}.jpg"
    Image.fromarray(np.tile(tile, reps)[:height, :width]).save(path, quality=95)
    return path


def returned_bytes_per_pixel() -> float:
    """Bytes per pixel of the arrays ``extract`` returns, each buffer once, plus the input's."""
    from refseg.claim1 import features

    rgb = np.tile(np.arange(256, dtype=np.uint8).reshape(16, 16, 1), (8, 8, 3))
    result = features.extract(rgb)
    arrays = [result.gray, result.blurred, result.mean_image, result.final_weight,
              result.feature_map, *result.responses.values(), *result.edges.values()]
    buffers = {}
    for a in arrays:
        base = a if a.base is None else a.base
        buffers[id(base)] = base.nbytes
    return (sum(buffers.values()) + rgb.nbytes) / (rgb.shape[0] * rgb.shape[1])


def main(argv=None) -> None:
    args = parse_args(argv)
    budget = returned_bytes_per_pixel()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)  # outside any checkout: the installed refseg is measured
        baseline = median_peak(BASELINE, folder, args.repeat)
        import_only = median_peak(IMPORT_ONLY, folder, args.repeat)
        print("# Peak memory of `refseg edges`")
        print()
        print(*machine_lines(), sep="\n")
        print(f"- Python {sys.version.split()[0]}, numpy {np.__version__}; "
              f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}; "
              f"median of {args.repeat} process(es) per figure")
        print(f"- baseline (imports of `refseg edges` and the compiled kernels): "
              f"{baseline / 2**20:.1f} MiB; `import refseg` alone: {import_only / 2**20:.1f} MiB")
        print(f"- arrays `extract` returns plus the input: {budget:.1f} bytes per pixel; "
              f"`--arrays all` target <= {ALL_MARGIN * budget:.1f}, "
              f"`--arrays maps` target <= {MAPS_TARGET:.0f}")
        print()
        print("| image | pixels | reading (B/px) | --arrays maps (B/px) | --arrays all (B/px) "
              "| all / (returned + input) | maps peak MiB | all peak MiB |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for width, height in args.sizes:
            image = photograph(width, height, folder)
            pixels = width * height
            read = median_peak(READ.format(path=str(image)), folder, args.repeat)
            peaks = {}
            for arrays in ARRAYS:
                out = folder / f"out_{arrays}_{width}x{height}"
                peaks[arrays] = median_peak(edges_code(image, out, arrays), folder,
                                            args.repeat)
            per_pixel = {k: (v - baseline) / pixels for k, v in peaks.items()}
            print(f"| astronaut tiles {width}x{height} | {pixels / 1e6:.0f} MP "
                  f"| {(read - baseline) / pixels:.1f} | {per_pixel['maps']:.1f} "
                  f"| {per_pixel['all']:.1f} | {per_pixel['all'] / budget:.3f} "
                  f"| {peaks['maps'] / 2**20:.0f} | {peaks['all'] / 2**20:.0f} |", flush=True)


if __name__ == "__main__":
    main()
