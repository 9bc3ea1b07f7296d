"""Convolution ops with Keras semantics and weight layouts, NHWC.

- conv2d: kernel (kh, kw, in, out) (HWIO), bias (out,).
- depthwise_conv2d: kernel (kh, kw, C, 1), bias (C,).
- conv2d_transpose: kernel (kh, kw, out, in), bias (out,); padding "same" gives size * stride.

conv2d runs as im2col + one matrix product (``products.matmul``: single-threaded BLAS calls on
tiles of the output, on refseg's OpenMP threads); its input gradient is col2im,
the adjoint of im2col. conv2d_transpose is the adjoint of conv2d: its forward is conv2d's
input-gradient path and its backward uses conv2d's forward path, so <conv2d(x, W), y> =
<x, conv2d_transpose(y, W)> for matching geometry (``tests/autograd/test_autograd.py``). With few input
pixels (x1 and x12 at batch 1) its column matrix is computed transposed, kernel-first, and
scattered by col2im_transposed (``TRANSPOSED_COLUMNS_MAX_ROWS``).

Stride-1 3x3 float32 convolutions with enough channels and output tiles take a Winograd route
instead (``_winograd_conv``, ``_winograd_weight_grad``, see ``conv_route``): F(4x4, 3x3) for
the larger ones (the decoder's x7b, x9, x18, x21, ResNet50V2's conv2 3x3 convolutions, and
x5 and conv3 from batch 4; 36 matrix products per block of 4x4 output tiles, 4 times fewer
multiply-adds) and F(2x2, 3x3) for the smaller ones (x5 and conv3 at batch 1, x2, x13 and conv4
from batch 4; 16 products per block of 2x2 tiles, 2.25 times fewer), for the forward and the
input gradient (the adjoint convolution, through the same transformed kernel, or for F(4x4,
3x3) the transformed flipped kernel); kernel gradients take F(2x2, 3x3)'s adjoint transforms on
both routes. The stride-1 transposed convolution takes them too.

Stride-1 convolutions with few channels (kh*kw*Cin*Cout <= DIRECT_MAX_PRODUCTS products per
output pixel, e.g. the 3 -> 3 prediction layer) run on compiled direct kernels instead
(``conv_small_forward`` / ``conv_small_weight``, see ``conv_route``): there im2col + GEMM is
mostly copying. The stride-1 transposed convolution is the convolution with the flipped kernel
and takes the same kernels.

Measured and not kept: implicit GEMM ("shifted GEMMs", kh*kw products with beta = 1 over
shifted views of a zero-padded input) was 1.0-1.5x slower than im2col forward and up to 2x
slower forward + backward on the decoder's large layers (the products have K = Cin instead of
kh*kw*Cin and re-read the output kh*kw times).

References: claims 2-4; [0146]-[0195] (Conv2D, Conv2DTranspose), [0139] (depthwise, MobileNetV2),
[0232]-[0236] (ResNet convolutions), [0129]-[0132] (backward).
"""
from __future__ import annotations

import math

import numpy as np

from refseg.autograd.elementwise import UNCLAMPED, relu_bounds, relu_passes
from refseg.autograd.geometry import conv_output, transpose_output
from refseg.autograd.products import matmul, matmul_stack
from refseg.autograd.tensor import Op, Tensor, as_tensor
from refseg.backend import kernels
from refseg.errors import InputError
from refseg.trace import implements, infrastructure


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
    """Shared attributes of the window ops: stride, padding, backend, and for the convolutions
    the ReLU (``relu``; ReLU6 with ``cap`` 6) computed with the bias, in the same pass."""

    def __init__(self, strides=1, padding="valid", backend="cython", relu=False, cap=None):
        self.strides = _pair(strides, "strides", self.name)
        self.padding = padding
        self.backend = backend
        self.relu = bool(relu)
        self.bounds = relu_bounds(self.relu, cap, self.name)
        if relu:
            self.name = f"{self.name}_relu" if cap is None else f"{self.name}_relu{cap:g}"

    def _activated(self, ctx, out) -> np.ndarray:
        """out, which its route has clamped with the bias, and, when a graph is recorded, the
        ReLU op's mask kept for backward."""
        if not self.relu:
            return out
        if ctx.recording:
            ctx.pass_through = relu_passes(out, self.bounds)
        return out

    def _masked(self, ctx, grad) -> np.ndarray:
        """The ReLU op's backward: grad where the ReLU passed its input, 0 elsewhere."""
        return grad * ctx.pass_through.reshape(grad.shape) if self.relu else grad


