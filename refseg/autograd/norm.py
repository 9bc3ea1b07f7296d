"""Batch normalisation (Keras BatchNormalization), NHWC, over the channel axis.

Inference: y = (x - moving_mean) / sqrt(moving_variance + eps) * gamma + beta.
Training: the batch's mean and biased variance over N, H, W replace the moving statistics, and
these are updated in place as Keras does: moving = moving * momentum + batch * (1 - momentum).
With ``relu`` the op is batch norm and the ReLU (or ReLU6) that follows it, computed in one
pass and equal bit for bit to the two ops one after the other (``refseg.models.graph`` fuses
a batch norm with the ReLU that alone reads it).

References: [0135], [0139], [0141], [0230] (BN in the backbones, frozen in this method).
"""
from __future__ import annotations

import numpy as np

from refseg.autograd.elementwise import masked_gradient, output_buffer, relu_bounds
from refseg.autograd.tensor import Op, Tensor, as_tensor
from refseg.backend import kernels
from refseg.errors import InputError
from refseg.cite import implements

#: Keras' default momentum of the moving statistics.
DEFAULT_MOMENTUM = 0.99


@implements("claim2.backbones", "claim4.propagation")
class BatchNorm(Op):
    """Batch normalisation with learnable gamma, beta and moving statistics."""

    name = "batch_norm"

    def __init__(self, moving_mean, moving_variance, *, training=False, epsilon=1e-3,
                 momentum=DEFAULT_MOMENTUM, backend="cython", reuse_input=False, relu=False,
                 cap=None):
        self.moving_mean, self.moving_variance = moving_mean, moving_variance
        self.training, self.epsilon, self.momentum = bool(training), float(epsilon), float(momentum)
        self.backend, self.reuse_input = backend, bool(reuse_input)
        self.relu = bool(relu)
        self.bounds = relu_bounds(self.relu, cap, self.name)
        if self.relu:
            self.name = "batch_norm_relu" if cap is None else f"batch_norm_relu{cap:g}"

    def forward(self, ctx, x, gamma, beta):
        c = x.shape[-1]
        for label, a in (("gamma", gamma), ("beta", beta), ("moving_mean", self.moving_mean),
                         ("moving_variance", self.moving_variance)):
            if a.shape != (c,):
                raise InputError(f"{self.name}: {label} shape {a.shape} does not match "
                                 f"{c} channels of input {x.shape}")
        x2 = np.ascontiguousarray(x).reshape(-1, c)
        if self.training:
            mean, variance = np.empty(c), np.empty(c)
            kernels(self.backend).channel_moments(x2, mean, variance)
            self.moving_mean *= self.momentum
            self.moving_mean += (1 - self.momentum) * mean
            self.moving_variance *= self.momentum
            self.moving_variance += (1 - self.momentum) * variance
        else:
            mean = self.moving_mean.astype(np.float64)
            variance = self.moving_variance.astype(np.float64)
        if not ctx.recording:
            # inference: one multiply-add per element, nothing kept (rounding differs from
            # the training path's (x - mean) * inv_std * gamma + beta by a few ulps)
            scale, shift = _affine(mean, variance, gamma, beta, self.epsilon, x.dtype)
            # the graph's backward keeps x for its own gradient, so only inference may
            # write over it
            out = output_buffer(x2, self.reuse_input)
            kernels(self.backend).channel_affine(x2, scale, shift, *self.bounds, out)
            return out.reshape(x.shape)
        inv_std = _inverse_std(variance, self.epsilon, x.dtype)
        mean, gamma, beta = (mean.astype(x.dtype), np.ascontiguousarray(gamma, dtype=x.dtype),
                             np.ascontiguousarray(beta, dtype=x.dtype))
        out = np.empty_like(x2)
        # the ReLU op's mask, made in the same pass as the output and its clamp
        pass_through = np.empty(x2.shape, dtype=bool) if self.relu else None
        kernels(self.backend).batch_norm_forward(x2, mean, inv_std, gamma, beta, *self.bounds,
                                                 out, _bytes(pass_through))
        # x2 (the input, which the graph keeps alive anyway) rather than xhat: backward
        # recomputes xhat, bit for bit, instead of holding a second array of x's size per
        # layer through the whole forward pass
        ctx.save_for_backward(x2, mean, inv_std, gamma, beta, pass_through)
        return out.reshape(x.shape)

    def backward(self, ctx, grad):
        x2, mean, inv_std, gamma, beta, pass_through = ctx.saved
        c = grad.shape[-1]
        g2 = np.ascontiguousarray(grad).reshape(-1, c)
        passes = None if pass_through is None else _bytes(pass_through)
        k = kernels(self.backend)
        # the ReLU op's backward (g * mask) and xhat are recomputed inside each pass
        sum_g, sum_gx = np.empty(c), np.empty(c)
        k.batch_norm_gradient_sums(x2, mean, inv_std, g2, passes, sum_g, sum_gx)
        dtype = grad.dtype
        if self.training:
            m = g2.shape[0]
            dx = np.empty_like(g2)
            k.batch_norm_backward(g2, passes, x2, mean, inv_std,
                                  np.ascontiguousarray(gamma * inv_std / m, dtype=dtype),
                                  sum_g.astype(dtype), sum_gx.astype(dtype), dtype.type(m), dx)
        else:
            if pass_through is not None:
                g2 = masked_gradient(g2, pass_through, self.backend)  # the ReLU op's backward
            dx = g2 * (gamma * inv_std)
        return dx.reshape(grad.shape), sum_gx.astype(dtype), sum_g.astype(dtype)


