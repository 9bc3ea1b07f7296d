"""Convolution ops with Keras semantics and weight layouts, NHWC.

- conv2d: kernel (kh, kw, in, out) (HWIO), bias (out,).
- depthwise_conv2d: kernel (kh, kw, C, 1), bias (C,).
- conv2d_transpose: kernel (kh, kw, out, in), bias (out,); padding "same" gives size * stride.

Each op checks its inputs, asks ``conv_routes.conv_route`` how to compute them, and runs one
algorithm module: ``conv_im2col`` (im2col + one matrix product, every strided convolution),
``conv_winograd`` (Winograd F(2x2, 3x3) and F(4x4, 3x3), stride-1 3x3 float32 convolutions with
enough channels and output tiles) or ``conv_direct`` (compiled direct kernels, stride-1
convolutions with few channels). The gradients are routed on their own. The bias, and a ReLU
or ReLU6 after the convolution, are applied in the same pass as the product where the route
allows.

conv2d_transpose is the adjoint of conv2d: its forward is conv2d's input-gradient path and its
backward uses conv2d's forward path, so <conv2d(x, W), y> = <x, conv2d_transpose(y, W)> for
matching geometry (``tests/autograd/test_autograd.py``). At stride 1 it is the convolution
with the flipped kernel, and takes the same routes as conv2d.

References: claims 2-4; [0146]-[0195] (Conv2D, Conv2DTranspose), [0139] (depthwise, MobileNetV2),
[0232]-[0236] (ResNet convolutions), [0129]-[0132] (backward).
"""
from __future__ import annotations

import numpy as np

from refseg.autograd.conv_direct import direct_backward, direct_conv
from refseg.autograd.conv_im2col import (im2col_conv, im2col_input_grad,
                                         im2col_transposed_backward, im2col_transposed_conv,
                                         im2col_weight_grad)
from refseg.autograd.conv_routes import WINOGRAD_TILE, conv_route
from refseg.autograd.conv_winograd import winograd_conv, winograd_weight_grad
from refseg.autograd.elementwise import UNCLAMPED, masked_gradient, relu_bounds, relu_passes
from refseg.autograd.geometry import conv_output, flipped_kernel, int_pair, transpose_output
from refseg.autograd.products import matmul
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


_ONES: dict = {}


