"""NumPy twins of the training kernels in ``autograd/_norm.pxi`` (batch norm in training) and
``autograd/_optim.pxi`` (Adam), compiled into ``refseg._kernels``; gathered with the other
autograd twins (``autograd/_twins.py``) by ``refseg._twins``.

Same names, same signatures (outputs written into ``out`` arrays), same arithmetic order: the
tests hold each pair equal bit for bit, except the float64 reductions whose docstrings say
otherwise.
"""
import numpy as np

from refseg.autograd._twins import _masked, clamp, relu_mask


# ------------------------------------------------------------------------------------------
# Twins of _norm.pxi.

def channel_moments(x, mean, variance):
    """Twin of ``_kernels.channel_moments`` (autograd/_norm.pxi), for ``claim2.backbones`` and
    ``claim4.propagation`` (the batch statistics of batch norm in training).

    Per-column mean and biased variance of x in float64, in two passes. NumPy sums pairwise
    where the kernel sums the rows in order: equal to float64 rounding, not bit for bit.
    """
    x = np.asarray(x, dtype=np.float64)
    mean[...] = x.mean(axis=0)
    variance[...] = ((x - mean) ** 2).mean(axis=0)


def batch_norm_gradient_sums(x, mean, inv_std, g, passes, sum_g, sum_g_xhat):
    """Twin of ``_kernels.batch_norm_gradient_sums`` (autograd/_norm.pxi), for
    ``claim4.propagation`` (the batch-norm backward of ``claim2.backbones``).

    Per-column sums of gm = g * passes and of gm * xhat in float64, with xhat = (x - mean) *
    inv_std rounded to x's dtype as in the forward pass. NumPy sums pairwise where the kernel
    sums the rows in order: equal to float64 rounding, not bit for bit.
    """
    gm = _masked(g, passes).astype(np.float64)
    xhat = (np.asarray(x) - mean) * inv_std
    sum_g[...] = gm.sum(axis=0)
    sum_g_xhat[...] = (gm * xhat.astype(np.float64)).sum(axis=0)


def batch_norm_forward(x, mean, inv_std, gamma, beta, low, high, out, passes):
    """Twin of ``_kernels.batch_norm_forward`` (autograd/_norm.pxi), for ``claim2.backbones``
    and ``claim4.propagation``.

    value = ((x - mean) * inv_std) * gamma + beta per column, each operation rounded to the
    arrays' dtype in that order, as in the kernel; out = value clamped to [low, high] by
    ``clamp``'s rule; passes (unless None) = the ReLU's mask of value
    (``elementwise.relu_passes``).
    """
    value = ((np.asarray(x) - mean) * inv_std) * gamma + beta
    if passes is not None:
        relu_mask(value.reshape(-1), low, high, passes.reshape(-1))
    clamp(value.reshape(-1), low, high, value.reshape(-1))
    out[...] = value


def batch_norm_backward(g, passes, x, mean, inv_std, coef, sum_g, sum_g_xhat, count, dx):
    """Twin of ``_kernels.batch_norm_backward`` (autograd/_norm.pxi), for ``claim4.propagation``
    (the batch-norm input gradient in training, ``claim2.backbones``).

    dx = coef * ((count * gm - sum_g) - xhat * sum_g_xhat) per column, gm and xhat as in
    :func:`batch_norm_gradient_sums`, each operation rounded to the arrays' dtype in that
    order, as in the kernel.
    """
    xhat = (np.asarray(x) - mean) * inv_std
    dx[...] = coef * ((count * _masked(g, passes) - sum_g) - xhat * sum_g_xhat)


# ------------------------------------------------------------------------------------------
# Twin of _optim.pxi.

def adam_update(param, grad, m, v, lr, beta1, beta2, eps, bias1, bias2):
    """Twin of ``_kernels.adam_update`` (autograd/_optim.pxi), for ``claim4.update``.

    m = b1 m + (1-b1) g and v = b2 v + (1-b2) g^2 computed in float64 and stored in the
    parameter's dtype; p - lr * (m / bias1) / (sqrt(v / bias2) + eps) computed in float64 from
    the stored m and v, then rounded to the parameter's dtype: the kernel's mix of double and
    real arithmetic.
    """
    dtype = np.asarray(param).dtype
    g = np.asarray(grad, dtype=np.float64)
    mk = (beta1 * np.asarray(m, dtype=np.float64) + (1.0 - beta1) * g).astype(dtype)
    vk = (beta2 * np.asarray(v, dtype=np.float64) + (1.0 - beta2) * g * g).astype(dtype)
    m[...] = mk
    v[...] = vk
    step = lr * (mk.astype(np.float64) / bias1) / (np.sqrt(vk.astype(np.float64) / bias2) + eps)
    param[...] = (np.asarray(param, dtype=np.float64) - step).astype(dtype)


def nonfinite_count(x, count):
    """Twin of ``_kernels.nonfinite_count`` (autograd/_optim.pxi), for ``claim4.update`` (Adam's
    check of the gradients).

    count[0] = the number of NaN and infinite values of x.
    """
    count[0] = np.count_nonzero(~np.isfinite(np.asarray(x)))
