"""The engine's steps at run time: what one planned layer (or fused chain of layers) does to
the NHWC activations, on the kernels of ``engine/_engine.pxi`` or their NumPy twins.

Knobs (context managers, per thread of control): :func:`portable_kernels` runs the portable C
loops instead of the vectorised ones, :func:`avx2_kernels` the AVX2 ones on an AVX-512 CPU, :func:`twin_kernels` the NumPy twins of
:mod:`refseg.engine._twins` (tests), :func:`engine_threads` the number of OpenMP threads.

Tolerance
---------
Every float32 sum of the engine rounds differently from the reference's (other summation
order, fused multiply-add, batch norm folded into the kernel), so the engine is held to the
reference within stated bounds, not bit for bit:

* one kernel against its float64 twin: ``|y - y64| <= (K + 3) u (sum |x w| + |b| + |r|)``
  elementwise, ``u = 2**-24``, ``K`` the terms of the sum (the classic bound of recursive
  float32 summation; :data:`UNIT_ROUNDOFF`); Winograd F(2x2, 3x3) within
  ``(cin + 10) u`` times the same transforms run on absolute values (its transforms add
  terms of both signs, so its bound is not the direct sum's), F(4x4, 3x3) within
  ``(cin + 20) u`` times the same (deeper transforms, coefficients up to 8);
* one planned layer fed the reference's input, against the reference's output:
  :data:`LAYER_TOLERANCE` relative to the layer's largest absolute output (measured at
  224x224 with He-scaled random weights, the estimate's plan, AVX-512: at most 9.4e-6, on the
  decoder's x6 (F(4x4)); F(2x2) 1.9e-6, direct 2.9e-6; the tests at 64x64 hold every
  algorithm on every layer that can run it to it);
* the whole network's class probabilities: :data:`PROBABILITY_TOLERANCE` absolute (measured
  3.3e-6 at 224x224 with F(4x4) on 10 layers, 2.0e-6 with F(2x2) alone), on the vectorised
  and the portable kernels alike.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
from dataclasses import dataclass, field

import numpy as np

from refseg.engine import panels
from refseg.errors import InputError

INFRASTRUCTURE = ("the engine's run-time steps: the network of claim 2 computed faster, held to "
                  "the reference within stated tolerances")

#: float32's unit roundoff.
UNIT_ROUNDOFF = 2.0 ** -24
#: |engine - reference| <= this x max |reference| for one layer fed the reference's input.
LAYER_TOLERANCE = 2e-5
#: |engine - reference| of the network's class probabilities (absolute).
PROBABILITY_TOLERANCE = 1e-5

#: A step of less work than this runs on one thread: starting and joining the team costs a
#: few microseconds on free cores, and beside busy neighbours the end of a parallel loop
#: waits for a descheduled thread. Multiply-adds for the convolutions, elements for the
#: elementwise and depthwise steps (whose element costs 9 multiply-adds at most).
PARALLEL_MIN_MACS = 1 << 21
PARALLEL_MIN_ELEMENTS = 1 << 16

#: Kernel backends: "native" (the best this CPU runs), "avx2", "portable" (plain C), "twin"
#: (NumPy).
_KERNELS = contextvars.ContextVar("refseg_engine_kernels", default="native")
_THREADS = contextvars.ContextVar("refseg_engine_threads", default=None)

#: Algorithms of a convolution (engine_kernels.c): the micro-kernel on panels of 16 output
#: channels, its tiles walking the panels of one pixel tile or the pixel tiles of one panel;
#: for at most DOT_MAX output channels, one dot product per output; for a transposed
#: convolution of at most DOT_MAX output channels, "columns": every tap's products at once as
#: a 1x1 convolution of taps x Cout output channels (full panels), each output then the sum of
#: its taps' columns (engine_gather_c); for a stride-1 3x3 convolution, Winograd F(2x2, 3x3)
#: (16 products per 2x2 outputs and channel pair, not 36) and F(4x4, 3x3) (36 per 4x4 outputs,
#: not 144).
ORDERS = ("pixels-outer", "panels-outer")
#: Winograd's algorithms and their output tiles
WINOGRAD_TILES = {"winograd": 2, "winograd4": 4}
ALGORITHMS = (*ORDERS, "dot", "columns", *WINOGRAD_TILES)
#: The most output channels of the "dot" algorithm (engine_kernels.h, ENGINE_DOT_MAX).
DOT_MAX = 8
#: From this many images a call on a loop order runs a stride-1 3x3 convolution by Winograd
#: F(4x4, 3x3) all the same, its weights made for the call (``engine_winograd_weights``), a
#: slab of output channels at a time: the plan measures and stores at batch 1, where such a
#: layer is bound by its weights or gave way to the memory limit, while a batch has the
#: multiplies to save.
BATCHED_WINOGRAD_MIN = 4
#: The bytes of one slab's Winograd weights at most (whole pairs of panels, at least one).
BATCHED_WINOGRAD_SLAB_BYTES = 8 << 20


@contextlib.contextmanager
def portable_kernels():
    """Within the block, the engine runs its portable C loops (no AVX2/AVX-512 intrinsics)."""
    token = _KERNELS.set("portable")
    try:
        yield
    finally:
        _KERNELS.reset(token)


@contextlib.contextmanager
def avx2_kernels():
    """Within the block, the engine runs its AVX2 + FMA loops even where the CPU has AVX-512
    (tests hold both vector backends to the reference on one machine)."""
    from refseg import _kernels
    if _kernels.engine_cpu_backend() < 1:
        raise InputError("avx2_kernels: this CPU has no AVX2 + FMA")
    token = _KERNELS.set("avx2")
    try:
        yield
    finally:
        _KERNELS.reset(token)


@contextlib.contextmanager
def twin_kernels():
    """Within the block, the engine runs the NumPy twins of its kernels (float64 sums)."""
    token = _KERNELS.set("twin")
    try:
        yield
    finally:
        _KERNELS.reset(token)


@contextlib.contextmanager
def engine_threads(threads: int):
    """Within the block, the engine's kernels split their work over ``threads`` threads."""
    if int(threads) < 1:
        raise InputError(f"engine threads must be >= 1, got {threads}")
    token = _THREADS.set(int(threads))
    try:
        yield
    finally:
        _THREADS.reset(token)


