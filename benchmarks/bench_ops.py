"""Time refseg's convolution layers, one per decoder layer shape, against PyTorch's, and
measure the memory of a decoder training step and the time and memory of a whole-network
training step.

What is compared
----------------
Every Conv2D / Conv2DTranspose layer of the Res-Mobile Net decoder at a 224x224 input (built
from the decoder's table, ``refseg.models.parts.DECODER``: 3x3 kernels with bias, Keras
padding "same", transposed convolutions stride 2 except the stride-1 prediction layer), at
batch 1 and 4:

* **refseg**: ``refseg.autograd.conv2d`` / ``conv2d_transpose`` on NHWC float32 (im2col /
  col2im kernels in Cython + NumPy matrix products, i.e. OpenBLAS sgemm; the stride-1 3x3
  convolutions with enough output tiles, ``conv_routes.conv_route``, take a Winograd route instead
  for their forward and input gradient: F(4x4, 3x3) for x7b, x9, x18, x21 at both batch sizes
  and x5 at batch 4, F(2x2, 3x3) for x5 at batch 1 and x2 and x13 at batch 4; kernel
  gradients of both take F(2x2, 3x3)).
* **torch**: ``torch.nn.functional.conv2d`` / ``conv_transpose2d`` (oneDNN / MKL on this CPU),
  timed both in NCHW (its native layout) and in channels_last; each ratio is taken against the
  faster of the two, and the table says which one that was. Keras "same" for a stride-2
  transposed 3x3 convolution is the full transposed convolution cropped to 2H starting at 0,
  which no symmetric torch ``padding`` reproduces: torch computes the full (2H+1) result and
  the script slices ``[:2H, :2W]`` (a view; torch pays one extra row and column, ~1/(2H)).
  Stride 1 is torch ``padding=1`` exactly.

Each layer is timed on its own (conv + bias, no activation), on random inputs:

* forward: refseg under ``ag.no_grad()``, torch under ``torch.no_grad()``;
* forward + backward: forward, then ``y.backward(g)`` with a fixed random ``g``: the gradient
  of ``sum(y * g)``, without materialising the product. The input, kernel and bias all get
  gradients in both libraries (leaf gradients are reset to None before each run).

Before timing, the outputs and the three gradients of refseg and torch are compared, so the
timings are of the same computation.

FLOPs: a convolution is 2 N Ho Wo kh kw Cin Cout; a transposed convolution 2 N H W kh kw Cin
Cout (H, W of its input); forward + backward counts 3x forward (input gradient and kernel
gradient each cost one forward; bias terms are ignored). These are direct-convolution FLOPs
for every route: on the Winograd route (forward and input gradient) refseg's GFLOP/s is an
effective rate, since its matrix products do 16 multiply-adds per 2x2 output tile and channel
pair where direct convolution does 36, and it can exceed the sgemm ceiling. refseg's GFLOP/s is set against the
float32 matrix product (``np.matmul``, i.e. OpenBLAS sgemm) measured in the same run: square
n = 1024 and 2048 (the larger median rate is "the sgemm ceiling"), and the forward GEMMs of the
two largest layers (x7b, x21), measured before and after the layers.

Threads: one count T (``--threads``, default all cores) for everything, fixed before the
libraries load: ``OMP_NUM_THREADS`` (refseg's OpenMP kernels), ``OPENBLAS_NUM_THREADS``
(NumPy's BLAS, checked with threadpoolctl when it is installed), ``MKL_NUM_THREADS`` and
``torch.set_num_threads(T)``. Both libraries run in this one process, on the same arrays.

Timing: two warm-up runs of each variant, then ``--repeat`` rounds in which every variant of a
layer runs once, the rounds in the orders of a balanced Latin square, so a slow spell of the
(shared) machine, and what each call leaves behind, hits all of them alike; the garbage collector is off while timing. Medians are reported; the ratio
column also gives, in brackets, the ratio of the fastest runs. Each row also gives the CPU
that other processes used meanwhile ("other load", in cores, from /proc/stat): on 2 cores a
single busy neighbour makes 2-thread OpenBLAS GEMMs an order of magnitude slower (its threads
wait for each other at every barrier), much more than it slows torch, so rows with a load
above ~0.1 compare the libraries' tolerance of contention rather than their speed.
``--wait-quiet S`` holds each layer back (up to S seconds) until the machine is idle. Load
from outside this virtual machine (its host) is not visible here: compare the sgemm rates
measured before and after the layers.

Where refseg's time goes (on by default, ``--no-profile`` skips it): each layer's forward +
backward is split into the calls of refseg's compiled window kernels inside the op (im2col,
col2im, and the Winograd input, output and kernel transforms)
(timed by wrapping the attributes of ``refseg._kernels`` at run time; no file is modified),
the same calls re-run alone, back to back, each into its own buffer written before (the
difference shows what the surroundings cost them: cache state, and OpenBLAS worker threads
that keep spinning after a GEMM and take the core the kernel's second OpenMP thread needs), the
three matrix products of the im2col formulation timed alone at the layer's shapes (the same
for Winograd layers, whose own products do 16/36 (F(2x2, 3x3)) or 36/144 (F(4x4, 3x3)) of
those multiply-adds), and the
rest (bias, bias gradient, allocation, leaf-gradient copies, Python); with the minor page
faults per run. All parts are timed in the same interleaved rounds.

Memory of a decoder training step: forward of every decoder layer (relu after each, softmax
after the prediction layer, the Adds), per-pixel categorical cross-entropy, backward, and one
``refseg.autograd.optim.Adam`` update, from random tap tensors of the backbone shapes at
224x224. It runs in a fresh child process (so memory that an earlier part of this run left in
the allocator cannot hide the step's own allocations), and is measured as the peak resident
set size: ``VmHWM`` of /proc/self/status, reset by writing 5 to /proc/self/clear_refs, minus
``VmRSS`` at the reset; once for step 1 (which also allocates whatever is made lazily:
scratch buffers, optimiser state) and once over the steps after it (the steady state). Peak
RSS is what the machine has to provide, and sees every allocation (NumPy arrays, BLAS
buffers, allocator slack), which ``ru_maxrss`` also does but cannot be reset. As a
cross-check the child also runs one step under ``tracemalloc``, to which NumPy reports its
array buffers: that peak is the bytes of live arrays only. RSS is printed after steps 1, 10,
25 and 50 to show that it does not grow. The same step in torch (NCHW and channels_last,
``torch.optim.Adam``) is given for comparison.

The training steps as refseg trains (``_training_step.py``), each implementation in a fresh
child process with its thread count pinned before the libraries load, at ``refseg train``'s
defaults (``TrainConfig``: batch 8 at 64x224), for the time per step (median without step 1)
and the peak RSS (as above), refseg also at 1 thread, against torch in NCHW and
channels_last from the same initial weights (their first-step losses must agree within
1e-4):

* the demo's step (``--demo-steps``): the decoder on cached taps, as ``refseg demo`` and
  ``refseg train`` with frozen backbones train; the taps of random images are computed once
  by refseg's backbones, then refseg/run/training.py's ``training_step`` runs on them; torch
  runs the same decoder (``refseg.models.decoder.DECODER``) on the same taps;
* the whole-network step (``--net-steps``, ``refseg train --train-backbone``): both backbones
  and the decoder trainable, batch norm on batch statistics; torch: ``_torch_net.py`` with
  ``trainable=True``.

refseg's steps are sized to the load as ``refseg train`` sizes them (the report says how many
ran on each thread count). The report ends with the training-step targets of the run: time
per step <= 0.8 of torch's (the faster layout), peak memory <= torch's.

Threads and background load: with T > 1, every layer is also timed with refseg's OpenMP and
OpenBLAS pools set to 1 thread at run time (``refseg.engine.training.threads``; "refseg-fwd-1t",
"refseg-fb-1t"), in the same rounds, and the report gives refseg's T-thread time over its
1-thread time. ``--background-load none,busy,mixed,matmul`` times the layers and the training
steps under each condition in this one run; the script starts and stops the neighbours itself
(``_neighbours.py``: ``busy`` = ``--background-cores`` busy Python loops, ``mixed`` = one process
running NumPy float32 products on 2 OpenBLAS threads, 70 % of the time, ``matmul`` = the same
products without pause). The decoder step's
memory, the sgemm ceiling and the breakdown run without neighbours. The header names the
CPU (/proc/cpuinfo) and the row loops refseg chose (``refseg.backend.row_loops``);
``--row-loops baseline`` runs the plain loops on an AVX-512 CPU.

Usage::

    python benchmarks/bench_ops.py [--quick] [--threads T] [--repeat N] [--write]
        [--batches 1 4] [--layers x1 x13 ...] [--no-profile] [--train-steps S]
        [--net-steps S] [--demo-steps S] [--wait-quiet SECONDS]
        [--row-loops auto|baseline] [--background-load none,busy,mixed,matmul]
        [--background-cores N]

The parts live beside it: ``_decoder_layers.py`` (the layer table, one layer in refseg and
torch, its timing), ``_layer_profile.py`` (the breakdown), ``_training_step.py`` (the
training steps, their child processes and tables), ``_neighbours.py`` (the background load).
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from _common import (Report, ThreadSwitch, add_row_loops_argument, all_cores,
                     environment_lines, measure_sgemm, min_ms, start, verdict,
                     wait_until_quiet)
from _neighbours import (add_background_arguments, background, check_background_arguments,
                         describe_load)

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results_ops.md"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="sanity run: batch 1 only, 3 rounds, 10 training steps")
    parser.add_argument("--threads", type=int, default=all_cores(),
                        help="threads for refseg's OpenMP, NumPy's BLAS and torch "
                             "(default: all cores)")
    parser.add_argument("--repeat", type=int, default=None,
                        help="timed rounds per layer (default 11, 3 with --quick)")
    parser.add_argument("--batches", type=int, nargs="+", default=None,
                        help="batch sizes (default 1 4, 1 with --quick)")
    parser.add_argument("--layers", nargs="+", default=None,
                        help="only these layers (default: all)")
    parser.add_argument("--train-steps", type=int, default=None,
                        help="refseg training steps for the RSS check (default 50, 10 with "
                             "--quick)")
    parser.add_argument("--no-profile", dest="profile", action="store_false",
                        help="skip the breakdown of refseg's time")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                        help="before each layer, wait up to SECONDS for other processes to "
                             "use under 0.2 cores (default 0: do not wait)")
    parser.add_argument("--net-steps", type=int, default=None,
                        help="steps of the whole-network training step (--train-backbone) "
                             "per implementation and condition, the first one untimed in the "
                             "median; beside other processes refseg's steps 2-7 time both "
                             "thread counts (default 12, 3 with --quick; 0 skips it)")
    parser.add_argument("--demo-steps", type=int, default=None,
                        help="steps of the demo's training step (the decoder on cached taps) "
                             "per implementation and condition, as --net-steps (default 12, "
                             "3 with --quick; 0 skips it)")
    add_row_loops_argument(parser)
    add_background_arguments(parser)
    parser.add_argument("--write", action="store_true",
                        help="also write the Markdown report to benchmarks/results_ops.md")
    # Internal: the training-step memory measurement runs in a child process.
    parser.add_argument("--train-child", nargs=3, metavar=("IMPL", "BATCH", "STEPS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeat is None:
        args.repeat = 3 if args.quick else 11
    if args.batches is None:
        args.batches = [1] if args.quick else [1, 4]
    if args.train_steps is None:
        args.train_steps = 10 if args.quick else 50
    if args.net_steps is None:
        args.net_steps = 3 if args.quick else 12
    if args.demo_steps is None:
        args.demo_steps = 3 if args.quick else 12
    if min(args.repeat, args.threads, args.train_steps, *args.batches) < 1:
        parser.error("--repeat, --threads, --train-steps and --batches must be >= 1")
    if min(args.net_steps, args.demo_steps) < 0:
        parser.error("--net-steps and --demo-steps must be >= 0")
    check_background_arguments(parser, args)
    return args


if __name__ == "__main__":
    # before NumPy, refseg and torch are imported below
    ARGS = start(parse_args)

import _decoder_layers  # noqa: E402
from _decoder_layers import (LARGE_FLOPS, LAYERS, LayerResult, benchmark_layer,  # noqa: E402
                             gemm_shape, load_torch)
from _layer_profile import profile_section  # noqa: E402
from _training_step import (DEMO_IMPLS, NET_IMPLS, TARGET_STEP_RATIO,  # noqa: E402
                            decoder_step_section, net_config, run_train_child, steady_ms,
                            step_lines, step_ratios, train_child)


# --- the report ----------------------------------------------------------------------------

def layer_table(results: list[LayerResult], ceiling: float) -> list[str]:
    lines = [
        "| layer | shape | GFLOP fwd | refseg fwd ms | torch fwd ms | ratio fwd | "
        "refseg f+b ms | torch f+b ms | ratio f+b | refseg GFLOP/s fwd / f+b | "
        "% sgemm fwd / f+b | targets | other load |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    layout = {"torch-nchw": "NCHW", "torch-cl": "CL"}
    for r in results:
        misses = []
        if r.ratio("fwd") > 1.5:
            misses.append("fwd>1.5x")
        if r.ratio("fb") > 1.5:
            misses.append("f+b>1.5x")
        large = r.layer.flops(1) >= LARGE_FLOPS
        if large and min(r.gflops("fwd"), r.gflops("fb")) < 0.5 * ceiling:
            misses.append("<50% sgemm")
        best = {m: layout[r.torch_best(m).rsplit("-", 1)[0]] for m in ("fwd", "fb")}
        agree = "" if r.agreement < 1e-3 else f" MISMATCH {r.agreement:.1e}"
        lines.append(
            f"| {r.layer.name}{' (large)' if large else ''} | {r.layer.describe()} | "
            f"{r.layer.flops(r.batch) / 1e9:.3f} | "
            f"{r.ms('refseg-fwd'):.2f} | {r.ms(r.torch_best('fwd')):.2f} {best['fwd']} | "
            f"{r.ratio('fwd'):.2f} ({r.ratio('fwd', min_ms):.2f}) | "
            f"{r.ms('refseg-fb'):.2f} | {r.ms(r.torch_best('fb')):.2f} {best['fb']} | "
            f"{r.ratio('fb'):.2f} ({r.ratio('fb', min_ms):.2f}) | "
            f"{r.gflops('fwd'):.0f} / {r.gflops('fb'):.0f} | "
            f"{100 * r.gflops('fwd') / ceiling:.0f}% / {100 * r.gflops('fb') / ceiling:.0f}% | "
            f"{', '.join(misses) or 'ok'}{agree} | {r.other_cores:.2f} |")
    ref = sum(r.ms("refseg-fb") for r in results)
    tor = sum(r.ms(r.torch_best("fb")) for r in results)
    ref_f = sum(r.ms("refseg-fwd") for r in results)
    tor_f = sum(r.ms(r.torch_best("fwd")) for r in results)
    flops = sum(r.layer.flops(r.batch) for r in results)
    lines.append(f"| **all** | | {flops / 1e9:.2f} | {ref_f:.1f} | {tor_f:.1f} | "
                 f"{ref_f / tor_f:.2f} | {ref:.1f} | {tor:.1f} | {ref / tor:.2f} | "
                 f"{flops / ref_f / 1e6:.0f} / {3 * flops / ref / 1e6:.0f} | "
                 f"{100 * flops / ref_f / 1e6 / ceiling:.0f}% / "
                 f"{100 * 3 * flops / ref / 1e6 / ceiling:.0f}% | | |")
    return lines


def torch_layout_lines(results: list[LayerResult]) -> list[str]:
    wins = {m: sum(r.ms(f"torch-cl-{m}") < r.ms(f"torch-nchw-{m}") for r in results)
            for m in ("fwd", "fb")}
    total = {m: (sum(r.ms(f"torch-nchw-{m}") for r in results),
                 sum(r.ms(f"torch-cl-{m}") for r in results)) for m in ("fwd", "fb")}
    return [f"torch layouts: channels_last faster on {wins['fwd']}/{len(results)} layers "
            f"forward, {wins['fb']}/{len(results)} forward+backward; sums NCHW / CL: "
            f"fwd {total['fwd'][0]:.1f} / {total['fwd'][1]:.1f} ms, "
            f"f+b {total['fb'][0]:.1f} / {total['fb'][1]:.1f} ms."]


def thread_lines(results: list[LayerResult], threads: int) -> list[str]:
    """refseg's T-thread time over its 1-thread time, per layer, from the same rounds."""
    lines = [f"refseg {threads} threads / 1 thread (medians of the same rounds; below 1: the "
             "threads help):", "",
             "| layer | fwd T ms | fwd 1 ms | fwd T / 1 | f+b T ms | f+b 1 ms | f+b T / 1 |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    sums = {k: 0.0 for k in ("refseg-fwd", "refseg-fwd-1t", "refseg-fb", "refseg-fb-1t")}
    for r in results:
        ms = {k: r.ms(k) for k in sums}
        for k in sums:
            sums[k] += ms[k]
        lines.append(f"| {r.layer.name} | {ms['refseg-fwd']:.2f} | {ms['refseg-fwd-1t']:.2f} | "
                     f"{ms['refseg-fwd'] / ms['refseg-fwd-1t']:.2f} | {ms['refseg-fb']:.2f} | "
                     f"{ms['refseg-fb-1t']:.2f} | {ms['refseg-fb'] / ms['refseg-fb-1t']:.2f} |")
    lines.append(f"| **all** | {sums['refseg-fwd']:.1f} | {sums['refseg-fwd-1t']:.1f} | "
                 f"{sums['refseg-fwd'] / sums['refseg-fwd-1t']:.2f} | {sums['refseg-fb']:.1f} | "
                 f"{sums['refseg-fb-1t']:.1f} | {sums['refseg-fb'] / sums['refseg-fb-1t']:.2f} |")
    return lines


def summary_lines(results: dict, threads: int) -> list[str]:
    """Decoder layers summed, one row per condition and batch."""
    lines = ["| background load | batch | other load (median) | refseg / torch fwd | "
             "refseg / torch f+b | refseg T / 1 thread fwd | refseg T / 1 thread f+b |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for (condition, batch), rs in results.items():
        def total(key):
            return sum(r.ms(key) for r in rs)

        def torch_total(mode):
            return sum(r.ms(r.torch_best(mode)) for r in rs)

        one = (f"{total('refseg-fwd') / total('refseg-fwd-1t'):.2f} | "
               f"{total('refseg-fb') / total('refseg-fb-1t'):.2f}" if threads > 1 else "- | -")
        lines.append(f"| {condition} | {batch} | "
                     f"{statistics.median(r.other_cores for r in rs):.2f} | "
                     f"{total('refseg-fwd') / torch_total('fwd'):.2f} | "
                     f"{total('refseg-fb') / torch_total('fb'):.2f} | {one} |")
    return lines


# --- main ----------------------------------------------------------------------------------

def sgemm_shapes(batches) -> dict:
    """The square products of the ceiling and the forward GEMMs of the two largest layers:
    x7b and x21 (2.08 GFLOP each), a squarish GEMM (N = 256) and a tall, narrow one (N = 96),
    which BLAS runs at different rates."""
    largest = sorted(LAYERS.values(), key=lambda layer: -layer.flops(1))[:2]
    shapes = {"square 1024": (1024,) * 3, "square 2048": (2048,) * 3}
    for batch in batches:
        for layer in largest:
            shapes[f"{layer.name} fwd GEMM, batch {batch}"] = gemm_shape(layer, batch)
    return shapes


def time_conditions(args, layers, switch) -> tuple[dict, dict]:
    """Under each background-load condition: every layer at every batch size, and the
    training steps (in child processes started while the neighbours run). Returns (layer
    results by (condition, batch), step runs by kind and condition)."""
    results, step_runs = {}, {"demo": {}, "net": {}}
    for condition in args.background_load:
        with background(condition, args.background_cores):
            for batch in args.batches:
                rs = results[(condition, batch)] = []
                for layer in layers:
                    if condition == "none":
                        wait_until_quiet(args.wait_quiet)
                    rs.append(benchmark_layer(layer, batch, args.repeat, switch))
            for kind, impls, steps in (("demo", DEMO_IMPLS, args.demo_steps),
                                       ("net", NET_IMPLS, args.net_steps)):
                if steps:
                    step_runs[kind][condition] = step_children(args, impls, steps)
    return results, step_runs


def step_children(args, impls, steps: int) -> list[dict]:
    """train_child of each implementation at the run's thread count, and refseg's at 1
    thread, at the training defaults' batch size."""
    batch = net_config().batch_size
    runs = [run_train_child(impl, batch, steps, args.threads, args.row_loops)
            for impl in impls]
    if args.threads > 1:
        runs.append(run_train_child(impls[0], batch, steps, 1, args.row_loops))
    return runs

def sgemm_section(report: Report, shapes, before, after) -> float:
    """The sgemm table; returns the ceiling (the best square median)."""
    ceiling = max(max(before[s], after[s]) for s in ("square 1024", "square 2048"))
    report("## sgemm (np.matmul float32) in this run", "",
           "| product | M x K x N | GFLOP/s before layers | after layers |", "|---|---|---:|---:|",
           *(f"| {label} | {' x '.join(map(str, shape))} | {before[label]:.0f} | "
             f"{after[label]:.0f} |" for label, shape in shapes.items()),
           "", f"sgemm ceiling (best square median): **{ceiling:.0f} GFLOP/s**.", "")
    return ceiling


def layer_sections(report: Report, args, results, ceiling, switch) -> None:
    for (condition, batch), rs in results.items():
        report(f"## Layers, batch {batch}, background load {condition}", "",
               f"Background load: {describe_load(condition, args.background_cores)}. "
               "Medians of the interleaved rounds; ratio = refseg / faster torch layout (ratio "
               "of the fastest runs in brackets); f+b = forward + backward, counted as 3x the "
               "forward FLOPs (direct-convolution FLOPs: an effective rate on the Winograd "
               "route); (large) = at least 1 GFLOP forward per image. Targets: ratio "
               "<= 1.5, large layers >= 50% of the sgemm ceiling. Other load: cores used by "
               "other processes meanwhile, the background neighbours included (without them, "
               "above ~0.1 the numbers are disturbed).", "",
               *layer_table(rs, ceiling), "", *torch_layout_lines(rs), "")
        if switch is not None:
            report(*thread_lines(rs, args.threads), "")
    report("## Summary: decoder layers summed, every condition", "",
           "Sums of the medians over the layers; torch: the faster layout per layer.", "",
           *summary_lines(results, args.threads), "")


STEP_RUNS_NOTE = (
    "Each row is a fresh child process with its thread count pinned before the libraries "
    "load, started while the condition's neighbours run; refseg's steps then take as many of "
    "those threads as the load leaves free (refseg.engine.training.threads.sized_to_load, as refseg train "
    "runs them; the step counts per thread count are below the table). Peaks are VmHWM above "
    "the RSS at the reset (see the decoder step above).")


def step_sections(report: Report, step_runs, threads) -> None:
    config = net_config()
    size = f"batch {config.batch_size} at {config.input_hw[0]}x{config.input_hw[1]}"
    if step_runs["demo"]:
        report("## The demo's training step: the decoder on cached taps", "",
               f"As `refseg demo` and `refseg train` train ({size}, frozen backbones): the "
               "taps of random images computed once by refseg's backbones, then forward of "
               "the decoder, per-pixel cross-entropy, backward, Adam (lr "
               f"{config.learning_rate:g}). refseg: refseg/run/training.py's training_step; "
               "torch: the same decoder (refseg.models.decoder.DECODER) with the same initial "
               "weights on the same taps, torch.optim.Adam, NCHW (torch-demo) and "
               "channels_last (torch-demo-cl). " + STEP_RUNS_NOTE, "",
               *step_lines(step_runs["demo"], threads, DEMO_IMPLS), "")
    if step_runs["net"]:
        report("## Whole-network training step (refseg train --train-backbone)", "",
               f"{size.capitalize()}, both backbones and the decoder trainable, batch norm on "
               "batch statistics; forward, per-pixel cross-entropy, backward, Adam (lr "
               f"{config.learning_rate:g}); the images are random and the data set's "
               "claim-1 extraction is not timed. refseg: refseg/run/training.py's step; "
               "torch: benchmarks/_torch_net.py trainable, torch.optim.Adam, NCHW "
               "(torch-net) and channels_last (torch-net-cl). " + STEP_RUNS_NOTE, "",
               *step_lines(step_runs["net"], threads), "")


def target_section(report: Report, step_runs, threads) -> None:
    """Every training-step target of this run in one table."""
    lines = ["| step | background load | refseg / torch per step | target | refseg / torch "
             "peak memory | target | refseg T / 1 thread |", "|---|---|---:|---|---:|---|---:|"]
    for kind, impls in (("demo", DEMO_IMPLS), ("net", NET_IMPLS)):
        for condition, rs in step_runs[kind].items():
            r = step_ratios(rs, threads, impls)
            if r is None:
                lines.append(f"| {kind} | {condition} | failed | | | | |")
                continue
            one = (f"{steady_ms(r['ours']) / steady_ms(r['one']):.2f}"
                   if r["one"] is not None and threads > 1 else "-")
            lines.append(f"| {kind} | {condition} | {r['time']:.2f} | <= {TARGET_STEP_RATIO}: "
                         f"{verdict(r['time'] <= TARGET_STEP_RATIO)} | {r['memory']:.2f} | "
                         f"<= 1: {verdict(r['memory'] <= 1)} | {one} |")
    report("## Targets: the training steps", "",
           "demo = the decoder on cached taps (the demo's step), net = --train-backbone; "
           "torch = the faster layout in the same condition. bench_model.py reports the "
           "prediction targets.", "", *lines, "")

def main(args: argparse.Namespace) -> None:
    if args.train_child:
        impl, batch, steps = args.train_child
        print(json.dumps(train_child(impl, int(batch), int(steps), args.threads)))
        return
    load_torch(args.threads)
    switch = ThreadSwitch() if args.threads > 1 else None
    layers = [LAYERS[n] for n in args.layers] if args.layers else list(LAYERS.values())
    report = Report()
    report.header("refseg decoder layers vs torch", "bench_ops.py",
                  environment_lines(args.threads, _decoder_layers.torch),
                  "- thread pools switched at run time for the 1-thread rounds: "
                  + (switch.describe() if switch else "- (T = 1)"),
                  "- background load conditions: " + "; ".join(
                      f"{c}: {describe_load(c, args.background_cores)}"
                      for c in args.background_load))
    decoder_step_section(args, report)
    # the ceiling before and after the layers: the machine's load may change in between
    shapes = sgemm_shapes(args.batches)
    sgemm_before = measure_sgemm(shapes, max(3, args.repeat // 2))
    results, step_runs = time_conditions(args, layers, switch)
    sgemm_after = measure_sgemm(shapes, max(3, args.repeat // 2))
    ceiling = sgemm_section(report, shapes, sgemm_before, sgemm_after)
    layer_sections(report, args, results, ceiling, switch)
    step_sections(report, step_runs, args.threads)
    worst = max(r.agreement for rs in results.values() for r in rs)
    report(f"refseg vs torch agreement: largest relative difference over outputs and "
           f"gradients {worst:.1e} ({'ok' if worst < 1e-3 else 'MISMATCH'}).", "")
    if args.profile:
        profile_section(report, args, layers)
    target_section(report, step_runs, args.threads)
    report.finish(RESULTS if args.write else None)


if __name__ == "__main__":
    main(ARGS)
