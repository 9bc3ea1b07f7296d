"""Transposed convolutions of training on the inference engine's kernels (route "panels").

A transposed convolution with stride s is s*s ordinary convolutions, one per parity of the
output pixel, each over the kernel taps that reach that parity
(``refseg.engine.packing.transpose_phases``). The inference engine computes each as an
indirect convolution on weights packed in panels of 16 output channels, with the bias and the
ReLU applied as each output tile is written: here one ``runtime.ConvStep`` made for the call
(``engine_conv`` in ``engine/engine_kernels.c``).
Training's weights change at every step, so they are packed at every call: a copy of the
kernel, small beside the products on the maps where ``conv_routes.transposed_route`` sends
this route. Each output is one float32 sum in a fixed order whatever the thread count.

References: claims 2 and 4; [0146]-[0192] (the decoder's transposed convolutions).
"""
from __future__ import annotations

import numpy as np

from refseg.cite import implements
from refseg.engine.packing import padded_bias, transpose_phases
from refseg.engine.runtime import ConvStep


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
    cout = w.shape[2]
    step = ConvStep(name="output", source="input", layers=(), out_shape=(*out_hw, cout),
                    phases=transpose_phases(np.asarray(w, np.float32), x.shape[1:3],
                                            strides[0], crop, out_hw),
                    bias=padded_bias(np.zeros(cout, np.float32) if bias is None else
                                     np.asarray(bias, np.float32)),
                    lo=bounds[0], hi=bounds[1], kind="transposed")
    return step.run({"input": x})
