"""Convolutions as im2col + one matrix product (route "im2col"), and their adjoints.

A convolution's output is the column matrix of its input (one row per output pixel, holding
the kh x kw x C window it reads: ``im2col``) times the kernel reshaped to (kh*kw*C, Cout),
a product on refseg's thread pool (``products.matmul``). The input gradient is col2im, the
adjoint of im2col, of the output gradient times the kernel's transpose. The column matrix is
never kept whole (it is kh*kw times the input): it is built a block of output rows at a time
(BLOCK_BYTES) into the shared workspace.

A transposed convolution is the adjoint of a convolution: its forward is the convolution's
input-gradient path and its backward the convolution's forward path. With few input pixels its
column matrix is computed kernel-first and scattered by col2im_transposed
(``conv_routes.transposed_columns``).

References: claims 2 and 4; [0146]-[0195] (Conv2D, Conv2DTranspose), [0129]-[0132] (backward).
"""
from __future__ import annotations

import numpy as np

from refseg.engine.training.conv_routes import transposed_columns
from refseg.autograd.elementwise import UNCLAMPED
from refseg.engine.training.products import matmul
from refseg.engine.training.workspace import workspace
from refseg.engine.training.backend import engine_kernels as kernels
from refseg.cite import implements

#: Bytes of the column-matrix block built at a time: small enough to stay in cache between
#: im2col and the matrix product, large enough for an efficient GEMM (smaller blocks split the
#: batch-1 14x14 layers into products of a few dozen rows, which run slower).
BLOCK_BYTES = 8 << 20


def _pointwise(kh, kw, strides, pads, in_hw, out_hw) -> bool:
    """A 1x1, stride-1, unpadded window: the column matrix is the input itself."""
    return kh == kw == 1 and strides == (1, 1) and pads == (0, 0) and tuple(in_hw) == tuple(out_hw)


