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
layer runs once, in an order rotated each round, so a slow spell of the (shared) machine hits
all of them alike; the garbage collector is off while timing. Medians are reported; the ratio
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
``refseg.autograd.optim.Adam`` update, from random tap tensors of the backbone shapes. It runs
in a fresh child process (so memory that an earlier part of this run left in the allocator
cannot hide the step's own allocations), and is
measured as the peak resident set size: ``VmHWM`` of /proc/self/status, reset by writing 5 to
/proc/self/clear_refs, minus ``VmRSS`` at the reset; once for step 1 (which also allocates
whatever is made lazily: scratch buffers, optimiser state) and once over the steps after it
(the steady state). Peak RSS is
what the machine has to provide, and sees every allocation (NumPy arrays, BLAS buffers,
allocator slack), which ``ru_maxrss`` also does but cannot be reset. As a cross-check the
child also runs one step under ``tracemalloc``, to which NumPy reports its array buffers: that
peak is the bytes of live arrays only. RSS is printed after steps 1, 10, 25 and 50 to show
that it does not grow. The same step in torch (NCHW and channels_last, ``torch.optim.Adam``)
is given for comparison.

The whole-network training step (``refseg train --train-backbone``): batch 8 at 64x224
(``TrainConfig``'s defaults), both backbones and the decoder trainable, batch norm on batch
statistics, forward, cross-entropy, backward, Adam; refseg's step as
``refseg/run/training.py`` takes it, against the same step in torch (``_torch_net.py`` with
``trainable=True``, ``torch.optim.Adam``, NCHW and channels_last), from the same initial
weights (their first-step losses must agree within 1e-4). Each runs ``--net-steps`` steps in
a fresh child process, with its thread count pinned before the libraries load, for the time
per step (median without step 1) and the peak RSS (as the decoder step's); refseg also at 1
thread. refseg's steps are sized to the load as ``refseg train`` sizes them (the report says
how many ran on each thread count).

Threads and background load: with T > 1, every layer is also timed with refseg's OpenMP and
OpenBLAS pools set to 1 thread at run time (``refseg.threads``; "refseg-fwd-1t",
"refseg-fb-1t"), in the same rounds, and the report gives refseg's T-thread time over its
1-thread time. ``--background-load none,busy,mixed`` times the layers and the whole-network
step under each condition in this one run; the script starts and stops the neighbours itself
(``_common.py``: ``busy`` = ``--background-cores`` busy Python loops, ``mixed`` = one process
running NumPy float32 products on 2 OpenBLAS threads, 70 % of the time). The decoder step's
memory, the sgemm ceiling and the breakdown run without neighbours. The header names the
CPU (/proc/cpuinfo) and the row loops refseg chose (``refseg.backend.row_loops``);
``--row-loops baseline`` runs the plain loops on an AVX-512 CPU.

Usage::

    python benchmarks/bench_ops.py [--quick] [--threads T] [--repeat N] [--write]
        [--batches 1 4] [--layers x1 x13 ...] [--no-profile] [--train-steps S]
        [--net-steps S] [--wait-quiet SECONDS] [--row-loops auto|baseline]
        [--background-load none,busy,mixed] [--background-cores N]
"""
from __future__ import annotations

import argparse
import collections
import gc
import json
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import _common
from _common import (OtherLoad, Report, ThreadSwitch, add_background_arguments,
                     add_row_loops_argument, all_cores, background,
                     check_background_arguments, describe_load, environment_lines,
                     measure_sgemm, median_ms, min_ms, minor_faults, proc_status_mb,
                     reset_peak_rss, start, time_rounds, verdict, wait_until_quiet)

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
    if min(args.repeat, args.threads, args.train_steps, *args.batches) < 1:
        parser.error("--repeat, --threads, --train-steps and --batches must be >= 1")
    if args.net_steps < 0:
        parser.error("--net-steps must be >= 0")
    check_background_arguments(parser, args)
    return args


if __name__ == "__main__":
    # before NumPy, refseg and torch are imported below
    ARGS = start(parse_args)

import numpy as np  # noqa: E402

from refseg import _kernels  # noqa: E402
from refseg import autograd as ag  # noqa: E402
from refseg import threads as refseg_threads  # noqa: E402
from refseg.autograd.optim import Adam as RefsegAdam  # noqa: E402
from refseg.models.parts import CLASSES, DECODER  # noqa: E402
from refseg.threads import bits_independent_of_load  # noqa: E402

# torch is imported by load_torch(): the refseg training child must not load it (it would
# add torch's own memory to the RSS that child measures).
torch = None
F = None


def load_torch(threads: int) -> None:
    global torch, F
    torch = _common.load_torch(threads)
    F = torch.nn.functional


# --- the decoder ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Layer:
    """One 3x3 convolution of the decoder: input size x size x cin -> output x cout."""

    name: str
    kind: str      # "conv" (Conv2D, stride 1) or "convT" (Conv2DTranspose), as in DECODER
    cin: int
    cout: int
    size: int      # input height = width
    stride: int    # 1 for conv; 2 for convT except the prediction layer
    src: str       # the tensor it reads (a tap or another decoder output)
    k: int = 3

    @property
    def out_size(self) -> int:
        return self.size * self.stride if self.kind == "convT" else self.size

    def flops(self, batch: int) -> float:
        """Forward FLOPs (2 per multiply-add), bias ignored."""
        pixels = self.size ** 2 if self.kind == "convT" else self.out_size ** 2
        return 2.0 * batch * pixels * self.k * self.k * self.cin * self.cout

    def kernel_shape(self) -> tuple:
        # Keras layouts: Conv2D HWIO, Conv2DTranspose (kh, kw, out, in).
        if self.kind == "conv":
            return (self.k, self.k, self.cin, self.cout)
        return (self.k, self.k, self.cout, self.cin)

    def describe(self) -> str:
        op = "Conv" if self.kind == "conv" else f"ConvT s{self.stride}"
        return f"{op} {self.cin}->{self.cout} {self.size}->{self.out_size}"


#: Backbone taps the decoder reads, (H, W, C) at a 224x224 input (spec/measurements.md, M-keras-shapes).
#: conv2_block3_1_relu and block_1_expand_relu are tapped by the patent but used by no Add.
TAPS = {
    "post_relu": (7, 7, 2048), "conv4_block6_1_relu": (14, 14, 256),
    "conv3_block4_1_relu": (28, 28, 128), "conv1_conv": (112, 112, 64),
    "block_16_project": (7, 7, 320), "block_13_expand_relu": (14, 14, 576),
    "block_6_expand_relu": (28, 28, 192), "block_3_expand_relu": (56, 56, 144),
}


def decoder_layers(taps: dict) -> tuple[dict, dict, list]:
    """(layers: name -> Layer, adds: name -> the two tensors added, the evaluation order) of
    the decoder table ``refseg.models.parts.DECODER``, each layer's input size and channels
    followed from the taps' (H, W, C)."""
    shapes = dict(taps)
    layers, adds, order = {}, {}, []
    for row in DECODER:
        order.append(row.name)
        if row.op == "add":
            adds[row.name] = row.sources
            shapes[row.name] = shapes[row.sources[0]]
            continue
        (source,) = row.sources
        size, _, cin = shapes[source]
        layer = layers[row.name] = Layer(row.name, row.op, cin, row.filters, size, row.stride,
                                         source)
        shapes[row.name] = (layer.out_size, layer.out_size, layer.cout)
    return layers, adds, order


#: The decoder's layers (name -> Layer), Adds (name -> the two tensors added) and evaluation
#: order (every name is a LAYERS or an ADDS entry).
LAYERS, ADDS, ORDER = decoder_layers(TAPS)

#: "Large" layers, for the 50%-of-sgemm target: at least 1 GFLOP forward per image.
LARGE_FLOPS = 1e9


# --- the sgemm ceiling ---------------------------------------------------------------------

def gemm_shape(layer: Layer, batch: int) -> tuple:
    """(M, K, N) of the layer's forward matrix product in refseg."""
    if layer.kind == "conv":
        return batch * layer.out_size ** 2, layer.k * layer.k * layer.cin, layer.cout
    return batch * layer.size ** 2, layer.cin, layer.k * layer.k * layer.cout


# --- one layer in refseg and in torch ------------------------------------------------------

@dataclass
class LayerData:
    """Random float32 inputs of one layer at one batch size (NHWC, Keras kernel layout)."""

    x: np.ndarray
    kernel: np.ndarray
    bias: np.ndarray
    g: np.ndarray      # the fixed output gradient


def layer_data(layer: Layer, batch: int, seed: int = 0) -> LayerData:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, layer.size, layer.size, layer.cin), dtype=np.float32)
    scale = np.sqrt(2.0 / (layer.k * layer.k * layer.cin))  # He: keeps outputs O(1)
    kernel = (scale * rng.standard_normal(layer.kernel_shape())).astype(np.float32)
    bias = (0.1 * rng.standard_normal(layer.cout)).astype(np.float32)
    g = rng.standard_normal((batch, layer.out_size, layer.out_size, layer.cout),
                            dtype=np.float32)
    return LayerData(x, kernel, bias, g)