def _channel_sums(g) -> np.ndarray:
    """Sum of g (..., C) over all but the last axis: the bias gradient. As the product of a row
    of ones and g (BLAS): NumPy's sum(axis=0) over rows of a few channels runs a strided loop
    per channel, many times slower at C = 3."""
    rows = g.reshape(-1, g.shape[-1])
    key = np.dtype(g.dtype)
    ones = _ONES.get(key)
    if ones is None or ones.size < rows.shape[0]:
        ones = _ONES[key] = np.ones(rows.shape[0], dtype=key)
    return matmul(ones[None, :rows.shape[0]], rows)[0]


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
        """out, which its route has clamped with the bias, and, when a graph is recorded, the
        ReLU op's mask kept for backward."""
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
        kh, kw, _, cout = w.shape
        _check_bias(b, cout, self.name)
        folded = self.batch_norm is not None
        # the multiply-add after the product: the batch norm's, or the bias alone
        scale, shift = self._batch_norm_pair(ctx, b, cout, x.dtype) if folded else (None, b)
        (ho, pt), (wo, pl) = (conv_output(x.shape[1], kh, self.strides[0], self.padding, self.name),
                              conv_output(x.shape[2], kw, self.strides[1], self.padding, self.name))
        out_shape = (x.shape[0], ho, wo, cout)
        route = conv_route(w.shape, self.strides, x.dtype, out_shape[:3])
        x = np.ascontiguousarray(x)
        out = self._convolved(route, x, w, scale, shift, (pt, pl), (ho, wo))
        if folded:
            return out.reshape(out_shape)
        out = self._activated(ctx, out)
        # the column matrix is never kept whole (it is kh*kw times the input): backward
        # rebuilds it block by block
        ctx.save_for_backward(x, w)
        ctx.geometry = ((pt, pl), (ho, wo))
        ctx.route = conv_route(w.shape, self.strides, x.dtype, out_shape[:3], gradient=True)
        ctx.has_bias = b is not None
        return out.reshape(out_shape)

    def _convolved(self, route, x, w, scale, shift, pads, out_hw) -> np.ndarray:
        """The convolution of x on ``route``, then * scale (if given) + shift, clamped to the
        ReLU's bounds: in the product's tiles on the im2col route, in the output transform
        on the Winograd routes (a bias), else in one pass after it."""
        kh, kw, cin, cout = w.shape
        folded = scale is not None
        if route == "im2col":
            return im2col_conv(x, w.reshape(kh * kw * cin, cout), kh, kw, self.strides, pads,
                               out_hw, self.backend, scale=scale, shift=shift,
                               bounds=self.bounds)
        if route == "direct":
            out = direct_conv(x, w.reshape(kh * kw * cin, cout), None if folded else shift,
                              (kh, kw), pads, out_hw, self.backend)
        else:
            out = winograd_conv(x, w, False, None if folded else shift, pads, out_hw,
                                self.backend, WINOGRAD_TILE[route],
                                UNCLAMPED if folded else self.bounds)
        if folded:
            # one pass, the kernel the batch norm runs
            rows = out.reshape(-1, cout)
            kernels(self.backend).channel_affine(rows, scale, shift, *self.bounds, rows)
        elif route == "direct":
            _clamp(out, self.bounds, self.backend)
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
        kh, kw, _, cout = w.shape
        g = np.ascontiguousarray(self._masked(ctx, grad))
        if ctx.route == "direct":
            return direct_backward(x, w, g, pads, ctx.needs_input_grad[0], ctx.has_bias,
                                   self.backend)
        db = _channel_sums(g) if ctx.has_bias else None
        if ctx.route in WINOGRAD_TILE:
            dw = winograd_weight_grad(x, g, pads, self.backend)
        else:
            dw = im2col_weight_grad(x, g.reshape(-1, cout), kh, kw, self.strides, pads, out_hw,
                                    self.backend).reshape(w.shape)
        dx = (self._input_grad(ctx.route, x.shape, w, g, pads, out_hw)
              if ctx.needs_input_grad[0] else None)
        return dx, dw, db

    def _input_grad(self, route, x_shape, w, g, pads, out_hw) -> np.ndarray:
        """The input gradient from the output gradient g (C-contiguous): the adjoint
        convolution, by the route's algorithm."""
        kh, kw, cin, cout = w.shape
        adjoint_pads = (kh - 1 - pads[0], kw - 1 - pads[1])
        if route in WINOGRAD_TILE:
            # the adjoint stride-1 convolution (flipped kernel, in and out exchanged, padded
            # k - 1 - p before), by the same Winograd path
            return winograd_conv(g, w, True, None, adjoint_pads, x_shape[1:3], self.backend,
                                 WINOGRAD_TILE[route])
        if self.strides == (1, 1) and (kh, kw) != (1, 1):
            # the correlation of g with the kernel flipped in space and transposed in
            # channels, padded k - 1 - p before: the same blocked path as forward (a 1x1
            # kernel takes the path below, g times the kernel's transposed view, which BLAS
            # reads in place: the flipped copy cost as much as the product at 7x7)
            return im2col_conv(g, flipped_kernel(w).reshape(kh * kw * cout, cin), kh, kw,
                               (1, 1), adjoint_pads, x_shape[1:3],
                               self.backend).reshape(x_shape)
        return im2col_input_grad(g.reshape(-1, cout), w.reshape(kh * kw * cin, cout), x_shape,
                                 kh, kw, self.strides, pads, out_hw, self.backend)


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
        x = np.ascontiguousarray(x)
        # stride 1 (direct, Winograd): the convolution with the kernel flipped in space,
        # padded k - 1 - crop before
        flipped_pads = (kh - 1 - pt, kw - 1 - pl)
        if ctx.route == "direct":
            ctx.save_for_backward(x, w)
            out = direct_conv(x, flipped_kernel(w).reshape(kh * kw * cin, cout), b, (kh, kw),
                              flipped_pads, (ho, wo), self.backend)
            _clamp(out, self.bounds, self.backend)
            return self._activated(ctx, out)
        if ctx.route in WINOGRAD_TILE:
            ctx.save_for_backward(x, w)
            return self._activated(ctx, winograd_conv(
                x, w, True, b, flipped_pads, (ho, wo), self.backend, WINOGRAD_TILE[ctx.route],
                self.bounds))
        out = im2col_transposed_conv(x, w, self.strides, (pt, pl), (ho, wo), self.backend)
        _add_bias(out, b, self.backend, self.bounds)
        ctx.save_for_backward(x.reshape(n * h * wd, cin), w)
        return self._activated(ctx, out)

    def backward(self, ctx, grad):
        x, w = ctx.saved  # on the im2col route, one row per input pixel
        x_shape, pads = ctx.geometry
        kh, kw, _, _ = w.shape
        grad = self._masked(ctx, grad)
        if ctx.route == "direct":
            # the forward was the convolution of x with the flipped kernel: its backward, and
            # the kernel gradient flipped back. Its kernel also sums g for the bias gradient,
            # in the same pass over g
            dx, dw, db = direct_backward(x, flipped_kernel(w), np.ascontiguousarray(grad),
                                         (kh - 1 - pads[0], kw - 1 - pads[1]),
                                         ctx.needs_input_grad[0], ctx.has_bias, self.backend)
            return dx, flipped_kernel(dw), db
        if ctx.route in WINOGRAD_TILE:
            # the convolution's forward (input gradient) and kernel gradient with the roles of
            # input and output exchanged, by the Winograd path
            g = np.ascontiguousarray(grad)
            dx = None
            if ctx.needs_input_grad[0]:
                dx = winograd_conv(g, w, False, None, pads, x_shape[1:3], self.backend,
                                   WINOGRAD_TILE[ctx.route])
            dw = winograd_weight_grad(g, x, pads, self.backend)
            db = _channel_sums(g) if ctx.has_bias else None
            return dx, dw, db
        dx, dw = im2col_transposed_backward(x, w, grad, x_shape, self.strides, pads,
                                            ctx.needs_input_grad[0], self.backend)
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