@implements("claim2.fusion", "claim4.propagation")
class Conv2D(_Window):
    """y = conv(x, W) + b, Keras Conv2D (cross-correlation): im2col + GEMM, Winograd or direct
    (``conv_route``). With ``batch_norm`` = (scale, shift), inference only and no bias: y =
    conv(x, W) * scale + shift, the inference batch norm that follows (``norm.inference_affine``),
    to the bit, and on the im2col route in the product's own tiles."""

    name = "conv2d"

    def __init__(self, strides=1, padding="valid", backend="cython", relu=False, cap=None,
                 batch_norm=None):
        if batch_norm is not None:
            self.name = "conv2d_batch_norm"
        super().__init__(strides, padding, backend, relu, cap)
        self.batch_norm = batch_norm

    def forward(self, ctx, x, w, b=None):
        _check_kernel(x, w, 2, "(kh, kw, in, out)", self.name)
        kh, kw, cin, cout = w.shape
        _check_bias(b, cout, self.name)
        folded = self.batch_norm is not None
        # the multiply-add after the product: the batch norm's, or the bias alone
        scale, shift = self._batch_norm_pair(ctx, b, cout, x.dtype) if folded else (None, b)
        (ho, pt), (wo, pl) = (conv_output(x.shape[1], kh, self.strides[0], self.padding, self.name),
                              conv_output(x.shape[2], kw, self.strides[1], self.padding, self.name))
        route = conv_route(w.shape, self.strides, x.dtype, (x.shape[0], ho, wo))
        x = np.ascontiguousarray(x)
        if route == "direct":
            out = _direct_conv(x, w.reshape(kh * kw * cin, cout), None if folded else b,
                               (kh, kw), (pt, pl), (ho, wo), self.backend)
        elif route in WINOGRAD_TILE:
            out = _winograd_conv(x, w, False, None if folded else b, (pt, pl), (ho, wo),
                                 self.backend, WINOGRAD_TILE[route],
                                 UNCLAMPED if folded else self.bounds)
        else:
            out = _blocked_conv(x, w.reshape(kh * kw * cin, cout), kh, kw, self.strides,
                                (pt, pl), (ho, wo), self.backend, scale=scale, shift=shift,
                                bounds=self.bounds)
        if folded and route != "im2col":
            # the routes without product tiles: one pass, the kernel the batch norm runs
            rows = out.reshape(-1, cout)
            kernels(self.backend).channel_affine(rows, scale, shift, *self.bounds, rows)
        elif route == "direct":
            _clamp(out, self.bounds, self.backend)
        if folded:
            return out.reshape(x.shape[0], ho, wo, cout)
        out = self._activated(ctx, out)
        # the column matrix is never kept whole (it is kh*kw times the input): backward
        # rebuilds it block by block
        ctx.save_for_backward(x, w)
        ctx.geometry = ((pt, pl), (ho, wo))
        ctx.route = conv_route(w.shape, self.strides, x.dtype, (x.shape[0], ho, wo),
                               gradient=True)
        ctx.has_bias = b is not None
        return out.reshape(x.shape[0], ho, wo, cout)

    def _batch_norm_pair(self, ctx, b, cout, dtype):
        """The folded batch norm's (scale, shift) in dtype, checked: inference only, no bias,
        one value per output channel."""
        if ctx.recording or b is not None:
            raise InputError(f"{self.name}: a batch norm folds into a convolution without bias "
                             f"and at inference only")
        scale, shift = (np.ascontiguousarray(v, dtype=dtype) for v in self.batch_norm)
        for label, v in (("scale", scale), ("shift", shift)):
            if v.shape != (cout,):
                raise InputError(f"{self.name}: batch-norm {label} shape {v.shape} does not "
                                 f"match {cout} channels")
        return scale, shift

    def backward(self, ctx, grad):
        x, w = ctx.saved
        (pt, pl), out_hw = ctx.geometry
        kh, kw, cin, cout = w.shape
        g = np.ascontiguousarray(self._masked(ctx, grad))
        if ctx.route == "direct":
            return _direct_backward(x, w, g, (pt, pl), ctx.needs_input_grad[0], ctx.has_bias,
                                    self.backend)
        db = _channel_sums(g) if ctx.has_bias else None
        g2 = g.reshape(-1, cout)
        if ctx.route in WINOGRAD_TILE:
            dw = _winograd_weight_grad(x, g, (pt, pl), self.backend)
        else:
            dw = _blocked_weight_grad(x, g2, kh, kw, self.strides, (pt, pl), out_hw,
                                      self.backend).reshape(w.shape)
        dx = None
        if ctx.needs_input_grad[0] and ctx.route in WINOGRAD_TILE:
            # the adjoint stride-1 convolution (flipped kernel, in and out exchanged, padded
            # k - 1 - p before), by the same Winograd path
            dx = _winograd_conv(g, w, True, None, (kh - 1 - pt, kw - 1 - pl), x.shape[1:3],
                                self.backend, WINOGRAD_TILE[ctx.route])
        elif ctx.needs_input_grad[0] and self.strides == (1, 1):
            # stride 1: dx is the correlation of grad with the kernel flipped in space and
            # transposed in channels, padded k - 1 - p before: the same blocked path as forward
            flipped = np.ascontiguousarray(w[::-1, ::-1].transpose(0, 1, 3, 2))
            dx = _blocked_conv(g, flipped.reshape(kh * kw * cout, cin),
                               kh, kw, (1, 1), (kh - 1 - pt, kw - 1 - pl), x.shape[1:3],
                               self.backend).reshape(x.shape)
        elif ctx.needs_input_grad[0]:
            cols = matmul(g2, w.reshape(kh * kw * cin, cout).T, backend=self.backend)
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
        ctx.route = conv_route((kh, kw, cout, cin), self.strides, x.dtype, (n, ho, wo))
        if ctx.route == "direct":
            # stride 1: the transposed convolution is the convolution with the kernel flipped
            # in space, padded k - 1 - crop before
            x = np.ascontiguousarray(x)
            ctx.save_for_backward(x, w)
            out = _direct_conv(x, _flipped(w).reshape(kh * kw * cin, cout), b, (kh, kw),
                               (kh - 1 - pt, kw - 1 - pl), (ho, wo), self.backend)
            _clamp(out, self.bounds, self.backend)
            return self._activated(ctx, out)
        if ctx.route in WINOGRAD_TILE:
            # the same convolution with the flipped kernel, by the Winograd path
            x = np.ascontiguousarray(x)
            ctx.save_for_backward(x, w)
            return self._activated(ctx, _winograd_conv(
                x, w, True, b, (kh - 1 - pt, kw - 1 - pl), (ho, wo), self.backend,
                WINOGRAD_TILE[ctx.route], self.bounds))
        x2 = x.reshape(n * h * wd, cin)
        w2 = w.reshape(kh * kw * cout, cin)
        rows, columns = n * h * wd, kh * kw * cout
        pointwise = _pointwise(kh, kw, self.strides, (pt, pl), (h, wd), (ho, wo))
        if rows <= TRANSPOSED_COLUMNS_MAX_ROWS and not pointwise:
            cols_t = matmul(w2, x2.T, _workspace(rows * columns, x.dtype)
                            .reshape(columns, rows), backend=self.backend)
            out = np.empty((n, ho, wo, cout), dtype=x.dtype)
            kernels(self.backend).col2im_transposed(cols_t, kh, kw, *self.strides, pt, pl, h,
                                                    wd, out)
        else:
            if pointwise:
                # the column matrix is the output itself: it must not live in the shared
                # workspace, which the next convolution overwrites
                cols = matmul(x2, w2.T, backend=self.backend)
            else:
                cols = matmul(x2, w2.T, _workspace(rows * columns, x.dtype)
                              .reshape(rows, columns), backend=self.backend)
            out = _col2im(cols, (n, ho, wo, cout), kh, kw, self.strides, (pt, pl), (h, wd),
                          self.backend)
        _add_bias(out, b, self.backend, self.bounds)
        ctx.save_for_backward(x2, w)
        return self._activated(ctx, out)

    def backward(self, ctx, grad):
        x2, w = ctx.saved
        x_shape, pads = ctx.geometry
        kh, kw, cout, cin = w.shape
        grad = self._masked(ctx, grad)
        if ctx.route == "direct":
            # the forward was the convolution of x with the flipped kernel: its backward, and
            # the kernel gradient flipped back. Its kernel also sums g for the bias gradient,
            # in the same pass over g
            dx, dw, db = _direct_backward(x2, _flipped(w), np.ascontiguousarray(grad),
                                          (kh - 1 - pads[0], kw - 1 - pads[1]),
                                          ctx.needs_input_grad[0], ctx.has_bias, self.backend)
            return dx, _flipped(dw), db
        if ctx.route in WINOGRAD_TILE:
            # the convolution's forward (input gradient) and kernel gradient with the roles of
            # input and output exchanged, by the Winograd path
            g = np.ascontiguousarray(grad)
            dx = None
            if ctx.needs_input_grad[0]:
                dx = _winograd_conv(g, w, False, None, pads, x_shape[1:3], self.backend,
                                    WINOGRAD_TILE[ctx.route])
            dw = _winograd_weight_grad(g, x2, pads, self.backend)
            db = _channel_sums(g) if ctx.has_bias else None
            return dx, dw, db
        gcols = _im2col(grad, kh, kw, self.strides, pads, x_shape[1:3], self.backend)
        w2 = w.reshape(kh * kw * cout, cin)
        dx = (matmul(gcols, w2, backend=self.backend).reshape(x_shape)
              if ctx.needs_input_grad[0] else None)
        dw = matmul(gcols.T, x2, backend=self.backend).reshape(w.shape)
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
            _add_bias(out, b, self.backend)
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
    time uses it (an op finishes with it before it returns), so nothing an op returns may be a
    view of it. Slots are buffers that one op uses at the same time: the Winograd path keeps
    its transformed kernel ("winograd kernel") while it transforms blocks of tiles in
    "columns"."""
    key = (np.dtype(dtype), slot)
    buffer = _WORKSPACE.get(key)
    if buffer is None or buffer.size < size:
        buffer = np.empty(max(size, 1), dtype=key[0])
        _WORKSPACE[key] = buffer
    return buffer[:size]


#: Largest kh*kw*Cin*Cout (products per output pixel) of a stride-1 convolution that the
#: direct kernels compute: the 3 -> 3 prediction layer has 81. Below this im2col + GEMM spends
#: most of its time copying (K = kh*kw*Cin and N = Cout are tiny); the next smallest decoder
#: layers (64 -> 3, 96 -> 3) are stride 2 and stay on im2col.
DIRECT_MAX_PRODUCTS = 256

#: Fewest input and output channels (each) of a stride-1 3x3 convolution that takes the
#: Winograd route by default. Measured on 2 cores, 56x56, batch 1, forward: Winograd took 0.7
#: (16 -> 16 and 32 -> 32 channels) to 0.8 (64 -> 64) times the im2col route's time; smaller
#: products (K = Cin, N = Cout) were not measured below 16.
WINOGRAD_MIN_CHANNELS = 16

#: Fewest 2x2 output tiles (N * ceil(Ho / 2) * ceil(Wo / 2)) of a convolution that takes the
#: Winograd route by default, unless each image has WINOGRAD_MIN_IMAGE_TILES: its 16 products
#: have one row per tile, and a product of a few dozen rows runs well below the BLAS's best,
#: while im2col's one product has 4 rows per tile. Measured on 2 cores, forward, Winograd over
#: im2col time: 512 -> 512 at 7x7 1.8-3.1 (16 tiles), 1.1-2.1 (64), 1.1-1.5 (128); 576 -> 576
#: at 14x14 1.1-1.9 (49 tiles), 0.85-1.4 (98), while OpenBLAS's own threads still split each
#: product (before refseg's one thread pool; WINOGRAD_MIN_IMAGE_TILES has the later figures).
#: ResNet50V2's conv5 (7x7, 16 tiles per image) takes Winograd from batch 10 on.
WINOGRAD_MIN_TILES = 160

#: Fewest 2x2 output tiles per image that take the Winograd route whatever the batch size: the
#: 14x14 layers (49 tiles) at batch 1. Each of the 16 products is then a tile of its own on
#: refseg's thread pool, and the route multiplies 2.25 times less. Measured on 2 cores (AMD
#: EPYC Zen 1, AVX2, no AVX-512), batch 1, forward with the kernel transform, im2col ->
#: Winograd: 576 -> 576 at 14x14 19.1 -> 14.7 ms, 256 -> 256 at 14x14 (five layers) 20.5 ->
#: 16.3 ms, 720 -> 256 11.0 -> 9.5 ms, the whole prediction 355 -> 348 ms; on a Zen 4 (1 MiB
#: of L2 per core) the same layers were level (576 -> 576: 3.0-3.4 against 2.9-3.6 ms).
#: 512 -> 512 at 7x7 (16 tiles) took 16.5 -> 21.8 ms, below the bound.
WINOGRAD_MIN_IMAGE_TILES = 49

#: The same threshold for the gradients (input and kernel) of a convolution, which conv2d
#: routes on their own, whatever route its forward pass took. Lower, because im2col's kernel
#: gradient is one product of inner dimension N*Ho*Wo, a few dozen rows: OpenBLAS does it
#: worse than the sixteen Winograd products of the same depth. Measured on 2 cores, backward
#: + forward (forward on im2col), 2x2 tiles Winograd over im2col time: x2 and x13 at batch 1
#: (49 tiles) 0.82 and 0.84; 256 -> 256 at 4x14, batch 8 (56) 0.82; 512 -> 512 at 2x7,
#: batch 8 (32) 0.98, at 7x7, batch 2 (32) 0.95, batch 1 (16) 1.01; at 2x7, batch 1 (4) 1.07;
#: 16 -> 16 at 4x4 (4 tiles) 2.6.
WINOGRAD_GRADIENT_MIN_TILES = 32

#: Dtypes whose stride-1 3x3 convolutions take the Winograd route by default. float64 stays on
#: im2col although Winograd is as fast there (0.55-0.75 of im2col's time on the decoder's
#: layers, 1 thread) and as accurate (1e-15): float64 is refseg's reference (gradient checks,
#: the float64 network that float32 tolerances are measured against), and direct summation
#: keeps it independent of the Winograd path it is used to check.
WINOGRAD_DTYPES = (np.dtype(np.float32),)

#: Output tile side of each Winograd route: F(2x2, 3x3) and F(4x4, 3x3).
WINOGRAD_TILE = {"winograd": 2, "winograd4": 4}

#: Fewest 4x4 output tiles (N * ceil(Ho / 4) * ceil(Wo / 4)) of a convolution that takes
#: F(4x4, 3x3) instead of F(2x2, 3x3). It multiplies 2.25 times per output instead of 4, but
#: in 36 products with one row per tile (a quarter of F(2x2, 3x3)'s rows) and with a kernel
#: transform 2.25 times as large. Measured on 2 cores, batch 1, forward, F(4x4) over F(2x2)
#: time: 0.65-0.75 at 112x112 (x9, x21: 784 tiles), 0.85-0.9 at 56x56 (x7b, x18: 196),
#: 1.2-1.4 at 28x28 (x5: 49), 2-6 at 14x14 with 256-720 channels (16 tiles).
WINOGRAD4_MIN_TILES = 160

#: Most input pixels (N*H*W) of a transposed convolution whose column matrix is computed
#: kernel-first, as kernel x input^T (kh*kw*Cout rows, one column per input pixel), and
#: scattered by col2im_transposed; above it input-first, input x kernel^T, and col2im. OpenBLAS
#: does a product with a few dozen rows faster with them as the right operand. Measured on 2
#: cores, forward of the whole op, kernel-first over input-first time: 7x7 inputs at batch 1
#: (49 pixels) 0.92 for 2048 -> 720 (x1) and 0.91-0.98 for 320 -> 576 (x12); at 196 pixels
#: 1.03-1.22 (x1, x12 at batch 4; x4, x15 at batch 1); at 784 and more 1.2-1.8.
TRANSPOSED_COLUMNS_MAX_ROWS = 64

#: Forces one route for every stride-1 convolution ("direct", "im2col", "winograd" or
#: "winograd4"; a forced Winograd route applies to 3x3 kernels, the only size they compute, and
#: other kernels take "im2col"); None chooses as conv_route says. For tests.
FORCE_ROUTE = None


@infrastructure("the choice among equivalent convolution algorithms")
def conv_route(w_shape, strides, dtype=np.float32, out_shape=None, gradient=False) -> str:
    """How conv2d computes a convolution with kernel ``w_shape`` (kh, kw, Cin, Cout).

    Parameters
    ----------
    w_shape : tuple of int
        (kh, kw, Cin, Cout).
    strides : (int, int)
    dtype : numpy dtype
        The input's.
    out_shape : (int, int, int) or None
        (N, Ho, Wo) of the output; None: not considered.
    gradient : bool
        The route of the gradients rather than of the forward pass: the same, but with
        WINOGRAD_GRADIENT_MIN_TILES for WINOGRAD_MIN_TILES.

    Returns
    -------
    {"direct", "winograd4", "winograd", "im2col"}
        Stride 1 only, else "im2col". "direct" for kh*kw*Cin*Cout <= DIRECT_MAX_PRODUCTS;
        for a 3x3 kernel with Cin and Cout >= WINOGRAD_MIN_CHANNELS and a dtype in
        WINOGRAD_DTYPES, "winograd4" (F(4x4, 3x3)) with at least WINOGRAD4_MIN_TILES 4x4
        output tiles, else "winograd" (F(2x2, 3x3)) with at least WINOGRAD_MIN_TILES 2x2 tiles
        or WINOGRAD_MIN_IMAGE_TILES per image (or when out_shape is None); "im2col"
        otherwise. FORCE_ROUTE overrides the choice.
    """
    kh, kw, cin, cout = w_shape
    if strides != (1, 1):
        return "im2col"
    if FORCE_ROUTE in WINOGRAD_TILE:
        return FORCE_ROUTE if (kh, kw) == (3, 3) else "im2col"
    if FORCE_ROUTE is not None:
        return FORCE_ROUTE
    if math.prod(w_shape) <= DIRECT_MAX_PRODUCTS:
        return "direct"
    if not ((kh, kw) == (3, 3) and min(cin, cout) >= WINOGRAD_MIN_CHANNELS
            and np.dtype(dtype) in WINOGRAD_DTYPES):
        return "im2col"
    if out_shape is None:
        return "winograd"
    n, ho, wo = out_shape
    if n * -(-ho // 4) * -(-wo // 4) >= WINOGRAD4_MIN_TILES:
        return "winograd4"
    min_tiles = WINOGRAD_GRADIENT_MIN_TILES if gradient else WINOGRAD_MIN_TILES
    image_tiles = -(-ho // 2) * -(-wo // 2)
    if n * image_tiles >= min_tiles or image_tiles >= WINOGRAD_MIN_IMAGE_TILES:
        return "winograd"
    return "im2col"


def _add_bias(out, b, backend, bounds=UNCLAMPED) -> None:
    """out += b over the last axis (b None: nothing to add), then out clamped to ``bounds``
    (a ReLU), in place and in one pass, on refseg's threads (out is C-contiguous)."""
    if b is None:
        _clamp(out, bounds, backend)
        return
    rows = out.reshape(-1, out.shape[-1])
    kernels(backend).channel_add(rows, np.ascontiguousarray(b, dtype=out.dtype), *bounds, rows)


