"""bench_model.py's per-op profile of refseg's prediction (``OpTimer``, ``profile_refseg``)
and its report tables: the timings under each condition, the targets, the profile and the
memory.
"""
from __future__ import annotations

import statistics
import time

import numpy as np

from _common import median_ms, verdict
from refseg.autograd.tensor import Op
from refseg.models import ResMobileNet
from refseg.registry import patent_figure

#: The patent's prediction time per image ([0260]).
PATENT_S_PER_IMAGE = patent_figure("seconds_per_image")
#: refseg / torch at most this, by condition (none: a quiet machine; the neighbours of
#: --background-load otherwise; no target beside the matmul neighbour, whose target is the
#: thread count's alone)
TARGET_TORCH_RATIO = {"none": 0.6, "busy": 1.0, "mixed": 1.0, "matmul": None}
#: refseg / torch's best CPU inference (frozen, compiled where it runs) at most this, quiet
TARGET_BEST_RATIO = 1.0
#: refseg's batch-1 prediction at least this share of the sgemm ceiling of the same run, quiet
TARGET_CEILING_SHARE = 0.65
#: refseg's default threads over its 1 thread at most this, under every condition
TARGET_THREAD_RATIO = 1.05


# --- where refseg's time goes --------------------------------------------------------------

class OpTimer:
    """Wraps ``Op.__call__`` while active: seconds per op call, keyed by op and by op + shape."""

    def __init__(self):
        self.by_key: dict[str, list[float]] = {}
        self.by_op: dict[str, float] = {}

    @staticmethod
    def key(op, inputs) -> str:
        """Convolutions by kernel, stride and shape (the input as the op sees it, i.e. after
        any ZeroPadding2D); every other op by name alone."""
        if not op.name.startswith(("conv", "depthwise")):
            return op.name
        x, w = inputs[0].shape, inputs[1].shape
        cout = w[2] if op.name.startswith("conv2d_transpose") else w[3]
        s = str(op.strides[0]) if op.strides[0] == op.strides[1] else \
            "x".join(map(str, op.strides))
        return f"{op.name} {w[0]}x{w[1]}/{s} {x[1]}x{x[2]}x{x[3]} -> {cout}"

    def __enter__(self):
        self._original = Op.__call__
        timer, original = self, self._original

        def timed(op, *inputs):
            start = time.perf_counter()
            out = original(op, *inputs)
            elapsed = time.perf_counter() - start
            key = timer.key(op, inputs)
            timer.by_key.setdefault(key, []).append(elapsed)
            timer.by_op[op.name] = timer.by_op.get(op.name, 0.0) + elapsed
            return out

        Op.__call__ = timed
        return self

    def __exit__(self, *exc):
        Op.__call__ = self._original


