"""Where refseg's forward + backward time of one decoder layer goes (bench_ops.py's breakdown):
its compiled window kernels timed inside the op (``KernelTimer``) and re-run alone, the three
matrix products of the im2col formulation alone, and the rest.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import refseg  # noqa: F401  (before NumPy: refseg sets how OpenBLAS's idle threads wait)
import numpy as np

from _common import OtherLoad, Report, minor_faults, time_rounds, wait_until_quiet
from _decoder_layers import Layer, RefsegCase, layer_data
from refseg import _kernels


# --- where refseg's time goes --------------------------------------------------------------

class KernelTimer:
    """Times refseg's compiled window kernels inside the ops (im2col / col2im and the Winograd
    transforms; each writes into its last argument). The ops look them up
    on the kernels module at every call (``kernels(backend).im2col(...)``), so replacing the
    module attributes with timing wrappers (in memory only, undone on exit) sees every call
    whatever the op's internals; each call's arguments are recorded for ``rerun_alone``."""

    NAMES = ("im2col", "col2im", "winograd_input", "winograd_output", "winograd_kernel",
             "winograd_output_adjoint", "winograd_kernel_adjoint", "winograd4_input",
             "winograd4_output", "winograd4_kernel")

    def __init__(self):
        self.seconds = 0.0
        self.recording = False
        self.calls = []           # (kernel, args) of the calls made while recording
        self._originals = {}

    def __enter__(self):
        for name in self.NAMES:
            original = getattr(_kernels, name)
            self._originals[name] = original

            def timed(*args, _original=original):
                start = time.perf_counter()
                out = _original(*args)
                self.seconds += time.perf_counter() - start
                if self.recording:
                    self.calls.append((_original, args))
                return out

            setattr(_kernels, name, timed)
        return self

    def __exit__(self, *exc):
        for name, original in self._originals.items():
            setattr(_kernels, name, original)


def rerun_alone(calls: list):
    """A callable that repeats the recorded kernel calls with the same inputs, each writing
    into a private output buffer (the last argument of both kernels) that has been written
    before: no allocation and no first-touch page faults, so the kernels' own cost."""
    prepared = []
    for kernel, args in calls:
        buffer = np.empty_like(args[-1])
        kernel(*args[:-1], buffer)  # touch the buffer once
        prepared.append((kernel, args[:-1], buffer))

    def run():
        for kernel, inputs, buffer in prepared:
            kernel(*inputs, buffer)

    return run


def gemm_operands(layer: Layer, batch: int) -> dict:
    """The three matrix products of the im2col formulation, at full size, on random arrays:
    forward ("fwd") and the kernel and input gradients ("bwd"), with the transposed views
    refseg wrote at the time of writing (conv: y = cols W, dW = cols^T g, dcols = g W^T;
    transposed conv: cols = x W^T, dx = gcols W, dW = gcols^T x), through refseg's products
    (``refseg.engine.training.products.matmul``, tiles on the OpenMP threads). Whatever blocking or
    reformulation the op uses, these are its FLOPs at the rate refseg's products give these
    shapes."""
    from refseg.engine.training.products import matmul

    rng = np.random.default_rng(2)
    kk = layer.k * layer.k

    def rand(*shape):
        return rng.standard_normal(shape, dtype=np.float32)

    if layer.kind == "conv":
        m = batch * layer.out_size ** 2
        cols, w2 = rand(m, kk * layer.cin), rand(kk * layer.cin, layer.cout)
        g2 = rand(m, layer.cout)
        return {"fwd": [lambda: matmul(cols, w2)],
                "bwd": [lambda: matmul(cols.T, g2), lambda: matmul(g2, w2.T)]}
    m = batch * layer.size ** 2
    x2, w2 = rand(m, layer.cin), rand(kk * layer.cout, layer.cin)
    gcols = rand(m, kk * layer.cout)
    return {"fwd": [lambda: matmul(x2, w2.T)],
            "bwd": [lambda: matmul(gcols, w2), lambda: matmul(gcols.T, x2)]}


