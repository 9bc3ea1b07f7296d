"""Adam, as [0246]-[0255] describe it (Kingma & Ba, 2015).

For each trainable parameter θ with gradient g at step t:
    m = β1 m + (1 - β1) g            v = β2 v + (1 - β2) g²
    m̂ = m / (1 - β1^t)              v̂ = v / (1 - β2^t)
    θ = θ - α m̂ / (√v̂ + ε)
with α = 0.001, β1 = 0.9, β2 = 0.999 ([0247]); ε is not given by the patent: 1e-7 (Keras'
default), settable. This is torch's form of the update; Keras 3 adds ε to √v instead of √v̂
(spec reading ``R-adam``). The elementwise update is ``AdamUpdate``, which runs
``_kernels.adam_update``; ``Adam.step`` takes it through ``refseg.autograd.seam``, so that a
faster implementation of the same arithmetic can be installed in its place.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from refseg.autograd.seam import op_class
from refseg.autograd.tensor import Tensor
from refseg.backend import kernels
from refseg.errors import InputError
from refseg.cite import implements

#: [0247]: learning rate and smoothing constants.
LEARNING_RATE = 0.001
BETA_1 = 0.9
BETA_2 = 0.999
#: Not in the patent: Keras' default (torch's is 1e-8).
EPSILON = 1e-7


@implements("claim4.update")
class AdamUpdate:
    """The update of one parameter in place, elementwise, in the parameter's precision:
    ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``, ``p -= lr (m / bias1) /
    (sqrt(v / bias2) + eps)``, with ``bias_k = 1 - b_k^t`` (``_kernels.adam_update``: each
    value widened to double, the update in double, each result rounded once).

    Parameters
    ----------
    backend : {"cython", "numpy"}
    """

    name = "adam_update"

    def __init__(self, backend="cython"):
        self.backend = backend

    def __call__(self, param, grad, m, v, lr, beta1, beta2, eps, bias1, bias2):
        """Update ``param``, ``m`` and ``v`` (1-D, C-contiguous, one dtype) in place from
        ``grad``."""
        kernels(self.backend).adam_update(param, grad, m, v, lr, beta1, beta2, eps, bias1,
                                          bias2)


@implements("claim4.update")
class Adam:
    """Adam over a list of named parameters; frozen ones (requires_grad False) are skipped.

    Parameters
    ----------
    params : list of Tensor
        Parameters; their names key the optimiser state (unnamed ones get ``param_<i>``).
    learning_rate, beta_1, beta_2, epsilon : float
    backend : {"cython", "numpy"}

    References
    ----------
    [0245]-[0255]; spec ``R-adam``.
    """

    def __init__(self, params, learning_rate=LEARNING_RATE, beta_1=BETA_1, beta_2=BETA_2,
                 epsilon=EPSILON, backend="cython"):
        self.params = list(params)
        for i, p in enumerate(self.params):
            if not isinstance(p, Tensor):
                raise InputError(f"Adam: parameter {i} is a {type(p).__name__}, not a Tensor")
        self.names = [p.name or f"param_{i}" for i, p in enumerate(self.params)]
        if len(set(self.names)) != len(self.names):
            raise InputError("Adam: parameter names repeat; the state needs unique names")
        for label, value in (("learning_rate", learning_rate), ("epsilon", epsilon)):
            if not np.isfinite(value) or value <= 0:
                raise InputError(f"Adam: {label} must be a finite number > 0, got {value}")
        for label, value in (("beta_1", beta_1), ("beta_2", beta_2)):
            if not 0 <= value < 1:
                raise InputError(f"Adam: {label} must lie in [0, 1), got {value}")
        self.learning_rate, self.beta_1, self.beta_2 = learning_rate, beta_1, beta_2
        self.epsilon, self.backend = epsilon, backend
        self.iterations = 0
        self.m = {n: np.zeros_like(p.data) for n, p in zip(self.names, self.params)}
        self.v = {n: np.zeros_like(p.data) for n, p in zip(self.names, self.params)}

    def zero_grad(self):
        """Drop every parameter's gradient (before the next backward)."""
        for p in self.params:
            p.grad = None

    def step(self):
        """One update of every trainable parameter that has a gradient."""
        update = op_class(AdamUpdate)(self.backend)
        stepped = [(name, p) for name, p in zip(self.names, self.params)
                   if p.requires_grad and p.grad is not None]
        # every gradient is checked before any parameter moves: a refused step changes nothing
        for name, p in stepped:
            if p.grad.shape != p.shape or not self._finite(p.grad):
                raise InputError(f"Adam: gradient of {name} has shape {p.grad.shape} or "
                                 "non-finite values")
            for array in (p.data, self.m[name], self.v[name]):
                if not array.flags.c_contiguous:
                    raise InputError(f"Adam: {name} is not C-contiguous")
        self.iterations += 1
        t = self.iterations
        bias1, bias2 = 1.0 - self.beta_1 ** t, 1.0 - self.beta_2 ** t
        for name, p in stepped:
            update(p.data.reshape(-1), np.ascontiguousarray(p.grad, dtype=p.dtype).reshape(-1),
                   self.m[name].reshape(-1), self.v[name].reshape(-1), self.learning_rate,
                   self.beta_1, self.beta_2, self.epsilon, bias1, bias2)

    def _finite(self, grad) -> bool:
        """Whether every value of grad is finite: on refseg's threads for a contiguous float
        array (most of a step's gradients by size), else by NumPy."""
        if grad.dtype in (np.float32, np.float64) and grad.flags.c_contiguous:
            count = np.zeros(1, dtype=np.int64)
            kernels(self.backend).nonfinite_count(grad.reshape(-1), count)
            return count[0] == 0
        return bool(np.isfinite(grad).all())

    def state_dict(self) -> dict:
        """Arrays of the optimiser state: ``iterations``, hyper-parameters, ``m/<name>``,
        ``v/<name>`` (copies)."""
        state = {"iterations": np.array(self.iterations),
                 "hyper": np.array([self.learning_rate, self.beta_1, self.beta_2, self.epsilon])}
        for n in self.names:
            state[f"m/{n}"] = self.m[n].copy()
            state[f"v/{n}"] = self.v[n].copy()
        return state

    def load_state_dict(self, state: dict):
        """Restore a state from :meth:`state_dict`; every moment must match its parameter."""
        for n, p in zip(self.names, self.params):
            for key in (f"m/{n}", f"v/{n}"):
                if key not in state:
                    raise InputError(f"Adam state: {key} is missing")
                if state[key].shape != p.shape:
                    raise InputError(f"Adam state: {key} has shape {state[key].shape}, "
                                     f"parameter has {p.shape}")
        hyper = np.asarray(state["hyper"], dtype=np.float64)
        self.learning_rate, self.beta_1, self.beta_2, self.epsilon = (float(h) for h in hyper)
        self.iterations = int(state["iterations"])
        for n, p in zip(self.names, self.params):
            self.m[n] = np.array(state[f"m/{n}"], dtype=p.dtype)
            self.v[n] = np.array(state[f"v/{n}"], dtype=p.dtype)

    def save(self, path):
        """Write the state to an .npz file, atomically."""
        from refseg.publish import write_npz

        write_npz(Path(path), **self.state_dict())

    def load(self, path):
        """Read a state written by :meth:`save` (no pickled objects are accepted)."""
        path = Path(path)
        try:
            with np.load(path, allow_pickle=False) as npz:
                state = {k: npz[k] for k in npz.files}
        except (OSError, ValueError) as exc:
            raise InputError(f"{path}: not a readable optimiser state ({exc})") from None
        self.load_state_dict(state)
