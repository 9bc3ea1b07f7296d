"""Peak memory of ``refseg edges`` in bytes per pixel, with ``--arrays maps`` and ``--arrays all``,
and of ``refseg explain claim1 --image`` (the walkthrough page).

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

The walkthrough (``refseg explain claim1 --image IMAGE --out DIR``) is measured the same way
against the baseline of a process that imports what it imports; its target is 100 bytes per
pixel (``refseg edges --arrays all`` and the alternative readings, one at a time, each
keeping its maps only).

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

from PIL import Image

from _common import machine_lines, verdict

#: What a process imports before it reads or extracts: the imports of ``refseg edges`` and its
#: compiled kernels.
BASELINE = ("import refseg.cli, refseg.claim1.outputs\n"
            "from refseg.backend import kernels\n"
            "kernels('cython')\n")
READ = BASELINE + "from refseg.images import read_image\nread_image({path!r})\n"
IMPORT_ONLY = "import refseg\n"
#: What ``refseg explain claim1 --image`` imports before it reads: its baseline.
EXPLAIN_BASELINE = BASELINE + "import refseg.report.walkthrough\n"
#: The walkthrough's target, bytes per pixel.
EXPLAIN_TARGET = 100.0
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
        args.sizes = parse_sizes(args.sizes)
    except ValueError as exc:
        parser.error(f"--sizes: {exc}")
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    return args


def parse_sizes(text: str) -> list[tuple[int, int]]:
    """``WIDTHxHEIGHT,...`` as (width, height) pairs, each side at least 3 (else ValueError);
    an empty text is no size."""
    sizes = []
    for item in filter(None, text.split(",")):
        try:
            size = tuple(int(v) for v in item.lower().split("x"))
        except ValueError:
            size = ()
        if len(size) != 2 or min(size) < 3:
            raise ValueError(f"expected WIDTHxHEIGHT,... with sides >= 3, got {text!r}")
        sizes.append(size)
    return sizes


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


def explain_code(image: Path, out: Path) -> str:
    """What ``python -m refseg explain claim1 --image IMAGE --out OUT`` runs."""
    argv = ["refseg", "explain", "claim1", "--image", str(image), "--out", str(out)]
    return f"import sys\nsys.argv = {argv!r}\nimport refseg.__main__\n"


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
    import numpy as np
    import skimage.data

    tile = skimage.data.astronaut()
    reps = (height // tile.shape[0] + 1, width // tile.shape[1] + 1, 1)
    path = folder / f"astronaut_{width}x{height}.jpg"
    Image.fromarray(np.tile(tile, reps)[:height, :width]).save(path, quality=95)
    return path


def returned_bytes_per_pixel() -> float:
    """Bytes per pixel of the arrays ``extract`` returns, each buffer once, plus the input's."""
    import numpy as np

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


def claim1_memory(sizes, repeat: int = 1) -> dict:
    """Peak memory of ``refseg edges`` on astronaut tiles of each (width, height) of ``sizes``,
    each figure the median of ``repeat`` fresh processes, in a temporary folder outside any
    checkout (the installed refseg is measured). Returns the baseline, ``import refseg``
    alone and the budget of ``--arrays all`` (bytes), and one row per size: its pixels, and
    bytes per pixel above the baseline for reading, ``--arrays maps`` and ``--arrays all``,
    with the peaks in bytes."""
    budget = returned_bytes_per_pixel()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        baseline = median_peak(BASELINE, folder, repeat)
        import_only = median_peak(IMPORT_ONLY, folder, repeat)
        explain_baseline = median_peak(EXPLAIN_BASELINE, folder, repeat)
        for width, height in sizes:
            image = photograph(width, height, folder)
            pixels = width * height
            read = median_peak(READ.format(path=str(image)), folder, repeat)
            peaks = {arrays: median_peak(edges_code(image, folder / f"out_{arrays}_{width}x"
                                                    f"{height}", arrays), folder, repeat)
                     for arrays in ARRAYS}
            explain = median_peak(explain_code(image, folder / f"out_explain_{width}x{height}"),
                                  folder, repeat)
            rows.append({"size": (width, height), "pixels": pixels,
                         "read": (read - baseline) / pixels, "peaks": peaks,
                         **{arrays: (peak - baseline) / pixels
                            for arrays, peak in peaks.items()},
                         "explain": (explain - explain_baseline) / pixels,
                         "explain_peak": explain})
    return {"baseline": baseline, "import_only": import_only, "budget": budget, "rows": rows,
            "explain_baseline": explain_baseline}


def claim1_target_rows(memory: dict) -> list[str]:
    """The claim-1 memory targets as rows of bench_model.py's targets table."""
    rows = []
    for row in memory["rows"]:
        size = "x".join(map(str, row["size"]))
        all_share = row["all"] / memory["budget"]
        rows.append(f"| claim 1, --arrays maps | {size} | peak bytes per pixel | "
                    f"{row['maps']:.1f} | <= {MAPS_TARGET:.0f}: "
                    f"{verdict(row['maps'] <= MAPS_TARGET)} |")
        rows.append(f"| claim 1, --arrays all | {size} | peak / (returned arrays + input, "
                    f"{memory['budget']:.1f} B/px) | {all_share:.3f} | <= {ALL_MARGIN:.2f}: "
                    f"{verdict(all_share <= ALL_MARGIN)} |")
        rows.append(f"| claim 1, explain claim1 --image | {size} | peak bytes per pixel | "
                    f"{row['explain']:.1f} | <= {EXPLAIN_TARGET:.0f}: "
                    f"{verdict(row['explain'] <= EXPLAIN_TARGET)} |")
    return rows


def main(argv=None) -> None:
    import numpy as np

    args = parse_args(argv)
    memory = claim1_memory(args.sizes, args.repeat)
    baseline, budget = memory["baseline"], memory["budget"]
    print("# Peak memory of `refseg edges`")
    print()
    print(*machine_lines(), sep="\n")
    print(f"- Python {sys.version.split()[0]}, numpy {np.__version__}; "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}; "
          f"median of {args.repeat} process(es) per figure")
    print(f"- baseline (imports of `refseg edges` and the compiled kernels): "
          f"{baseline / 2**20:.1f} MiB; `import refseg` alone: "
          f"{memory['import_only'] / 2**20:.1f} MiB")
    print(f"- arrays `extract` returns plus the input: {budget:.1f} bytes per pixel; "
          f"`--arrays all` target <= {ALL_MARGIN * budget:.1f}, "
          f"`--arrays maps` target <= {MAPS_TARGET:.0f}")
    print()
    print(f"- `explain claim1 --image` baseline (its imports): "
          f"{memory['explain_baseline'] / 2**20:.1f} MiB; target <= {EXPLAIN_TARGET:.0f}")
    print()
    print("| image | pixels | reading (B/px) | --arrays maps (B/px) | --arrays all (B/px) "
          "| all / (returned + input) | explain (B/px) | maps peak MiB | all peak MiB "
          "| explain peak MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in memory["rows"]:
        width, height = row["size"]
        print(f"| astronaut tiles {width}x{height} | {row['pixels'] / 1e6:.0f} MP "
              f"| {row['read']:.1f} | {row['maps']:.1f} "
              f"| {row['all']:.1f} | {row['all'] / budget:.3f} | {row['explain']:.1f} "
              f"| {row['peaks']['maps'] / 2**20:.0f} | {row['peaks']['all'] / 2**20:.0f} "
              f"| {row['explain_peak'] / 2**20:.0f} |")


if __name__ == "__main__":
    main()
