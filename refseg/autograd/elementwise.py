"""Elementwise ops and explicit padding: add, relu, relu6, softmax, zero_pad2d.

References: [0150]-[0192] (Add: multi-scale fusion), [0140], [0226]-[0229] (ReLU, ReLU6),
[0194]-[0195] (softmax), [0137] (zero padding in ResNet50).
"""
from __future__ import annotations

import numpy as np

from refseg.autograd.tensor import Op, Tensor, as_tensor
from refseg.backend import kernels
from refseg.errors import InputError
from refseg.trace import implements


def _flat(a) -> np.ndarray:
    """a as a contiguous 1-D array (a view when it already is contiguous)."""
    return np.ascontiguousarray(a).reshape(-1)


@implements("claim2.fusion", "claim4.propagation")
class Add(Op):
    """x + y for equal shapes (the skip connections of [0150]-[0192])."""

    name = "add"

    def __init__(self, backend="cython"):
        self.backend = backend

    def forward(self, ctx, x, y):
        if x.shape != y.shape:
            raise InputError(f"add: shapes differ: {x.shape} and {y.shape}")
        out = np.empty(x.shape, dtype=x.dtype)
        kernels(self.backend).add_arrays(_flat(x), _flat(y), out.reshape(-1))
        return out

    def backward(self, ctx, grad):
        return grad, grad


@implements("claim2.fusion", "claim4.propagation")
class ReLU(Op):
    """max(x, 0); with ``cap``, min(max(x, 0), cap) (ReLU6 for cap 6). The gradient is 1 where
    0 < x (< cap), else 0 (at the kinks, 0, as torch and TensorFlow)."""

    name = "relu"

    def __init__(self, cap: float | None = None, backend="cython"):
        self.cap = cap
        self.backend = backend
        if cap is not None:
            self.name = "relu6" if cap == 6 else f"relu{cap:g}"

    def forward(self, ctx, x):
        if not ctx.recording:
            out = np.empty(x.shape, dtype=x.dtype)
            kernels(self.backend).clamp(_flat(x), 0.0, np.inf if self.cap is None else self.cap,
                                        out.reshape(-1))
            return out
        pass_through = x > 0
        if self.cap is not None:
            pass_through &= x < self.cap
        ctx.save_for_backward(pass_through)
        out = np.maximum(x, 0)
        return out if self.cap is None else np.minimum(out, self.cap).astype(x.dtype)

    def backward(self, ctx, grad):
        (pass_through,) = ctx.saved
        return (grad * pass_through,)


@implements("claim2.fusion", "claim4.propagation")
class Softmax(Op):
    """exp(x - max) / sum over the last (channel) axis."""

    name = "softmax"

    def forward(self, ctx, x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        p = e / e.sum(axis=-1, keepdims=True)
        ctx.save_for_backward(p)
        return p

    def backward(self, ctx, grad):
        (p,) = ctx.saved
        return (p * (grad - (grad * p).sum(axis=-1, keepdims=True)),)


@implements("claim2.backbones", "claim4.propagation")
class ZeroPad2D(Op):
    """Keras ZeroPadding2D: ((top, bottom), (left, right)) zeros around NHWC images."""

    name = "zero_pad2d"

    def __init__(self, padding):
        try:
            (t, b), (l, r) = padding
        except (TypeError, ValueError):
            raise InputError(f"zero_pad2d: padding must be ((top, bottom), (left, right)), "
                             f"got {padding!r}") from None
        if min(t, b, l, r) < 0:
            raise InputError(f"zero_pad2d: padding must be >= 0, got {padding!r}")
        self.padding = ((int(t), int(b)), (int(l), int(r)))

    def forward(self, ctx, x):
        if x.ndim != 4:
            raise InputError(f"zero_pad2d: input must be NHWC (4-D), got shape {x.shape}")
        (t, b), (l, r) = self.padding
        ctx.shape = x.shape
        return np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)))

    def backward(self, ctx, grad):
        (t, _), (l, _) = self.padding
        _, h, w, _ = ctx.shape
        return (grad[:, t:t + h, l:l + w].copy(),)  # never a view of grad (see backward)


@implements("claim2.fusion", "claim4.propagation")
def add(x, y, *, backend="cython") -> Tensor:
    """Elementwise sum of two tensors of equal shape (multi-scale fusion, [0150])."""
    return Add(backend)(as_tensor(x, "x"), as_tensor(y, "y"))


@implements("claim2.fusion", "claim4.propagation")
def relu(x, *, backend="cython") -> Tensor:
    """max(x, 0) (the decoder's activation, [0140], [0195])."""
    return ReLU(backend=backend)(as_tensor(x, "x"))


@implements("claim2.backbones", "claim4.propagation")
def relu6(x, *, backend="cython") -> Tensor:
    """min(max(x, 0), 6) (MobileNetV2's activation, [0140], [0226]-[0229])."""
    return ReLU(6.0, backend)(as_tensor(x, "x"))


@implements("claim2.fusion", "claim4.propagation")
def softmax(x) -> Tensor:
    """Softmax over the last axis (the prediction layer's activation, [0194]-[0195])."""
    return Softmax()(as_tensor(x, "x"))


@implements("claim2.backbones", "claim4.propagation")
def zero_pad2d(x, padding) -> Tensor:
    """Zero padding ((top, bottom), (left, right)) of NHWC images ([0137])."""
    return ZeroPad2D(padding)(as_tensor(x, "x"))
