"""Convolution ops with Keras semantics and weight layouts, NHWC.

- conv2d: kernel (kh, kw, in, out) (HWIO), bias (out,).
- depthwise_conv2d: kernel (kh, kw, C, 1), bias (C,).
- conv2d_transpose: kernel (kh, kw, out, in), bias (out,); padding "same" gives size * stride.

conv2d runs as im2col + one matrix product (BLAS through NumPy); its input gradient is col2im,
the adjoint of im2col. conv2d_transpose is the adjoint of conv2d: its forward is conv2d's
input-gradient path and its backward uses conv2d's forward path, so <conv2d(x, W), y> =
<x, conv2d_transpose(y, W)> for matching geometry (``tests/test_autograd.py``).

Stride-1 convolutions take one of three routes (``conv_route``), all giving the same sums up
to rounding:

- "direct": few channels (kh*kw*Cin*Cout <= DIRECT_MAX_PRODUCTS products per pixel, e.g. the
  3 -> 3 prediction layer): compiled kernels that compute the sums themselves
  (``conv_small_forward`` / ``conv_small_weight``); im2col + GEMM would be mostly copying there.
  Also the stride-1 transposed convolution, which is a convolution with the flipped kernel.
- "shifted": "same" geometry on images of at least SHIFTED_MIN_SIDE pixels a side: implicit
  GEMM, kh*kw matrix products accumulated (beta = 1) over shifted views of a zero-padded copy
  of the input, no column matrix (``_shifted_conv``, ``_shifted_weight_grad``).
- "im2col": everything else, and every strided convolution.

References: claims 2-4; [0146]-[0195] (Conv2D, Conv2DTranspose), [0139] (depthwise, MobileNetV2),
[0232]-[0236] (ResNet convolutions), [0129]-[0132] (backward).
"""
from __future__ import annotations

import numpy as np
from scipy.linalg import blas

from refseg.autograd.geometry import conv_output, transpose_output
from refseg.autograd.tensor import Op, Tensor, as_tensor
from refseg.backend import kernels
from refseg.errors import InputError
from refseg.trace import implements


def _pair(value, name, op):
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, (int, np.integer)) and v >= 1 for v in pair):
        raise InputError(f"{op}: {name} must be a positive int or a pair of them, got {value!r}")
    return int(pair[0]), int(pair[1])


def _check_nhwc(x, op, name="input"):
    if x.ndim != 4:
        raise InputError(f"{op}: {name} must be NHWC (4-D), got shape {x.shape}")


def _check_kernel(x, w, axis, layout, op):
    """x must be NHWC and w a 4-D kernel whose ``axis`` holds x's channels."""
    _check_nhwc(x, op)
    if w.ndim != 4 or w.shape[axis] != x.shape[3]:
        raise InputError(f"{op}: kernel {w.shape} {layout} does not fit input {x.shape} "
                         "(N, H, W, C)")


def _check_bias(b, channels, op):
    if b is not None and b.shape != (channels,):
        raise InputError(f"{op}: bias shape {b.shape} does not match {channels} channels")


class _Window(Op):
    """Shared attributes of the window ops: stride, padding, backend."""

    def __init__(self, strides=1, padding="valid", backend="cython"):
        self.strides = _pair(strides, "strides", self.name)
        self.padding = padding
        self.backend = backend


