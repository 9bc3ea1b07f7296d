"""Layers with named parameters (Keras weight paths) and a trainable switch.

A layer owns Tensors named ``<layer>/kernel``, ``<layer>/bias``, ``<layer>/gamma``, ... exactly as
Keras 3 names its variables, so that a weight file written from Keras loads by name. Setting
``trainable = False`` freezes a layer: its parameters get no gradient and batch normalisation
runs on its moving statistics ([0143], [0230], [0241]: the backbones are frozen).
"""
from __future__ import annotations

import numpy as np

from refseg import autograd as ag
from refseg.autograd.geometry import conv_output, transpose_output
from refseg.autograd.tensor import Tensor
from refseg.errors import InputError
from refseg.cite import implements


#: Values drawn at a time by ``glorot_uniform`` (8 MiB of float64).
GLOROT_BLOCK = 1 << 20


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
    out = np.empty(shape, dtype=dtype)
    flat = out.reshape(-1)
    # drawn in blocks: each value takes the next double of the stream, so the values are those of
    # one draw of the whole shape, without a float64 array of the whole shape to page in
    for start in range(0, flat.size, GLOROT_BLOCK):
        block = flat[start:start + GLOROT_BLOCK]
        block[...] = rng.uniform(-limit, limit, size=block.size)
    return out


@implements("claim4.propagation")
class Layer:
    """Base of the layers: named parameters, non-trainable state, the trainable switch.

    ``keras_type`` is the Keras class the layer mirrors; ``output_shape`` and ``macs`` describe
    it for per-image shapes (H, W, C) without running it (model summaries).
    """

    keras_type = "Layer"
    #: Whether ``forward`` takes ``reusable`` (one flag per input): the layer may then write its
    #: result over an input's array that the caller (the graph) knows nothing else reads.
    reuses_input = False

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

    def parameter_count(self) -> int:
        return sum(p.data.size for p in self.params.values()) + sum(
            v.size for v in self.state.values())

    def output_shape(self, *shapes):
        return shapes[0]

    def macs(self, *shapes) -> int:
        """Multiply-accumulates per image (convolutions only; 0 for the other layers)."""
        return 0

    def __call__(self, *inputs, reusable=()):
        if self.reuses_input and any(reusable):
            return self.forward(*inputs, reusable=tuple(reusable))
        return self.forward(*inputs)


class _ConvLayer(Layer):
    def __init__(self, name, kernel_shape, *, strides=1, padding="same", use_bias=True,
                 activation=None, seed=0, dtype=np.float32, bias_size=None):
        super().__init__(name)
        self.strides = (strides, strides) if isinstance(strides, int) else tuple(strides)
        self.padding, self.activation = padding, activation
        rng = np.random.default_rng(seed)
        self.kernel = self._add("kernel", glorot_uniform(kernel_shape, rng, dtype))
        self.bias = self._add("bias", np.zeros(bias_size, dtype)) if use_bias else None

    def _activate(self, y):
        if self.activation is None:
            return y
        if self.activation == "softmax":
            return ag.softmax(y)
        # y is the convolution's own fresh output, read by nothing else
        activation = ag.relu if self.activation == "relu" else ag.relu6
        return activation(y, reuse_input=True)

    def _convolved(self, op, x):
        """op (conv2d or conv2d_transpose) of x, a ReLU activation computed by the op itself,
        with the bias (the same values as a ReLU op after it, one pass less)."""
        relu = self.activation in ("relu", "relu6")
        y = op(x, self.kernel, self.bias, strides=self.strides, padding=self.padding,
               relu=relu, cap=6.0 if self.activation == "relu6" else None)
        return y if relu else self._activate(y)