def refseg_layer(layer: Layer):
    """f(x, kernel, bias) -> Tensor, refseg's op for the layer."""
    if layer.kind == "conv":
        return lambda x, w, b: ag.conv2d(x, w, b, strides=1, padding="same")
    return lambda x, w, b: ag.conv2d_transpose(x, w, b, strides=layer.stride, padding="same")


def torch_layer(layer: Layer):
    """f(x, weight, bias) -> tensor, torch's op giving Keras "same" (NCHW shapes)."""
    if layer.kind == "conv":
        return lambda x, w, b: F.conv2d(x, w, b, padding=layer.k // 2)
    s, k, out = layer.stride, layer.k, layer.out_size
    full = (layer.size - 1) * s + k
    crop = max(k - s, 0) // 2  # Keras: the full result cropped to `out` from index `crop`
    if full - out == 2 * crop:  # a symmetric crop is torch's own padding
        return lambda x, w, b: F.conv_transpose2d(x, w, b, stride=s, padding=crop)
    return lambda x, w, b: F.conv_transpose2d(x, w, b, stride=s)[:, :, crop:crop + out,
                                                                   crop:crop + out]


class RefsegCase:
    """refseg's forward and forward+backward of one layer on fixed data."""

    def __init__(self, layer: Layer, data: LayerData):
        self.op = refseg_layer(layer)
        self.data = data
        self.x = ag.Tensor(data.x, requires_grad=True)
        self.w = ag.Tensor(data.kernel, requires_grad=True)
        self.b = ag.Tensor(data.bias, requires_grad=True)

    def forward(self):
        with ag.no_grad():
            return self.op(self.data.x, self.data.kernel, self.data.bias)

    def forward_backward(self):
        for t in (self.x, self.w, self.b):
            t.grad = None
        y = self.op(self.x, self.w, self.b)
        y.backward(self.data.g)
        return y


class TorchCase:
    """torch's forward and forward+backward of one layer, NCHW or channels_last."""

    def __init__(self, layer: Layer, data: LayerData, channels_last: bool):
        self.op = torch_layer(layer)
        fmt = torch.channels_last if channels_last else torch.contiguous_format

        def tensor(array, grad):
            t = torch.from_numpy(np.ascontiguousarray(array))
            if t.ndim == 4:
                t = t.contiguous(memory_format=fmt)
            return t.requires_grad_(grad)

        # NHWC -> NCHW; Keras kernels (kh, kw, a, b) -> torch (b, a, kh, kw) for both ops.
        self.x = tensor(data.x.transpose(0, 3, 1, 2), True)
        self.w = tensor(data.kernel.transpose(3, 2, 0, 1), True)
        self.b = tensor(data.bias, True)
        self.g = tensor(data.g.transpose(0, 3, 1, 2), False)

    def forward(self):
        with torch.no_grad():
            return self.op(self.x, self.w, self.b)

    def forward_backward(self):
        for t in (self.x, self.w, self.b):
            t.grad = None
        y = self.op(self.x, self.w, self.b)
        y.backward(self.g)
        return y


def agreement(layer: Layer, data: LayerData) -> float:
    """Largest relative difference between refseg and torch (NCHW) over the output and the
    three gradients (each relative to the largest magnitude of torch's array)."""
    ours, theirs = RefsegCase(layer, data), TorchCase(layer, data, channels_last=False)
    y = ours.forward_backward().data
    ty = theirs.forward_backward().detach().numpy().transpose(0, 2, 3, 1)
    pairs = [(y, ty),
             (ours.x.grad, theirs.x.grad.numpy().transpose(0, 2, 3, 1)),
             (ours.w.grad, theirs.w.grad.numpy().transpose(2, 3, 1, 0)),
             (ours.b.grad, theirs.b.grad.numpy())]
    worst = 0.0
    for a, b in pairs:
        if a.shape != b.shape:
            return float("inf")
        worst = max(worst, float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30)))
    return worst


