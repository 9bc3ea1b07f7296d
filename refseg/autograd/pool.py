"""Max pooling (Keras MaxPooling2D), NHWC. References: [0137] (ResNet50's max pooling)."""
from __future__ import annotations

import numpy as np

from refseg.autograd.geometry import conv_output, int_pair
from refseg.autograd.tensor import Op, Tensor, as_tensor
from refseg.backend import kernels
from refseg.errors import InputError
from refseg.cite import implements


@implements("claim2.backbones", "claim4.propagation")
class MaxPool2D(Op):
    """Window maximum; the gradient goes to the first maximum of each window (row-major),
    as torch and TensorFlow route it."""

    name = "max_pool2d"

    def __init__(self, pool_size=2, strides=None, padding="valid", backend="cython"):
        self.pool = int_pair(pool_size, "pool_size", self.name)
        self.strides = self.pool if strides is None else int_pair(strides, "strides", self.name)
        self.padding = padding
        self.backend = backend

    def forward(self, ctx, x):
        if x.ndim != 4:
            raise InputError(f"{self.name}: input must be NHWC (4-D), got shape {x.shape}")
        (ho, pt), (wo, pl) = (
            conv_output(x.shape[1], self.pool[0], self.strides[0], self.padding, self.name),
            conv_output(x.shape[2], self.pool[1], self.strides[1], self.padding, self.name))
        out = np.empty((x.shape[0], ho, wo, x.shape[3]), dtype=x.dtype)
        if not ctx.recording:
            # inference: no argmax to keep (the values are the recording path's: Keras' "same"
            # padding is smaller than the window, so every window holds an input pixel)
            kernels(self.backend).window_maximum(np.ascontiguousarray(x), *self.pool,
                                                 *self.strides, pt, pl, out)
            return out
        argmax = np.empty(out.shape, dtype=np.int_)
        kernels(self.backend).max_pool_forward(np.ascontiguousarray(x), *self.pool,
                                               *self.strides, pt, pl, out, argmax)
        ctx.save_for_backward(argmax)
        ctx.shape = x.shape
        return out

    def backward(self, ctx, grad):
        (argmax,) = ctx.saved
        dx = np.empty(int(np.prod(ctx.shape)), dtype=grad.dtype)
        kernels(self.backend).max_pool_backward(np.ascontiguousarray(grad), argmax, dx)
        return (dx.reshape(ctx.shape),)


@implements("claim2.backbones", "claim4.propagation")
def max_pool2d(x, pool_size=2, strides=None, padding="valid", *, backend="cython") -> Tensor:
    """Keras MaxPooling2D on NHWC input.

    Parameters
    ----------
    x : Tensor of shape (N, H, W, C)
    pool_size, strides : int or (int, int)
        strides defaults to pool_size (Keras).
    padding : {"valid", "same"}
    backend : {"cython", "numpy"}

    Returns
    -------
    Tensor of shape (N, Ho, Wo, C)

    References
    ----------
    [0137].
    """
    return MaxPool2D(pool_size, strides, padding, backend)(as_tensor(x, "x"))
