"""ResNet50V2 without its classifier (Keras ``applications.ResNet50V2(include_top=False)``).

The patent names its taps ``post_relu``, ``conv4_block6_1_relu``, ... ([0145]); ``post_relu``
exists only in the pre-activation (V2) network, which is why this is ResNet50V2 (R-backbones).
Layer names, layer order and weight paths are Keras'; batch normalisation uses epsilon 1.001e-5.

Structure ([0134]-[0137], [0232]-[0236]): a 7x7/2 convolution and a 3x3/2 max pool, then four
stages of pre-activation bottleneck blocks (3, 4, 6, 3 blocks of 64, 128, 256, 512 filters); the
first block of a stage has a 1x1 convolution shortcut, the others the identity; the stride-2
downsampling sits in the last block of stages 2-4 (3x3 convolution stride 2, shortcut a 1x1 max
pool stride 2). A final batch norm and ReLU give ``post_relu``.
"""
from __future__ import annotations

import numpy as np

from refseg.models.builder import Builder
from refseg.models.graph import INPUT, Graph
from refseg.cite import implements

#: ResNet50V2's batch-normalisation epsilon (Keras).
EPSILON = 1.001e-5

#: The five layers the fusion network taps ([0145], [0216]: b1 ... b5), deepest first.
TAPS = ("post_relu", "conv4_block6_1_relu", "conv3_block4_1_relu", "conv2_block3_1_relu",
        "conv1_conv")

#: (stage name, filters, blocks, stride of the last block).
STAGES = (("conv2", 64, 3, 2), ("conv3", 128, 4, 2), ("conv4", 256, 6, 2), ("conv5", 512, 3, 1))

_STEM = "[0137]"
_BLOCK = "[0134]-[0135], [0232]-[0236]"


def _block(b: Builder, x: str, in_channels: int, filters: int, name: str, *, stride: int,
           conv_shortcut: bool, pool_index: int) -> str:
    """One pre-activation bottleneck block (Keras' ``block2``); returns its output's name."""
    preact = b.batch_norm(f"{name}_preact_bn", x, in_channels, epsilon=EPSILON)
    preact = b.relu(f"{name}_preact_relu", preact)
    y = b.conv(f"{name}_1_conv", preact, in_channels, filters, 1, use_bias=False)
    y = b.batch_norm(f"{name}_1_bn", y, filters, epsilon=EPSILON)
    tap = f"{name}_1_relu"
    y = b.relu(tap, y, paragraphs=f"{_BLOCK}, [0145]" if tap in TAPS else None)
    y = b.zero_pad(f"{name}_2_pad", y, ((1, 1), (1, 1)))
    y = b.conv(f"{name}_2_conv", y, filters, filters, 3, strides=stride, use_bias=False)
    y = b.batch_norm(f"{name}_2_bn", y, filters, epsilon=EPSILON)
    y = b.relu(f"{name}_2_relu", y)
    # the shortcut is added here, not first, so that the layer order is Keras' own
    if conv_shortcut:
        shortcut = b.conv(f"{name}_0_conv", preact, in_channels, 4 * filters, 1, strides=stride)
    elif stride > 1:
        suffix = f"_{pool_index}" if pool_index else ""
        shortcut = b.max_pool(f"max_pooling2d{suffix}", x, 1, stride)
    else:
        shortcut = x
    y = b.conv(f"{name}_3_conv", y, filters, 4 * filters, 1)
    return b.add(f"{name}_out", shortcut, y)


@implements("claim2.backbones")
def resnet50v2_graph(*, seed: int = 0, dtype=np.float32) -> Graph:
    """The layer graph of ResNet50V2 (include_top=False), Keras names, seeded initial weights.

    Parameters
    ----------
    seed : int
        Seed of the initial weights (Glorot uniform kernels, zero biases, BN identity).
    dtype : float32 or float64

    Returns
    -------
    Graph
        Reads ``INPUT`` (N, H, W, 3) scaled to [-1, 1]; H and W multiples of 32.

    References
    ----------
    [0133]-[0137], [0145], [0232]-[0236].
    """
    graph = Graph()
    b = Builder(graph, "resnet50v2", seed=seed, dtype=dtype, paragraphs=_BLOCK)
    x = b.zero_pad("conv1_pad", INPUT, ((3, 3), (3, 3)), paragraphs=_STEM)
    x = b.conv("conv1_conv", x, 3, 64, 7, strides=2, paragraphs=f"{_STEM}, [0145]")
    x = b.zero_pad("pool1_pad", x, ((1, 1), (1, 1)), paragraphs=_STEM)
    x = b.max_pool("pool1_pool", x, 3, 2, paragraphs=_STEM)
    channels, pools = 64, 0
    for stage, filters, blocks, last_stride in STAGES:
        for index in range(1, blocks + 1):
            stride = last_stride if index == blocks else 1
            x = _block(b, x, channels, filters, f"{stage}_block{index}", stride=stride,
                       conv_shortcut=index == 1, pool_index=pools)
            pools += stride > 1 and index > 1
            channels = 4 * filters
    x = b.batch_norm("post_bn", x, channels, epsilon=EPSILON, paragraphs="[0137], [0145]")
    b.relu("post_relu", x, paragraphs="[0145]")
    return graph