@dataclass
class LayerResult:
    layer: Layer
    batch: int
    times: dict        # variant -> list of seconds
    agreement: float
    other_cores: float  # cores used by other processes while this layer was timed

    def ms(self, variant: str, stat=median_ms) -> float:
        return stat(self.times[variant])

    def torch_best(self, mode: str) -> str:
        """The faster torch layout for "fwd" or "fb" (by median)."""
        return min((f"torch-nchw-{mode}", f"torch-cl-{mode}"), key=self.ms)

    def ratio(self, mode: str, stat=median_ms) -> float:
        ref = self.ms(f"refseg-{mode}", stat)
        return ref / min(self.ms(f"torch-nchw-{mode}", stat), self.ms(f"torch-cl-{mode}", stat))

    def gflops(self, mode: str) -> float:
        work = self.layer.flops(self.batch) * (3 if mode == "fb" else 1)
        return work / (self.ms(f"refseg-{mode}") * 1e-3) / 1e9


def benchmark_layer(layer: Layer, batch: int, repeat: int, switch=None) -> LayerResult:
    """Every variant of one layer in interleaved rounds; with a ThreadSwitch also refseg at 1
    thread ("refseg-fwd-1t", "refseg-fb-1t")."""
    data = layer_data(layer, batch)
    ours = RefsegCase(layer, data)
    nchw = TorchCase(layer, data, channels_last=False)
    cl = TorchCase(layer, data, channels_last=True)
    fns = {"refseg-fwd": ours.forward, "torch-nchw-fwd": nchw.forward,
           "torch-cl-fwd": cl.forward, "refseg-fb": ours.forward_backward,
           "torch-nchw-fb": nchw.forward_backward, "torch-cl-fb": cl.forward_backward}
    if switch is not None:
        fns["refseg-fwd-1t"] = switch.wrap(1, ours.forward)
        fns["refseg-fb-1t"] = switch.wrap(1, ours.forward_backward)
    load = OtherLoad()
    times = time_rounds(fns, repeat)[0]
    return LayerResult(layer, batch, times, agreement(layer, data), load.cores())


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
    (``refseg.autograd.products.matmul``, tiles on the OpenMP threads). Whatever blocking or
    reformulation the op uses, these are its FLOPs at the rate refseg's products give these
    shapes."""
    from refseg.autograd.products import matmul

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


# --- the decoder training step -------------------------------------------------------------

def decoder_inputs(batch: int, seed: int = 3) -> tuple[dict, np.ndarray]:
    """Random NHWC taps (non-negative, as after a relu) and integer labels (N, 224, 224)."""
    rng = np.random.default_rng(seed)
    taps = {name: rng.random((batch, *shape), dtype=np.float32) for name, shape in TAPS.items()}
    size = LAYERS["prediction"].out_size
    return taps, rng.integers(0, CLASSES, size=(batch, size, size))


def decoder_weights(seed: int = 4) -> dict:
    """name -> (kernel, bias), Keras layouts, He-scaled so activations stay O(1)."""
    rng = np.random.default_rng(seed)
    weights = {}
    for layer in LAYERS.values():
        scale = np.sqrt(2.0 / (layer.k * layer.k * layer.cin))
        weights[layer.name] = ((scale * rng.standard_normal(layer.kernel_shape()))
                               .astype(np.float32), np.zeros(layer.cout, np.float32))
    return weights


def parameter_count() -> int:
    return sum(layer.k * layer.k * layer.cin * layer.cout + layer.cout
               for layer in LAYERS.values())


class RefsegTrainer:
    """One decoder training step in refseg: forward, loss, backward, update."""

    def __init__(self, batch: int, learning_rate: float = 1e-3):
        self.taps, self.labels = decoder_inputs(batch)
        self.params = {}
        for name, (kernel, bias) in decoder_weights().items():
            self.params[name] = (ag.Tensor(kernel, requires_grad=True, name=f"{name}/kernel"),
                                 ag.Tensor(bias, requires_grad=True, name=f"{name}/bias"))
        flat = [t for pair in self.params.values() for t in pair]
        self.optimizer = RefsegAdam(flat, learning_rate=learning_rate)

    def step(self) -> float:
        values = {name: ag.Tensor(array) for name, array in self.taps.items()}  # frozen
        for name in ORDER:
            if name in ADDS:
                a, b = ADDS[name]
                values[name] = ag.add(values[a], values[b])
                continue
            layer = LAYERS[name]
            y = refseg_layer(layer)(values[layer.src], *self.params[name])
            values[name] = ag.softmax(y) if name == "prediction" else ag.relu(y)
        loss = ag.categorical_crossentropy(values["prediction"], self.labels)
        del values  # the graph lives on through `loss` only, and is freed by backward
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return float(loss.data)


class TorchTrainer:
    """The same step in torch (NCHW or channels_last), with torch.optim.Adam."""

    def __init__(self, batch: int, channels_last: bool, learning_rate: float = 1e-3):
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        taps, labels = decoder_inputs(batch)
        self.taps = {k: torch.from_numpy(v.transpose(0, 3, 1, 2)).contiguous(memory_format=fmt)
                     for k, v in taps.items()}
        self.labels = torch.from_numpy(labels)
        self.params = {}
        for name, (kernel, bias) in decoder_weights().items():
            w = torch.from_numpy(kernel.transpose(3, 2, 0, 1)).contiguous(memory_format=fmt)
            self.params[name] = (w.requires_grad_(), torch.from_numpy(bias).requires_grad_())
        flat = [t for pair in self.params.values() for t in pair]
        self.optimizer = torch.optim.Adam(flat, lr=learning_rate, eps=1e-7)

    def step(self) -> float:
        values = dict(self.taps)
        for name in ORDER:
            if name in ADDS:
                a, b = ADDS[name]
                values[name] = values[a] + values[b]
                continue
            layer = LAYERS[name]
            y = torch_layer(layer)(values[layer.src], *self.params[name])
            values[name] = torch.softmax(y, dim=1) if name == "prediction" else torch.relu(y)
        # refseg's loss: mean over pixels of -log(clip(p, 1e-7, 1 - 1e-7)) at the true class
        p = values["prediction"].clamp(1e-7, 1 - 1e-7)
        loss = -torch.log(p.gather(1, self.labels[:, None])).mean()
        del values, p
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.item()


# --- the whole-network training step (refseg train --train-backbone) ----------------------

def net_config():
    """The training settings the step is taken from: ``refseg train``'s defaults (batch 8 at
    64x224, both backbones, Adam at 1e-3)."""
    from refseg.run.config import TrainConfig

    return TrainConfig(train_backbone=True)


def net_inputs(batch: int, hw, seed: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """Random NHWC images in [-1, 1] (the network's input range) and integer labels."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (batch, *hw, 3)).astype(np.float32)
    return x, rng.integers(0, CLASSES, size=(batch, *hw))


class RefsegNetTrainer:
    """One step of ``refseg train --train-backbone`` (refseg/run/training.py, _train_epoch):
    both backbones unfrozen, training mode (batch norm on batch statistics), forward,
    per-pixel cross-entropy, backward, Adam. The data set and claim-1 extraction are not
    part of the step: the images are random."""

    def __init__(self, batch: int):
        from refseg.models import ResMobileNet
        from refseg.run.training import training_step

        config = net_config()
        self.model = ResMobileNet(config.input_hw, branches=config.branches, seed=config.seed)
        for branch in config.branches:
            self.model.freeze(branch, frozen=False)
        self.model.set_training(True)
        self.x, self.labels = net_inputs(batch, config.input_hw)
        self.index = np.arange(batch)
        self.training_step = training_step
        params = self.model.trainable_parameters()
        self.parameters = sum(p.data.size for p in params)
        self.optimizer = RefsegAdam(params, learning_rate=config.learning_rate)

    def step(self) -> float:
        # training's own step, sized to the load, its products cut for the process's thread
        # count, as refseg.run.training.train runs it
        with bits_independent_of_load():
            p, loss = self.training_step(self.model, self.optimizer, self.x, self.index,
                                         self.labels)
        del p
        return float(loss.data)


class TorchNetTrainer:
    """The same step in torch: ``_torch_net.TorchResMobileNet`` with refseg's initial
    weights, trainable, in training mode; refseg's loss; torch.optim.Adam (epsilon 1e-7, as
    refseg's)."""

    def __init__(self, batch: int, channels_last: bool):
        from _torch_net import TorchResMobileNet

        from refseg.models import ResMobileNet

        config = net_config()
        model = ResMobileNet(config.input_hw, branches=config.branches, seed=config.seed)
        self.net = TorchResMobileNet(model.weights(), channels_last=channels_last,
                                     trainable=True).train()
        del model
        gc.collect()
        x, labels = net_inputs(batch, config.input_hw)
        tx = torch.from_numpy(x).permute(0, 3, 1, 2)  # channels_last: a view of NHWC
        self.x = tx if channels_last else tx.contiguous()
        self.labels = torch.from_numpy(labels)
        params = list(self.net.parameters())
        self.parameters = sum(p.numel() for p in params)
        self.optimizer = torch.optim.Adam(params, lr=config.learning_rate, eps=1e-7)

    def step(self) -> float:
        p = self.net(self.x).clamp(1e-7, 1 - 1e-7)
        loss = -torch.log(p.gather(1, self.labels[:, None])).mean()
        del p
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.item()


def train_child(impl: str, batch: int, steps: int, threads: int) -> dict:
    """Runs in a fresh process: RSS around `steps` training steps, as a dict (printed as
    JSON to the parent). impl: refseg, torch, torch-cl (the decoder's step) or refseg-net,
    torch-net, torch-net-cl (the whole network's)."""
    if impl.startswith("torch"):
        load_torch(threads)
    if impl in ("torch-net", "torch-net-cl"):
        trainer = TorchNetTrainer(batch, channels_last=impl == "torch-net-cl")
    elif impl == "refseg-net":
        trainer = RefsegNetTrainer(batch)
    elif impl.startswith("torch"):
        trainer = TorchTrainer(batch, channels_last=impl == "torch-cl")
    else:
        trainer = RefsegTrainer(batch)
    result = {"impl": impl, "batch": batch, "threads": threads,
              "rss_before_mb": proc_status_mb("VmRSS")}
    if hasattr(trainer, "parameters"):
        result["parameters"] = trainer.parameters
    checkpoints = {1, 10, 25, 50, steps}
    can_reset = reset_peak_rss()
    rss, losses, times, step_threads, peak_first = {}, [], [], [], None
    load = OtherLoad()
    for i in range(1, steps + 1):
        if i == 2 and can_reset:  # step 1 allocates the optimiser's lazily made state
            reset_peak_rss()
            steady_before = proc_status_mb("VmRSS")
        sized_before = refseg_threads.SIZINGS.copy()
        start = time.perf_counter()
        losses.append(trainer.step())
        times.append(time.perf_counter() - start)
        step_threads.append(sized_threads(sized_before))
        if i == 1:
            peak_first = proc_status_mb("VmHWM")
        if i in checkpoints:
            rss[i] = proc_status_mb("VmRSS")
    result.update(
        peak_reset=can_reset, rss_mb=rss, losses=[losses[0], losses[-1]],
        other_cores=load.cores(),
        step_ms=[1e3 * t for t in times], step_threads=step_threads,
        peak_step1_mb=peak_first - result["rss_before_mb"],
        vmhwm_mb=proc_status_mb("VmHWM"), maxrss_mb=resource.getrusage(
            resource.RUSAGE_SELF).ru_maxrss / 1024.0)
    if can_reset and steps >= 2:
        result["peak_steady_mb"] = result["vmhwm_mb"] - steady_before
    if impl == "refseg":
        import tracemalloc

        tracemalloc.start()  # NumPy reports its data buffers to tracemalloc (since 1.13)
        live = tracemalloc.get_traced_memory()[0]
        trainer.step()
        result["tracemalloc_peak_mb"] = (tracemalloc.get_traced_memory()[1] - live) / 2 ** 20
        tracemalloc.stop()
    return result


def sized_threads(before) -> int | None:
    """The thread count of the one load-sized run (``refseg.threads.SIZINGS``) since the
    counts were ``before``: a refseg training step's; None for torch's steps."""
    runs = refseg_threads.SIZINGS - before
    if sum(runs.values()) != 1:
        return None
    ((_ceiling, threads),) = runs
    return threads


def run_train_child(impl: str, batch: int, steps: int, threads: int, row_loops: str,
                    wait_quiet: float = 0.0) -> dict:
    """train_child in a fresh process of this script, at ``threads`` threads and with the
    row loops ``row_loops``; its result, or the last line of its error."""
    wait_until_quiet(wait_quiet)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--threads", str(threads),
           "--row-loops", row_loops, "--train-child", impl, str(batch), str(steps)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"impl": impl, "batch": batch, "error": out.stderr.strip().splitlines()[-1:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


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


def training_lines(runs: list[dict]) -> list[str]:
    lines = ["| impl | batch | steps | step ms (median) | RSS before MiB | peak over step 1 "
             "MiB | peak over steps 2.. MiB | tracemalloc peak MiB | RSS after steps "
             "(MiB) | loss first / last | other load |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---:|"]
    for r in runs:
        if "error" in r:
            lines.append(f"| {r['impl']} | {r['batch']} | failed: {r['error']} |")
            continue
        rss = ", ".join(f"{k}: {v:.0f}" for k, v in sorted(r["rss_mb"].items(),
                                                            key=lambda kv: int(kv[0])))
        steady = f"{r['peak_steady_mb']:.0f}" if "peak_steady_mb" in r else "-"
        tm = f"{r['tracemalloc_peak_mb']:.0f}" if "tracemalloc_peak_mb" in r else "-"
        lines.append(
            f"| {r['impl']} | {r['batch']} | {len(r['step_ms'])} | "
            f"{statistics.median(r['step_ms']):.0f} | {r['rss_before_mb']:.0f} | "
            f"{r['peak_step1_mb']:.0f} | {steady} | {tm} | {rss} | "
            f"{r['losses'][0]:.4f} / {r['losses'][1]:.4f} | {r['other_cores']:.2f} |")
    return lines


NET_IMPLS = ("refseg-net", "torch-net", "torch-net-cl")
#: first-step losses of refseg and torch (same weights, same data) must agree this closely
NET_LOSS_TOLERANCE = 1e-4


def steady_ms(run: dict) -> float:
    """Median step time without step 1 (which allocates Adam's state and the workspaces)."""
    steps = run["step_ms"]
    return statistics.median(steps[1:] if len(steps) > 1 else steps)


def peak_mb(run: dict) -> float:
    """The larger of the peaks over step 1 and over the steps after it (MiB above the RSS
    at the reset)."""
    return max(run["peak_step1_mb"], run.get("peak_steady_mb", 0.0))


def net_training_lines(runs: dict, threads: int) -> list[str]:
    """runs: condition -> list of train_child results of NET_IMPLS (and refseg-net at 1
    thread)."""
    lines = ["| background load | impl | threads | steps | ms / step (median, steps 2..) | "
             "images / s | peak over step 1 MiB | peak over steps 2.. MiB | RSS before MiB | "
             "trainable parameters | loss step 1 / last step | other load |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    verdicts = []
    for condition, rs in runs.items():
        for r in rs:
            if "error" in r:
                lines.append(f"| {condition} | {r['impl']} | | failed: {r['error']} |")
                continue
            steady = f"{r['peak_steady_mb']:.0f}" if "peak_steady_mb" in r else "-"
            lines.append(
                f"| {condition} | {r['impl']} | {r['threads']} | {len(r['step_ms'])} | "
                f"{steady_ms(r):.0f} | {1e3 * r['batch'] / steady_ms(r):.1f} | "
                f"{r['peak_step1_mb']:.0f} | {steady} | {r['rss_before_mb']:.0f} | "
                f"{r.get('parameters', 0):,} | {r['losses'][0]:.6f} / {r['losses'][1]:.6f} | "
                f"{r['other_cores']:.2f} |")
        ok = {(r["impl"], r["threads"]): r for r in rs if "error" not in r}
        ours = ok.get(("refseg-net", threads))
        torches = [ok[k] for k in (("torch-net", threads), ("torch-net-cl", threads)) if k in ok]
        if ours is None or not torches:
            verdicts.append(f"- {condition}: no ratio (a run failed)")
            continue
        best = min(torches, key=steady_ms)
        ratio = steady_ms(ours) / steady_ms(best)
        memory = peak_mb(ours) / max(peak_mb(best), 1e-9)
        gap = max(abs(ours["losses"][0] - t["losses"][0]) for t in torches)
        # after the updates, shown without a tolerance: Adam's first steps move each weight
        # by about the learning rate whatever the size of its gradient, so rounding-sized
        # gradient differences can move this loss more than they move the first
        last_gap = max(abs(ours["losses"][1] - t["losses"][1]) for t in torches)
        line = (f"- {condition}: refseg / torch ({best['impl']}, the faster layout) = "
                f"{ratio:.2f} per step (target <= 1.0: {verdict(ratio <= 1)}); peak memory "
                f"{peak_mb(ours):.0f} / {peak_mb(best):.0f} MiB = {memory:.2f} "
                f"(target <= 1: {verdict(memory <= 1)}); first-step "
                f"loss differs from torch's by {gap:.1e} "
                f"({'ok' if gap <= NET_LOSS_TOLERANCE else 'MISMATCH'}, tolerance "
                f"{NET_LOSS_TOLERANCE:g}), after step {len(ours['step_ms'])} by "
                f"{last_gap:.1e}")
        one = ok.get(("refseg-net", 1))
        if one is not None and threads > 1:
            line += f"; refseg T threads / 1 thread = {steady_ms(ours) / steady_ms(one):.2f}"
        counts = collections.Counter(ours.get("step_threads", [])[1:])
        if counts:
            line += "; refseg's steps 2.. ran on " + ", ".join(
                f"{t} thread{'s' if t != 1 else ''} x{n}" for t, n in sorted(counts.items()))
        verdicts.append(line)
    return lines + [""] + verdicts


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


def rss_verdict(run: dict) -> str:
    rss = {int(k): v for k, v in run["rss_mb"].items()}
    first = 10 if 10 in rss and max(rss) > 10 else min(rss)
    growth = rss[max(rss)] - rss[first]
    return (f"refseg batch {run['batch']}: RSS after step {first} -> step {max(rss)}: "
            f"{growth:+.1f} MiB ({'stable' if growth < 8 else 'GROWS'}; threshold 8 MiB)")


# --- main ----------------------------------------------------------------------------------

def decoder_step_section(args, report: Report) -> None:
    """The decoder training step's memory and time, each implementation in a fresh process;
    refseg's RSS check runs the longest."""
    report("## Decoder training step: memory and time", "",
           f"Decoder parameters: {parameter_count():,} "
           f"({parameter_count() * 4 / 2 ** 20:.1f} MiB float32; with gradient and two Adam "
           f"moments {4 * parameter_count() * 4 / 2 ** 20:.1f} MiB). Update: "
           "refseg.autograd.optim.Adam (lr 1e-3); torch: torch.optim.Adam.", "")
    child = dict(threads=args.threads, row_loops=args.row_loops, wait_quiet=args.wait_quiet)
    runs = [run_train_child("refseg", 1, args.train_steps, **child)]
    runs += [run_train_child(impl, 1, min(args.train_steps, 10), **child)
             for impl in ("torch", "torch-cl")]
    for batch in args.batches:
        if batch != 1:
            runs += [run_train_child(impl, batch, 5, **child)
                     for impl in ("refseg", "torch", "torch-cl")]
    report(*training_lines(runs), "")
    if "error" not in runs[0]:
        report(rss_verdict(runs[0]), "")


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
    whole-network training step (in child processes started while the neighbours run)."""
    results, net_runs = {}, {}
    for condition in args.background_load:
        with background(condition, args.background_cores):
            for batch in args.batches:
                rs = results[(condition, batch)] = []
                for layer in layers:
                    if condition == "none":
                        wait_until_quiet(args.wait_quiet)
                    rs.append(benchmark_layer(layer, batch, args.repeat, switch))
            if args.net_steps:
                batch = net_config().batch_size
                net_runs[condition] = [
                    run_train_child(impl, batch, args.net_steps, args.threads, args.row_loops)
                    for impl in NET_IMPLS]
                if args.threads > 1:
                    net_runs[condition].append(run_train_child(
                        "refseg-net", batch, args.net_steps, 1, args.row_loops))
    return results, net_runs


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


def net_section(report: Report, net_runs, threads) -> None:
    config = net_config()
    report("## Whole-network training step (refseg train --train-backbone)", "",
           f"Batch {config.batch_size} at {config.input_hw[0]}x{config.input_hw[1]}, both "
           "backbones and the decoder trainable, batch norm on batch statistics; forward, "
           "per-pixel cross-entropy, backward, Adam (lr "
           f"{config.learning_rate:g}); the images are random and the data set's "
           "claim-1 extraction is not timed. refseg: refseg/run/training.py's step; torch: "
           "benchmarks/_torch_net.py trainable, torch.optim.Adam, NCHW (torch-net) and "
           "channels_last (torch-net-cl). Each row is a fresh child process with its "
           "thread count pinned before the libraries load, started while the condition's "
           "neighbours run; refseg's steps then take as many of those threads as the load "
           "leaves free (refseg.threads.sized_to_load, as refseg train runs them; the step "
           "counts per thread count are below the table). Peaks are VmHWM above the RSS at "
           "the reset (see the decoder step above).", "",
           *net_training_lines(net_runs, threads), "")


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
                  environment_lines(args.threads, torch),
                  "- thread pools switched at run time for the 1-thread rounds: "
                  + (switch.describe() if switch else "- (T = 1)"),
                  "- background load conditions: " + "; ".join(
                      f"{c}: {describe_load(c, args.background_cores)}"
                      for c in args.background_load))
    decoder_step_section(args, report)
    # the ceiling before and after the layers: the machine's load may change in between
    shapes = sgemm_shapes(args.batches)
    sgemm_before = measure_sgemm(shapes, max(3, args.repeat // 2))
    results, net_runs = time_conditions(args, layers, switch)
    sgemm_after = measure_sgemm(shapes, max(3, args.repeat // 2))
    ceiling = sgemm_section(report, shapes, sgemm_before, sgemm_after)
    layer_sections(report, args, results, ceiling, switch)
    if net_runs:
        net_section(report, net_runs, args.threads)
    worst = max(r.agreement for rs in results.values() for r in rs)
    report(f"refseg vs torch agreement: largest relative difference over outputs and "
           f"gradients {worst:.1e} ({'ok' if worst < 1e-3 else 'MISMATCH'}).", "")
    if args.profile:
        profile_section(report, args, layers)
    report.finish(RESULTS if args.write else None)


if __name__ == "__main__":
    main(ARGS)