def thread_count() -> int:
    """The engine's threads: :func:`engine_threads`, else OpenMP's count for the calling
    thread (``OMP_NUM_THREADS``, by default the cores), at most the cores this process may
    use."""
    chosen = _THREADS.get()
    if chosen is not None:
        return chosen
    from refseg import _kernels
    return max(1, min(len(os.sched_getaffinity(0)), _kernels.engine_max_threads()))


def threads_for(work: int, least: int) -> int:
    """The threads of a step of ``work`` units: one below ``least``, else thread_count()."""
    return 1 if work < least else thread_count()


def backend_name() -> str:
    """The backend the engine runs now: "avx512", "avx2", "portable" or "twin"."""
    kind = _KERNELS.get()
    if kind != "native":
        return kind
    from refseg import _kernels
    return ("portable", "avx2", "avx512")[_kernels.engine_cpu_backend()]


#: The C kernels' code of each backend (engine_kernels.h: ENGINE_PORTABLE, _AVX2, _AVX512).
BACKEND_CODES = {"portable": 0, "avx2": 1, "avx512": 2}


def backend_code() -> int:
    """The C kernels' code of the backend the engine runs now (0 for the twins, which take
    no vector unit)."""
    return BACKEND_CODES.get(backend_name(), 0)


def _kernels_and_code():
    """(module holding the engine kernels, backend code for the C kernels)."""
    if _KERNELS.get() == "twin":
        from refseg.engine import _twins
        return _twins, 0
    from refseg import _kernels
    return _kernels, backend_code()