@dataclass
class Breakdown:
    layer: Layer
    batch: int
    fwd_ms: float
    fb_ms: float
    gemm_fwd_ms: float     # the forward GEMM alone
    gemm_fb_ms: float      # all three GEMMs alone
    kernels_ms: float      # im2col + col2im inside the op, per forward+backward
    warm_kernels_ms: float  # the same kernels into an already-written buffer
    faults: float          # minor page faults per forward+backward
    other_cores: float     # cores used by other processes meanwhile

    @property
    def rest_ms(self) -> float:
        return self.fb_ms - self.gemm_fb_ms - self.kernels_ms


def profile_layer(layer: Layer, batch: int, repeat: int) -> Breakdown:
    """refseg's forward + backward of one layer, split into its parts. All parts are timed in
    the same interleaved rounds, so that a slow spell of the machine does not land on one."""
    case = RefsegCase(layer, layer_data(layer, batch))
    kernel_runs, fault_runs = [], []
    with KernelTimer() as timer:

        def forward_backward():
            kernels0, faults0 = timer.seconds, minor_faults()
            case.forward_backward()
            fault_runs.append(minor_faults() - faults0)
            kernel_runs.append(timer.seconds - kernels0)

        timer.recording = True
        case.forward_backward()  # records the kernel calls of one forward + backward
        timer.recording = False
        products = gemm_operands(layer, batch)
        fns = {"fwd": case.forward, "fb": forward_backward, "kernels": rerun_alone(timer.calls),
               **{f"gemm {stage}{i}": fn for stage, fns in products.items()
                  for i, fn in enumerate(fns)}}
        load = OtherLoad()
        times = {k: 1e3 * statistics.median(v)
                 for k, v in time_rounds(fns, repeat)[0].items()}
    return Breakdown(
        layer, batch, times["fwd"], times["fb"], times["gemm fwd0"],
        sum(v for k, v in times.items() if k.startswith("gemm")),
        1e3 * statistics.median(kernel_runs[-repeat:]), times["kernels"],
        statistics.median(fault_runs[-repeat:]), load.cores())


def breakdown_table(rows: list[Breakdown]) -> list[str]:
    lines = [
        "| layer | batch | refseg f+b ms | 3 GEMMs alone ms | GEMM GFLOP/s | window kernels in "
        "op ms | same kernels re-run alone ms | rest ms | page faults / run | fwd ms | "
        "fwd GEMM alone ms | other load |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for b in rows:
        gemm_rate = 3 * b.layer.flops(b.batch) / (b.gemm_fb_ms * 1e-3) / 1e9
        lines.append(
            f"| {b.layer.name} | {b.batch} | {b.fb_ms:.2f} | {b.gemm_fb_ms:.2f} "
            f"({100 * b.gemm_fb_ms / b.fb_ms:.0f}%) | {gemm_rate:.0f} | {b.kernels_ms:.2f} "
            f"({100 * b.kernels_ms / b.fb_ms:.0f}%) | {b.warm_kernels_ms:.2f} | "
            f"{b.rest_ms:.2f} | {b.faults:.0f} | {b.fwd_ms:.2f} | {b.gemm_fwd_ms:.2f} | "
            f"{b.other_cores:.2f} |")
    return lines



def profile_section(report: Report, args, layers) -> None:
    rows = []
    for batch in args.batches:
        for layer in layers:
            wait_until_quiet(args.wait_quiet)
            rows.append(profile_layer(layer, batch, args.repeat))
    report("## Where refseg's forward + backward time goes", "",
           "GEMMs alone: the three matrix products of the im2col formulation at the "
           "layer's shapes (each allocating its output; a Winograd layer's own products do "
           "16/36 (F(2x2, 3x3)) or 36/144 (F(4x4, 3x3)) of those multiply-adds in its "
           "forward and input gradient). Window kernels "
           "in op: the compiled im2col, col2im and Winograd transform kernels as called "
           "inside the op; re-run alone: the same calls back to "
           "back, each into its own buffer written before (the gap shows cache state and "
           "OpenBLAS threads still spinning after a GEMM). Page faults: minor faults per "
           "forward+backward (they depend on what the allocator has cached). Rest: bias, "
           "bias gradient, allocation, leaf-gradient copies, Python.", "",
           *breakdown_table(rows), "")