@implements("claim2.fusion", "claim4.propagation")
class Conv2D(_Window):
    """y = conv(x, W) + b, Keras Conv2D (cross-correlation), im2col + GEMM."""

    name = "conv2d"

    def forward(self, ctx, x, w, b=None):
        _check_kernel(x, w, 2, "(kh, kw, in, out)", self.name)
        kh, kw, cin, cout = w.shape
        _check_bias(b, cout, self.name)
        (ho, pt), (wo, pl) = (conv_output(x.shape[1], kh, self.strides[0], self.padding, self.name),
                              conv_output(x.shape[2], kw, self.strides[1], self.padding, self.name))
        route = conv_route(x.shape, w.shape, self.strides, (pt, pl), (ho, wo))
        x = np.ascontiguousarray(x)
        if route == "direct":
            out = _direct_conv(x, w.reshape(kh * kw * cin, cout), b, (kh, kw), (pt, pl),
                               (ho, wo), self.backend)
        elif route == "shifted":
            out = _shifted_conv(x, np.ascontiguousarray(w), (pt, pl), self.backend, bias=b)
        else:
            out = _blocked_conv(x, w.reshape(kh * kw * cin, cout), kh, kw, self.strides,
                                (pt, pl), (ho, wo), self.backend)
            if b is not None:
                out += b
        # the column matrix is never kept whole (it is kh*kw times the input): backward
        # rebuilds it block by block
        ctx.save_for_backward(x, w)
        ctx.geometry = ((pt, pl), (ho, wo))
        ctx.route = route
        ctx.has_bias = b is not None
        return out.reshape(x.shape[0], ho, wo, cout)

    def backward(self, ctx, grad):
        x, w = ctx.saved
        (pt, pl), out_hw = ctx.geometry
        kh, kw, cin, cout = w.shape
        g = np.ascontiguousarray(grad)
        if ctx.route == "direct":
            return _direct_backward(x, w, g, (pt, pl), ctx.needs_input_grad[0], ctx.has_bias,
                                    self.backend)
        db = _channel_sums(g) if ctx.has_bias else None
        if ctx.route == "shifted":
            return (*_shifted_backward(x, w, g, (pt, pl), ctx.needs_input_grad[0],
                                       self.backend), db)
        g2 = g.reshape(-1, cout)
        dw = _blocked_weight_grad(x, g2, kh, kw, self.strides, (pt, pl), out_hw,
                                  self.backend).reshape(w.shape)
        dx = None
        if ctx.needs_input_grad[0] and self.strides == (1, 1):
            # stride 1: dx is the correlation of grad with the kernel flipped in space and
            # transposed in channels, padded k - 1 - p before: the same blocked path as forward
            flipped = np.ascontiguousarray(w[::-1, ::-1].transpose(0, 1, 3, 2))
            dx = _blocked_conv(np.ascontiguousarray(grad), flipped.reshape(kh * kw * cout, cin),
                               kh, kw, (1, 1), (kh - 1 - pt, kw - 1 - pl), x.shape[1:3],
                               self.backend).reshape(x.shape)
        elif ctx.needs_input_grad[0]:
            cols = g2 @ w.reshape(kh * kw * cin, cout).T
            dx = _col2im(cols, x.shape, kh, kw, self.strides, (pt, pl), out_hw, self.backend)
        return dx, dw, db


@implements("claim2.fusion", "claim4.propagation")
class Conv2DTranspose(_Window):
    """Keras Conv2DTranspose: the adjoint of Conv2D, kernel (kh, kw, out, in)."""

    name = "conv2d_transpose"

    def forward(self, ctx, x, w, b=None):
        _check_kernel(x, w, 3, "(kh, kw, out, in)", self.name)
        kh, kw, cout, cin = w.shape
        _check_bias(b, cout, self.name)
        n, h, wd, _ = x.shape
        (ho, pt), (wo, pl) = (
            transpose_output(h, kh, self.strides[0], self.padding, self.name),
            transpose_output(wd, kw, self.strides[1], self.padding, self.name))
        ctx.geometry = (x.shape, (pt, pl))
        ctx.has_bias = b is not None
        # the convolution this op is the adjoint of maps (ho, wo, cout) to (h, wd, cin)
        ctx.direct = conv_route((n, ho, wo, cout), (kh, kw, cout, cin), self.strides, (pt, pl),
                                (h, wd)) == "direct"
        if ctx.direct:
            # stride 1: the transposed convolution is the convolution with the kernel flipped
            # in space, padded k - 1 - crop before
            x = np.ascontiguousarray(x)
            ctx.save_for_backward(x, w)
            return _direct_conv(x, _flipped(w).reshape(kh * kw * cin, cout), b, (kh, kw),
                                (kh - 1 - pt, kw - 1 - pl), (ho, wo), self.backend)
        x2 = x.reshape(n * h * wd, cin)
        w2 = w.reshape(kh * kw * cout, cin)
        cols = np.matmul(x2, w2.T, out=_workspace(n * h * wd * kh * kw * cout, x.dtype)
                         .reshape(n * h * wd, kh * kw * cout))
        out = _col2im(cols, (n, ho, wo, cout), kh, kw, self.strides, (pt, pl), (h, wd),
                      self.backend)
        if b is not None:
            out += b
        ctx.save_for_backward(x2, w)
        return out

    def backward(self, ctx, grad):
        x2, w = ctx.saved
        x_shape, pads = ctx.geometry
        kh, kw, cout, cin = w.shape
        if ctx.direct:
            # the convolution's forward (input gradient) and kernel gradient with the roles of
            # input and output exchanged: dw[(a, b, o), c] = sum g_padded[.. + (a, b), o] x[.., c]
            g = np.ascontiguousarray(grad)
            dx = None
            if ctx.needs_input_grad[0]:
                dx = _direct_conv(g, w.reshape(kh * kw * cout, cin), None, (kh, kw), pads,
                                  x_shape[1:3], self.backend)
            dw, _ = _direct_weight_grad(g, x2, (kh, kw), pads, self.backend)
            db = _channel_sums(g) if ctx.has_bias else None
            return dx, dw.reshape(w.shape), db
        gcols = _im2col(grad, kh, kw, self.strides, pads, x_shape[1:3], self.backend)
        w2 = w.reshape(kh * kw * cout, cin)
        dx = (gcols @ w2).reshape(x_shape) if ctx.needs_input_grad[0] else None
        dw = (gcols.T @ x2).reshape(w.shape)
        db = _channel_sums(grad) if ctx.has_bias else None
        return dx, dw, db


