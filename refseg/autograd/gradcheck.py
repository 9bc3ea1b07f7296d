"""Gradient checks: an op's backward pass against central differences of its forward pass.

For a fixed random projection R, the loss L = <op(inputs), R> is evaluated in float64, and the
analytic gradient of every element of every input is compared with
(L(x + h e) - L(x - h e)) / 2h. The truncation error is O(h^2) ~ 1e-12 at h = 1e-6 and the
rounding error ~ eps sum|op(x) R| / h, so the bound is ``rtol`` of the largest gradient plus
ten times that rounding term: only a wrong gradient breaks it. The rounding term matters
where a gradient is nearly zero for every element, such as batch norm over two samples per
channel (xhat = +-1 for any x up to epsilon), where the difference quotient is mostly rounding
noise of L.
"""
from __future__ import annotations

import numpy as np

from refseg.autograd.tensor import Tensor, no_grad

INFRASTRUCTURE = "checks the backward passes against finite differences: no claim element"

#: Central-difference step.
STEP = 1e-6

#: Allowed error relative to the largest gradient of an input (at least 1e-3).
RTOL = 1e-6


def numeric_gradient(loss_of, arrays, index, step=STEP) -> np.ndarray:
    """Central differences of ``loss_of(arrays)`` with respect to every element of
    ``arrays[index]``.

    Parameters
    ----------
    loss_of : callable
        Takes the list ``arrays`` and returns a float.
    arrays : list of ndarray
        Each element of ``arrays[index]`` is moved by +-``step`` in place, and put back.
    index : int
    step : float

    Returns
    -------
    ndarray of the shape and dtype of ``arrays[index]``
        (loss(x + step e) - loss(x - step e)) / (2 step) for each unit vector e.
    """
    x = arrays[index]
    grad = np.zeros_like(x)
    flat, gflat = x.reshape(-1), grad.reshape(-1)
    for k in range(flat.size):
        saved = flat[k]
        flat[k] = saved + step
        up = loss_of(arrays)
        flat[k] = saved - step
        down = loss_of(arrays)
        flat[k] = saved
        gflat[k] = (up - down) / (2 * step)
    return grad


def check_gradients(op, arrays, seed=0, step=STEP, rtol=RTOL) -> None:
    """Compare op's analytic gradients with central differences for every input array.

    Parameters
    ----------
    op : callable
        Takes one Tensor per array and returns a Tensor (an autograd op, or any composition).
    arrays : sequence of array_like
        The inputs; converted to float64 copies.
    seed : int
        Seed of the random projection R of op's output.
    step : float
        Central-difference step h.
    rtol : float
        Allowed error relative to the largest gradient of each input (at least 1e-3).

    Raises
    ------
    AssertionError
        When a gradient differs from its difference quotient by more than
        ``rtol * max(|expected|.max(), 1e-3) + 10 eps sum|op(x) R| / h``; the message names
        the input.

    Notes
    -----
    1. out = op(inputs); R drawn from a standard normal of out's shape.
    2. The analytic gradients: op on leaf tensors that require gradients, backward(R).
    3. For each input i, ``numeric_gradient`` of L(values) = sum(op(values) * R), evaluated
       under ``no_grad``, compared with the analytic gradient of input i.

    Examples
    --------
    >>> import numpy as np
    >>> from refseg import autograd as ag
    >>> check_gradients(ag.relu, [np.array([[-1.0, 0.5], [2.0, -0.25]])])
    """
    arrays = [np.array(a, dtype=np.float64) for a in arrays]
    out = op(*[Tensor(a) for a in arrays])
    projection = np.random.default_rng(seed).standard_normal(out.shape)

    def loss_of(values):
        with no_grad():
            return float((op(*[Tensor(v) for v in values]).data * projection).sum())

    tensors = [Tensor(a.copy(), requires_grad=True) for a in arrays]
    op(*tensors).backward(projection)
    rounding = 10 * np.finfo(np.float64).eps * np.abs(out.data * projection).sum() / step
    for i, t in enumerate(tensors):
        expected = numeric_gradient(loss_of, arrays, i, step)
        scale = max(np.abs(expected).max(), 1e-3)
        np.testing.assert_allclose(t.grad, expected, rtol=0, atol=rtol * scale + rounding,
                                   err_msg=f"input {i} of {out}")