def _clamp(out, bounds, backend) -> None:
    """out clamped to ``bounds`` in place, as the ReLU op does; nothing for UNCLAMPED."""
    if bounds != UNCLAMPED:
        flat = out.reshape(-1)
        kernels(backend).clamp(flat, *bounds, flat)


def _flipped(w) -> np.ndarray:
    """The kernel of the adjoint stride-1 convolution: flipped in space, in and out exchanged
    (contiguous, (kh, kw, out, in) for an (kh, kw, in, out) kernel)."""
    return np.ascontiguousarray(w[::-1, ::-1].transpose(0, 1, 3, 2))


#: Bytes of the transformed tiles that the Winograd path holds at a time, input (P x tiles
#: x Cin) and products (P x tiles x Cout) together, P = 16 or 36 products: fewer, longer
#: matrix products against data that stays in the caches (2 MB of L2 per core, a large shared
#: L3 here). Measured on 2 cores with F(2x2, 3x3) over x9, x13, x18 and x21 at batch 1 and 4
#: (forward): 4, 8, 16 and 32 MB within about 15% of each other in sum, 1 and 2 MB slower.
#: With F(4x4, 3x3) (a third as many tiles per block for the same bytes), in bench_ops'
#: interleaved rounds at batch 1, forward against torch: 24 MB 0.90-0.94 (x21), 1.09-1.35
#: (x9), 0.96-1.03 (x7b); 8 MB 1.28, 1.32-1.46, 1.14-1.15.
WINOGRAD_BLOCK_BYTES = 24 << 20

