"""Losses over the image: per-pixel categorical cross-entropy (and mean squared error).

The patent's loss formula ([0242]-[0244]) is missing; it is computed over the W x H pixels of
the image from predicted and true values. Read as the per-pixel categorical cross-entropy of the
softmax probabilities averaged over all pixels (spec reading ``R-loss``); mean squared error is
offered as the other reading.
"""
from __future__ import annotations

import numpy as np

from refseg.autograd.tensor import Op, Tensor, as_tensor
from refseg.errors import InputError
from refseg.cite import implements

#: Probabilities are clipped to [EPSILON, 1 - EPSILON] before the logarithm (Keras' epsilon).
EPSILON = 1e-7


@implements("claim4.update")
def one_hot(labels, classes: int, dtype=np.float32) -> np.ndarray:
    """Integer labels (N, H, W) in [0, classes) to one-hot (N, H, W, classes) ([0263]'s three
    colour classes become the channels of the loss's target)."""
    labels = np.asarray(labels)
    if labels.dtype.kind not in "iu":
        raise InputError(f"labels: expected integers, got dtype {labels.dtype}")
    if labels.size and (labels.min() < 0 or labels.max() >= classes):
        raise InputError(f"labels: values must lie in [0, {classes}), found "
                         f"{labels.min()}..{labels.max()}")
    return np.eye(classes, dtype=dtype)[labels]


def _targets(pred, target, name):
    t = np.asarray(target)
    if t.dtype.kind in "iu":
        t = one_hot(t, pred.shape[-1], pred.dtype)
    if t.shape != pred.shape:
        raise InputError(f"{name}: target shape {t.shape} does not match prediction {pred.shape}")
    return t.astype(pred.dtype, copy=False)


class _Loss(Op):
    """A loss of one input (the prediction) against a fixed target array."""

    def __init__(self, target):
        self.target = target


@implements("claim4.update")
class CategoricalCrossentropy(_Loss):
    """L = -(1 / pixels) sum over pixels and classes of y log(clip(p, eps, 1 - eps))."""

    name = "categorical_crossentropy"

    def forward(self, ctx, p):
        y = _targets(p, self.target, self.name)
        clipped = np.clip(p, EPSILON, 1 - EPSILON)
        pixels = p.size // p.shape[-1]
        ctx.save_for_backward(y, clipped, (p > EPSILON) & (p < 1 - EPSILON))
        ctx.pixels = pixels
        return np.asarray(-(y * np.log(clipped)).sum() / pixels, dtype=p.dtype)

    def backward(self, ctx, grad):
        y, clipped, inside = ctx.saved
        return ((-grad / ctx.pixels) * (y / clipped) * inside,)


@implements("claim4.update")
class MeanSquaredError(_Loss):
    """L = mean over every element of (p - y)^2."""

    name = "mean_squared_error"

    def forward(self, ctx, p):
        y = _targets(p, self.target, self.name)
        ctx.save_for_backward(p - y)
        return np.asarray(((p - y) ** 2).mean(), dtype=p.dtype)

    def backward(self, ctx, grad):
        (diff,) = ctx.saved
        return (grad * 2 * diff / diff.size,)


@implements("claim4.update")
def categorical_crossentropy(probabilities, target) -> Tensor:
    """Per-pixel categorical cross-entropy, averaged over all pixels (N * H * W).

    Parameters
    ----------
    probabilities : Tensor of shape (N, H, W, C)
        Softmax output.
    target : ndarray
        One-hot (N, H, W, C) or integer labels (N, H, W).

    Returns
    -------
    Tensor of shape ()

    References
    ----------
    [0242]-[0244]; spec ``R-loss``.
    """
    return CategoricalCrossentropy(target)(as_tensor(probabilities, "probabilities"))


@implements("claim4.update")
def mean_squared_error(prediction, target) -> Tensor:
    """Mean squared error over every element (the other reading of [0243]).

    Parameters
    ----------
    prediction : Tensor of shape (N, H, W, C)
    target : ndarray
        Same shape, or integer labels (N, H, W) (one-hot encoded).

    Returns
    -------
    Tensor of shape ()

    References
    ----------
    [0242]-[0244]; spec ``R-loss``.
    """
    return MeanSquaredError(target)(as_tensor(prediction, "prediction"))