@implements("claim2.backbones", "claim4.propagation")
class DepthwiseConv2D(_Window):
    """Keras DepthwiseConv2D with depth multiplier 1: kernel (kh, kw, C, 1)."""

    name = "depthwise_conv2d"

    def forward(self, ctx, x, w, b=None):
        _check_kernel(x, w, 2, "(kh, kw, C, 1)", self.name)
        if w.shape[3] != 1:
            raise InputError(f"{self.name}: kernel {w.shape} must have depth multiplier 1 "
                             "(last axis)")
        kh, kw, c, _ = w.shape
        _check_bias(b, c, self.name)
        (ho, pt), (wo, pl) = (conv_output(x.shape[1], kh, self.strides[0], self.padding, self.name),
                              conv_output(x.shape[2], kw, self.strides[1], self.padding, self.name))
        w2 = np.ascontiguousarray(w.reshape(kh * kw, c))
        out = np.empty((x.shape[0], ho, wo, c), dtype=x.dtype)
        xc = np.ascontiguousarray(x)
        kernels(self.backend).depthwise_forward(xc, w2, kh, kw, *self.strides, pt, pl, out)
        if b is not None:
            out += b
        ctx.save_for_backward(xc, w2)
        ctx.geometry = (w.shape, pt, pl)
        ctx.has_bias = b is not None
        return out

    def backward(self, ctx, grad):
        x, w2 = ctx.saved
        w_shape, pt, pl = ctx.geometry
        kh, kw, c, _ = w_shape
        g = np.ascontiguousarray(grad)
        k = kernels(self.backend)
        dx = None
        if ctx.needs_input_grad[0]:
            dx = np.empty_like(x)
            k.depthwise_backward_input(g, w2, kh, kw, *self.strides, pt, pl, dx)
        dw = np.empty((kh * kw, c), dtype=np.float64)
        k.depthwise_backward_weight(x, g, kh, kw, *self.strides, pt, pl, dw)
        db = g.reshape(-1, c).sum(axis=0) if ctx.has_bias else None
        return dx, dw.astype(x.dtype).reshape(w_shape), db


_WORKSPACE: dict = {}


def _workspace(size, dtype, slot="columns") -> np.ndarray:
    """A scratch vector of at least ``size`` elements, one per dtype and slot, grown as needed
    and reused by every op: column matrices are temporaries, and writing into memory that is
    already mapped avoids the page faults of a fresh allocation on every call. Only one op at a
    time uses it (an op finishes with it before it returns); an op that needs several scratch
    arrays at once takes them from different slots."""
    key = (np.dtype(dtype), slot)
    buffer = _WORKSPACE.get(key)
    if buffer is None or buffer.size < size:
        buffer = np.empty(max(size, 1), dtype=key[0])
        _WORKSPACE[key] = buffer
    return buffer[:size]


#: Largest kh*kw*Cin*Cout (products per output pixel) of a stride-1 convolution that the
#: direct kernels compute: the 3 -> 3 prediction layer has 81. Measured on the decoder's
#: shapes (benchmarks/bench_ops.py): below this im2col + GEMM spends most of its time copying.
DIRECT_MAX_PRODUCTS = 256