@dataclass
class Phase:
    """One indirect convolution over a set of output pixels that share their taps.

    ``in_off`` (P, taps) int32 input offsets per image (-1: zeros) or None (pixel p reads
    p * cin); ``out_off`` (P,) int32 output offsets or None (p * cout); ``packed`` the
    weights (panels * taps * cin * 16,) float32 and ``dot`` the same weights (taps * cout *
    cin,) for the dot-product kernel (None where unused); ``g_off`` (P, taps) int32, for the
    "columns" algorithm, the offset of each tap's columns in one image's columns (-1: none)."""

    pixels: int
    taps: int
    cin: int
    packed: np.ndarray | None
    in_off: np.ndarray | None = None
    out_off: np.ndarray | None = None
    dot: np.ndarray | None = None
    g_off: np.ndarray | None = None

    def __post_init__(self):
        if self.in_off is not None:  # the kernels read the table flat
            self.in_off = np.ascontiguousarray(self.in_off, np.int32).reshape(-1)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.packed, self.dot, self.in_off, self.out_off,
                                      self.g_off) if a is not None)

    def taps_kernel(self, cout: int) -> np.ndarray:
        """This phase's weights (taps, cin, cout) float32, from whichever form it holds."""
        if self.dot is not None:
            return self.dot.reshape(self.taps, cout, self.cin).transpose(0, 2, 1)
        return panels.unpacked_panels(self.packed, self.taps, self.cin, cout)


