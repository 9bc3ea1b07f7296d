"""Time the prediction of the whole Res-Mobile Net fusion network: refseg against the same
network in torch and in Keras (torch backend), and measure refseg's peak memory.

What is compared
----------------
One network, 224x224x3 float32 input in [-1, 1], class probabilities out, at batch 1 and 8
(``--batches``), three implementations in this one process with identical weights:

* **refseg**: the engine, ``refseg.engine.plan(ResMobileNet((224, 224)))`` made once
  (``mode="measure"``), then ``plan.predict(x, batch_size=N)`` on NHWC NumPy arrays: what
  ``refseg predict`` runs. **refseg reference** (quiet rounds only): the layer graph,
  ``ResMobileNet.predict``, on training's engine, which ``_common.py`` installs for the whole
  process (Winograd, tiled products): the route ``refseg predict`` took before the plan,
  not the ordered products ``--route reference`` runs.
* **torch frozen** and **torch compile** (quiet rounds only): torch's best CPU inference,
  ``_torch_best.py`` (``torch.jit.freeze`` of the traced channels_last network with
  ``optimize_for_inference``; ``torch.compile`` where it runs, ``--no-compile`` skips it).
* **torch**: ``benchmarks/_torch_net.py``, the network written as a plain ``torch.nn.Module``
  from refseg's weight dict (Keras semantics: asymmetric "same" padding, BN in inference mode
  with each backbone's epsilon and not folded, ReLU6, Keras' Conv2DTranspose crop), run under
  ``torch.inference_mode()``. Both memory layouts are timed first, NCHW and channels_last
  (the input is then a zero-copy NHWC view); the faster one is the one compared.
* **Keras**: Keras 3 on the torch backend, ``keras.applications.ResNet50V2`` and
  ``MobileNetV2`` on one input plus the hand-written Keras decoder of
  ``tests/models/test_models_keras.py`` (imported from there), prediction output only. Two ways of
  calling it are timed first, ``model.predict_on_batch(x)`` (NumPy in and out) and
  ``model(x, training=False)`` under ``torch.no_grad()``; the faster one is compared.

Weights: the Keras variables are filled with ``tests/models/test_models_keras.randomise`` (He-scaled
kernels, the decoder at half the variance, random BN statistics, so activations stay in range
and the softmax is not saturated); the same arrays are loaded into refseg by Keras path
(``set_weights(strict=True)``), and torch is built from ``model.weights()``. Before any
timing the three predictions on the benchmark input are compared: the largest absolute
difference of the probabilities to refseg's must be at most 1e-4 (else the script stops).

Timing: threads T (``--threads``, default all cores) for everything, fixed before the
libraries load: ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS``,
``torch.set_num_threads(T)``. One warm-up call of each variant, then ``--repeat`` rounds in
which each implementation predicts the batch once, the rounds in the orders of a balanced
Latin square (each implementation right after every other equally often), garbage
collector off; medians are reported, with the fastest run in brackets. Every call carries the
CPU that other processes used meanwhile ("other load", cores, from /proc/stat; see
_common.py: on 2 cores one busy neighbour slows 2-thread OpenBLAS far more than torch);
``--wait-quiet S`` holds each round back, up to S seconds, until the machine is idle.

FLOPs: 2 x the multiply-accumulates of every Conv2D, DepthwiseConv2D and Conv2DTranspose of
refseg's graph (``Layer.macs`` over ``graph.shapes((224, 224, 3))``, the layers the prediction
needs); BN, activations, Adds and pooling are not counted. These are direct-convolution FLOPs
for every implementation: where refseg (or torch) computes a 3x3 convolution by Winograd, which
does fewer multiply-adds, its GFLOP/s is an effective rate. refseg's GFLOP/s is set against the
float32 sgemm ceiling (``np.matmul``, square 1024 and 2048, median, the better of before and
after the model timings), measured as bench_ops.py does (``_common.measure_sgemm``); and, for
the target, against a square 2048 ``np.matmul`` timed in the same quiet rounds as the
implementations, round by round (``SGEMM_IN_ROUNDS``): a shared host's speed drifts within
minutes, and a ceiling taken before or after the rounds measures the drift as well.

Threads and background load: with T > 1, refseg is also timed with its OpenMP and OpenBLAS
pools set to 1 thread at run time (``refseg.engine.training.threads``) and torch with
``torch.set_num_threads(1)``, in the same rounds; the report gives refseg's T-thread time over
its 1-thread time, and after the rounds counts the threads that really computed during one
more call of each (CPU time per thread, /proc/self/task). ``--background-load
none,busy,mixed,matmul`` repeats the timing under each condition in this one run; the script
starts and stops the neighbours itself (``_neighbours.py``: ``busy`` = ``--background-cores``
busy Python loops, ``mixed`` = one process running NumPy float32 products on 2 OpenBLAS
threads, 70 % of the time, ``matmul`` = the same products without pause). Keras, the variant
selection, the profile, the memory and the training steps run without neighbours.
refseg's T-thread rows run its default, a thread count chosen per prediction from the load
(``refseg.engine.training.threads.sized_to_load``: at most T, and where other processes keep cores busy, the
faster of T and fewer threads as timed on the earlier runs); under a neighbour it first runs
untimed until each count in doubt has been timed, and the report counts the runs that went to
each count.
The header names the CPU (/proc/cpuinfo) and the row loops refseg chose
(``refseg.backend.row_loops``); ``--row-loops baseline`` runs the plain loops on an AVX-512 CPU.

Targets (``_model_parts.py``), each reported with its verdict in the last section, "Targets:
every one of this run": refseg / torch eager <= 0.6 on a quiet machine at every batch size,
refseg / torch's best (frozen, or compiled where it runs) <= 1.0 there, <= 1.0 against torch
eager with one busy neighbour and with the mixed load (none stated beside the matmul
neighbour); batch 1 at >= 65 % of the sgemm ceiling of the same run (effective GFLOP/s,
quiet; the median over the rounds of refseg's rate over the sgemm's of the same round);
refseg's T threads at most 1.05 times its 1 thread's time under every condition (the
run-to-run noise, the median absolute deviation over the median, shown beside); faster than Keras
(ratio < 1); under the 0.123 s per image that the patent reports for its prediction ([0260];
its hardware is not stated) with one busy neighbour; and the training steps' (``--train-steps``,
bench_ops.py's child processes, without neighbours): the demo's step (the decoder on cached
taps) and ``--train-backbone``'s each <= 0.8 of torch's time per step, with a peak memory
<= torch's; with ``--train-rounds R`` the children run R times, the order of the
implementations rotated each round, and the ratios are the medians of the rounds' ratios.
Claim 1's peak memory (``--claim1-sizes``, bench_edges_memory.py's fresh processes): with
``--arrays maps`` <= 40 bytes per pixel, with ``--arrays all`` <= 1.10 times the arrays it
returns plus the input. The main job (``--demo-against PYTHON``, ``_demo_runs.py``): the
default ``refseg demo`` in at most 0.75 of the time of the install of PYTHON (the code before
these targets), in alternating child processes, its scores reported beside (they may move
where an algorithm changes rounding).

Where refseg's time goes (``--no-profile`` skips it): every autograd op call of one prediction
(``Op.__call__``, wrapped at run time; no file is modified) timed and summed by op, and the
ten largest costs listed with convolutions split by shape, at each batch size; the rest of the
prediction's time is graph bookkeeping and Python outside the ops.

Memory: peak resident set size over one prediction, in a fresh child process per
implementation and batch (so this process's torch, Keras and earlier allocations do not
count): ``VmHWM`` after ``clear_refs`` minus ``VmRSS`` at the reset, for the first call
(which also allocates refseg's reusable im2col workspace) and for a second call; plus refseg's
``tracemalloc`` peak (live NumPy buffers only) and the RSS that building the model took.

Usage::

    python benchmarks/bench_model.py [--quick] [--threads T] [--repeat N] [--batches 1,8]
        [--wait-quiet SECONDS] [--no-profile] [--write] [--row-loops auto|baseline]
        [--background-load none,busy,mixed,matmul] [--background-cores N] [--train-steps S]
        [--train-rounds R] [--claim1-sizes WxH,...] [--demo-against PYTHON]
        [--demo-rounds R] [--no-compile]

The last line of the output sums up the issue's targets (``_torch_best.targets_summary``):
``targets: b1_eager R b8_eager R b1_best R b8_best R b1_ceiling P%``.

The profile and the report tables are ``_model_parts.py``'s.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

import _common
from _common import (Report, ThreadSwitch, add_row_loops_argument, all_cores,
                     environment_lines, measure_sgemm, median_ms, proc_status_mb,
                     reset_peak_rss, start, time_rounds, verdict, working_threads)
from _demo_runs import demo_lines, demo_rounds, demo_target_rows
from bench_edges_memory import claim1_memory, claim1_target_rows, parse_sizes
from _neighbours import (LOADS, add_background_arguments, background,
                         check_background_arguments, describe_load)

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results_model.md"
INPUT_HW = (224, 224)
TOLERANCE = 1e-4            # largest |p - p_refseg| accepted before timing


def parse_batches(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="sanity run: 3 rounds, 1 layout/call-selection round, 1 profile "
                             "round")
    parser.add_argument("--threads", type=int, default=all_cores(),
                        help="threads for refseg's OpenMP, NumPy's BLAS and torch "
                             "(default: all cores)")
    parser.add_argument("--repeat", type=int, default=None,
                        help="timed rounds per batch size (default 11, 3 with --quick)")
    parser.add_argument("--batches", nargs="+", default=["1,8"],
                        help="batch sizes, comma- or space-separated (default 1,8)")
    parser.add_argument("--wait-quiet", type=float, default=0.0, metavar="SECONDS",
                        help="before each round, wait up to SECONDS for other processes to "
                             "use under 0.2 cores (default 0: do not wait)")
    parser.add_argument("--no-profile", dest="profile", action="store_false",
                        help="skip the per-op breakdown of refseg's prediction")
    parser.add_argument("--train-steps", type=int, default=None,
                        help="steps of each training step kind (the demo's, the decoder on "
                             "cached taps; --train-backbone's) per implementation, each in a "
                             "child process of bench_ops.py, without neighbours, for the "
                             "targets table (default 12, 3 with --quick; 0 skips them: "
                             "torch's steps speed up over the first several, and medians "
                             "over 8 steps flattered refseg)")
    parser.add_argument("--train-rounds", type=int, default=1,
                        help="rounds of the training-step children, the implementations' "
                             "order rotated each round; the targets take the median of the "
                             "rounds' ratios (default 1)")
    parser.add_argument("--claim1-sizes", default=None, metavar="WxH,...",
                        help="images on which claim 1's peak memory is measured for the "
                             "targets table, bench_edges_memory.py's way (default "
                             "3000x2000,6000x4000, 1500x1000 with --quick; '' skips it)")
    parser.add_argument("--demo-against", default=None, metavar="PYTHON",
                        help="time the default `refseg demo` of this install against the "
                             "one of the interpreter PYTHON (another install of refseg), "
                             "in alternating child processes, for the targets table "
                             "(default: not measured; about 5 minutes a demo)")
    parser.add_argument("--demo-rounds", type=int, default=1,
                        help="rounds of the two demos with --demo-against (default 1)")
    parser.add_argument("--no-compile", dest="compile", action="store_false",
                        help="leave torch.compile out of torch's best inference (its first "
                             "call compiles for minutes)")
    add_row_loops_argument(parser)
    add_background_arguments(parser)
    parser.add_argument("--write", action="store_true",
                        help="also write the Markdown report to benchmarks/results_model.md")
    # Internal: the memory measurement runs in a child process.
    parser.add_argument("--memory-child", nargs=2, metavar=("IMPL", "BATCH"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.batches = [b for text in args.batches for b in parse_batches(text)]
    if args.repeat is None:
        args.repeat = 3 if args.quick else 11
    if args.train_steps is None:
        args.train_steps = 3 if args.quick else 12
    if args.train_steps < 0:
        parser.error("--train-steps must be >= 0")
    if args.train_rounds < 1 or args.demo_rounds < 1:
        parser.error("--train-rounds and --demo-rounds must be >= 1")
    if args.claim1_sizes is None:
        args.claim1_sizes = "1500x1000" if args.quick else "3000x2000,6000x4000"
    try:
        args.claim1_sizes = parse_sizes(args.claim1_sizes)
    except ValueError as exc:
        parser.error(f"--claim1-sizes: {exc}")
    if args.demo_against is not None and not Path(args.demo_against).is_file():
        parser.error(f"--demo-against: no interpreter at {args.demo_against}")
    if min(args.repeat, args.threads, *args.batches) < 1:
        parser.error("--repeat, --threads and --batches must be >= 1")
    check_background_arguments(parser, args)
    return args


if __name__ == "__main__":
    # before NumPy, refseg and torch are imported below
    ARGS = start(parse_args)
    # Keras must know its backend before its import
    os.environ["KERAS_BACKEND"] = "torch"

import numpy as np  # noqa: E402

from refseg.engine import plan as engine_plan  # noqa: E402
from refseg.engine.training import threads as refseg_threads  # noqa: E402
from refseg.models import ResMobileNet  # noqa: E402

from _torch_best import COMPILED, EAGER, FROZEN, anchor_calls, targets_summary  # noqa: E402

from _model_parts import (PATENT_S_PER_IMAGE, TARGET_BEST_RATIO,  # noqa: E402
                          TARGET_CEILING_SHARE, TARGET_THREAD_RATIO, TARGET_TORCH_RATIO, memory_lines, profile_lines, profile_refseg,
                          summary_lines, target_lines, thread_ratio, timing_table)

# torch and Keras are imported in load_frameworks(): the refseg memory child must not load
# them (their libraries would count in the RSS it measures).
torch = None
keras = None


def load_frameworks(threads: int) -> None:
    global torch, keras
    torch = _common.load_torch(threads)
    import keras as _keras

    keras = _keras
    torch.set_num_threads(threads)  # again, in case importing Keras changed it


# --- the network in three implementations --------------------------------------------------

def macs_per_image(model: ResMobileNet) -> dict[str, int]:
    """Multiply-accumulates per image of the layers the prediction runs, by part."""
    shapes = model.graph.shapes((*model.input_shape, 3))
    parts: dict[str, int] = {}
    for name in model.graph.required([model.OUTPUT]):
        node = model.graph.nodes[name]
        macs = node.layer.macs(*(shapes[s] for s in node.inputs))
        parts[node.part] = parts.get(node.part, 0) + macs
    return parts


class Networks:
    """refseg, torch (NCHW and channels_last) and Keras with the same random weights."""

    def __init__(self, seed: int = 0, use_compile: bool = True):
        from _torch_net import TorchResMobileNet
        from test_models_keras import keras_fusion_network, randomise

        net, _taps, variables = keras_fusion_network(keras, INPUT_HW)
        self.keras = keras.Model(net.inputs[0], net.outputs[-1])  # the prediction only
        weights = randomise(variables, np.random.default_rng(seed))
        self.refseg = ResMobileNet(INPUT_HW, seed=seed)
        self.refseg.set_weights(weights, strict=True, source="keras")
        self.torch = {
            "NCHW": TorchResMobileNet(self.refseg.weights(), channels_last=False).eval(),
            "channels_last": TorchResMobileNet(self.refseg.weights(), channels_last=True).eval()}
        self.plan = engine_plan(self.refseg)
        self.use_compile = use_compile
        self._anchors: dict[int, dict] = {}   # torch's best, made once per batch size

    def calls(self, x: np.ndarray) -> dict:
        """name -> callable predicting batch x (each on its own input form, made here)."""
        nchw = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
        nhwc = torch.from_numpy(x).permute(0, 3, 1, 2)  # channels_last: a view, no copy
        keras_in = torch.from_numpy(x)
        n = x.shape[0]

        def torch_call(net, inp):
            def run():
                with torch.inference_mode():
                    return net(inp)
            return run

        def keras_call():
            with torch.no_grad():
                return self.keras(keras_in, training=False)

        if n not in self._anchors:
            self._anchors[n] = anchor_calls(torch, self.torch["channels_last"], nhwc,
                                            self.use_compile)
        return {
            "refseg": lambda: self.plan.predict(x, batch_size=n),
            "refseg reference": lambda: self.refseg.predict(x, batch_size=n),
            **self._anchors[n],
            "torch NCHW": torch_call(self.torch["NCHW"], nchw),
            "torch channels_last": torch_call(self.torch["channels_last"], nhwc),
            "Keras predict_on_batch": lambda: self.keras.predict_on_batch(x),
            "Keras call (no_grad)": keras_call,
        }


def as_nhwc(name: str, output) -> np.ndarray:
    """A variant's output as an (N, H, W, 3) array: torch's are NCHW-indexed tensors, Keras'
    call gives an NHWC tensor, predict_on_batch an NHWC array."""
    array = output if isinstance(output, np.ndarray) else output.detach().cpu().numpy()
    return array.transpose(0, 2, 3, 1) if name.startswith("torch") else array


def agreement(calls: dict) -> dict[str, float]:
    """Largest |p - p_refseg| of each torch / Keras variant."""
    ours = calls["refseg"]()
    out = {}
    for name, fn in calls.items():
        if name != "refseg":
            theirs = as_nhwc(name, fn())
            out[name] = (float("inf") if theirs.shape != ours.shape
                         else float(np.abs(theirs - ours).max()))
    return out


# --- timing --------------------------------------------------------------------------------

def settle_thread_choice(run) -> None:
    """Runs refseg's prediction until its thread count under this load has been timed on each
    count in doubt (``refseg.engine.training.threads.ThreadChoice``: TIMED_RUNS runs each), as a long job's
    first runs would, so that the timed rounds show the choice it settles on."""
    for _ in range(2 * refseg_threads.TIMED_RUNS):
        run()


def sizing_line(counts, threads: int) -> str:
    """What refseg's load-sized thread count chose in the timed rounds."""
    rows = []
    for ceiling, label in ((threads, "refseg"), (1, "refseg 1 thread"))[:1 + (threads > 1)]:
        chose = {t: n for (c, t), n in counts.items() if c == ceiling}
        if chose:
            rows.append(f"{label}: " + ", ".join(
                f"{n} run{'s' * (n != 1)} on {t} thread{'s' * (t != 1)}"
                for t, n in sorted(chose.items(), reverse=True)))
    return ("Thread count chosen per run from the load (refseg.engine.training.threads.sized_to_load; the "
            "rounds above): " + ("; ".join(rows) if rows else "-") + ".")


