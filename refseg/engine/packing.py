"""Weights packed once into the engine's layout, batch norms folded into them, and the tables
of input offsets of the indirect convolutions.

The layout of a packed kernel and Winograd's transform of it: :mod:`refseg.engine.panels`.
"""
from __future__ import annotations

import numpy as np

from refseg.engine.panels import PANEL, pack_panels
from refseg.engine.runtime import DOT_MAX, Phase

INFRASTRUCTURE = "the engine's folded weights and offset tables"


def folded(kernel: np.ndarray, bias, scale, shift, axis: int = -1):
    """The kernel and bias of a convolution followed by the affine map ``y * scale + shift``
    (an inference batch norm): ``kernel * scale`` along the output ``axis`` and
    ``bias * scale + shift``, computed in float64 and rounded once to float32.

    Parameters
    ----------
    kernel : ndarray, output channels along ``axis``
    bias : ndarray of shape (C,) or None (zeros)
    scale, shift : ndarray of shape (C,) or None (no batch norm: 1 and 0)
    axis : int

    Returns
    -------
    (kernel float32 of kernel's shape, bias float32 (C,))
    """
    channels = kernel.shape[axis]
    k64 = np.asarray(kernel, np.float64)
    b64 = np.zeros(channels) if bias is None else np.asarray(bias, np.float64)
    if scale is not None:
        shape = [1] * kernel.ndim
        shape[axis] = channels
        k64 = k64 * np.asarray(scale, np.float64).reshape(shape)
        b64 = b64 * np.asarray(scale, np.float64) + np.asarray(shift, np.float64)
    return k64.astype(np.float32), b64.astype(np.float32)


def batch_norm_affine(layer) -> tuple[np.ndarray, np.ndarray]:
    """(scale, shift) float64 (C,) of a batch norm layer on its moving statistics:
    ``gamma / sqrt(variance + epsilon)`` and ``beta - mean * scale``."""
    gamma = np.asarray(layer.gamma.data, np.float64)
    scale = gamma / np.sqrt(np.asarray(layer.state["moving_variance"], np.float64)
                            + layer.epsilon)
    shift = np.asarray(layer.beta.data, np.float64) - \
        np.asarray(layer.state["moving_mean"], np.float64) * scale
    return scale, shift


def dot_weights(taps_kernel: np.ndarray) -> np.ndarray | None:
    """Weights (taps, cin, cout) as the dot-product kernel reads them, (taps, cout, cin) flat
    float32; None for more than DOT_MAX output channels."""
    if taps_kernel.shape[2] > DOT_MAX:
        return None
    return np.ascontiguousarray(taps_kernel.transpose(0, 2, 1), np.float32).reshape(-1)


def padded_bias(bias: np.ndarray) -> np.ndarray:
    """The bias (C,) padded with zeros to whole panels, float32."""
    out = np.zeros(-(-bias.size // PANEL) * PANEL, np.float32)
    out[:bias.size] = bias
    return out


def conv_offsets(in_hw, cin: int, kernel_hw, stride: int, pads, out_hw) -> np.ndarray | None:
    """Input offsets of a convolution: (Ho * Wo, kh * kw) int32, the offset in floats from the
    image's start of the channels that output pixel (i, j) reads at tap (a, b), at row
    ``i * stride - pad_top + a`` and column ``j * stride - pad_left + b``, or -1 outside the
    input (zero padding). None for a 1x1 stride-1 convolution without padding (pixel p reads
    p * cin)."""
    (h, w), (kh, kw), (pt, pl), (ho, wo) = in_hw, kernel_hw, pads, out_hw
    if (kh, kw, stride, pt, pl) == (1, 1, 1, 0, 0) and (h, w) == (ho, wo):
        return None
    rows = np.arange(ho)[:, None] * stride - pt + np.arange(kh)[None, :]      # (ho, kh)
    cols = np.arange(wo)[:, None] * stride - pl + np.arange(kw)[None, :]      # (wo, kw)
    inside = ((rows >= 0) & (rows < h))[:, None, :, None] & \
        ((cols >= 0) & (cols < w))[None, :, None, :]
    offsets = (rows[:, None, :, None] * w + cols[None, :, None, :]) * cin
    return np.where(inside, offsets, -1).reshape(ho * wo, kh * kw).astype(np.int32)


def conv_phases(kernel: np.ndarray, in_hw, stride: int, pads, out_hw) -> list[Phase]:
    """The one phase of a convolution with ``kernel`` (kh, kw, cin, cout) float32."""
    kh, kw, cin, cout = kernel.shape
    offsets = conv_offsets(in_hw, cin, (kh, kw), stride, pads, out_hw)
    taps_kernel = kernel.reshape(kh * kw, cin, cout)
    return [Phase(out_hw[0] * out_hw[1], kh * kw, cin, pack_panels(taps_kernel), offsets,
                  dot=dot_weights(taps_kernel))]


def transpose_phases(kernel: np.ndarray, in_hw, stride: int, crop, out_hw) -> list[Phase]:
    """A transposed convolution as ``stride**2`` convolutions, one per parity of the output
    pixel: output row ``o`` sums input rows ``i = (o + crop - a) / stride`` over the kernel
    rows ``a`` for which that is a whole number inside the input (columns likewise).

    Parameters
    ----------
    kernel : ndarray of shape (kh, kw, cout, cin), float32 (Keras' Conv2DTranspose layout)
    in_hw, out_hw : (int, int)
    stride : int
    crop : (int, int)
        The crop before of the full transposed convolution (``geometry.transpose_output``).

    Returns
    -------
    list of Phase, whose output offsets cover every output pixel once.
    """
    kh, kw, cout, cin = kernel.shape
    (h, w), (ho, wo) = in_hw, out_hw
    phases = []
    for py in range(min(stride, ho)):
        for px in range(min(stride, wo)):
            ys, xs = np.arange(py, ho, stride), np.arange(px, wo, stride)
            taps_a = [a for a in range(kh) if (py + crop[0] - a) % stride == 0]
            taps_b = [b for b in range(kw) if (px + crop[1] - b) % stride == 0]
            taps = [(a, b) for a in taps_a for b in taps_b]
            if not taps:  # kernel smaller than the stride: these outputs are the bias alone
                weights = np.zeros((1, cin, cout), np.float32)
                in_off = np.full((ys.size * xs.size, 1), -1, np.int32)
            else:
                weights = np.stack([kernel[a, b].T for a, b in taps])     # (taps, cin, cout)
                rows = (ys[:, None] + crop[0] - np.array(taps_a)[None, :]) // stride
                cols = (xs[:, None] + crop[1] - np.array(taps_b)[None, :]) // stride
                inside = ((rows >= 0) & (rows < h))[:, None, :, None] & \
                    ((cols >= 0) & (cols < w))[None, :, None, :]
                offsets = (rows[:, None, :, None] * w + cols[None, :, None, :]) * cin
                in_off = np.where(inside, offsets, -1).reshape(ys.size * xs.size, len(taps))
            out_off = ((ys[:, None] * wo + xs[None, :]) * cout).reshape(-1)
            weights = np.ascontiguousarray(weights)
            phases.append(Phase(ys.size * xs.size, weights.shape[0], cin, pack_panels(weights),
                                np.ascontiguousarray(in_off, np.int32),
                                out_off.astype(np.int32), dot=dot_weights(weights)))
    return phases
