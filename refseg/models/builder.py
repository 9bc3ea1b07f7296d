"""Shorthand for adding Keras-named layers to a :class:`~refseg.models.graph.Graph`.

Every layer draws its initial weights from its own generator, seeded by the model seed and the
layer's name: a layer's weights do not depend on which other layers exist or in which order they
were built (the decoder's weights are the same whether or not the backbones are built with it).
"""
from __future__ import annotations

import zlib

import numpy as np

from refseg.autograd import layers
from refseg.models.graph import Graph
from refseg.cite import infrastructure


@infrastructure("deterministic per-layer seeds")
def layer_seed(seed: int, name: str) -> list[int]:
    """The seed of layer ``name``'s initialiser in a model seeded with ``seed``."""
    return [int(seed), zlib.crc32(name.encode())]


class Builder:
    """Adds layers of one part of a network, all with the same seed, dtype and paragraphs."""

    def __init__(self, graph: Graph, part: str, *, seed: int, dtype, paragraphs: str):
        self.graph, self.part, self.seed = graph, part, seed
        self.dtype = np.dtype(dtype)
        self.paragraphs = paragraphs

    def _add(self, layer, *inputs, paragraphs=None):
        return self.graph.add(layer, *inputs, part=self.part,
                              paragraphs=paragraphs or self.paragraphs)

    def conv(self, name, source, in_channels, filters, kernel, *, strides=1, padding="valid",
             use_bias=True, activation=None, paragraphs=None):
        layer = layers.Conv2D(name, in_channels, filters, kernel, strides=strides, padding=padding,
                          use_bias=use_bias, activation=activation,
                          seed=layer_seed(self.seed, name), dtype=self.dtype)
        return self._add(layer, source, paragraphs=paragraphs)

    def conv_transpose(self, name, source, in_channels, filters, kernel, *, strides,
                       padding="same", activation=None, paragraphs=None):
        layer = layers.Conv2DTranspose(name, in_channels, filters, kernel, strides=strides,
                                   padding=padding, activation=activation,
                                   seed=layer_seed(self.seed, name), dtype=self.dtype)
        return self._add(layer, source, paragraphs=paragraphs)

    def depthwise(self, name, source, channels, *, strides, padding, paragraphs=None):
        layer = layers.DepthwiseConv2D(name, channels, 3, strides=strides, padding=padding,
                                   use_bias=False, seed=layer_seed(self.seed, name),
                                   dtype=self.dtype)
        return self._add(layer, source, paragraphs=paragraphs)

    def batch_norm(self, name, source, channels, *, epsilon, paragraphs=None):
        layer = layers.BatchNormalization(name, channels, epsilon=epsilon, dtype=self.dtype)
        return self._add(layer, source, paragraphs=paragraphs)

    def relu(self, name, source, *, max_value=None, keras_type="Activation", paragraphs=None):
        return self._add(layers.ReLU(name, max_value, keras_type), source, paragraphs=paragraphs)

    def zero_pad(self, name, source, padding, paragraphs=None):
        return self._add(layers.ZeroPadding2D(name, padding), source, paragraphs=paragraphs)

    def max_pool(self, name, source, pool_size, strides, paragraphs=None):
        return self._add(layers.MaxPooling2D(name, pool_size, strides), source,
                         paragraphs=paragraphs)

    def add(self, name, a, b, paragraphs=None):
        return self._add(layers.Add(name), a, b, paragraphs=paragraphs)