@implements("claim2.fusion", "claim4.propagation")
class Conv2D(_ConvLayer):
    """Keras Conv2D: kernel (kh, kw, in, filters), bias (filters,)."""

    def __init__(self, name, in_channels, filters, kernel_size=3, **kwargs):
        k = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        super().__init__(name, (*k, in_channels, filters), bias_size=filters, **kwargs)

    keras_type = "Conv2D"

    def forward(self, x):
        return self._convolved(ag.conv2d, x)

    def forward_with_batch_norm(self, x, batch_norm, then=None):
        """The batch norm layer ``batch_norm`` (on its moving statistics) of this layer's
        output, and ``then``'s ReLU of that, in the convolution's own output pass, to the bit
        (the graph fuses a convolution without bias or activation with the inference batch
        norm that alone reads it, and that batch norm with the ReLU that alone reads it)."""
        if self.bias is not None or self.activation is not None or \
                batch_norm.on_batch_statistics or not (then is None or isinstance(then, ReLU)):
            raise InputError(f"{self.name}: only a convolution without bias or activation "
                             f"takes in a batch norm on its moving statistics and a ReLU")
        return ag.conv2d(x, self.kernel, None, strides=self.strides, padding=self.padding,
                         relu=then is not None, cap=None if then is None else then.max_value,
                         batch_norm=batch_norm.inference_affine(x.data.dtype))

    def output_shape(self, shape):
        kh, kw, _, cout = self.kernel.shape
        return (conv_output(shape[0], kh, self.strides[0], self.padding, self.name)[0],
                conv_output(shape[1], kw, self.strides[1], self.padding, self.name)[0], cout)

    def macs(self, shape):
        ho, wo, _ = self.output_shape(shape)
        return ho * wo * self.kernel.data.size


@implements("claim2.fusion", "claim4.propagation")
class Conv2DTranspose(_ConvLayer):
    """Keras Conv2DTranspose: kernel (kh, kw, filters, in), bias (filters,)."""

    def __init__(self, name, in_channels, filters, kernel_size=3, **kwargs):
        k = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        super().__init__(name, (*k, filters, in_channels), bias_size=filters, **kwargs)

    keras_type = "Conv2DTranspose"

    def forward(self, x):
        return self._convolved(ag.conv2d_transpose, x)

    def output_shape(self, shape):
        kh, kw, cout, _ = self.kernel.shape
        return (transpose_output(shape[0], kh, self.strides[0], self.padding, self.name)[0],
                transpose_output(shape[1], kw, self.strides[1], self.padding, self.name)[0],
                cout)

    def macs(self, shape):
        # every input pixel meets the whole kernel once
        return shape[0] * shape[1] * self.kernel.data.size


@implements("claim2.backbones", "claim4.propagation")
class DepthwiseConv2D(_ConvLayer):
    """Keras DepthwiseConv2D, depth multiplier 1: kernel (kh, kw, C, 1).

    Keras 3 names the kernel ``<layer>/kernel`` (``v.path``); Keras 2's HDF5 files call it
    ``depthwise_kernel:0``, which the converter renames."""

    def __init__(self, name, channels, kernel_size=3, use_bias=False, **kwargs):
        k = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        super().__init__(name, (*k, channels, 1), use_bias=use_bias, bias_size=channels,
                         **kwargs)

    keras_type = "DepthwiseConv2D"

    def forward(self, x):
        return self._activate(ag.depthwise_conv2d(x, self.kernel, self.bias,
                                                  strides=self.strides, padding=self.padding))

    def output_shape(self, shape):
        kh, kw, c, _ = self.kernel.shape
        return (conv_output(shape[0], kh, self.strides[0], self.padding, self.name)[0],
                conv_output(shape[1], kw, self.strides[1], self.padding, self.name)[0], c)

    def macs(self, shape):
        ho, wo, _ = self.output_shape(shape)
        return ho * wo * self.kernel.data.size