#: Entry k = 4*xi + nu of the transform of the kernel flipped in space is entry
#: 4*pi(xi) + pi(nu) of the kernel's own transform, pi swapping 0 and 3: reversing the columns
#: of G reverses the order of its rows 0 and 3 and leaves rows 1 and 2 as they are.
_FLIPPED_ENTRY = [4 * i + j for i in (3, 1, 2, 0) for j in (3, 1, 2, 0)]


#: Distance in bytes, modulo 4096, between consecutive planes of the Winograd arrays. The
#: transforms read or write all 16 planes of an array at once: planes a multiple of 4096 bytes
#: apart would all fall into the same sets of the L1 cache (whose sets repeat every 4096
#: bytes) and evict each other; 256 bytes apart, the 16 streams cover all of them. Measured:
#: the input transform of 96 channels took 25 ms instead of 2 ms with contiguous planes of
#: 3136 tiles (1204224 bytes, 294 x 4096).
_PLANE_SKEW = 256


def _plane_stride(rows, cols, dtype) -> int:
    """Elements between the planes of a (planes, rows, cols) Winograd array: rows*cols rounded
    up to whole 4096-byte pages, plus _PLANE_SKEW bytes."""
    itemsize = np.dtype(dtype).itemsize
    pages = -(-rows * cols * itemsize // 4096)
    return (pages * 4096 + _PLANE_SKEW) // itemsize


def _planes_size(rows, cols, dtype, planes=16) -> int:
    """Elements of scratch that _planes needs for a (planes, rows, cols) array."""
    return (planes - 1) * _plane_stride(rows, cols, dtype) + rows * cols


def _planes(scratch, rows, cols, planes=16) -> np.ndarray:
    """A (planes, rows, cols) view of the vector ``scratch``: each plane C-contiguous, planes
    _plane_stride elements apart (16 for F(2x2, 3x3), 36 for F(4x4, 3x3))."""
    itemsize = scratch.dtype.itemsize
    return np.lib.stride_tricks.as_strided(
        scratch, (planes, rows, cols),
        (_plane_stride(rows, cols, scratch.dtype) * itemsize, cols * itemsize, itemsize))


@implements("claim4.propagation")
def _winograd_conv(x, w, adjoint, bias, pads, out_hw, backend, tile=2,
                   bounds=UNCLAMPED) -> np.ndarray:
    """Stride-1 3x3 convolution (+ bias) by Winograd F(2x2, 3x3) or F(4x4, 3x3), a block of
    tiles at a time.

    Parameters
    ----------
    x : ndarray of shape (N, H, W, C), C-contiguous
    w : ndarray of shape (3, 3, A, B)
    adjoint : bool
        False: convolve with w (C = A, B output channels). True: with w flipped in space and
        its channel axes exchanged, the kernel of the adjoint convolution (C = B, A output
        channels) - the input gradient of a convolution, the forward of a transposed one.
    bias : ndarray of shape (output channels,) or None
    pads : (int, int)
        Rows and columns of zeros before the input (negative: skipped input).
    out_hw : (int, int)
    backend : {"cython", "numpy"}
    tile : {2, 4}
        Output tile size: F(2x2, 3x3) (16 products per tile) or F(4x4, 3x3) (36).
    bounds : (float, float)
        The output clamped to [low, high] in the output transform (a ReLU after the
        convolution); UNCLAMPED: not clamped.

    Returns
    -------
    ndarray of shape (N, Ho, Wo, output channels), a new array (never workspace).

    Notes
    -----
    With a = tile + 2 (the input window's side) and P = a*a products per tile:
    1. U = G g G^T of each input/output channel pair: (P, A, B), in the workspace slot
       "winograd kernel".
    2. For each block of tiles (tile x tile output pixels each, WINOGRAD_BLOCK_BYTES of
       transformed data): V = B^T d B of each tile's a x a input window, (P, tiles, C); the P
       products M[k] = V[k] @ U[k] (BLAS); out = A^T M A + bias, clamped to ``bounds``,
       cropped at the bottom and right edges.
    For F(2x2, 3x3) the adjoint needs no transformed copy of the flipped kernel: its entry k
    is U[j].T for j = _FLIPPED_ENTRY[k], a transposed view that BLAS reads as it is. F(4x4,
    3x3)'s points (0, +-1, +-2, infinity) are not closed under p -> 1/p, which is what
    flipping does to them: it transforms the flipped kernel itself.

    References
    ----------
    A. Lavin and S. Gray, "Fast Algorithms for Convolutional Neural Networks", CVPR 2016,
    arXiv:1509.09308.
    """
    k = kernels(backend)
    n, _, _, c = x.shape
    ho, wo = out_hw
    a_ch, b_ch = w.shape[2], w.shape[3]
    cout = a_ch if adjoint else b_ch
    planes = (tile + 2) ** 2
    if tile == 2:
        transform_kernel, transform_input, transform_output = (
            k.winograd_kernel, k.winograd_input, k.winograd_output)
    else:
        transform_kernel, transform_input, transform_output = (
            k.winograd4_kernel, k.winograd4_input, k.winograd4_output)
        if adjoint:
            w, adjoint = _flipped(w), False
    u = _planes(_workspace(_planes_size(*w.shape[2:], x.dtype, planes), x.dtype,
                           "winograd kernel"), *w.shape[2:], planes)
    transform_kernel(np.ascontiguousarray(w, dtype=x.dtype), u)
    bias = np.zeros(cout, dtype=x.dtype) if bias is None else np.ascontiguousarray(bias)
    th, tw = -(-ho // tile), -(-wo // tile)
    out = np.empty((n, ho, wo, cout), dtype=x.dtype)
    for start, v, m in _tile_blocks(n * th * tw, c, cout, x.dtype, planes):
        transform_input(x, *pads, th, tw, start, v)
        if adjoint:
            matmul_stack(v, u.transpose(0, 2, 1), m, b_plane=_FLIPPED_ENTRY, backend=backend)
        else:
            matmul_stack(v, u, m, backend=backend)
        transform_output(m, bias, *bounds, th, tw, start, out)
    return out


def _tile_blocks(tiles, c, cout, dtype, planes=16):
    """(first tile, V planes (planes, count, c), M planes (planes, count, cout)) for each
    block of ``tiles`` whose transformed data fit in WINOGRAD_BLOCK_BYTES; both in the
    workspace, valid until the next block."""
    per_block = max(1, WINOGRAD_BLOCK_BYTES // (planes * (c + cout) * np.dtype(dtype).itemsize))
    for start in range(0, tiles, per_block):
        count = min(per_block, tiles - start)
        v_size = _planes_size(count, c, dtype, planes)
        scratch = _workspace(v_size + _planes_size(count, cout, dtype, planes), dtype)
        yield (start, _planes(scratch[:v_size], count, c, planes),
               _planes(scratch[v_size:], count, cout, planes))


@implements("claim4.propagation")
def _winograd_weight_grad(x, g, pads, backend) -> np.ndarray:
    """Kernel gradient of a stride-1 3x3 convolution by the adjoint of Winograd F(2x2, 3x3).

    Parameters
    ----------
    x : ndarray of shape (N, H, W, C), C-contiguous
        The convolution's input.
    g : ndarray of shape (N, Ho, Wo, Cout), C-contiguous
        The gradient of its output.
    pads : (int, int)
        As for _winograd_conv.
    backend : {"cython", "numpy"}

    Returns
    -------
    ndarray of shape (3, 3, C, Cout), a new array.

    Notes
    -----
    The forward is out = A^T M A per tile with M[k] = V[k] @ U[k] and U = G w G^T, so the
    gradient of M is A dy A^T per tile (dy the tile's 2x2 block of g, 0 past the edges), that
    of U is dU[k] = sum over tiles of V[k]^T dM[k], and that of w is G^T dU G. Block by block
    (WINOGRAD_BLOCK_BYTES), dU summed over the blocks in order in x's dtype, as the blocked
    im2col kernel gradient sums its blocks.
    """
    k = kernels(backend)
    n, _, _, c = x.shape
    _, ho, wo, cout = g.shape
    th, tw = (ho + 1) // 2, (wo + 1) // 2
    du = _planes(_workspace(_planes_size(c, cout, x.dtype), x.dtype, "winograd kernel"), c,
                 cout)
    for start, v, m in _tile_blocks(n * th * tw, c, cout, x.dtype):
        k.winograd_input(x, *pads, th, tw, start, v)
        k.winograd_output_adjoint(g, th, tw, start, m)
        matmul_stack(v.transpose(0, 2, 1), m, du, accumulate=start > 0, backend=backend)
    dw = np.empty((3, 3, c, cout), dtype=x.dtype)
    k.winograd_kernel_adjoint(du, dw)
    return dw


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


_ONES: dict = {}


def _channel_sums(g) -> np.ndarray:
    """Sum of g (..., C) over all but the last axis: the bias gradient. As the product of a row
    of ones and g (BLAS): NumPy's sum(axis=0) over rows of a few channels runs a strided loop
    per channel, ten to twenty times slower at C = 3."""
    rows = g.reshape(-1, g.shape[-1])
    key = np.dtype(g.dtype)
    ones = _ONES.get(key)
    if ones is None or ones.size < rows.shape[0]:
        ones = _ONES[key] = np.ones(rows.shape[0], dtype=key)
    return matmul(ones[None, :rows.shape[0]], rows)[0]


def _pointwise(kh, kw, strides, pads, in_hw, out_hw) -> bool:
    """A 1x1, stride-1, unpadded window: the column matrix is the input itself."""
    return kh == kw == 1 and strides == (1, 1) and pads == (0, 0) and tuple(in_hw) == tuple(out_hw)


#: Bytes of the column-matrix block that blocked convolution builds at a time: small enough to
#: stay in cache between im2col and the matrix product (2 MiB of L2 per core and a large shared
#: L3 here), large enough for an efficient GEMM. 4 MiB split x2 at batch 1 (14x14, K = 6480)
#: into products of 154 and 42 rows: 5.0-5.1 ms forward against 4.4-4.5 ms in one block.
BLOCK_BYTES = 8 << 20


def _row_blocks(total_rows, row_pixels, k, itemsize):
    """Ranges of output image rows (n*ho + i) whose column block fits in BLOCK_BYTES."""
    per_block = max(1, BLOCK_BYTES // max(1, row_pixels * k * itemsize))
    return [(start, min(start + per_block, total_rows))
            for start in range(0, total_rows, per_block)]


def _blocked_conv(x, w2, kh, kw, strides, pads, out_hw, backend, scale=None, shift=None,
                  bounds=UNCLAMPED):
    """x (N, H, W, C) convolved with w2 (kh*kw*C, Cout): (N*ho*wo, Cout), one block of output
    rows at a time (im2col into the workspace, then one GEMM into the output rows), each
    product tile then taking ``scale``, ``shift`` (a bias, or a batch norm) and ``bounds`` (a
    ReLU) as ``matmul`` does."""
    n, _, _, c = x.shape
    ho, wo = out_hw
    tail = {"scale": scale, "shift": shift, "bounds": bounds, "backend": backend}
    if _pointwise(kh, kw, strides, pads, x.shape[1:3], out_hw):
        return matmul(np.ascontiguousarray(x).reshape(n * ho * wo, c), w2, **tail)
    x = np.ascontiguousarray(x)
    k = kh * kw * c
    out = np.empty((n * ho * wo, w2.shape[1]), dtype=x.dtype)
    for start, stop in _row_blocks(n * ho, wo, k, x.dtype.itemsize):
        rows = (stop - start) * wo
        cols = _workspace(rows * k, x.dtype).reshape(rows, k)
        kernels(backend).im2col(x, kh, kw, *strides, *pads, ho, wo, start, cols)
        matmul(cols, w2, out[start * wo:stop * wo], **tail)
    return out


def _blocked_weight_grad(x, g2, kh, kw, strides, pads, out_hw, backend):
    """sum over blocks of cols_block^T @ g2_block: the kernel gradient (kh*kw*C, Cout)."""
    n, _, _, c = x.shape
    ho, wo = out_hw
    if _pointwise(kh, kw, strides, pads, x.shape[1:3], out_hw):
        return matmul(np.ascontiguousarray(x).reshape(n * ho * wo, c).T, g2, backend=backend)
    x = np.ascontiguousarray(x)
    k = kh * kw * c
    dw = np.empty((k, g2.shape[1]), dtype=x.dtype)
    for start, stop in _row_blocks(n * ho, wo, k, x.dtype.itemsize):
        rows = (stop - start) * wo
        cols = _workspace(rows * k, x.dtype).reshape(rows, k)
        kernels(backend).im2col(x, kh, kw, *strides, *pads, ho, wo, start, cols)
        matmul(cols.T, g2[start * wo:stop * wo], dw, accumulate=start > 0, backend=backend)
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
def conv2d(x, kernel, bias=None, *, strides=1, padding="valid", backend="cython", relu=False,
           cap=None, batch_norm=None) -> Tensor:
    """Keras Conv2D on NHWC input.

    Parameters
    ----------
    x : Tensor of shape (N, H, W, Cin)
    kernel : Tensor of shape (kh, kw, Cin, Cout)
    bias : Tensor of shape (Cout,) or None
    strides : int or (int, int)
    padding : {"valid", "same"}
    backend : {"cython", "numpy"}
    relu : bool
        The ReLU of the result, in the same pass as the bias: ``relu(conv(...))`` (forward and
        gradients) to the bit, without the intermediate array.
    cap : float or None
        With ``relu``, ReLU6's cap (6).
    batch_norm : (scale, shift), arrays of shape (Cout,), optional
        Inference only, without bias: the batch norm that follows the convolution
        (``norm.inference_affine``), applied before the ReLU, ``batch_norm(conv(...))`` to the
        bit without its pass over memory where the route allows (im2col: the product's tiles;
        backbones' convolutions, ``refseg.models.graph``).

    Returns
    -------
    Tensor of shape (N, Ho, Wo, Cout)

    References
    ----------
    [0148], [0154], [0160], [0164], [0172], [0182], [0188]; [0135], [0139] for the batch norm.
    """
    return Conv2D(strides, padding, backend, relu, cap, batch_norm)(
        as_tensor(x, "x"), as_tensor(kernel, "kernel"),
        None if bias is None else as_tensor(bias, "bias"))


@implements("claim2.fusion", "claim4.propagation")
def conv2d_transpose(x, kernel, bias=None, *, strides=1, padding="valid",
                     backend="cython", relu=False, cap=None) -> Tensor:
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
    relu : bool
        The ReLU of the result, in the same pass as the bias: ``relu(conv(...))`` (forward and
        gradients) to the bit, without the intermediate array.
    cap : float or None
        With ``relu``, ReLU6's cap (6).

    Returns
    -------
    Tensor of shape (N, Ho, Wo, Cout)

    References
    ----------
    [0146], [0152], [0158], [0162], [0168], [0170], [0176], [0180], [0186], [0190], [0194].
    """
    return Conv2DTranspose(strides, padding, backend, relu, cap)(
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