def _row_blocks(total_rows, row_pixels, k, itemsize):
    """Ranges of output image rows (n*ho + i) whose column block fits in BLOCK_BYTES."""
    per_block = max(1, BLOCK_BYTES // max(1, row_pixels * k * itemsize))
    return [(start, min(start + per_block, total_rows))
            for start in range(0, total_rows, per_block)]


def _columns(x, kh, kw, strides, pads, out_hw, backend):
    """The whole column matrix (N*Ho*Wo, kh*kw*C) of x, in the workspace (x itself when
    pointwise)."""
    n, _, _, c = x.shape
    ho, wo = out_hw
    if _pointwise(kh, kw, strides, pads, x.shape[1:3], out_hw):
        return np.ascontiguousarray(x).reshape(n * ho * wo, c)
    cols = workspace(n * ho * wo * kh * kw * c, x.dtype).reshape(n * ho * wo, kh * kw * c)
    kernels(backend).im2col(np.ascontiguousarray(x), kh, kw, *strides, *pads, ho, wo, 0, cols)
    return cols


def _col2im(cols, x_shape, kh, kw, strides, pads, out_hw, backend):
    """The array of shape x_shape whose column matrix, summed where windows overlap, is
    cols: the adjoint of im2col."""
    ho, wo = out_hw
    if _pointwise(kh, kw, strides, pads, x_shape[1:3], out_hw):
        return cols.reshape(x_shape)
    out = np.empty(x_shape, dtype=cols.dtype)
    kernels(backend).col2im(np.ascontiguousarray(cols), kh, kw, *strides, *pads, ho, wo, out)
    return out


@implements("claim2.fusion", "claim4.propagation")
def im2col_conv(x, w2, kh, kw, strides, pads, out_hw, backend, scale=None, shift=None,
                bounds=UNCLAMPED) -> np.ndarray:
    """Convolution of x by im2col + GEMM, one block of output rows at a time.

    Parameters
    ----------
    x : ndarray of shape (N, H, W, C)
    w2 : ndarray of shape (kh*kw*C, Cout)
        The kernel, rows in (kh, kw, C) order.
    kh, kw : int
    strides, pads : (int, int)
        Strides, and rows and columns of zeros before the input.
    out_hw : (int, int)
    backend : {"cython", "numpy"}
    scale, shift : ndarray of shape (Cout,), optional
        Each product tile then becomes tile * scale + shift (a batch norm) or tile + shift (a
        bias), as ``matmul`` applies them.
    bounds : (float, float)
        The result clamped to [low, high] (a ReLU); UNCLAMPED: not clamped.

    Returns
    -------
    ndarray of shape (N*Ho*Wo, Cout), a new array.
    """
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
        cols = workspace(rows * k, x.dtype).reshape(rows, k)
        kernels(backend).im2col(x, kh, kw, *strides, *pads, ho, wo, start, cols)
        matmul(cols, w2, out[start * wo:stop * wo], **tail)
    return out


@implements("claim4.propagation")
def im2col_weight_grad(x, g2, kh, kw, strides, pads, out_hw, backend) -> np.ndarray:
    """Kernel gradient of a convolution of x: the sum over blocks of cols_block^T @ g2_block.

    Parameters
    ----------
    x : ndarray of shape (N, H, W, C)
        The convolution's input.
    g2 : ndarray of shape (N*Ho*Wo, Cout)
        The gradient of its output.
    kh, kw, strides, pads, out_hw, backend
        As for im2col_conv.

    Returns
    -------
    ndarray of shape (kh*kw*C, Cout), a new array.
    """
    n, _, _, c = x.shape
    ho, wo = out_hw
    if _pointwise(kh, kw, strides, pads, x.shape[1:3], out_hw):
        return matmul(np.ascontiguousarray(x).reshape(n * ho * wo, c).T, g2, backend=backend)
    x = np.ascontiguousarray(x)
    k = kh * kw * c
    dw = np.empty((k, g2.shape[1]), dtype=x.dtype)
    for start, stop in _row_blocks(n * ho, wo, k, x.dtype.itemsize):
        rows = (stop - start) * wo
        cols = workspace(rows * k, x.dtype).reshape(rows, k)
        kernels(backend).im2col(x, kh, kw, *strides, *pads, ho, wo, start, cols)
        matmul(cols.T, g2[start * wo:stop * wo], dw, accumulate=start > 0, backend=backend)
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
    cols = matmul(g2, w2.T, backend=backend)
    return _col2im(cols, x_shape, kh, kw, strides, pads, out_hw, backend)


@implements("claim2.fusion", "claim4.propagation")
def im2col_transposed_conv(x, w, strides, pads, out_hw, backend) -> np.ndarray:
    """Transposed convolution of x (no bias): the input gradient of the convolution it is the
    adjoint of.

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

    Notes
    -----
    Up to ``TRANSPOSED_COLUMNS_MAX_ROWS`` input pixels the column matrix is computed
    kernel-first, w2 @ x2^T (one column per input pixel), and scattered by
    col2im_transposed; above it input-first, x2 @ w2^T, and scattered by col2im. For a
    pointwise window the column matrix is the output itself, and is computed outside the
    workspace, which the next convolution overwrites.
    """
    n, h, wd, cin = x.shape
    kh, kw, cout, _ = w.shape
    x2, w2 = x.reshape(n * h * wd, cin), w.reshape(kh * kw * cout, cin)
    rows, columns = n * h * wd, kh * kw * cout
    if _pointwise(kh, kw, strides, pads, (h, wd), out_hw):
        return matmul(x2, w2.T, backend=backend).reshape(n, *out_hw, cout)
    scratch = workspace(rows * columns, x.dtype)
    if transposed_columns(rows) == "kernel-first":
        cols_t = matmul(w2, x2.T, scratch.reshape(columns, rows), backend=backend)
        out = np.empty((n, *out_hw, cout), dtype=x.dtype)
        kernels(backend).col2im_transposed(cols_t, kh, kw, *strides, *pads, h, wd, out)
        return out
    cols = matmul(x2, w2.T, scratch.reshape(rows, columns), backend=backend)
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
    grad : ndarray of shape (N, Ho, Wo, Cout)
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
    gcols = _columns(grad, kh, kw, strides, pads, x_shape[1:3], backend)
    w2 = w.reshape(kh * kw * cout, cin)
    dx = matmul(gcols, w2, backend=backend).reshape(x_shape) if needs_dx else None
    dw = matmul(gcols.T, x2, backend=backend).reshape(w.shape)
    return dx, dw