def profile_refseg(model: ResMobileNet, x: np.ndarray, rounds: int) -> dict:
    """Per-op seconds of one prediction (the median round by total), and the whole call."""
    runs = []
    for _ in range(rounds):
        with OpTimer() as timer:
            start = time.perf_counter()
            model.predict(x, batch_size=x.shape[0])
            total = time.perf_counter() - start
        runs.append((total, timer))
    runs.sort(key=lambda run: run[0])
    total, timer = runs[len(runs) // 2]
    return {"total": total, "by_op": timer.by_op,
            "by_key": {k: (len(v), sum(v)) for k, v in timer.by_key.items()}}


# --- the report ----------------------------------------------------------------------------

def timing_table(batch, times, loads, flops, ceiling) -> list[str]:
    ref = median_ms(times["refseg"])
    lines = ["| implementation | ms / batch (fastest) | ms / image | refseg / this (fastest) "
             "| GFLOP/s | % sgemm ceiling | other load (median / max) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, t in times.items():
        ms, fast = median_ms(t), 1e3 * min(t)
        rate = flops / (ms * 1e-3) / 1e9
        ratio = "-" if name == "refseg" else \
            f"{ref / ms:.2f} ({1e3 * min(times['refseg']) / fast:.2f})"
        lines.append(f"| {name} | {ms:.0f} ({fast:.0f}) | {ms / batch:.1f} | {ratio} | "
                     f"{rate:.0f} | {100 * rate / ceiling:.0f}% | "
                     f"{statistics.median(loads[name]):.2f} / {max(loads[name]):.2f} |")
    return lines


def spread(samples) -> float:
    """Run-to-run noise of a sample: its median absolute deviation over its median."""
    m = statistics.median(samples)
    return statistics.median(abs(v - m) for v in samples) / m if m > 0 else 0.0


def thread_ratio(times) -> tuple[float, float]:
    """refseg's T-thread median over its 1-thread median, and the run-to-run noise (the larger
    spread of the two)."""
    ours, one = times["refseg"], times["refseg 1 thread"]
    return median_ms(ours) / median_ms(one), max(spread(ours), spread(one))


def target_lines(condition, batch, times, torch_name, keras_name) -> list[str]:
    ref = median_ms(times["refseg"])
    r_torch = ref / median_ms(times[torch_name])
    target = TARGET_TORCH_RATIO.get(condition)
    lines = [f"- refseg / torch = {r_torch:.2f} (target <= {target} with background load "
             f"{condition}): {verdict(r_torch <= target)}" if target is not None else
             f"- refseg / torch = {r_torch:.2f} (no target with background load {condition})"]
    if "refseg 1 thread" in times:
        r_one, noise = thread_ratio(times)
        lines.append(f"- refseg T threads / 1 thread = {r_one:.2f} (target: not above 1 by more "
                     f"than the run-to-run noise, here {noise:.2f}): "
                     f"{verdict(r_one <= 1 + noise)}")
    if keras_name in times:
        r_keras = ref / median_ms(times[keras_name])
        lines.append(f"- refseg / Keras = {r_keras:.2f} (target < 1, faster than Keras): "
                     f"{verdict(r_keras < 1)}")
    per_image = ref / batch / 1e3
    lines.append(f"- refseg {per_image:.3f} s per image (the patent's {PATENT_S_PER_IMAGE} s, "
                 f"[0260]; the target holds it with one busy neighbour): "
                 f"{verdict(per_image < PATENT_S_PER_IMAGE)}")
    return lines


def summary_lines(results: dict, conditions, batches, threads) -> list[str]:
    """One row per condition and thread count, as the conditions' targets are stated."""
    head = "| background load | other load (median cores) | threads |"
    rule = "|---|---:|---:|"
    for b in batches:
        head += f" batch {b}: refseg / torch ms per image | ratio | refseg T / 1 thread |"
        rule += "---:|---:|---:|"
    lines = [head, rule]
    counts = [threads, 1] if threads > 1 else [1]
    for condition in conditions:
        for t in counts:
            suffix = "" if t == threads else " 1 thread"
            loads = [statistics.median(results[(condition, b)][1]["refseg" + suffix])
                     for b in batches]
            row = f"| {condition} | {max(loads):.2f} | {t} |"
            for b in batches:
                times, _loads, torch_name, _keras = results[(condition, b)]
                ours, theirs = times["refseg" + suffix], times[torch_name + suffix]
                whole, one = times["refseg"], times.get("refseg 1 thread")
                ratio_one = (f"{median_ms(whole) / median_ms(one):.2f}"
                             if t == threads and threads > 1 else "-")
                row += (f" {median_ms(ours) / b:.1f} / {median_ms(theirs) / b:.1f} | "
                        f"{median_ms(ours) / median_ms(theirs):.2f} | {ratio_one} |")
            lines.append(row)
    return lines


def profile_lines(profile: dict, batch: int, top: int = 10) -> list[str]:
    total = profile["total"] * 1e3
    in_ops = sum(profile["by_op"].values()) * 1e3
    lines = [f"Batch {batch}: prediction {total:.0f} ms, of which inside ops {in_ops:.0f} ms; "
             f"the rest ({total - in_ops:.0f} ms) is graph bookkeeping, input checks and "
             "Python between the ops.", "",
             "| op | ms | % of prediction |", "|---|---:|---:|"]
    for name, s in sorted(profile["by_op"].items(), key=lambda kv: -kv[1]):
        lines.append(f"| {name} | {1e3 * s:.1f} | {100 * 1e3 * s / total:.1f}% |")
    lines += ["", f"Top {top} costs, convolutions by shape (kernel/stride, input H x W x C "
              "after any zero padding -> output channels), other ops summed over all their "
              "calls:", "", "| op | calls | ms | % of prediction |", "|---|---:|---:|---:|"]
    ranked = sorted(profile["by_key"].items(), key=lambda kv: -kv[1][1])[:top]
    for key, (calls, s) in ranked:
        lines.append(f"| {key} | {calls} | {1e3 * s:.1f} | {100 * 1e3 * s / total:.1f}% |")
    return lines


def memory_lines(runs: list[dict]) -> list[str]:
    lines = ["| implementation | batch | RSS, network built | peak RSS, 1st prediction "
             "(+ over built) | RSS before 2nd | peak RSS, 2nd prediction (+ over built) | "
             "tracemalloc peak |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in runs:
        if "error" in r:
            lines.append(f"| {r['impl']} | {r['batch']} | failed: {r['error']} | | | | |")
            continue
        if not r["peak_reset"]:
            lines.append(f"| {r['impl']} | {r['batch']} | cannot reset the peak RSS here "
                         "(/proc/self/clear_refs) | | | | |")
            continue
        built = r["rss_built_mb"]
        tm = f"{r['tracemalloc_peak_mb']:.0f}" if "tracemalloc_peak_mb" in r else "-"
        lines.append(f"| {r['impl']} | {r['batch']} | {built:.0f} | {r['peak_first_mb']:.0f} "
                     f"(+{r['peak_first_mb'] - built:.0f}) | {r['rss_before_second_mb']:.0f} | "
                     f"{r['peak_second_mb']:.0f} (+{r['peak_second_mb'] - built:.0f}) | "
                     f"{tm} |")
    return lines