#: Smallest image side (output height and width) for the shifted-GEMM route: it computes every
#: position of the zero-padded (H + kh - 1) x (W + kw - 1) grid and drops the border ones, a
#: waste of about (kh - 1) / H + (kw - 1) / W that im2col does not have on small images.
SHIFTED_MIN_SIDE = 28

#: Bytes of one block of padded-grid rows (input rows plus output rows) that the shifted route
#: multiplies at a time: the kh*kw products of a block reuse the same rows from cache.
SHIFTED_BLOCK_BYTES = 2 << 20

#: Forces one route for every stride-1 convolution ("direct", "shifted" or "im2col"), where
#: its geometry allows it; None chooses by the rules above. For tests.
FORCE_ROUTE = None


def conv_route(x_shape, w_shape, strides, pads, out_hw) -> str:
    """How conv2d computes a convolution of input ``x_shape`` with kernel ``w_shape`` (HWIO).

    Returns
    -------
    {"direct", "shifted", "im2col"}
        "direct" for stride 1 and kh*kw*Cin*Cout <= DIRECT_MAX_PRODUCTS; "shifted" for stride
        1, "same" geometry (output size = input size, padding before within the kernel) and
        both output sides >= SHIFTED_MIN_SIDE; "im2col" otherwise (and for 1x1 kernels, whose
        column matrix is the input itself). FORCE_ROUTE overrides where the geometry allows.
    """
    kh, kw, cin, cout = w_shape
    if strides != (1, 1) or (kh == kw == 1 and FORCE_ROUTE is None):
        return "im2col"
    same = (tuple(out_hw) == tuple(x_shape[1:3]) and 0 <= pads[0] < kh and 0 <= pads[1] < kw)
    if FORCE_ROUTE is not None:
        return FORCE_ROUTE if (FORCE_ROUTE != "shifted" or same) else "im2col"
    if kh * kw * cin * cout <= DIRECT_MAX_PRODUCTS:
        return "direct"
    if same and min(out_hw) >= SHIFTED_MIN_SIDE:
        return "shifted"
    return "im2col"


def _flipped(w) -> np.ndarray:
    """The kernel of the adjoint stride-1 convolution: flipped in space, in and out exchanged
    (contiguous, (kh, kw, out, in) for an (kh, kw, in, out) kernel)."""
    return np.ascontiguousarray(w[::-1, ::-1].transpose(0, 1, 3, 2))


def _direct_conv(x, w2, bias, kernel, pads, out_hw, backend):
    """Stride-1 convolution (+ bias) of contiguous x by the direct kernel: w2 (kh*kw*C, Cout)."""
    cout = w2.shape[1]
    out = np.empty((x.shape[0], *out_hw, cout), dtype=x.dtype)
    bias = np.zeros(cout, dtype=x.dtype) if bias is None else np.ascontiguousarray(bias)
    kernels(backend).conv_small_forward(x, np.ascontiguousarray(w2), bias, *kernel, *pads, out)
    return out


def _direct_weight_grad(x, g, kernel, pads, backend):
    """(dw (kh*kw*C, Cout), sums of g per channel) of a stride-1 convolution of x giving g, by
    the direct kernel (float64 sums, returned in x's dtype / float64)."""
    dw = np.empty((kernel[0] * kernel[1] * x.shape[3], g.shape[3]), dtype=np.float64)
    g_sums = np.empty(g.shape[3], dtype=np.float64)
    kernels(backend).conv_small_weight(x, g, *kernel, *pads, dw, g_sums)
    return dw.astype(x.dtype), g_sums


def _direct_backward(x, w, g, pads, needs_dx, needs_db, backend):
    """(dx, dw, db) of a stride-1 convolution by the direct kernels: dx is the convolution of g
    with the flipped kernel, padded k - 1 - p before."""
    kh, kw, cin, cout = w.shape
    dx = None
    if needs_dx:
        dx = _direct_conv(g, _flipped(w).reshape(kh * kw * cout, cin), None, (kh, kw),
                          (kh - 1 - pads[0], kw - 1 - pads[1]), x.shape[1:3], backend)
    dw, g_sums = _direct_weight_grad(x, g, (kh, kw), pads, backend)
    return dx, dw.reshape(w.shape), g_sums.astype(g.dtype) if needs_db else None


def _gemm(dtype):
    """BLAS xGEMM for dtype (SciPy's wrapper: column-major, C = alpha op(A) op(B) + beta C)."""
    return blas.sgemm if np.dtype(dtype) == np.float32 else blas.dgemm