@dataclass
class ConvStep:
    """A convolution (or transposed convolution, one phase per output parity) with its folded
    batch norm, clamp and residual: ``out = clamp(conv(x) + bias, lo, hi) (+ residual)``; with
    ``second``, also ``clamp(out * scale + shift, lo2, hi2)`` (a batch norm and ReLU reading
    ``out`` that no convolution can take in)."""

    name: str
    source: str
    layers: tuple[str, ...]
    out_shape: tuple[int, int, int]
    phases: list[Phase]
    bias: np.ndarray
    lo: float = -np.inf
    hi: float = np.inf
    residual: str | None = None
    softmax: bool = False
    order: str = "pixels-outer"
    kind: str = "conv"
    #: (top, left) zero padding of a stride-1 3x3 convolution, which can run Winograd; None
    #: for the others
    winograd_pads: tuple[int, int] | None = None
    #: the Winograd weights (panels.winograd_weights), built when first needed, and their
    #: output tile
    winograd: np.ndarray | None = None
    winograd_tile: int = 2
    #: the "columns" algorithm's 1x1 kernel (every phase's taps side by side, packed), built
    #: when first needed
    columns: np.ndarray | None = None
    #: a second output, ``clamp(out * scale + shift, lo, hi)`` (a batch norm and ReLU that
    #: read this step's output): (its name, scale and shift padded to whole panels, lo, hi)
    second: tuple[str, np.ndarray, np.ndarray, float, float] | None = None
    #: pixels of one input image, read from the offset tables before "columns" drops them
    _pixels_in: int | None = field(default=None, repr=False)

    @property
    def nbytes(self) -> int:
        return self.bias.nbytes + sum(phase.nbytes for phase in self.phases) + sum(
            0 if a is None else a.nbytes for a in (self.winograd, self.columns)) + \
            self._second_bytes()

    def _second_bytes(self) -> int:
        return 0 if self.second is None else self.second[1].nbytes + self.second[2].nbytes

    @property
    def outputs(self) -> tuple[str, ...]:
        """The names of the values this step computes (``run`` returns them in this order)."""
        return (self.name,) if self.second is None else (self.name, self.second[0])

    @property
    def algorithms(self) -> tuple[str, ...]:
        """The algorithms this step can run."""
        if self.second is not None:  # the panel kernels' epilogue alone writes it
            return ORDERS
        few = self.out_shape[2] <= DOT_MAX
        return (*ORDERS, *(("dot",) if few else ()),
                *(("columns",) if few and self.kind == "transposed" else ()),
                *(WINOGRAD_TILES if self.winograd_pads is not None else ()))

    def _column_count(self) -> int:
        """Columns per input pixel of the "columns" algorithm: every phase's taps x Cout."""
        return sum(phase.taps for phase in self.phases) * self.out_shape[2]

    def _panels(self) -> int:
        return -(-self.out_shape[2] // 16)

    def nbytes_for(self, algorithm: str) -> int:
        """The bytes this step keeps once settled on ``algorithm``."""
        if algorithm in WINOGRAD_TILES:
            return self.bias.nbytes + self._positions(algorithm) * self._panels() * 16 * \
                self.phases[0].cin * 4
        cout = self.out_shape[2]
        if algorithm == "columns":
            tables = sum(p.pixels * p.taps * 4 + (0 if p.out_off is None else p.out_off.nbytes)
                         for p in self.phases)
            return self.bias.nbytes + -(-self._column_count() // 16) * 16 * \
                self.phases[0].cin * 4 + tables
        weights = sum(p.taps * p.cin * (cout if algorithm == "dot" else self._panels() * 16)
                      for p in self.phases) * 4
        tables = sum(a.nbytes for p in self.phases for a in (p.in_off, p.out_off)
                     if a is not None)
        return self.bias.nbytes + weights + tables + self._second_bytes()

    def scratch_bytes(self, batch: int = 1, algorithm: str | None = None) -> int:
        """The bytes of scratch one call on ``batch`` images allocates on ``algorithm`` (by
        default the step's own): Winograd's tiles, or the columns of every tap."""
        algorithm = algorithm or self.order
        if algorithm == "columns":  # one image's (_run_columns)
            return self._input_pixels() * self._column_count() * 4
        if algorithm not in WINOGRAD_TILES:
            return 0
        return self._winograd_scratch(batch, algorithm, self.out_shape[2]) * 4

    def _winograd_scratch(self, batch: int, algorithm: str, cout: int) -> int:
        """The floats of scratch a Winograd call on ``batch`` images computing ``cout`` output
        channels needs (engine_winograd: its chunk of tiles' inputs and products)."""
        from refseg import _kernels
        ho, wo = self.out_shape[:2]
        cin = self.phases[0].cin
        chunk = _kernels.engine_winograd_chunk(batch, ho, wo, cin, cout,
                                               WINOGRAD_TILES[algorithm])
        return self._positions(algorithm) * chunk * (cin + -(-cout // 16) * 16)

    @staticmethod
    def _positions(algorithm: str) -> int:
        """The transformed tile's positions of a Winograd algorithm: 16, or 36 for F(4x4)."""
        return (WINOGRAD_TILES[algorithm] + 2) ** 2

    def _input_pixels(self) -> int:
        """Pixels of one input image: the tables give it (the largest input offset over Cin,
        plus one), read once, before settling on "columns" drops them."""
        if self._pixels_in is None:
            self._pixels_in = max(int(p.in_off.max()) for p in self.phases
                                  if p.in_off is not None) // self.phases[0].cin + 1
        return self._pixels_in

    def prepare(self, algorithm: str) -> None:
        """Build the weights ``algorithm`` reads if they are not there (Winograd's and the
        columns' are made from the packed panels on first use: a plan that does not choose
        them never holds both)."""
        if algorithm == "columns" and self.columns is None:
            self._input_pixels()
            cout, count = self.out_shape[2], self._column_count()
            kernels = [phase.taps_kernel(cout) for phase in self.phases]
            # one 1x1 kernel (1, cin, taps x cout): column block j is the j-th tap overall
            side_by_side = np.concatenate(kernels).transpose(1, 0, 2).reshape(
                1, self.phases[0].cin, count)
            self.columns = panels.pack_panels(side_by_side)
            first = 0
            for phase in self.phases:
                pixel = phase.in_off.reshape(phase.pixels, phase.taps) // phase.cin
                block = (first + np.arange(phase.taps))[None, :] * cout
                phase.g_off = np.where(phase.in_off.reshape(phase.pixels, phase.taps) < 0, -1,
                                       pixel * count + block).astype(np.int32).reshape(-1)
                first += phase.taps
        tile = WINOGRAD_TILES.get(algorithm)
        if tile and (self.winograd is None or self.winograd_tile != tile):
            phase = self.phases[0]
            kernel = panels.unpacked_panels(phase.packed, phase.taps, phase.cin,
                                            self.out_shape[2])
            self.winograd, self.winograd_tile = panels.winograd_weights(kernel, tile), tile

    def settle(self, algorithm: str) -> None:
        """Run ``algorithm`` from now on and drop the weights only the others read."""
        self.prepare(algorithm)
        self.order = algorithm
        if algorithm not in WINOGRAD_TILES:
            self.winograd = None
        if algorithm != "columns":
            self.columns = None
        for phase in self.phases:
            if algorithm != "columns":
                phase.g_off = None
            if algorithm in WINOGRAD_TILES or algorithm == "columns":
                phase.packed = phase.dot = phase.in_off = None
            elif algorithm == "dot":
                phase.packed = None
            else:
                phase.dot = None

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.source,) if self.residual is None else (self.source, self.residual)

    def run(self, values: dict):
        """The step's output; with a second output, the tuple of both (``outputs``)."""
        x = values[self.source]
        n = x.shape[0]
        cout = self.out_shape[2]
        y = np.empty((n, *self.out_shape), np.float32)
        y2 = None if self.second is None else np.empty_like(y)
        extra = {} if y2 is None else dict(y2=y2.reshape(-1), scale2=self.second[1],
                                           shift2=self.second[2], lo2=self.second[3],
                                           hi2=self.second[4])
        r = None if self.residual is None else values[self.residual]
        kernels, code = _kernels_and_code()
        threads = threads_for(n * cout * sum(p.pixels * p.taps * p.cin for p in self.phases),
                              PARALLEL_MIN_MACS)
        order = self.order_for(n, x[0].nbytes)
        if order == "batched-winograd4":
            self._run_batched_winograd(kernels, code, threads, x, y, r)
            return y
        if self.order in WINOGRAD_TILES:
            scratch = np.empty(self.scratch_bytes(n) // 4, np.float32)
            kernels.engine_winograd(x, *self.winograd_pads, self.winograd, self.bias, y, r,
                                    self.lo, self.hi, scratch, code, threads, self.winograd_tile)
            return y
        flat_x, flat_y = x.reshape(-1), y.reshape(-1)
        flat_r = None if r is None else r.reshape(-1)
        x_image, y_image = x[0].size, y[0].size
        if self.order == "columns":
            self._run_columns(kernels, code, threads, flat_x, x_image, n, flat_y, y_image,
                              flat_r)
            return y
        for phase in self.phases:
            if self.order == "dot":
                kernels.engine_dot(flat_x, x_image, phase.in_off, phase.pixels, phase.taps,
                                   phase.cin, phase.dot, self.bias, cout, flat_y, y_image,
                                   phase.out_off, flat_r, y_image, phase.out_off, self.lo,
                                   self.hi, n, code, threads, self.softmax)
            else:
                kernels.engine_conv(flat_x, x_image, phase.in_off, phase.pixels, phase.taps,
                                    phase.cin, phase.packed, self.bias, cout, flat_y, y_image,
                                    phase.out_off, flat_r, y_image, phase.out_off, self.lo,
                                    self.hi, n, code, threads, ORDERS.index(order), **extra)
        if self.softmax and self.order != "dot":  # the dot kernel's epilogue took it
            y -= y.max(axis=-1, keepdims=True)
            np.exp(y, out=y)
            y /= y.sum(axis=-1, keepdims=True)
        return y if y2 is None else (y, y2)

    def order_for(self, images: int, image_bytes: int) -> str:
        """What a call on ``images`` images of ``image_bytes`` each runs: the step's own
        algorithm, except on a loop order and a batch: from ``BATCHED_WINOGRAD_MIN`` images,
        a stride-1 3x3 convolution without a second output or a softmax runs
        "batched-winograd4"; else the order that keeps the batch's larger operand in place
        (``larger_operand_order``; the two orders give the same bits, and on one image they
        tie where a batch tells them apart)."""
        if images == 1 or self.order not in ORDERS:
            return self.order
        if images >= BATCHED_WINOGRAD_MIN and self.winograd_pads is not None and \
                self.second is None and not self.softmax:
            return "batched-winograd4"
        return larger_operand_order(self, images * image_bytes)

    def _run_batched_winograd(self, kernels, code, threads, x, y, r):
        """Winograd F(4x4, 3x3) on the packed direct kernel: for each slab of output channels
        (whole pairs of panels, ``BATCHED_WINOGRAD_SLAB_BYTES`` of weights at most) its
        weights are made, then the slab's outputs computed; a slab narrower than the layer is
        computed apart and copied in."""
        tile = WINOGRAD_TILES["winograd4"]
        phase, (ho, wo, cout) = self.phases[0], self.out_shape
        cin, positions = phase.cin, self._positions("winograd4")
        per_panel = positions * cin * 16 * 4
        slab = max(2, BATCHED_WINOGRAD_SLAB_BYTES // per_panel // 2 * 2) * 16
        slab = min(slab, self._panels() * 16)
        u = np.empty(positions * slab * cin, np.float32)
        widths = {min(slab, cout - first) for first in range(0, cout, slab)}
        scratch = np.empty(max(self._winograd_scratch(x.shape[0], "winograd4", width)
                               for width in widths), np.float32)
        for first in range(0, cout, slab):
            width = min(slab, cout - first)
            panels_here = -(-width // 16)
            weights = u[:positions * panels_here * 16 * cin]
            kernels.engine_winograd_weights(phase.packed, cin, first // 16, panels_here, tile,
                                            weights, code, threads)
            whole = width == cout
            out = y if whole else np.empty((x.shape[0], ho, wo, width), np.float32)
            res = r if whole or r is None else np.ascontiguousarray(r[..., first:first + width])
            kernels.engine_winograd(x, *self.winograd_pads, weights, self.bias[first:], out,
                                    res, self.lo, self.hi, scratch, code, threads, tile)
            if not whole:
                y[..., first:first + width] = out

    def _run_columns(self, kernels, code, threads, flat_x, x_image, n, flat_y, y_image, flat_r):
        """The "columns" algorithm: every tap's products as one 1x1 convolution, then each
        output gathered from its taps' columns with the epilogue."""
        cin, cout, count = self.phases[0].cin, self.out_shape[2], self._column_count()
        pixels = x_image // cin
        # one image at a time: its columns (5.4 MB for the prediction layer at 224x224) are
        # gathered while they are still in the cache, and the scratch does not grow with the
        # batch
        cols = np.empty(pixels * count, np.float32)
        zeros = np.zeros(-(-count // 16) * 16, np.float32)
        for image in range(n):
            x_n = flat_x[image * x_image:(image + 1) * x_image]
            y_n = flat_y[image * y_image:(image + 1) * y_image]
            r_n = None if flat_r is None else flat_r[image * y_image:(image + 1) * y_image]
            kernels.engine_conv(x_n, x_image, None, pixels, 1, cin, self.columns, zeros, count,
                                cols, pixels * count, None, None, pixels * count, None,
                                -np.inf, np.inf, 1, code, threads,
                                ORDERS.index("pixels-outer"))
            for phase in self.phases:
                kernels.engine_gather(cols, pixels * count, phase.g_off, phase.pixels,
                                      phase.taps, self.bias, cout, y_n, y_image, phase.out_off,
                                      r_n, y_image, phase.out_off, self.lo, self.hi, 1,
                                      threads, self.softmax)


def larger_operand_order(step: ConvStep, input_bytes: int) -> str:
    """The loop order that keeps the larger operand in place: with more input activations
    (``input_bytes``) than packed weights, the tiles of a thread walk the panels of one pixel
    tile (its inputs stay in L1, the weights stream from L2), otherwise the pixel tiles of one
    panel (the panel stays, the activations stream)."""
    weights = sum(phase.packed.nbytes for phase in step.phases)
    return "pixels-outer" if input_bytes > weights else "panels-outer"


@dataclass
class DepthwiseStep:
    """A depthwise convolution with its folded batch norm and clamp."""

    name: str
    source: str
    layers: tuple[str, ...]
    out_shape: tuple[int, int, int]
    kernel: np.ndarray          # (kh, kw, C) float32
    bias: np.ndarray            # (C,) float32
    stride: int
    pads: tuple[int, int]       # (top, left)
    lo: float = -np.inf
    hi: float = np.inf
    kind: str = "depthwise"
    order: str = "rows"

    @property
    def nbytes(self) -> int:
        return self.kernel.nbytes + self.bias.nbytes

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.source,)

    def run(self, values: dict) -> np.ndarray:
        x = values[self.source]
        y = np.empty((x.shape[0], *self.out_shape), np.float32)
        kernels, code = _kernels_and_code()
        kernels.engine_depthwise(x, self.kernel, self.bias, self.stride, *self.pads, self.lo,
                                 self.hi, y, code, threads_for(y.size, PARALLEL_MIN_ELEMENTS))
        return y


@dataclass
class AffineStep:
    """A batch norm that no convolution takes in, ``clamp(x * scale + shift, lo, hi)``."""

    name: str
    source: str
    layers: tuple[str, ...]
    scale: np.ndarray
    shift: np.ndarray
    lo: float = -np.inf
    hi: float = np.inf
    kind: str = "affine"
    order: str = "pixels"

    @property
    def nbytes(self) -> int:
        return self.scale.nbytes + self.shift.nbytes

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.source,)

    def run(self, values: dict) -> np.ndarray:
        x = values[self.source]
        y = np.empty_like(x)
        kernels, _ = _kernels_and_code()
        c = x.shape[-1]
        kernels.engine_affine(x.reshape(-1, c), self.scale, self.shift, self.lo, self.hi,
                              y.reshape(-1, c), threads_for(y.size, PARALLEL_MIN_ELEMENTS))
        return y


@dataclass
class MaxPoolStep:
    """Max pooling, "valid", its zero padding (a folded ZeroPadding2D: zeros, not -inf)
    ``pads`` ((top, bottom), (left, right)); also ResNet50V2's 1x1 subsampling shortcuts."""

    name: str
    source: str
    layers: tuple[str, ...]
    pool: int
    stride: int
    pads: tuple[tuple[int, int], tuple[int, int]] = ((0, 0), (0, 0))
    kind: str = "max_pool"
    order: str = "rows"

    nbytes = 0

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.source,)

    def run(self, values: dict) -> np.ndarray:
        x = values[self.source]
        n, h, w, c = x.shape
        ho = (h + sum(self.pads[0]) - self.pool) // self.stride + 1
        wo = (w + sum(self.pads[1]) - self.pool) // self.stride + 1
        y = np.empty((n, ho, wo, c), np.float32)
        kernels, code = _kernels_and_code()
        kernels.engine_max_pool(x, self.pool, self.stride, self.pads[0][0], self.pads[1][0], y,
                                code, threads_for(y.size * self.pool ** 2,
                                                  PARALLEL_MIN_ELEMENTS))
        return y


@dataclass
class NumpyStep:
    """A layer the engine leaves to NumPy: an Add or ReLU no convolution takes in, a zero
    padding no window op takes in. ``op`` is "add", "relu" or "pad"."""

    name: str
    op: str
    sources: tuple[str, ...]
    layers: tuple[str, ...]
    pads: tuple[tuple[int, int], tuple[int, int]] = ((0, 0), (0, 0))
    hi: float = np.inf
    kind: str = field(default="numpy")
    order: str = "-"

    nbytes = 0

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.sources

    def run(self, values: dict) -> np.ndarray:
        x = values[self.sources[0]]
        if self.op == "add":
            return x + values[self.sources[1]]
        if self.op == "relu":
            return np.clip(x, 0.0, self.hi, dtype=np.float32)
        return np.pad(x, ((0, 0), *self.pads, (0, 0)))