def _bytes(mask):
    """A bool mask as the kernels take it (uint8, the same memory), or None."""
    return None if mask is None else mask.view(np.uint8)


def _inverse_std(variance, epsilon, dtype) -> np.ndarray:
    return (1.0 / np.sqrt(variance + epsilon)).astype(dtype)


def _affine(mean, variance, gamma, beta, epsilon, dtype):
    """(scale, shift), contiguous in dtype: y = x * scale + shift is the batch norm on these
    statistics (mean, variance float64)."""
    scale = _inverse_std(variance, epsilon, dtype) * gamma
    shift = beta - mean.astype(dtype) * scale
    return (np.ascontiguousarray(scale, dtype=dtype), np.ascontiguousarray(shift, dtype=dtype))


@implements("claim2.backbones")
def inference_affine(gamma, beta, moving_mean, moving_variance, epsilon=1e-3,
                     dtype=np.float32) -> tuple[np.ndarray, np.ndarray]:
    """The inference batch norm as one multiply-add per channel.

    Parameters
    ----------
    gamma, beta, moving_mean, moving_variance : ndarray of shape (C,)
    epsilon : float
    dtype : float32 or float64, the input's

    Returns
    -------
    (scale, shift) : ndarrays of shape (C,) in dtype, with batch_norm(x) (inference) equal to
    x * scale + shift rounded after the product and after the sum, which is what
    ``BatchNorm`` computes, and what ``conv2d(..., batch_norm=(scale, shift))`` folds into a
    convolution's output.

    References
    ----------
    [0135], [0139].
    """
    return _affine(np.asarray(moving_mean).astype(np.float64),
                   np.asarray(moving_variance).astype(np.float64),
                   gamma, beta, float(epsilon), np.dtype(dtype))


@implements("claim2.backbones", "claim4.propagation")
def batch_norm(x, gamma, beta, moving_mean, moving_variance, *, training=False, epsilon=1e-3,
               momentum=DEFAULT_MOMENTUM, backend="cython", reuse_input=False, relu=False,
               cap=None) -> Tensor:
    """Keras BatchNormalization over the last axis of NHWC input, optionally with the ReLU that
    follows it.

    Parameters
    ----------
    x : Tensor of shape (N, H, W, C)
    gamma, beta : Tensor of shape (C,)
    moving_mean, moving_variance : ndarray of shape (C,)
        Updated in place in training mode.
    training : bool
        Batch statistics (True) or moving statistics (False, and in frozen layers).
    epsilon : float
        ResNet50V2 uses 1.001e-5, MobileNetV2 1e-3 (Keras' default).
    momentum : float
    backend : {"cython", "numpy"}
    reuse_input : bool
        In inference (no graph recorded), the result may overwrite x's array: only for an x
        that nothing else reads afterwards (see ``refseg.autograd.elementwise.add``). When a
        graph is recorded, x is kept for backward and never overwritten.
    relu : bool
        Apply ReLU to the result in the same pass: ``relu(batch_norm(x))`` (forward and
        gradients) to the bit, without the intermediate array.
    cap : float or None
        With ``relu``, ReLU6's cap (6): ``relu6(batch_norm(x))``.

    Returns
    -------
    Tensor of shape (N, H, W, C)

    References
    ----------
    [0135], [0139], [0141], [0230].
    """
    return BatchNorm(moving_mean, moving_variance, training=training, epsilon=epsilon,
                     momentum=momentum, backend=backend, reuse_input=reuse_input, relu=relu,
                     cap=cap)(
        as_tensor(x, "x"), as_tensor(gamma, "gamma"), as_tensor(beta, "beta"))