@implements("claim2.backbones", "claim4.propagation")
class BatchNormalization(Layer):
    """Keras BatchNormalization over channels: gamma, beta (trainable), moving_mean,
    moving_variance (state). Runs on batch statistics only when trainable and training."""

    keras_type = "BatchNormalization"

    def __init__(self, name, channels, *, epsilon=1e-3, momentum=0.99, dtype=np.float32):
        super().__init__(name)
        self.epsilon, self.momentum = epsilon, momentum
        self.gamma = self._add("gamma", np.ones(channels, dtype))
        self.beta = self._add("beta", np.zeros(channels, dtype))
        self.state["moving_mean"] = np.zeros(channels, dtype)
        self.state["moving_variance"] = np.ones(channels, dtype)
        self.training = False
        # calibration (a frozen layer's statistics set from data, R-frozen): batch statistics
        # replace the moving ones outright (momentum 0), whether or not the layer is trainable
        self.calibrating = False

    reuses_input = True

    @property
    def on_batch_statistics(self) -> bool:
        """Whether the next call normalises by the batch's statistics (training, calibration)
        rather than the moving ones."""
        return (self.training and self.trainable) or self.calibrating

    def inference_affine(self, dtype) -> tuple[np.ndarray, np.ndarray]:
        """(scale, shift) of this layer at inference, ``norm.inference_affine``."""
        return ag.inference_affine(self.gamma.data, self.beta.data, self.state["moving_mean"],
                                   self.state["moving_variance"], self.epsilon, dtype)

    def forward(self, x, reusable=(False,), then=None):
        """The batch norm of x; with ``then`` (a ReLU layer), that layer's ReLU of it, in the
        same pass and to the bit (the graph fuses a batch norm with the ReLU that alone reads
        it)."""
        if then is not None and not isinstance(then, ReLU):
            raise InputError(f"{self.name}: only a ReLU layer can follow in the same pass, "
                             f"not {then.name}")
        return ag.batch_norm(x, self.gamma, self.beta, self.state["moving_mean"],
                             self.state["moving_variance"],
                             training=self.on_batch_statistics,
                             epsilon=self.epsilon,
                             momentum=0.0 if self.calibrating else self.momentum,
                             reuse_input=reusable[0], relu=then is not None,
                             cap=None if then is None else then.max_value)


@implements("claim2.backbones")
class ZeroPadding2D(Layer):
    """Keras ZeroPadding2D: ((top, bottom), (left, right)) zeros ([0137])."""

    keras_type = "ZeroPadding2D"

    def __init__(self, name, padding):
        super().__init__(name)
        self.padding = padding

    def forward(self, x):
        return ag.zero_pad2d(x, self.padding)

    def output_shape(self, shape):
        (t, b), (l, r) = self.padding
        return (shape[0] + t + b, shape[1] + l + r, shape[2])


@implements("claim2.backbones")
class MaxPooling2D(Layer):
    """Keras MaxPooling2D, padding "valid" ([0137])."""

    keras_type = "MaxPooling2D"

    def __init__(self, name, pool_size, strides):
        super().__init__(name)
        self.pool_size, self.strides = pool_size, strides

    def forward(self, x):
        return ag.max_pool2d(x, self.pool_size, self.strides)

    def output_shape(self, shape):
        return (conv_output(shape[0], self.pool_size, self.strides, "valid", self.name)[0],
                conv_output(shape[1], self.pool_size, self.strides, "valid", self.name)[0],
                shape[2])


@implements("claim2.backbones", "claim2.fusion")
class ReLU(Layer):
    """max(x, 0), capped at ``max_value`` when given (ReLU6 of MobileNetV2, [0140]).

    ``keras_type`` is "Activation" (ResNet50V2's ``Activation("relu")``) or "ReLU" (Keras'
    ReLU layer, MobileNetV2's ``ReLU(6.)``), so that summaries name the layer as Keras does.
    """

    def __init__(self, name, max_value=None, keras_type="Activation"):
        super().__init__(name)
        if max_value not in (None, 6.0):
            raise InputError(f"{name}: max_value must be None or 6, got {max_value!r}")
        self.max_value, self.keras_type = max_value, keras_type

    reuses_input = True

    def forward(self, x, reusable=(False,)):
        activation = ag.relu if self.max_value is None else ag.relu6
        return activation(x, reuse_input=reusable[0])


@implements("claim2.fusion")
class Add(Layer):
    """Elementwise sum of two inputs of equal shape (the fusion of [0150]-[0192])."""

    keras_type = "Add"
    reuses_input = True

    def forward(self, x, y, reusable=(False, False)):
        if reusable[1] and not reusable[0]:
            return ag.add(y, x, reuse_input=True)  # the same sum: IEEE addition commutes
        return ag.add(x, y, reuse_input=reusable[0])

    def output_shape(self, a, b):
        if tuple(a) != tuple(b):
            raise InputError(f"{self.name}: cannot add shapes {tuple(a)} and {tuple(b)}")
        return a
