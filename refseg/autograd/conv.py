"""Convolution ops with Keras semantics and weight layouts, NHWC.

- conv2d: kernel (kh, kw, in, out) (HWIO), bias (out,).
- depthwise_conv2d: kernel (kh, kw, C, 1), bias (C,).
- conv2d_transpose: kernel (kh, kw, out, in), bias (out,); padding "same" gives size * stride.

conv2d runs as im2col + one matrix product (BLAS through NumPy); its input gradient is col2im,
the adjoint of im2col. conv2d_transpose is the adjoint of conv2d: its forward is conv2d's
input-gradient path and its backward uses conv2d's forward path, so <conv2d(x, W), y> =
<x, conv2d_transpose(y, W)> for matching geometry (``tests/test_autograd.py``).

References: claims 2-4; [0146]-[0195] (Conv2D, Conv2DTranspose), [0139] (depthwise, MobileNetV2),
[0232]-[0236] (ResNet convolutions), [0129]-[0132] (backward).
"""
from __future__ import annotations

import numpy as np

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
        out = _blocked_conv(x, w.reshape(kh * kw * cin, cout), kh, kw, self.strides, (pt, pl),
                            (ho, wo), self.backend)
        if b is not None:
            out += b
        # the column matrix is never kept whole (it is kh*kw times the input): backward
        # rebuilds it block by block
        ctx.save_for_backward(x, w)
        ctx.geometry = ((pt, pl), (ho, wo))
        ctx.has_bias = b is not None
        return out.reshape(x.shape[0], ho, wo, cout)

    def backward(self, ctx, grad):
        x, w = ctx.saved
        (pt, pl), out_hw = ctx.geometry
        kh, kw, cin, cout = w.shape
        g2 = np.ascontiguousarray(grad).reshape(-1, cout)
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
        db = g2.sum(axis=0) if ctx.has_bias else None
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
        x2 = x.reshape(n * h * wd, cin)
        w2 = w.reshape(kh * kw * cout, cin)
        cols = np.matmul(x2, w2.T, out=_workspace(n * h * wd * kh * kw * cout, x.dtype)
                         .reshape(n * h * wd, kh * kw * cout))
        out = _col2im(cols, (n, ho, wo, cout), kh, kw, self.strides, (pt, pl), (h, wd),
                      self.backend)
        if b is not None:
            out += b
        ctx.save_for_backward(x2, w)
        ctx.geometry = (x.shape, (pt, pl))
        ctx.has_bias = b is not None
        return out

    def backward(self, ctx, grad):
        x2, w = ctx.saved
        x_shape, pads = ctx.geometry
        kh, kw, cout, cin = w.shape
        gcols = _im2col(grad, kh, kw, self.strides, pads, x_shape[1:3], self.backend)
        w2 = w.reshape(kh * kw * cout, cin)
        dx = (gcols @ w2).reshape(x_shape) if ctx.needs_input_grad[0] else None
        dw = (gcols.T @ x2).reshape(w.shape)
        db = grad.reshape(-1, cout).sum(axis=0) if ctx.has_bias else None
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


def _workspace(size, dtype) -> np.ndarray:
    """A scratch vector of at least ``size`` elements, one per dtype, grown as needed and reused
    by every op: column matrices are temporaries, and writing into memory that is already
    mapped avoids the page faults of a fresh allocation on every call. Only one op at a time
    uses it (an op finishes with it before it returns)."""
    key = np.dtype(dtype)
    buffer = _WORKSPACE.get(key)
    if buffer is None or buffer.size < size:
        buffer = np.empty(max(size, 1), dtype=key)
        _WORKSPACE[key] = buffer
    return buffer[:size]


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
