"""Layers with named parameters (Keras weight paths) and a trainable switch.

A layer owns Tensors named ``<layer>/kernel``, ``<layer>/bias``, ``<layer>/gamma``, ... exactly as
Keras 3 names its variables, so that a weight file written from Keras loads by name. Setting
``trainable = False`` freezes a layer: its parameters get no gradient and batch normalisation
runs on its moving statistics ([0143], [0230], [0241]: the backbones are frozen).
"""
from __future__ import annotations

import numpy as np

from refseg import autograd as ag
from refseg.autograd.tensor import Tensor
from refseg.errors import InputError
from refseg.trace import implements


@implements("claim4.propagation")
def glorot_uniform(shape, rng: np.random.Generator, dtype=np.float32) -> np.ndarray:
    """Keras' default kernel initialiser: U(-l, l), l = sqrt(6 / (fan_in + fan_out)), with
    fan_in = receptive field x shape[-2] and fan_out = receptive field x shape[-1].

    Parameters
    ----------
    shape : tuple of int
        Kernel shape, (kh, kw, a, b) or (a, b).
    rng : numpy.random.Generator
    dtype : float32 or float64

    Returns
    -------
    ndarray of ``shape``
    """
    receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=shape).astype(dtype)


@implements("claim4.propagation")
class Layer:
    """Base of the layers: named parameters, non-trainable state, the trainable switch."""

    def __init__(self, name: str):
        if not name or "/" in name:
            raise InputError(f"layer name must be non-empty without '/', got {name!r}")
        self.name = name
        self.params: dict[str, Tensor] = {}   # trainable weights, by short name
        self.state: dict[str, np.ndarray] = {}  # non-trainable arrays (moving statistics)
        self._trainable = True

    def _add(self, short: str, value: np.ndarray) -> Tensor:
        tensor = Tensor(value, requires_grad=self._trainable, name=f"{self.name}/{short}")
        self.params[short] = tensor
        return tensor

    @property
    def trainable(self) -> bool:
        return self._trainable

    @trainable.setter
    def trainable(self, value: bool):
        self._trainable = bool(value)
        for p in self.params.values():
            p.requires_grad = self._trainable
            if not self._trainable:
                p.grad = None

    def weights(self) -> dict[str, np.ndarray]:
        """Every weight and state array by Keras path (``<layer>/<name>``)."""
        out = {p.name: p.data for p in self.params.values()}
        out.update({f"{self.name}/{k}": v for k, v in self.state.items()})
        return out

    def __call__(self, x):
        return self.forward(x)


class _ConvLayer(Layer):
    def __init__(self, name, kernel_shape, *, strides=1, padding="same", use_bias=True,
                 activation=None, seed=0, dtype=np.float32, bias_size=None):
        super().__init__(name)
        self.strides, self.padding, self.activation = strides, padding, activation
        rng = np.random.default_rng(seed)
        self.kernel = self._add("kernel", glorot_uniform(kernel_shape, rng, dtype))
        self.bias = self._add("bias", np.zeros(bias_size, dtype)) if use_bias else None

    def _activate(self, y):
        if self.activation is None:
            return y
        return {"relu": ag.relu, "relu6": ag.relu6, "softmax": ag.softmax}[self.activation](y)


@implements("claim2.fusion", "claim4.propagation")
class Conv2D(_ConvLayer):
    """Keras Conv2D: kernel (kh, kw, in, filters), bias (filters,)."""

    def __init__(self, name, in_channels, filters, kernel_size=3, **kwargs):
        k = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        super().__init__(name, (*k, in_channels, filters), bias_size=filters, **kwargs)

    def forward(self, x):
        return self._activate(ag.conv2d(x, self.kernel, self.bias, strides=self.strides,
                                        padding=self.padding))


@implements("claim2.fusion", "claim4.propagation")
class Conv2DTranspose(_ConvLayer):
    """Keras Conv2DTranspose: kernel (kh, kw, filters, in), bias (filters,)."""

    def __init__(self, name, in_channels, filters, kernel_size=3, **kwargs):
        k = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        super().__init__(name, (*k, filters, in_channels), bias_size=filters, **kwargs)

    def forward(self, x):
        return self._activate(ag.conv2d_transpose(x, self.kernel, self.bias,
                                                  strides=self.strides, padding=self.padding))


@implements("claim2.backbones", "claim4.propagation")
class DepthwiseConv2D(_ConvLayer):
    """Keras DepthwiseConv2D, depth multiplier 1: kernel (kh, kw, C, 1)."""

    def __init__(self, name, channels, kernel_size=3, use_bias=False, **kwargs):
        k = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        super().__init__(name, (*k, channels, 1), use_bias=use_bias, bias_size=channels,
                         **kwargs)
        self.params["depthwise_kernel"] = self.params.pop("kernel")
        self.kernel.name = f"{name}/depthwise_kernel"

    def forward(self, x):
        return self._activate(ag.depthwise_conv2d(x, self.kernel, self.bias,
                                                  strides=self.strides, padding=self.padding))


@implements("claim2.backbones", "claim4.propagation")
class BatchNormalization(Layer):
    """Keras BatchNormalization over channels: gamma, beta (trainable), moving_mean,
    moving_variance (state). Runs on batch statistics only when trainable and training."""

    def __init__(self, name, channels, *, epsilon=1e-3, momentum=0.99, dtype=np.float32):
        super().__init__(name)
        self.epsilon, self.momentum = epsilon, momentum
        self.gamma = self._add("gamma", np.ones(channels, dtype))
        self.beta = self._add("beta", np.zeros(channels, dtype))
        self.state["moving_mean"] = np.zeros(channels, dtype)
        self.state["moving_variance"] = np.ones(channels, dtype)
        self.training = False

    def forward(self, x):
        return ag.batch_norm(x, self.gamma, self.beta, self.state["moving_mean"],
                             self.state["moving_variance"],
                             training=self.training and self.trainable, epsilon=self.epsilon,
                             momentum=self.momentum)
