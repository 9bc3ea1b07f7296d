"""The reference route's matrix product: each element one sum in a fixed order.

Every product of the reference convolutions (im2col times kernel, the kernel and input
gradients, the bias gradient as a row of ones times the output gradient) is ``matmul``: the
compiled ``matmul_ordered`` (``autograd/_matmul.pxi``) or its twin, which sum each element over
k in the order 0, 1, ..., K - 1 and round each product and each sum. Its bits therefore depend
neither on the thread count nor on the CPU's vector width, where a BLAS's depend on both (its
kernels are chosen per CPU, and it cuts the sums differently for different shapes and
threads). The price is speed: the training engine (``refseg.engine.training``) computes the
same products on BLAS.
"""
from __future__ import annotations

import numpy as np

from refseg.backend import kernels
from refseg.cite import implements
from refseg.errors import InputError

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


@implements("claim2.fusion", "claim4.propagation")
def matmul(a, b, backend="cython") -> np.ndarray:
    """a @ b, each element summed over k in order from 0.

    Parameters
    ----------
    a : ndarray of shape (M, K), float32 or float64
        Any strides (a transposed view is read in place).
    b : ndarray of shape (K, N), a's dtype
    backend : {"cython", "numpy"}
        The compiled loop or its twin: bit-identical.

    Returns
    -------
    ndarray of shape (M, N), a new C-contiguous array of a's dtype.

    Notes
    -----
    out[i, j] = (...((0 + a[i, 0] b[0, j]) + a[i, 1] b[1, j]) + ...) + a[i, K-1] b[K-1, j],
    every product and every sum rounded to the dtype.
    """
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise InputError(f"matmul: shapes {a.shape} and {b.shape} do not fit")
    if not (a.dtype == b.dtype and a.dtype in _FLOATS):
        raise InputError(f"matmul: needs two float32 or two float64 arrays, got {a.dtype} and "
                         f"{b.dtype}")
    out = np.empty((a.shape[0], b.shape[1]), dtype=a.dtype)
    kernels(backend).matmul_ordered(a, np.ascontiguousarray(b), out)
    return out