def pick_faster(calls: dict, names: list[str], rounds: int, wait_quiet: float):
    """The faster of `names` by median over `rounds` interleaved rounds, and all medians."""
    times, _ = time_rounds({n: calls[n] for n in names}, rounds, warmup=1,
                           wait_quiet=wait_quiet)
    medians = {n: 1e3 * statistics.median(t) for n, t in times.items()}
    return min(medians, key=medians.get), medians


# --- memory (child process) ----------------------------------------------------------------

def torch_at(threads: int, fn, restore: int):
    """A callable running ``fn`` with torch at ``threads`` threads, then at ``restore``."""
    def run():
        torch.set_num_threads(threads)
        try:
            return fn()
        finally:
            torch.set_num_threads(restore)
    return run


def memory_child(impl: str, batch: int, threads: int) -> dict:
    """Runs in a fresh process: RSS of building the network, and peak RSS over one
    prediction (first and second call)."""
    rss_start = proc_status_mb("VmRSS")
    model = ResMobileNet(INPUT_HW, seed=0)
    x = np.random.default_rng(2).uniform(-1, 1, (batch, *INPUT_HW, 3)).astype(np.float32)
    if impl == "refseg":  # the engine's plan, as refseg predict runs it
        plan = engine_plan(model, mode="estimate")

        def predict():
            return plan.predict(x, batch_size=batch)
    else:
        torch = _common.load_torch(threads)
        from _torch_net import TorchResMobileNet

        net = TorchResMobileNet(model.weights(), channels_last=impl == "torch channels_last")
        del model
        gc.collect()
        tx = torch.from_numpy(x)
        tx = tx.permute(0, 3, 1, 2) if impl == "torch channels_last" else \
            tx.permute(0, 3, 1, 2).contiguous()

        def predict():
            with torch.inference_mode():
                return net(tx)
    gc.collect()
    result = {"impl": impl, "batch": batch, "rss_start_mb": rss_start,
              "rss_built_mb": proc_status_mb("VmRSS"), "peak_reset": reset_peak_rss()}
    for label in ("first", "second"):
        reset_peak_rss()
        result[f"rss_before_{label}_mb"] = proc_status_mb("VmRSS")
        out = predict()
        result[f"peak_{label}_mb"] = proc_status_mb("VmHWM")
        del out
    if impl == "refseg":
        import tracemalloc

        tracemalloc.start()  # NumPy reports its data buffers to tracemalloc
        predict()
        result["tracemalloc_peak_mb"] = tracemalloc.get_traced_memory()[1] / 2 ** 20
        tracemalloc.stop()
    result["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return result


def run_memory_child(impl: str, batch: int, threads: int, row_loops: str) -> dict:
    """memory_child in a fresh process of this script; its result, or the last line of its
    error."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--threads", str(threads),
           "--row-loops", row_loops, "--memory-child", impl, str(batch)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"impl": impl, "batch": batch, "error": out.stderr.strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


# --- main ----------------------------------------------------------------------------------

def header(report: Report, args, switch) -> None:
    report.header("Res-Mobile Net prediction: refseg vs torch vs Keras", "bench_model.py",
                  environment_lines(args.threads, torch),
                  f"- Keras {keras.__version__}, backend {keras.backend.backend()}",
                  f"- thread pools switched at run time for the 1-thread rounds: "
                  f"{switch.describe()}",
                  "- background load conditions: " + "; ".join(
                      f"{c}: {describe_load(c, args.background_cores)}"
                      for c in args.background_load))


def select_variants(report: Report, nets, args) -> tuple[dict, dict]:
    """For each batch size: the input, the agreement of every variant with refseg (else the
    script stops), and the faster torch layout and Keras call. Returns (inputs, chosen names)
    by batch size."""
    select_rounds = 1 if args.quick else 3
    inputs, chosen_names = {}, {}
    for batch in args.batches:
        x = inputs[batch] = np.random.default_rng(batch).uniform(
            -1, 1, (batch, *INPUT_HW, 3)).astype(np.float32)
        calls = nets.calls(x)
        diffs = agreement(calls)
        report(f"## Batch {batch}", "", "Agreement with refseg on the benchmark input (largest "
               f"|p - p_refseg| of the probabilities, tolerance {TOLERANCE:g}): "
               + ", ".join(f"{name} {d:.2g}" for name, d in diffs.items()), "")
        bad = {name: d for name, d in diffs.items() if not d <= TOLERANCE}
        if bad:
            raise SystemExit(f"predictions differ from refseg's beyond {TOLERANCE:g}: {bad}")
        torch_name, torch_ms = pick_faster(calls, ["torch NCHW", "torch channels_last"],
                                           select_rounds, args.wait_quiet)
        keras_name, keras_ms = pick_faster(
            calls, ["Keras predict_on_batch", "Keras call (no_grad)"], select_rounds,
            args.wait_quiet)
        report("Variant selection (median ms / batch over "
               f"{select_rounds} round{'s' * (select_rounds > 1)}, no background load): "
               + ", ".join(f"{n} {ms:.0f}" for n, ms in {**torch_ms, **keras_ms}.items())
               + f"; compared below: **{torch_name}**, **{keras_name}**.", "")
        chosen_names[batch] = (torch_name, keras_name)
    return inputs, chosen_names


#: The product timed in the quiet rounds beside the implementations (square, float32,
#: np.matmul on T threads): the sgemm ceiling of each round, against which that round's
#: refseg prediction is set (``paired_ceiling_share``).
SGEMM_IN_ROUNDS = ("sgemm 2048 (in the rounds)", 2048)


def sgemm_call(side: int):
    """np.matmul of two float32 side x side matrices."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((side, side), dtype=np.float32)
    b = rng.standard_normal((side, side), dtype=np.float32)
    return lambda: a @ b


def sgemm_rates(times: dict) -> list[float]:
    """GFLOP/s of the sgemm of each round."""
    name, side = SGEMM_IN_ROUNDS
    return [2.0 * side ** 3 / t / 1e9 for t in times[name]]


def paired_ceiling_share(times: dict, flops: float) -> list[float]:
    """refseg's effective GFLOP/s over the sgemm's of the same round, round by round: on a
    host whose speed drifts within minutes (measured: the 2048 product at 294 GFLOP/s before
    the models loaded and 201 after, in one run) a ceiling taken at another moment measures
    the drift as much as refseg."""
    return [flops / ours / 1e9 / rate for ours, rate in zip(times["refseg"], sgemm_rates(times))]


def time_condition(nets, args, switch, condition, batch, inputs, chosen_names):
    """One background-load condition at one batch size: (times, loads, torch name, Keras
    name), the working threads of refseg's calls, and the thread counts it chose. On a quiet
    machine the rounds also time ``SGEMM_IN_ROUNDS`` (its times under its name, apart from
    the implementations' tables)."""
    torch_name, keras_name = chosen_names[batch]
    calls = nets.calls(inputs[batch])
    chosen = {"refseg": calls["refseg"], torch_name: calls[torch_name]}
    if args.threads > 1:
        chosen["refseg 1 thread"] = switch.wrap(1, calls["refseg"])
        chosen[f"{torch_name} 1 thread"] = torch_at(1, calls[torch_name], args.threads)
    if condition == "none":  # Keras' and torch's best targets are a quiet machine's
        chosen[keras_name] = calls[keras_name]
        for name in ("refseg reference", EAGER, "torch frozen", "torch compile"):
            if name in calls:
                chosen[name] = calls[name]
        chosen[SGEMM_IN_ROUNDS[0]] = sgemm_call(SGEMM_IN_ROUNDS[1])
    else:
        settle_thread_choice(calls["refseg"])
    before = refseg_threads.SIZINGS.copy()
    times, loads = time_rounds(chosen, args.repeat, warmup=1, wait_quiet=(
        args.wait_quiet if condition == "none" else 0.0))
    sizing = refseg_threads.SIZINGS - before
    workers = {name: working_threads(chosen[name])[0]
               for name in ("refseg", "refseg 1 thread") if name in chosen}
    return (times, loads, torch_name, keras_name), workers, sizing


def time_conditions(nets, args, switch, inputs, chosen_names):
    """time_condition under each background-load condition (its neighbours running) and at
    each batch size, keyed by (condition, batch)."""
    results, workers, sizings = {}, {}, {}
    for condition in args.background_load:
        with background(condition, args.background_cores):
            for batch in args.batches:
                key = (condition, batch)
                results[key], workers[key], sizings[key] = time_condition(
                    nets, args, switch, condition, batch, inputs, chosen_names)
    return results, workers, sizings


def implementations(times: dict) -> dict:
    """The timings of the implementations, without the sgemm of the rounds."""
    return {name: t for name, t in times.items() if name != SGEMM_IN_ROUNDS[0]}


def paired_ceiling_lines(times: dict, flops: float) -> list[str]:
    """The sgemm of the rounds and refseg's share of it, round by round (quiet rows only)."""
    name = SGEMM_IN_ROUNDS[0]
    if name not in times:
        return []
    rates = sgemm_rates(times)
    shares = paired_ceiling_share(times, flops)
    return [f"{name}: median {statistics.median(rates):.0f} GFLOP/s (rounds: "
            f"{min(rates):.0f}-{max(rates):.0f}); refseg's effective GFLOP/s over the sgemm's "
            f"of the same round: median {100 * statistics.median(shares):.0f}% (rounds: "
            f"{100 * min(shares):.0f}-{100 * max(shares):.0f}%).", ""]


def timing_sections(report: Report, args, results, workers, sizings, flops_image,
                    ceiling) -> None:
    for (condition, batch), (times, loads, torch_name, keras_name) in results.items():
        seen = ", ".join(f"{name} {n}" for name, n in workers[(condition, batch)].items())
        report(f"## Prediction time, batch {batch}, background load {condition}", "",
               f"Background load: {describe_load(condition, args.background_cores)}. "
               f"Medians of {args.repeat} interleaved rounds (fastest run in brackets); "
               "ratio = refseg / this implementation (for refseg 1 thread: refseg's T-thread "
               "time over its 1-thread time); GFLOP/s = 2 x MACs / median time, the "
               "same count for every implementation; other load: cores used by other "
               "processes (the background neighbours included) during the calls. 1 thread: "
               "refseg's OpenMP and OpenBLAS pools set to 1 at run time (refseg.engine.training.threads), "
               "torch by torch.set_num_threads(1). Threads that computed during one more call "
               f"of each (CPU time from /proc/self/task): {seen or '-'}.", "",
               *timing_table(batch, implementations(times), loads, batch * flops_image,
                             ceiling), "",
               *paired_ceiling_lines(times, batch * flops_image),
               sizing_line(sizings[(condition, batch)], args.threads), "",
               *target_lines(condition, batch, times, torch_name, keras_name), "")
    report("## Summary: every condition", "",
           f"Threads T = {args.threads}; ratio = refseg / torch (the faster layout, at the same "
           "thread count); refseg T / 1 thread = refseg's T-thread time over its 1-thread "
           "time in the same rounds. Targets: refseg / torch <= "
           + ", ".join(f"{TARGET_TORCH_RATIO[c]} ({c})" for c in LOADS
                       if TARGET_TORCH_RATIO.get(c) is not None)
           + "; T threads never slower than 1 beyond run-to-run noise; "
           f"{PATENT_S_PER_IMAGE} s per image with one busy neighbour.", "",
           *summary_lines(results, args.background_load, args.batches, args.threads), "")


def profile_section(report: Report, nets, args) -> None:
    report("## Where refseg's prediction time goes", "",
           "Every autograd op call timed (Op.__call__ wrapped at run time: the op's "
           "forward plus its Tensor wrapping); median of "
           f"{1 if args.quick else 3} predictions by total time. Conv ops include their "
           "bias, and the decoder's ReLU where it has one (conv2d_relu, "
           "conv2d_transpose_relu); conv2d_batch_norm (_relu, _relu6) is a backbone's "
           "convolution with the batch norm after it, and that batch norm's ReLU, in the "
           "convolution's output pass; batch_norm_relu and batch_norm_relu6 are the other "
           "batch norms with the ReLU that alone reads them, in one pass; the softmax is "
           "its own op.", "")
    for batch in args.batches:
        x = np.random.default_rng(batch).uniform(-1, 1, (batch, *INPUT_HW, 3)) \
            .astype(np.float32)
        report(*profile_lines(profile_refseg(nets.refseg, x, 1 if args.quick else 3),
                              batch), "")


def memory_section(report: Report, args, chosen_names) -> None:
    report("## Peak memory of one prediction", "",
           "MiB. Each row a fresh child process: RSS once the network is built (libraries and "
           "weights; torch's network is built from a refseg model's weights, which are then "
           "freed), then the peak RSS (VmHWM, reset through clear_refs before each call) over "
           "a first and a second prediction, and in brackets that peak above the built RSS: "
           "the memory the prediction needs. The first call also allocates refseg's reusable "
           "im2col workspace; memory freed by the first call and kept by the allocator shows "
           "in the RSS before the second. tracemalloc: peak of live NumPy buffers over a "
           "third refseg call.", "")
    best_torch = {chosen_names[b][0] for b in args.batches}
    runs = []
    for batch in args.batches:
        runs.append(run_memory_child("refseg", batch, args.threads, args.row_loops))
        runs += [run_memory_child(name, batch, args.threads, args.row_loops)
                 for name in sorted(best_torch)]
    report(*memory_lines(runs), "")


def training_runs(args) -> dict:
    """The training steps' child runs by kind (bench_ops.py's children), without neighbours:
    the demo's step and --train-backbone's, refseg's at T threads and at 1; a list of rounds
    per kind, each round a list of runs, the implementations' order rotated from round to
    round so that a slow spell of the host does not fall on one of them alone."""
    from _training_step import DEMO_IMPLS, NET_IMPLS, net_config, run_train_child

    batch = net_config().batch_size
    runs = {}
    for kind, impls in (("demo", DEMO_IMPLS), ("net", NET_IMPLS)):
        children = [(impl, args.threads) for impl in impls]
        if args.threads > 1:
            children.append((impls[0], 1))
        runs[kind] = []
        for r in range(args.train_rounds):
            k = r % len(children)
            runs[kind].append([run_train_child(impl, batch, args.train_steps, threads,
                                               args.row_loops, args.wait_quiet)
                               for impl, threads in children[k:] + children[:k]])
    return runs


def prediction_target_rows(args, results, flops_image, ceiling) -> list[str]:
    """The prediction's targets: ratio to torch under each condition and batch, batch 1's
    share of the sgemm ceiling (quiet), T threads against 1 under each condition."""
    rows = []
    for (condition, batch), (times, _loads, torch_name, _keras) in results.items():
        ref = median_ms(times["refseg"])
        target = TARGET_TORCH_RATIO.get(condition)
        ratio = ref / median_ms(times[torch_name])
        rows.append(f"| prediction, batch {batch} | {condition} | refseg / torch | "
                    f"{ratio:.2f} | " + (f"<= {target}: {verdict(ratio <= target)}"
                                        if target is not None else "none stated") + " |")
        best = [median_ms(times[n]) for n in (FROZEN, COMPILED) if n in times]
        if condition == "none" and best:
            ratio = ref / min(best)
            rows.append(f"| prediction, batch {batch} | none | refseg / torch's best "
                        f"(frozen or compiled) | {ratio:.2f} | <= {TARGET_BEST_RATIO}: "
                        f"{verdict(ratio <= TARGET_BEST_RATIO)} |")
        if condition == "none" and batch == 1:
            share = batch * flops_image / (ref * 1e-3) / 1e9 / ceiling
            paired = statistics.median(paired_ceiling_share(times, batch * flops_image))
            rows.append(f"| prediction, batch 1 | none | share of the sgemm ceiling, round by "
                        f"round (median) | {100 * paired:.0f}% | "
                        f">= {100 * TARGET_CEILING_SHARE:.0f}%: "
                        f"{verdict(paired >= TARGET_CEILING_SHARE)} |")
            rows.append(f"| prediction, batch 1 | none | share of the run's best sgemm "
                        f"({ceiling:.0f} GFLOP/s) | {100 * share:.0f}% | context |")
        if "refseg 1 thread" in times:
            r_one, noise = thread_ratio(times)
            rows.append(f"| prediction, batch {batch} | {condition} | refseg T / 1 thread | "
                        f"{r_one:.2f} (noise {noise:.2f}) | <= {TARGET_THREAD_RATIO}: "
                        f"{verdict(r_one <= TARGET_THREAD_RATIO)} |")
    return rows


def targets_section(report: Report, args, results, flops_image, ceiling, train, claim1,
                    demos) -> None:
    """Every target of this run in one table; the training steps' from their child runs,
    claim 1's memory and the demo's speed from theirs (when measured)."""
    from _training_step import (DEMO_IMPLS, NET_IMPLS, TARGET_STEP_RATIO, step_lines,
                                step_ratios)

    rows = prediction_target_rows(args, results, flops_image, ceiling)
    for kind, impls in (("demo", DEMO_IMPLS), ("net", NET_IMPLS)):
        label = {"demo": "training step, decoder on cached taps (the demo's)",
                 "net": "training step, --train-backbone"}[kind]
        rounds = [step_ratios(rs, args.threads, impls) for rs in train.get(kind, [])]
        if not rounds or any(r is None for r in rounds):
            rows.append(f"| {label} | none | - | {'skipped' if not train else 'failed'} | |")
            continue
        for measure, key, target in (("per step", "time", TARGET_STEP_RATIO),
                                     ("peak memory", "memory", 1)):
            values = [r[key] for r in rounds]
            value = statistics.median(values)
            each = (f" (rounds: {', '.join(f'{v:.2f}' for v in values)})"
                    if len(values) > 1 else "")
            rows.append(f"| {label} | none | refseg / torch {measure}{each} | {value:.2f} | "
                        f"<= {target}: {verdict(value <= target)} |")
    if train:
        report("## Training steps (no neighbour)", "",
               "bench_ops.py's child processes (its report describes them): demo = the "
               "decoder on cached taps at the training defaults, net = --train-backbone; "
               f"{args.train_rounds} round{'s' * (args.train_rounds > 1)}, the "
               "implementations' order rotated from round to round.", "",
               *step_lines({f"round {i + 1}": train["demo"][i] + train["net"][i]
                            for i in range(args.train_rounds)}, args.threads,
                           DEMO_IMPLS)[:-2 - (args.train_rounds - 1)], "")
    if claim1 is not None:
        rows += claim1_target_rows(claim1)
    else:
        rows.append("| claim 1's peak memory | none | - | skipped (--claim1-sizes '') | |")
    if demos:
        report(*demo_lines(demos, args.demo_against))
        rows += demo_target_rows(demos)
    else:
        rows.append("| refseg demo (defaults) | none | - | not measured (--demo-against) | |")
    report("## Targets: every one of this run", "",
           "torch = the faster layout; T threads = refseg's default (load-sized) count; "
           "noise = the larger median absolute deviation over the median of the two.", "",
           "| what | background load | measure | value | target |", "|---|---|---|---:|---|",
           *rows, "")


def main(args: argparse.Namespace) -> None:
    if args.memory_child:
        impl, batch = args.memory_child
        print(json.dumps(memory_child(impl, int(batch), args.threads)))
        return
    # tests/models/test_models_keras.py and the tests/anchors.py it imports
    sys.path[:0] = [str(HERE.parent / "tests" / "models"), str(HERE.parent / "tests")]
    load_frameworks(args.threads)
    switch = ThreadSwitch()
    report = Report()
    header(report, args, switch)
    nets = Networks(use_compile=args.compile)
    macs = macs_per_image(nets.refseg)
    flops_image = 2.0 * sum(macs.values())
    report(f"Input {INPUT_HW[0]}x{INPUT_HW[1]}x3. Multiply-accumulates per image (refseg "
           "graph, convolutions only): " + ", ".join(f"{part} {m / 1e9:.2f} G"
                                                     for part, m in macs.items())
           + f"; total {sum(macs.values()) / 1e9:.2f} G = {flops_image / 1e9:.2f} GFLOP.", "")
    sgemm_shapes = {"square 1024": (1024,) * 3, "square 2048": (2048,) * 3}
    sgemm_rounds = 3 if args.quick else 5
    sgemm_before = measure_sgemm(sgemm_shapes, sgemm_rounds)
    inputs, chosen_names = select_variants(report, nets, args)
    results, workers, sizings = time_conditions(nets, args, switch, inputs, chosen_names)
    sgemm_after = measure_sgemm(sgemm_shapes, sgemm_rounds)
    ceiling = max(max(sgemm_before[s], sgemm_after[s]) for s in sgemm_shapes)
    report("## sgemm (np.matmul float32) in this run", "",
           "| product | GFLOP/s before models | after models |", "|---|---:|---:|",
           *(f"| {label} | {sgemm_before[label]:.0f} | {sgemm_after[label]:.0f} |"
             for label in sgemm_shapes),
           "", f"sgemm ceiling (best square median, no background load): **{ceiling:.0f} "
           "GFLOP/s**.", "")
    timing_sections(report, args, results, workers, sizings, flops_image, ceiling)
    if args.profile:
        profile_section(report, nets, args)
    del nets
    gc.collect()
    memory_section(report, args, chosen_names)
    train = training_runs(args) if args.train_steps else {}
    claim1 = claim1_memory(args.claim1_sizes) if args.claim1_sizes else None
    demos = demo_rounds(args.demo_against, args.demo_rounds) if args.demo_against else []
    targets_section(report, args, results, flops_image, ceiling, train, claim1, demos)
    report.finish(RESULTS if args.write else None)
    print(targets_summary(results, lambda times, batch: paired_ceiling_share(
        times, batch * flops_image)))


if __name__ == "__main__":
    main(ARGS)
