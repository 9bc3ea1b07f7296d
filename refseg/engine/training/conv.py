"""Training's convolutions on the engine's routes: subclasses of the reference ops.

``FastConv2D`` and ``FastConv2DTranspose`` take the inputs, outputs and gradients of the
reference ``Conv2D`` and ``Conv2DTranspose`` (``refseg.autograd.conv``) and compute them by the
route ``conv_routes.conv_route`` chooses: im2col and products tiled over refseg's threads
(``conv_im2col``, ``products``), Winograd F(2x2, 3x3) and F(4x4, 3x3) (``conv_winograd``) or the
compiled direct kernels (``conv_direct``); the gradients are routed on their own. A strided
transposed convolution's forward pass takes the inference engine's panel kernels where
``conv_routes.transposed_route`` says so (``conv_panels``). The bias, a
folded batch norm and a ReLU are applied in the product's tiles or the Winograd output
transform where the route allows. They agree with the reference to float rounding; their bits
depend on the route and the CPU's vector units, and, for products left to BLAS, on the thread
count the products are cut for and the BLAS's kernels.

``refseg.engine.training.training_engine`` installs them through ``refseg.autograd.seam``.

References: claims 2 and 4; [0146]-[0195] (Conv2D, Conv2DTranspose), [0129]-[0132] (backward).
"""
from __future__ import annotations

import contextlib

import numpy as np

from refseg.autograd.conv import Conv2D, Conv2DTranspose, _clamp
from refseg.autograd.elementwise import UNCLAMPED
from refseg.autograd.geometry import flipped_kernel
from refseg.autograd.seam import ops_replaced
from refseg.cite import implements, infrastructure
from refseg.engine.training.backend import engine_kernels as kernels
from refseg.engine.training.conv_direct import direct_backward, direct_conv
from refseg.engine.training.conv_im2col import (im2col_conv, im2col_input_grad,
                                                im2col_transposed_backward,
                                                im2col_transposed_conv, im2col_weight_grad)
from refseg.engine.training.conv_panels import panels_transposed_conv
from refseg.engine.training.conv_routes import (WINOGRAD_TILE, conv_route, forcing,
                                                transposed_route)
from refseg.engine.training.conv_winograd import winograd_conv, winograd_weight_grad

def _channel_sums(g, backend="cython") -> np.ndarray:
    """Sum of g (..., C) over all but the last axis: the bias gradient, each channel summed
    over the pixels in float64 (``column_sums``), then rounded to g's type."""
    rows = np.ascontiguousarray(g).reshape(-1, g.shape[-1])
    sums = np.empty(rows.shape[1])
    kernels(backend).column_sums(rows, sums)
    return sums.astype(rows.dtype)


def _add_bias(out, b, backend, bounds=UNCLAMPED) -> None:
    """out += b over the last axis, then clamped to ``bounds``, in one pass."""
    if b is None:
        _clamp(out, bounds, backend)
        return
    rows = out.reshape(-1, out.shape[-1])
    kernels(backend).channel_add(rows, np.ascontiguousarray(b, dtype=out.dtype), *bounds, rows)


@implements("claim2.fusion", "claim4.propagation")
class FastConv2D(Conv2D):
    """Conv2D by the route ``conv_route`` chooses: im2col + tiled GEMM, Winograd or direct."""

    def forward(self, ctx, x, w, b=None):
        x, scale, shift, pads, out_hw = self._prepared(ctx, x, w, b)
        cout = w.shape[3]
        out_shape = (x.shape[0], *out_hw, cout)
        route = conv_route(w.shape, self.strides, x.dtype, out_shape[:3])
        out = self._convolved(route, x, w, scale, shift, pads, out_hw)
        if self.batch_norm is not None:
            return out.reshape(out_shape)
        out = self._activated(ctx, out)
        # the column matrix is never kept whole (it is kh*kw times the input): backward
        # rebuilds it block by block
        ctx.save_for_backward(x, w)
        ctx.geometry = (pads, out_hw)
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

    def backward(self, ctx, grad):
        x, w = ctx.saved
        pads, out_hw = ctx.geometry
        kh, kw, _, cout = w.shape
        g = np.ascontiguousarray(self._masked(ctx, grad))
        if ctx.route == "direct":
            return direct_backward(x, w, g, pads, ctx.needs_input_grad[0], ctx.has_bias,
                                   self.backend)
        db = _channel_sums(g, self.backend) if ctx.has_bias else None
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
class FastConv2DTranspose(Conv2DTranspose):
    """Conv2DTranspose by the route of the convolution it is the adjoint of; with a stride,
    its forward pass on the inference engine's kernels where ``transposed_route`` says so."""

    def forward(self, ctx, x, w, b=None):
        x, (pt, pl), (ho, wo) = self._prepared(x, w, b)
        kh, kw, cout, cin = w.shape
        n, h, wd, _ = x.shape
        ctx.geometry = (x.shape, (pt, pl))
        ctx.has_bias = b is not None
        # the convolution this op is the adjoint of maps (ho, wo, cout) to (h, wd, cin)
        ctx.route = conv_route((kh, kw, cout, cin), self.strides, x.dtype, (n, ho, wo))
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
        if transposed_route(w.shape, self.strides, x.dtype, x.shape, self.backend) == "panels":
            out = panels_transposed_conv(x, w, b, self.strides, (pt, pl), (ho, wo), self.bounds)
        else:
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
            db = _channel_sums(g, self.backend) if ctx.has_bias else None
            return dx, dw, db
        dx, dw = im2col_transposed_backward(x, w, grad, x_shape, self.strides, pads,
                                            ctx.needs_input_grad[0], self.backend)
        db = _channel_sums(grad, self.backend) if ctx.has_bias else None
        return dx, dw, db


#: The reference ops and the classes that compute them on the engine's routes.
CONV_REPLACEMENTS = {Conv2D: FastConv2D, Conv2DTranspose: FastConv2DTranspose}


@infrastructure("forces one of the equivalent convolution algorithms, to hold them to each other")
@contextlib.contextmanager
def forced_route(route: str | None):
    """Inside the block the engine's convolutions are installed (``refseg.autograd.seam``) and
    every stride-1 convolution of this thread takes ``route``.

    Parameters
    ----------
    route : {"direct", "im2col", "winograd", "winograd4"} or None
        As ``conv_routes.forcing``; None: the engine's own choice (``conv_route``).
    """
    with forcing(route), ops_replaced(CONV_REPLACEMENTS):
        yield
