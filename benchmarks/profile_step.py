"""Where a training step spends its time, op by op, on all threads and on one, against torch's
step in the same process: the whole network's (``--step net``, the default: ``refseg train
--train-backbone``, batch 8 at 64x224, both backbones and the decoder trainable, Adam) or the
demo's (``--step demo``: the decoder alone on cached backbone taps, as ``refseg demo`` and
``refseg train`` run it).

    python benchmarks/profile_step.py --rounds 5 [--step demo]

Each round times refseg's step on the machine's threads and on one thread
(``refseg.engine.training.threads.limit_threads``; the order alternates from round to round) and, unless
``--no-torch``, torch's same step (NCHW, ``_training_step.TorchNetTrainer`` or
``TorchDemoTrainer``) on the same
threads. Every autograd op's forward (``Op.__call__``) and backward is timed by wrapping them
at run time (in memory only), keyed by op, kernel, stride and input shape; Adam's step is
timed as one. The report gives, per op, the median times on T threads and on one, and
"T-thread time - 1-thread time / T": the time above perfect scaling, which ranks the ops that
hold the threads back. The other load column says whether a round was quiet; a loaded round
tells nothing about scaling.
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import time

os.environ.setdefault("REFSEG_ADAPTIVE_THREADS", "0")

# refseg's waiting policies for OpenBLAS and OpenMP take effect only if refseg loads first
import refseg as _refseg  # noqa: E402, F401
import _decoder_layers  # noqa: E402
import _training_step as steps  # noqa: E402
from _common import OtherLoad, all_cores, engine_for_the_process  # noqa: E402
from refseg.autograd import optim  # noqa: E402
from refseg.autograd.tensor import Op  # noqa: E402
from refseg.engine.training.threads import limit_threads  # noqa: E402


def op_key(op, inputs) -> str:
    """A convolution by kernel, stride and input shape, any other op by name and shape."""
    shapes = [None if t is None else t.shape for t in inputs]
    if op.name.startswith(("conv", "depthwise")):
        x, w = shapes[0], shapes[1]
        cout = w[2] if op.name.startswith("conv2d_transpose") else w[3]
        return (f"{op.name} {w[0]}x{w[1]}/{op.strides[0]} "
                f"{'x'.join(map(str, x))} -> {cout}")
    return f"{op.name} {'x'.join(map(str, shapes[0]))}"


class StepTimer:
    """Seconds per op key (forward and backward apart) while active: ``Op.__call__``, every
    op class's ``backward`` and ``Adam.step`` wrapped, undone on exit."""

    def __init__(self):
        self.seconds = collections.defaultdict(float)
        self._undo = []

    def _wrap(self, owner, name, wrapper):
        original = owner.__dict__[name]
        self._undo.append((owner, name, original))
        setattr(owner, name, wrapper(original))

    def __enter__(self):
        seconds = self.seconds

        def call(original):
            def timed(op, *inputs):
                start = time.perf_counter()
                out = original(op, *inputs)
                key = op_key(op, inputs)
                seconds["fwd " + key] += time.perf_counter() - start
                if out.node is not None:
                    out.node[1].profile_key = key
                return out
            return timed

        def backward(original):
            def timed(op, ctx, grad):
                start = time.perf_counter()
                grads = original(op, ctx, grad)
                seconds["bwd " + getattr(ctx, "profile_key", op.name)] += \
                    time.perf_counter() - start
                return grads
            return timed

        def adam(original):
            def timed(*args, **kwargs):
                start = time.perf_counter()
                result = original(*args, **kwargs)
                seconds["adam step"] += time.perf_counter() - start
                return result
            return timed

        self._wrap(Op, "__call__", call)
        stack, classes = [Op], set()
        while stack:
            for sub in stack.pop().__subclasses__():
                stack.append(sub)
                if "backward" in sub.__dict__ and sub not in classes:
                    classes.add(sub)
                    self._wrap(sub, "backward", backward)
        self._wrap(optim.Adam, "step", adam)
        return self

    def __exit__(self, *exc):
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)


def group(key: str) -> str:
    """The op without its shape: a convolution keeps its kernel and stride."""
    words = key.split(" ")
    return " ".join(words[:3] if words[1].startswith(("conv", "depthwise")) else words[:2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=all_cores())
    parser.add_argument("--no-torch", dest="torch", action="store_false")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--step", choices=("net", "demo"), default="net")
    args = parser.parse_args()
    engine_for_the_process()  # the step as refseg train runs it, not the reference route
    ours, theirs = ((steps.RefsegNetTrainer, steps.TorchNetTrainer) if args.step == "net"
                    else (steps.RefsegDemoTrainer, steps.TorchDemoTrainer))
    refseg = ours(8)
    torch = None
    if args.torch:
        _decoder_layers.load_torch(args.threads)
        torch = theirs(8, channels_last=False)
    per_op = {n: collections.defaultdict(list) for n in (args.threads, 1)}
    totals = {n: [] for n in (args.threads, 1, "torch")}
    with StepTimer() as timer:
        for _ in range(2):  # Adam's state, the workspaces, the threads' first products
            refseg.step()
        for r in range(args.rounds):
            load = OtherLoad()
            for n in ((1, args.threads) if r % 2 else (args.threads, 1)):
                timer.seconds.clear()
                with limit_threads(n):
                    start = time.perf_counter()
                    refseg.step()
                    totals[n].append(time.perf_counter() - start)
                for key, s in timer.seconds.items():
                    per_op[n][key].append(s)
            line = (f"round {r}: refseg {args.threads} threads {1e3 * totals[args.threads][-1]:.0f}"
                    f" ms, 1 thread {1e3 * totals[1][-1]:.0f} ms")
            if torch is not None:
                start = time.perf_counter()
                torch.step()
                totals["torch"].append(time.perf_counter() - start)
                line += f", torch NCHW {1e3 * totals['torch'][-1]:.0f} ms"
            print(f"{line}; other load {load.cores():.2f} cores", flush=True)
    medians = {n: {k: statistics.median(v) for k, v in per_op[n].items()} for n in per_op}
    t = args.threads
    print(f"\nmedian step: refseg {1e3 * statistics.median(totals[t]):.0f} ms on {t} threads, "
          f"{1e3 * statistics.median(totals[1]):.0f} ms on 1"
          + (f"; torch {1e3 * statistics.median(totals['torch']):.0f} ms" if torch else ""))
    for title, keyed in (("by op", group), ("by op and shape", lambda k: k)):
        sums = {n: collections.defaultdict(float) for n in medians}
        for n in medians:
            for key, s in medians[n].items():
                sums[n][keyed(key)] += s
        excess = {k: sums[t][k] - sums[1][k] / t for k in sums[t]}
        print(f"\n{title}, ranked by the time above perfect scaling (ms)\n"
              f"| op | {t} threads | 1 thread | above 1/{t} of 1 thread | ratio |\n"
              "|---|---:|---:|---:|---:|")
        for key in sorted(excess, key=lambda k: -excess[k])[:args.top]:
            a, b = 1e3 * sums[t][key], 1e3 * sums[1][key]
            print(f"| {key} | {a:.1f} | {b:.1f} | {1e3 * excess[key]:.1f} | "
                  f"{a / max(b, 1e-9):.2f} |")


if __name__ == "__main__":
    main()
