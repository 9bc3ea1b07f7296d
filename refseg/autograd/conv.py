"""Convolution ops with Keras semantics and weight layouts, NHWC: the reference route.

- conv2d: kernel (kh, kw, in, out) (HWIO), bias (out,).
- depthwise_conv2d: kernel (kh, kw, C, 1), bias (C,).
- conv2d_transpose: kernel (kh, kw, out, in), bias (out,); padding "same" gives size * stride.

A convolution is im2col and one matrix product (``conv_im2col``), then the bias (or the folded
batch norm) and the ReLU as their own ops compute them, in one elementwise pass. Its gradients
are the adjoint products. The products sum in a fixed order (``product.matmul``), so the
results depend neither on the thread count nor on the CPU.

conv2d_transpose is the adjoint of conv2d: its forward is conv2d's input-gradient path and its
backward uses conv2d's forward path, so <conv2d(x, W), y> = <x, conv2d_transpose(y, W)> for
matching geometry (``tests/autograd/test_autograd.py``).

``conv2d`` and ``conv2d_transpose`` build their op through ``seam.op_class``: inside a block
that installs a faster implementation (training's engine), its subclass of ``Conv2D`` or
``Conv2DTranspose`` computes them instead.

References: claims 2-4; [0146]-[0195] (Conv2D, Conv2DTranspose), [0139] (depthwise, MobileNetV2),
[0232]-[0236] (ResNet convolutions), [0129]-[0132] (backward).
"""
from __future__ import annotations

import numpy as np

from refseg.autograd.conv_im2col import (im2col_conv, im2col_input_grad,
                                         im2col_transposed_backward, im2col_transposed_conv,
                                         im2col_weight_grad)
from refseg.autograd.elementwise import UNCLAMPED, masked_gradient, relu_bounds, relu_passes
from refseg.autograd.geometry import conv_output, int_pair, transpose_output
from refseg.autograd.product import matmul
from refseg.autograd.seam import op_class
from refseg.autograd.tensor import Op, Tensor, as_tensor
from refseg.backend import kernels
from refseg.errors import InputError
from refseg.cite import implements


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


def _add_bias(out, b, backend, bounds=UNCLAMPED) -> None:
    """out += b over the last axis (b None: nothing to add), then out clamped to ``bounds``
    (a ReLU), in place and in one pass (out is C-contiguous)."""
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


def _channel_sums(g, backend="cython") -> np.ndarray:
    """Sum of g (..., C) over all but the last axis, in row order: the bias gradient, as the
    product of a row of ones and g."""
    rows = g.reshape(-1, g.shape[-1])
    return matmul(np.ones((1, rows.shape[0]), dtype=g.dtype), rows, backend)[0]


class _Window(Op):
    """Shared attributes of the window ops: stride, padding, backend, and for the convolutions
    the ReLU (``relu``; ReLU6 with ``cap`` 6) computed with the bias, in the same pass."""

    def __init__(self, strides=1, padding="valid", backend="cython", relu=False, cap=None):
        self.strides = int_pair(strides, "strides", self.name)
        self.padding = padding
        self.backend = backend
        self.relu = bool(relu)
        self.bounds = relu_bounds(self.relu, cap, self.name)
        if relu:
            self.name = f"{self.name}_relu" if cap is None else f"{self.name}_relu{cap:g}"

    def _activated(self, ctx, out) -> np.ndarray:
        """out, which has been clamped with the bias, and, when a graph is recorded, the ReLU
        op's mask kept for backward."""
        if not self.relu:
            return out
        if ctx.recording:
            ctx.pass_through = relu_passes(out, self.bounds, self.backend)
        return out

    def _masked(self, ctx, grad) -> np.ndarray:
        """The ReLU op's backward: grad where the ReLU passed its input, 0 elsewhere."""
        return masked_gradient(grad, ctx.pass_through, self.backend) if self.relu else grad


