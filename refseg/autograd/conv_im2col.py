"""Convolutions as im2col and one matrix product, and their adjoints: the reference route.

A convolution's output is the column matrix of its input (one row per output pixel, holding
the kh x kw x C window it reads: ``im2col``) times the kernel reshaped to (kh*kw*C, Cout)
(``product.matmul``). The input gradient is col2im, the adjoint of im2col, of the output
gradient times the kernel's transpose; the kernel gradient is the column matrix's transpose
times the output gradient. A transposed convolution is the adjoint of a convolution: its
forward is the convolution's input-gradient path and its backward the convolution's forward
path.

The column matrix is kh*kw times the input; it is built a block of output rows at a time
(``BLOCK_BYTES``), which changes no result: each output row is its own sums, and the kernel
gradient adds the blocks' products in block order, the blocks fixed by the shapes alone.

References: claims 2 and 4; [0146]-[0195] (Conv2D, Conv2DTranspose), [0129]-[0132] (backward).
"""
from __future__ import annotations

import numpy as np

from refseg.autograd.product import matmul
from refseg.backend import kernels
from refseg.cite import implements

#: Bytes of the column matrix built at a time: bounds the memory of a large convolution.
BLOCK_BYTES = 64 << 20


def _row_blocks(total_rows, row_pixels, k, itemsize):
    """Ranges of output image rows (n*ho + i) whose column block fits in BLOCK_BYTES."""
    per_block = max(1, BLOCK_BYTES // max(1, row_pixels * k * itemsize))
    return [(start, min(start + per_block, total_rows))
            for start in range(0, total_rows, per_block)]


def _column_block(x, kh, kw, strides, pads, out_hw, start, stop, backend) -> np.ndarray:
    """Rows of the column matrix of x for output image rows start..stop-1:
    ((stop - start) * Wo, kh*kw*C)."""
    ho, wo = out_hw
    x = np.ascontiguousarray(x)
    cols = np.empty(((stop - start) * wo, kh * kw * x.shape[3]), dtype=x.dtype)
    kernels(backend).im2col(x, kh, kw, *strides, *pads, ho, wo, start, cols)
    return cols


def _col2im(cols, x_shape, kh, kw, strides, pads, out_hw, backend) -> np.ndarray:
    """The array of shape x_shape whose column matrix, summed where windows overlap, is
    cols: the adjoint of im2col."""
    out = np.empty(x_shape, dtype=cols.dtype)
    kernels(backend).col2im(np.ascontiguousarray(cols), kh, kw, *strides, *pads, *out_hw, out)
    return out


@implements("claim2.fusion", "claim4.propagation")
def im2col_conv(x, w2, kh, kw, strides, pads, out_hw, backend) -> np.ndarray:
    """Convolution of x: its column matrix times the kernel.

    Parameters
    ----------
    x : ndarray of shape (N, H, W, C), C-contiguous
    w2 : ndarray of shape (kh*kw*C, Cout)
        The kernel, rows in (kh, kw, C) order.
    kh, kw : int
    strides, pads : (int, int)
        Strides, and rows and columns of zeros before the input.
    out_hw : (int, int)
    backend : {"cython", "numpy"}

    Returns
    -------
    ndarray of shape (N*Ho*Wo, Cout), a new array.
    """
    n = x.shape[0]
    ho, wo = out_hw
    out = np.empty((n * ho * wo, w2.shape[1]), dtype=x.dtype)
    for start, stop in _row_blocks(n * ho, wo, w2.shape[0], x.dtype.itemsize):
        cols = _column_block(x, kh, kw, strides, pads, out_hw, start, stop, backend)
        out[start * wo:stop * wo] = matmul(cols, w2, backend)
    return out


@implements("claim4.propagation")
def im2col_weight_grad(x, g2, kh, kw, strides, pads, out_hw, backend) -> np.ndarray:
    """Kernel gradient of a convolution of x: cols^T @ g2, block by block.

    Parameters
    ----------
    x : ndarray of shape (N, H, W, C), C-contiguous
        The convolution's input.
    g2 : ndarray of shape (N*Ho*Wo, Cout)
        The gradient of its output.
    kh, kw, strides, pads, out_hw, backend
        As for im2col_conv.

    Returns
    -------
    ndarray of shape (kh*kw*C, Cout), a new array: the blocks' products added in block order.
    """
    n = x.shape[0]
    ho, wo = out_hw
    dw = None
    for start, stop in _row_blocks(n * ho, wo, kh * kw * x.shape[3], x.dtype.itemsize):
        cols = _column_block(x, kh, kw, strides, pads, out_hw, start, stop, backend)
        part = matmul(cols.T, g2[start * wo:stop * wo], backend)
        dw = part if dw is None else np.add(dw, part, out=dw)
    return dw


@implements("claim4.propagation")
def im2col_input_grad(g2, w2, x_shape, kh, kw, strides, pads, out_hw, backend) -> np.ndarray:
    """Input gradient of a convolution: col2im of g2 @ w2^T.

    Parameters
    ----------
    g2 : ndarray of shape (N*Ho*Wo, Cout)
        The gradient of the convolution's output.
    w2 : ndarray of shape (kh*kw*C, Cout)
    x_shape : (N, H, W, C)
    kh, kw, strides, pads, out_hw, backend
        As for im2col_conv.

    Returns
    -------
    ndarray of shape x_shape, a new array.
    """
    return _col2im(matmul(g2, w2.T, backend), x_shape, kh, kw, strides, pads, out_hw, backend)


@implements("claim2.fusion", "claim4.propagation")
def im2col_transposed_conv(x, w, strides, pads, out_hw, backend) -> np.ndarray:
    """Transposed convolution of x (no bias): the input gradient of the convolution it is the
    adjoint of, col2im of x2 @ w2^T.

    Parameters
    ----------
    x : ndarray of shape (N, H, W, Cin)
    w : ndarray of shape (kh, kw, Cout, Cin)
    strides : (int, int)
    pads : (int, int)
        The crop before (the padding before of the convolution it is the adjoint of).
    out_hw : (int, int)
    backend : {"cython", "numpy"}

    Returns
    -------
    ndarray of shape (N, Ho, Wo, Cout), a new array.
    """
    n, h, wd, cin = x.shape
    kh, kw, cout, _ = w.shape
    cols = matmul(x.reshape(n * h * wd, cin), w.reshape(kh * kw * cout, cin).T, backend)
    return _col2im(cols, (n, *out_hw, cout), kh, kw, strides, pads, (h, wd), backend)


@implements("claim4.propagation")
def im2col_transposed_backward(x2, w, grad, x_shape, strides, pads, needs_dx, backend):
    """(dx, dw) of a transposed convolution: the forward path of the convolution it is the
    adjoint of.

    Parameters
    ----------
    x2 : ndarray of shape (N*H*W, Cin)
        Its input, one row per pixel.
    w : ndarray of shape (kh, kw, Cout, Cin)
    grad : ndarray of shape (N, Ho, Wo, Cout), C-contiguous
        The gradient of its output.
    x_shape : (N, H, W, Cin)
    strides, pads : (int, int)
        As for im2col_transposed_conv.
    needs_dx : bool
        Whether to compute the input gradient (None otherwise).
    backend : {"cython", "numpy"}

    Returns
    -------
    (dx of shape x_shape or None, dw of shape w.shape)
    """
    kh, kw, cout, cin = w.shape
    n, h, wd, _ = x_shape
    gcols = _column_block(grad, kh, kw, strides, pads, (h, wd), 0, n * h, backend)
    dx = matmul(gcols, w.reshape(kh * kw * cout, cin), backend).reshape(x_shape) \
        if needs_dx else None
    dw = matmul(gcols.T, x2, backend).reshape(w.shape)
    return dx, dw