def _padded_grid(x, pads, grid_hw, slot, backend) -> np.ndarray:
    """x (N, H, W, C) placed at (pads) in a zero grid (N, *grid_hw, C), in the workspace
    ``slot``, as (N * gh * gw, C) rows (im2col with a 1x1 window writes exactly that)."""
    n, _, _, c = x.shape
    gh, gw = grid_hw
    grid = _workspace(n * gh * gw * c, x.dtype, slot).reshape(n * gh * gw, c)
    kernels(backend).im2col(x, 1, 1, 1, 1, *pads, gh, gw, 0, grid)
    return grid


def _row_ranges(start, stop, row_bytes):
    """[start, stop) cut into ranges of rows of at most SHIFTED_BLOCK_BYTES."""
    step = max(1, SHIFTED_BLOCK_BYTES // max(1, row_bytes))
    return [(a, min(a + step, stop)) for a in range(start, stop, step)]


def _shifted_products(src, w, grid_hw, out_grid):
    """out_grid[p] = sum over taps (a, b) of src[p + a*gw + b] @ w[a, b], for the grid rows p
    whose every tap lies inside src (all the rows of real output pixels).

    src and out_grid are (N * gh * gw, C) and (N * gh * gw, Cout) rows of a row-major grid, so
    the input of tap (a, b) for a block of output rows is the same block of rows of src shifted
    by a*gw + b: a plain slice, no copy. Rows near the right and bottom edges mix neighbouring
    image rows: they are outputs outside the image, which the caller drops.
    """
    kh, kw = w.shape[:2]
    gw = grid_hw[1]
    rows = src.shape[0] - ((kh - 1) * gw + kw - 1)
    gemm = _gemm(src.dtype)
    itemsize = src.dtype.itemsize
    for start, stop in _row_ranges(0, rows, (src.shape[1] + w.shape[3]) * itemsize):
        c_block = out_grid[start:stop].T  # column-major view: C^T = W^T X^T
        for a in range(kh):
            for b in range(kw):
                shift = a * gw + b
                gemm(1.0, w[a, b].T, src[start + shift:stop + shift].T,
                     beta=0.0 if a == b == 0 else 1.0, c=c_block, overwrite_c=1)


def _shifted_conv(x, w, pads, backend, bias=None, out=None):
    """Stride-1 "same" convolution of x (N, H, W, C) with w (kh, kw, C, Cout) by kh*kw shifted
    GEMMs over x zero-padded by (pads) before and (k - 1 - pads) after: (N, H, W, Cout)."""
    n, h, wd, _ = x.shape
    kh, kw, _, cout = w.shape
    grid_hw = (h + kh - 1, wd + kw - 1)
    src = _padded_grid(x, pads, grid_hw, "shift-in", backend)
    out_grid = _workspace(src.shape[0] * cout, x.dtype, "shift-out").reshape(-1, cout)
    _shifted_products(src, w, grid_hw, out_grid)
    inside = out_grid.reshape(n, *grid_hw, cout)[:, :h, :wd]
    if out is None:
        out = np.empty((n, h, wd, cout), dtype=x.dtype)
    if bias is None:
        np.copyto(out, inside)
    else:
        np.add(inside, bias, out=out)
    return out


def _shifted_backward(x, w, g, pads, needs_dx, backend):
    """(dx, dw) of a stride-1 "same" convolution by shifted GEMMs. g goes once into a zero grid
    at (k - 1 - pads): dx is the shifted convolution of that grid with the flipped kernel, and
    dw[a, b] = sum over pixels of x_grid[q + (a - qt)*gw + (b - ql)]^T g_grid[q], the grid rows
    q running over those of g's pixels (the zeros around g cancel every other pixel)."""
    n, h, wd, cin = x.shape
    kh, kw, _, cout = w.shape
    grid_hw = (h + kh - 1, wd + kw - 1)
    gh, gw = grid_hw
    qt, ql = kh - 1 - pads[0], kw - 1 - pads[1]
    g_grid = _padded_grid(g, (qt, ql), grid_hw, "shift-grad", backend)
    dx = None
    if needs_dx:
        flipped = _flipped(w)
        out_grid = _workspace(g_grid.shape[0] * cin, x.dtype, "shift-out").reshape(-1, cin)
        _shifted_products(g_grid, flipped, grid_hw, out_grid)
        # a copy even where the view is contiguous: the workspace is reused by the next op
        dx = out_grid.reshape(n, gh, gw, cin)[:, :h, :wd].copy()
    x_grid = _padded_grid(x, pads, grid_hw, "shift-in", backend)
    first = qt * gw + ql                                   # g's first pixel
    last = ((n - 1) * gh + qt + h - 1) * gw + ql + wd      # one past its last
    dw = np.empty(w.shape, dtype=x.dtype)
    gemm = _gemm(x.dtype)
    for k, (start, stop) in enumerate(_row_ranges(first, last, (cin + cout) * x.dtype.itemsize)):
        g_block = g_grid[start:stop].T
        for a in range(kh):
            for b in range(kw):
                shift = (a - qt) * gw + (b - ql)
                # dw[a, b]^T (Cout, Cin) += g_block (Cout, rows) @ x_block (rows, Cin)
                gemm(1.0, g_block, x_grid[start + shift:stop + shift].T, beta=float(k > 0),
                     c=dw[a, b].T, trans_b=1, overwrite_c=1)
    return dx, dw


_ONES: dict = {}


def _channel_sums(g) -> np.ndarray:
    """Sum of g (..., C) over all but the last axis: the bias gradient. As a matrix-vector
    product with a vector of ones (BLAS gemv): NumPy's sum(axis=0) over rows of a few
    channels runs a strided loop per channel, ten to twenty times slower at C = 3."""
    rows = g.reshape(-1, g.shape[-1])
    key = np.dtype(g.dtype)
    ones = _ONES.get(key)
    if ones is None or ones.size < rows.shape[0]:
        ones = _ONES[key] = np.ones(rows.shape[0], dtype=key)
    return ones[:rows.shape[0]] @ rows


def _pointwise(kh, kw, strides, pads, in_hw, out_hw) -> bool:
    """A 1x1, stride-1, unpadded window: the column matrix is the input itself."""
    return kh == kw == 1 and strides == (1, 1) and pads == (0, 0) and tuple(in_hw) == tuple(out_hw)


#: Bytes of the column-matrix block that blocked convolution builds at a time: small enough to
#: stay in cache between im2col and the matrix product, large enough for an efficient GEMM.
BLOCK_BYTES = 4 << 20


def _row_blocks(total_rows, row_pixels, k, itemsize):
    """Ranges of output image rows (n*ho + i) whose column block fits in BLOCK_BYTES."""
    per_block = max(1, BLOCK_BYTES // max(1, row_pixels * k * itemsize))
    return [(start, min(start + per_block, total_rows))
            for start in range(0, total_rows, per_block)]


def _blocked_conv(x, w2, kh, kw, strides, pads, out_hw, backend):
    """x (N, H, W, C) convolved with w2 (kh*kw*C, Cout): (N*ho*wo, Cout), one block of output
    rows at a time (im2col into the workspace, then one GEMM into the output rows)."""
    n, _, _, c = x.shape
    ho, wo = out_hw
    if _pointwise(kh, kw, strides, pads, x.shape[1:3], out_hw):
        return np.ascontiguousarray(x).reshape(n * ho * wo, c) @ w2
    x = np.ascontiguousarray(x)
    k = kh * kw * c
    out = np.empty((n * ho * wo, w2.shape[1]), dtype=x.dtype)
    for start, stop in _row_blocks(n * ho, wo, k, x.dtype.itemsize):
        rows = (stop - start) * wo
        cols = _workspace(rows * k, x.dtype).reshape(rows, k)
        kernels(backend).im2col(x, kh, kw, *strides, *pads, ho, wo, start, cols)
        np.matmul(cols, w2, out=out[start * wo:stop * wo])
    return out


def _blocked_weight_grad(x, g2, kh, kw, strides, pads, out_hw, backend):
    """sum over blocks of cols_block^T @ g2_block: the kernel gradient (kh*kw*C, Cout)."""
    n, _, _, c = x.shape
    ho, wo = out_hw
    if _pointwise(kh, kw, strides, pads, x.shape[1:3], out_hw):
        return np.ascontiguousarray(x).reshape(n * ho * wo, c).T @ g2
    x = np.ascontiguousarray(x)
    k = kh * kw * c
    dw = np.zeros((k, g2.shape[1]), dtype=x.dtype)
    for start, stop in _row_blocks(n * ho, wo, k, x.dtype.itemsize):
        rows = (stop - start) * wo
        cols = _workspace(rows * k, x.dtype).reshape(rows, k)
        kernels(backend).im2col(x, kh, kw, *strides, *pads, ho, wo, start, cols)
        dw += cols.T @ g2[start * wo:stop * wo]
    return dw


def _im2col(x, kh, kw, strides, pads, out_hw, backend):
    """The whole column matrix (in the workspace), for the transposed convolution's backward."""
    n, _, _, c = x.shape
    ho, wo = out_hw
    if _pointwise(kh, kw, strides, pads, x.shape[1:3], out_hw):
        return np.ascontiguousarray(x).reshape(n * ho * wo, c)
    cols = _workspace(n * ho * wo * kh * kw * c, x.dtype).reshape(n * ho * wo, kh * kw * c)
    kernels(backend).im2col(np.ascontiguousarray(x), kh, kw, *strides, *pads, ho, wo, 0, cols)
    return cols


def _col2im(cols, x_shape, kh, kw, strides, pads, out_hw, backend):
    ho, wo = out_hw
    if _pointwise(kh, kw, strides, pads, x_shape[1:3], out_hw):
        return cols.reshape(x_shape)
    out = np.empty(x_shape, dtype=cols.dtype)
    kernels(backend).col2im(np.ascontiguousarray(cols), kh, kw, *strides, *pads, ho, wo, out)
    return out


@implements("claim2.fusion", "claim4.propagation")
def conv2d(x, kernel, bias=None, *, strides=1, padding="valid", backend="cython") -> Tensor:
    """Keras Conv2D on NHWC input.

    Parameters
    ----------
    x : Tensor of shape (N, H, W, Cin)
    kernel : Tensor of shape (kh, kw, Cin, Cout)
    bias : Tensor of shape (Cout,) or None
    strides : int or (int, int)
    padding : {"valid", "same"}
    backend : {"cython", "numpy"}

    Returns
    -------
    Tensor of shape (N, Ho, Wo, Cout)

    References
    ----------
    [0148], [0154], [0160], [0164], [0172], [0182], [0188].
    """
    return Conv2D(strides, padding, backend)(as_tensor(x, "x"), as_tensor(kernel, "kernel"),
                                              None if bias is None else as_tensor(bias, "bias"))


@implements("claim2.fusion", "claim4.propagation")
def conv2d_transpose(x, kernel, bias=None, *, strides=1, padding="valid",
                     backend="cython") -> Tensor:
    """Keras Conv2DTranspose on NHWC input ("upsampling" in the patent's words).

    Parameters
    ----------
    x : Tensor of shape (N, H, W, Cin)
    kernel : Tensor of shape (kh, kw, Cout, Cin)
    bias : Tensor of shape (Cout,) or None
    strides : int or (int, int)
    padding : {"valid", "same"}
        "same" gives (H * sh, W * sw), cropping the full result from (k - s) // 2 (Keras).
    backend : {"cython", "numpy"}

    Returns
    -------
    Tensor of shape (N, Ho, Wo, Cout)

    References
    ----------
    [0146], [0152], [0158], [0162], [0168], [0170], [0176], [0180], [0186], [0190], [0194].
    """
    return Conv2DTranspose(strides, padding, backend)(
        as_tensor(x, "x"), as_tensor(kernel, "kernel"),
        None if bias is None else as_tensor(bias, "bias"))


@implements("claim2.backbones", "claim4.propagation")
def depthwise_conv2d(x, kernel, bias=None, *, strides=1, padding="valid",
                     backend="cython") -> Tensor:
    """Keras DepthwiseConv2D (depth multiplier 1) on NHWC input.

    Parameters
    ----------
    x : Tensor of shape (N, H, W, C)
    kernel : Tensor of shape (kh, kw, C, 1)
    bias : Tensor of shape (C,) or None
    strides : int or (int, int)
    padding : {"valid", "same"}
    backend : {"cython", "numpy"}

    Returns
    -------
    Tensor of shape (N, Ho, Wo, C)

    References
    ----------
    [0138]-[0139], [0218]-[0225].
    """
    return DepthwiseConv2D(strides, padding, backend)(
        as_tensor(x, "x"), as_tensor(kernel, "kernel"),
        None if bias is None else as_tensor(bias, "bias"))