@implements("claim2.fusion", "claim4.propagation")
class Conv2D(_Window):
    """y = conv(x, W) + b, Keras Conv2D (cross-correlation), by im2col and one matrix product.
    With ``batch_norm`` = (scale, shift), inference only and no bias: y = conv(x, W) * scale +
    shift, the inference batch norm that follows (``norm.inference_affine``), to the bit."""

    name = "conv2d"

    def __init__(self, strides=1, padding="valid", backend="cython", relu=False, cap=None,
                 batch_norm=None):
        if batch_norm is not None:
            self.name = "conv2d_batch_norm"
        super().__init__(strides, padding, backend, relu, cap)
        self.batch_norm = batch_norm

    def _prepared(self, ctx, x, w, b):
        """Checks, then (x C-contiguous, scale or None, shift or None, pads, out_hw): the
        multiply-add after the product is the batch norm's, or the bias alone."""
        _check_kernel(x, w, 2, "(kh, kw, in, out)", self.name)
        kh, kw, _, cout = w.shape
        _check_bias(b, cout, self.name)
        scale, shift = (self._batch_norm_pair(ctx, b, cout, x.dtype)
                        if self.batch_norm is not None else (None, b))
        (ho, pt), (wo, pl) = (conv_output(x.shape[1], kh, self.strides[0], self.padding, self.name),
                              conv_output(x.shape[2], kw, self.strides[1], self.padding, self.name))
        return np.ascontiguousarray(x), scale, shift, (pt, pl), (ho, wo)

    def forward(self, ctx, x, w, b=None):
        x, scale, shift, pads, out_hw = self._prepared(ctx, x, w, b)
        kh, kw, cin, cout = w.shape
        out = im2col_conv(x, w.reshape(kh * kw * cin, cout), kh, kw, self.strides, pads,
                          out_hw, self.backend)
        if scale is not None:
            kernels(self.backend).channel_affine(out, scale, shift, *self.bounds, out)
        else:
            _add_bias(out, shift, self.backend, self.bounds)
        out = out.reshape(x.shape[0], *out_hw, cout)
        if self.batch_norm is not None:
            return out
        out = self._activated(ctx, out)
        ctx.save_for_backward(x, w)
        ctx.geometry = (pads, out_hw)
        ctx.has_bias = b is not None
        return out

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
        pads, out_hw = ctx.geometry
        kh, kw, cin, cout = w.shape
        g2 = np.ascontiguousarray(self._masked(ctx, grad)).reshape(-1, cout)
        w2 = w.reshape(kh * kw * cin, cout)
        db = _channel_sums(g2, self.backend) if ctx.has_bias else None
        dw = im2col_weight_grad(x, g2, kh, kw, self.strides, pads, out_hw,
                                self.backend).reshape(w.shape)
        dx = (im2col_input_grad(g2, w2, x.shape, kh, kw, self.strides, pads, out_hw,
                                self.backend) if ctx.needs_input_grad[0] else None)
        return dx, dw, db


@implements("claim2.fusion", "claim4.propagation")
class Conv2DTranspose(_Window):
    """Keras Conv2DTranspose: the adjoint of Conv2D, kernel (kh, kw, out, in)."""

    name = "conv2d_transpose"

    def _prepared(self, x, w, b):
        """Checks, then (x C-contiguous, crop before, out_hw)."""
        _check_kernel(x, w, 3, "(kh, kw, out, in)", self.name)
        kh, kw, cout, _ = w.shape
        _check_bias(b, cout, self.name)
        (ho, pt), (wo, pl) = (
            transpose_output(x.shape[1], kh, self.strides[0], self.padding, self.name),
            transpose_output(x.shape[2], kw, self.strides[1], self.padding, self.name))
        return np.ascontiguousarray(x), (pt, pl), (ho, wo)

    def forward(self, ctx, x, w, b=None):
        x, pads, out_hw = self._prepared(x, w, b)
        n, h, wd, cin = x.shape
        out = im2col_transposed_conv(x, w, self.strides, pads, out_hw, self.backend)
        _add_bias(out, b, self.backend, self.bounds)
        ctx.save_for_backward(x.reshape(n * h * wd, cin), w)
        ctx.geometry = (x.shape, pads)
        ctx.has_bias = b is not None
        return self._activated(ctx, out)

    def backward(self, ctx, grad):
        x2, w = ctx.saved  # one row per input pixel
        x_shape, pads = ctx.geometry
        g = np.ascontiguousarray(self._masked(ctx, grad))
        dx, dw = im2col_transposed_backward(x2, w, g, x_shape, self.strides, pads,
                                            ctx.needs_input_grad[0], self.backend)
        db = _channel_sums(g, self.backend) if ctx.has_bias else None
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
    return op_class(Conv2D)(strides, padding, backend, relu, cap, batch_norm)(
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
    return op_class(Conv2DTranspose)(strides, padding, backend, relu, cap)(
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
