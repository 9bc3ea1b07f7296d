"""MobileNetV2 (width 1.0) without its classifier (Keras
``applications.MobileNetV2(include_top=False)``).

Layer names, order and weight paths are Keras'; batch normalisation uses epsilon 1e-3.
Structure ([0138]-[0140], [0218]-[0229]): a 3x3/2 convolution, then 17 inverted-residual blocks
(1x1 expansion + BN + ReLU6, 3x3 depthwise + BN + ReLU6, 1x1 linear projection + BN, an identity
shortcut when shape allows), then ``Conv_1`` (1x1, 1280) + BN + ReLU6. The fusion network taps
five layers ([0169]); ``Conv_1`` and what follows ``block_16_project`` feed no tap.
"""
from __future__ import annotations

import numpy as np

from refseg.models.builder import Builder
from refseg.models.graph import INPUT, Graph
from refseg.cite import implements

#: MobileNetV2's batch-normalisation epsilon (Keras' default).
EPSILON = 1e-3

#: The five layers the fusion network taps ([0169], [0216]: b11 ... b15), deepest first.
TAPS = ("block_16_project", "block_13_expand_relu", "block_6_expand_relu",
        "block_3_expand_relu", "block_1_expand_relu")

#: Inverted-residual blocks: (output channels, stride, expansion), block_id 0 ... 16.
BLOCKS = ((16, 1, 1),
          (24, 2, 6), (24, 1, 6),
          (32, 2, 6), (32, 1, 6), (32, 1, 6),
          (64, 2, 6), (64, 1, 6), (64, 1, 6), (64, 1, 6),
          (96, 1, 6), (96, 1, 6), (96, 1, 6),
          (160, 2, 6), (160, 1, 6), (160, 1, 6),
          (320, 1, 6))

#: Padding before a stride-2 depthwise convolution on even-sized maps (Keras' ``correct_pad``:
#: one row and column after, so that the 3x3 stride-2 window is centred as TensorFlow's "same").
STRIDE2_PAD = ((0, 1), (0, 1))

_BLOCK = "[0138]-[0140], [0218]-[0229]"


def _inverted_residual(b: Builder, x: str, in_channels: int, filters: int, stride: int,
                       expansion: int, block_id: int) -> str:
    """One bottleneck (Keras' ``_inverted_res_block``); returns its output's name."""
    prefix = f"block_{block_id}_" if block_id else "expanded_conv_"
    y = x
    channels = in_channels
    if block_id:
        channels = expansion * in_channels
        y = b.conv(f"{prefix}expand", y, in_channels, channels, 1, padding="same",
                   use_bias=False)
        y = b.batch_norm(f"{prefix}expand_BN", y, channels, epsilon=EPSILON)
        relu = f"{prefix}expand_relu"
        y = b.relu(relu, y, max_value=6.0, keras_type="ReLU",
                   paragraphs=f"{_BLOCK}, [0169]" if relu in TAPS else None)
    if stride == 2:
        y = b.zero_pad(f"{prefix}pad", y, STRIDE2_PAD)
    y = b.depthwise(f"{prefix}depthwise", y, channels, strides=stride,
                    padding="same" if stride == 1 else "valid")
    y = b.batch_norm(f"{prefix}depthwise_BN", y, channels, epsilon=EPSILON)
    y = b.relu(f"{prefix}depthwise_relu", y, max_value=6.0, keras_type="ReLU")
    project = f"{prefix}project"
    y = b.conv(project, y, channels, filters, 1, padding="same", use_bias=False,
               paragraphs=f"{_BLOCK}, [0169]" if project in TAPS else None)
    y = b.batch_norm(f"{prefix}project_BN", y, filters, epsilon=EPSILON)
    if in_channels == filters and stride == 1:
        y = b.add(f"{prefix}add", x, y)
    return y


@implements("claim2.backbones")
def mobilenetv2_graph(*, seed: int = 0, dtype=np.float32) -> Graph:
    """The layer graph of MobileNetV2 (alpha 1.0, include_top=False), Keras names.

    Parameters
    ----------
    seed : int
        Seed of the initial weights (Glorot uniform kernels, BN identity).
    dtype : float32 or float64

    Returns
    -------
    Graph
        Reads ``INPUT`` (N, H, W, 3) scaled to [-1, 1]; H and W multiples of 32.

    References
    ----------
    [0138]-[0140], [0169], [0218]-[0229].
    """
    graph = Graph()
    b = Builder(graph, "mobilenetv2", seed=seed, dtype=dtype, paragraphs=_BLOCK)
    x = b.conv("Conv1", INPUT, 3, 32, 3, strides=2, padding="same", use_bias=False)
    x = b.batch_norm("bn_Conv1", x, 32, epsilon=EPSILON)
    x = b.relu("Conv1_relu", x, max_value=6.0, keras_type="ReLU")
    channels = 32
    for block_id, (filters, stride, expansion) in enumerate(BLOCKS):
        x = _inverted_residual(b, x, channels, filters, stride, expansion, block_id)
        channels = filters
    x = b.conv("Conv_1", x, channels, 1280, 1, use_bias=False)
    x = b.batch_norm("Conv_1_bn", x, 1280, epsilon=EPSILON)
    b.relu("out_relu", x, max_value=6.0, keras_type="ReLU")
    return graph
