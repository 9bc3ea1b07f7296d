"""Stride-1 convolutions with few channels by the compiled direct kernels (route "direct").

When kh*kw*Cin*Cout is small (the 3 -> 3 prediction layer), im2col + GEMM is mostly copying:
``conv_small_forward`` and ``conv_small_weight`` (``engine/training/_direct_conv.pxi``) sum the
products in place instead. The input gradient is the convolution of the output gradient with
the flipped kernel, by the same forward kernel.

References: claims 2 and 4; [0194]-[0195] (the prediction layer), [0129]-[0132] (backward).
"""
from __future__ import annotations

import numpy as np

from refseg.autograd.geometry import flipped_kernel
from refseg.engine.training.backend import engine_kernels as kernels
from refseg.cite import implements


@implements("claim2.fusion", "claim4.propagation")
def direct_conv(x, w2, bias, kernel, pads, out_hw, backend) -> np.ndarray:
    """Stride-1 convolution (+ bias) by the direct kernel.

    Parameters
    ----------
    x : ndarray of shape (N, H, W, C), C-contiguous
    w2 : ndarray of shape (kh*kw*C, Cout)
        The kernel, rows in (kh, kw, C) order.
    bias : ndarray of shape (Cout,) or None
    kernel : (int, int)
        (kh, kw).
    pads : (int, int)
        Rows and columns of zeros before the input.
    out_hw : (int, int)
    backend : {"cython", "numpy"}

    Returns
    -------
    ndarray of shape (N, Ho, Wo, Cout), x's dtype, a new array.
    """
    cout = w2.shape[1]
    out = np.empty((x.shape[0], *out_hw, cout), dtype=x.dtype)
    bias = np.zeros(cout, dtype=x.dtype) if bias is None else np.ascontiguousarray(bias)
    kernels(backend).conv_small_forward(x, np.ascontiguousarray(w2), bias, *kernel, *pads, out)
    return out


def _weight_grad(x, g, kernel, pads, backend):
    """(dw (kh*kw*C, Cout) in x's dtype, float64 sums of g per channel) of a stride-1
    convolution of x giving g: the kernel sums in float64."""
    dw = np.empty((kernel[0] * kernel[1] * x.shape[3], g.shape[3]), dtype=np.float64)
    g_sums = np.empty(g.shape[3], dtype=np.float64)
    kernels(backend).conv_small_weight(x, g, *kernel, *pads, dw, g_sums)
    return dw.astype(x.dtype), g_sums


@implements("claim4.propagation")
def direct_backward(x, w, g, pads, needs_dx, needs_db, backend):
    """(dx, dw, db) of a stride-1 convolution by the direct kernels.

    Parameters
    ----------
    x : ndarray of shape (N, H, W, Cin), C-contiguous
        The convolution's input.
    w : ndarray of shape (kh, kw, Cin, Cout)
    g : ndarray of shape (N, Ho, Wo, Cout), C-contiguous
        The gradient of its output.
    pads : (int, int)
        The forward's padding before.
    needs_dx, needs_db : bool
        Whether to compute the input gradient and the bias gradient (None otherwise).
    backend : {"cython", "numpy"}

    Returns
    -------
    (dx, dw, db)
        dx is the convolution of g with the flipped kernel, padded k - 1 - p before; db the
        sums of g per channel, which the kernel-gradient kernel makes in the same pass over g.
    """
    kh, kw, cin, cout = w.shape
    dx = None
    if needs_dx:
        dx = direct_conv(g, flipped_kernel(w).reshape(kh * kw * cout, cin), None, (kh, kw),
                         (kh - 1 - pads[0], kw - 1 - pads[1]), x.shape[1:3], backend)
    dw, g_sums = _weight_grad(x, g, (kh, kw), pads, backend)
    return dx, dw.reshape(w.shape), g_sums.astype(g.dtype) if needs_db else None
