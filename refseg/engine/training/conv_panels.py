"""Transposed convolutions of training on the inference engine's kernels (route "panels").

A transposed convolution with stride s is s*s ordinary convolutions, one per parity of the
output pixel, each over the kernel taps that reach that parity
(``refseg.engine.packing.transpose_phases``). The inference engine computes each as an
indirect convolution on weights packed in panels of 16 output channels, with the bias and the
ReLU applied as each output tile is written (``engine_conv`` in ``engine/engine_kernels.c``).
Training's weights change at every step, so they are packed at every call: a copy of the
kernel, small beside the products on the maps where ``conv_routes.transposed_route`` sends
this route. Each output is one float32 sum in a fixed order whatever the thread count.

References: claims 2 and 4; [0146]-[0192] (the decoder's transposed convolutions).
"""
from __future__ import annotations

import numpy as np

from refseg.cite import implements
from refseg.engine.packing import padded_bias, transpose_phases
from refseg.engine.runtime import ORDERS, backend_name, thread_count


@implements("claim2.fusion")
def panels_transposed_conv(x, w, bias, strides, crop, out_hw, bounds) -> np.ndarray:
    """Conv2DTranspose of x, + bias, clamped to ``bounds``, on the engine's panel kernels.

    Parameters
    ----------
    x : ndarray of shape (N, H, W, Cin), float32, C-contiguous
    w : ndarray of shape (kh, kw, Cout, Cin), float32
    bias : ndarray of shape (Cout,) or None
    strides : (int, int)
        Equal strides (the engine's parity phases take one stride for both axes).
    crop : (int, int)
        The crop before of the full transposed convolution (``geometry.transpose_output``).
    out_hw : (int, int)
    bounds : (float, float)
        The ReLU's clamp, or (-inf, inf).

    Returns
    -------
    ndarray of shape (N, Ho, Wo, Cout), float32, a new array.
    """
    from refseg import _kernels

    n = x.shape[0]
    cout = w.shape[2]
    phases = transpose_phases(np.asarray(w, np.float32), x.shape[1:3], strides[0], crop,
                              out_hw)
    b = padded_bias(np.zeros(cout, np.float32) if bias is None else
                    np.asarray(bias, np.float32))
    y = np.empty((n, *out_hw, cout), np.float32)
    flat_x, flat_y = x.reshape(-1), y.reshape(-1)
    x_image, y_image = x[0].size, y[0].size
    code = {"avx512": 2, "avx2": 1}.get(backend_name(), 0)
    threads = thread_count()
    for phase in phases:
        _kernels.engine_conv(flat_x, x_image, phase.in_off, phase.pixels, phase.taps, phase.cin,
                             phase.packed, b, cout, flat_y, y_image, phase.out_off, None,
                             y_image, None, bounds[0], bounds[1], n, code, threads,
                             ORDERS.index("pixels-outer"))
    return y
