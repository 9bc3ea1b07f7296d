"""The Res-Mobile Net decoder ([0144]-[0195]): transposed convolutions upsample the deepest tap
of each backbone step by step, 3x3 convolutions match channels, and Adds fuse the shallower taps
(the skip connections); the two branches meet at full resolution and a last transposed
convolution with softmax predicts the three classes.

The table of layers, ``DECODER``, lives in :mod:`refseg.models.parts`; this module builds it.
"""
from __future__ import annotations

import numpy as np

from refseg.models.builder import Builder
from refseg.models.graph import Graph
from refseg.models.parts import BRANCH_OUTPUT, BRANCHES, DECODER, DecoderLayer
from refseg.cite import implements


@implements("claim2.fusion", "claim3.formula")
def add_decoder(graph: Graph, *, branches=BRANCHES, seed: int = 0, dtype=np.float32) -> None:
    """Add the decoder's layers to ``graph``, which must already hold the ten taps.

    Parameters
    ----------
    graph : Graph
        The backbones' layers (the decoder's kernels take their channels from the taps).
    branches : tuple of str
        Both (the patent's network), or one of "resnet50v2", "mobilenetv2": that branch alone,
        its last layer feeding the prediction directly (the single-branch networks the patent
        compares against in fig. 9, [0259]-[0260]).
    seed : int
        Seed of the initial weights (Glorot uniform kernels, zero biases).
    dtype : float32 or float64

    References
    ----------
    [0144]-[0195], [0238]-[0240].
    """
    # channels do not depend on the image size: any multiple of 32 tells them
    channels = {name: shape[2] for name, shape in graph.shapes((32, 32, 3)).items()}
    b = Builder(graph, "decoder", seed=seed, dtype=dtype, paragraphs="")
    single = len(branches) == 1
    for layer in DECODER:
        if layer.branch not in (None, *branches) or (single and layer.name == "x23"):
            continue
        if single and layer.name == "prediction":
            layer = DecoderLayer(layer.name, layer.op, (BRANCH_OUTPUT[branches[0]],),
                                 layer.filters, layer.stride, layer.activation,
                                 layer.paragraph)
        if layer.op == "add":
            b.add(layer.name, *layer.sources, paragraphs=layer.paragraph)
            channels[layer.name] = channels[layer.sources[0]]
            continue
        source = layer.sources[0]
        if layer.op == "convT":
            b.conv_transpose(layer.name, source, channels[source], layer.filters, 3,
                             strides=layer.stride, padding="same", activation=layer.activation,
                             paragraphs=layer.paragraph)
        else:
            b.conv(layer.name, source, channels[source], layer.filters, 3, padding="same",
                   activation=layer.activation, paragraphs=layer.paragraph)
        channels[layer.name] = layer.filters
