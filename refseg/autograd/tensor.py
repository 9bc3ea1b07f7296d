"""Reverse-mode automatic differentiation: the Tensor, the Op protocol, backward, no_grad.

A :class:`Tensor` holds a float32 or float64 NumPy array, its gradient, and the node that made it
(the op, its saved context and its input tensors). Each op is one object with
``forward(ctx, *arrays)`` and ``backward(ctx, grad)`` and a ``name``; calling it on tensors runs
forward and, when gradients are on and an input needs one, records the node. ``backward()`` visits
the graph in reverse topological order; gradients of a tensor used twice accumulate with ``+=``;
each node is freed once its gradient has been propagated.

References: claim 4, [0129]-[0132] (forward and backward propagation), [0143], [0217].
"""
from __future__ import annotations

import contextlib

import numpy as np

from refseg.errors import InputError
from refseg.cite import implements, infrastructure

#: Floating-point types the engine computes in (float64 for gradient checks).
DTYPES = (np.float32, np.float64)
_grad_enabled = True


@implements("claim4.propagation")
@contextlib.contextmanager
def no_grad():
    """Within this block ops record no graph (inference, parameter updates)."""
    global _grad_enabled
    previous, _grad_enabled = _grad_enabled, False
    try:
        yield
    finally:
        _grad_enabled = previous


@infrastructure("whether ops record a graph, for the callers that choose a path by it")
def grad_enabled() -> bool:
    """False within ``no_grad``: ops then record nothing, whatever their inputs."""
    return _grad_enabled


class Context:
    """What an op's forward keeps for its backward (``ctx.saved``, plus any attributes)."""

    def save_for_backward(self, *arrays):
        self.saved = arrays


class Tensor:
    """An array with a gradient and the node that made it.

    Parameters
    ----------
    data : array_like
        float32 or float64 values (other dtypes are refused: convert explicitly).
    requires_grad : bool
        Leaves with True receive ``.grad`` from :meth:`backward`.
    name : str or None
        For messages and for parameters (Keras weight path, e.g. ``x2/kernel``).
    """

    __slots__ = ("data", "grad", "requires_grad", "name", "node")

    def __init__(self, data, requires_grad: bool = False, name: str | None = None):
        data = np.asarray(data)
        if data.dtype not in DTYPES:
            label = f"Tensor {name}" if name else "Tensor"
            raise InputError(f"{label}: dtype {data.dtype} is not float32 or float64")
        self.data = data
        self.grad = None
        self.requires_grad = bool(requires_grad)
        self.name = name
        self.node = None  # (op, ctx, inputs) for a computed tensor, None for a leaf

    @property
    def shape(self):
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    def __repr__(self):
        made_by = f", op={self.node[0].name}" if self.node else ""
        label = f"{self.name!r}, " if self.name else ""
        return f"Tensor({label}shape={self.shape}, dtype={self.dtype}{made_by})"

    def __add__(self, other):
        from refseg.autograd.elementwise import add

        return add(self, other)

    def zero_grad(self):
        self.grad = None

    @implements("claim4.propagation")
    def backward(self, grad=None):
        """Propagate d(self)/d(leaf) into ``leaf.grad`` for every leaf that requires it.

        Parameters
        ----------
        grad : ndarray or None
            Gradient of the final objective with respect to this tensor; None means 1 and
            needs a one-element tensor (a loss).

        Notes
        -----
        1. Order the graph's tensors so that each comes after every tensor it was made from.
        2. Walk that order backwards, calling each op's ``backward`` with the summed gradient
           of its output, and add (``+=``) what it returns into its inputs' gradients.
        3. Free each node (op context and links) once visited, and let go of the tensor: the
           graph is used once, and the activations go as the walk passes them.

        References
        ----------
        [0129]-[0132], [0217].
        """
        if grad is None:
            if self.data.size != 1:
                raise InputError(f"backward: {self!r} is not a scalar; pass its gradient")
            grad = np.ones_like(self.data)
        grad = np.asarray(grad)
        if grad.shape != self.shape or grad.dtype != self.dtype:
            raise InputError(f"backward: gradient {grad.shape} {grad.dtype} does not match "
                             f"{self!r}")
        order = _topological_order(self)
        grads = {id(self): grad}
        owned = set()  # gradient buffers allocated here, safe to add into in place
        # arrays that someone else may also hold: the caller's seed, and any array an op handed
        # to two inputs (add passes its gradient to both); a leaf copies these, and takes any
        # other array as its own (an op's freshly computed gradient: no copy of large kernels)
        shared = {id(grad)}
        for index in range(len(order) - 1, -1, -1):
            # drop the order's hold on each tensor once visited: an intermediate's array is then
            # freed as soon as the ops that used it are done, unless the caller still holds it
            tensor, order[index] = order[index], None
            g = grads.pop(id(tensor), None)
            if tensor.node is None:
                if tensor.requires_grad and g is not None:
                    if tensor.grad is not None:
                        tensor.grad += g
                    elif id(g) in shared and id(tensor) not in owned:
                        tensor.grad = np.array(g, copy=True)
                    else:
                        tensor.grad = g
                continue
            op, ctx, inputs = tensor.node
            tensor.node = None
            if g is None:
                continue
            input_grads = op.backward(ctx, g)
            handed = [id(pg) for pg in input_grads if pg is not None]
            shared.update(i for i in handed if handed.count(i) > 1)
            for parent, pg in zip(inputs, input_grads):
                if pg is None or parent is None or not parent.requires_grad:
                    continue
                if pg.shape != parent.shape:
                    raise AssertionError(f"{op.name}.backward returned {pg.shape} for an input "
                                         f"of shape {parent.shape}")
                key = id(parent)
                if key not in grads:
                    grads[key] = pg
                elif key in owned:
                    grads[key] += pg
                else:
                    grads[key] = grads[key] + pg
                    owned.add(key)


def _topological_order(root: Tensor) -> list[Tensor]:
    """Tensors reachable from root, each after all the tensors it was computed from."""
    order, seen, stack = [], set(), [(root, False)]
    while stack:
        tensor, expanded = stack.pop()
        if expanded:
            order.append(tensor)
            continue
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        stack.append((tensor, True))
        if tensor.node is not None:
            for parent in tensor.node[2]:
                if parent is not None and id(parent) not in seen:
                    stack.append((parent, False))
    return order


class Op:
    """One differentiable operation: ``forward(ctx, *arrays)`` and ``backward(ctx, grad)``.

    Subclasses set ``name`` and implement both methods; ``backward`` returns one gradient per
    input (None where the input is not differentiable). Calling an op instance on tensors (or
    None for an absent optional input, such as a bias) returns the output tensor.
    """

    name = "op"
    #: True for an op whose backward reads its own output array (softmax): that array must
    #: then stay as it is, and no later op may overwrite it (``reuse_input`` of the
    #: elementwise ops).
    keeps_output = False

    def __call__(self, *inputs):
        arrays = [None if t is None else t.data for t in inputs]
        dtypes = {a.dtype for a in arrays if a is not None}
        if len(dtypes) > 1:
            raise InputError(f"{self.name}: inputs mix dtypes "
                             + ", ".join(str(a.dtype) for a in arrays if a is not None))
        ctx = Context()
        # which inputs want a gradient: backward may skip the others (e.g. frozen backbone taps)
        ctx.needs_input_grad = tuple(t is not None and t.requires_grad for t in inputs)
        # whether backward can run at all: inference (no_grad, or frozen inputs only) lets
        # forward skip what it would keep for backward
        ctx.recording = needs = _grad_enabled and any(ctx.needs_input_grad)
        out = self.forward(ctx, *arrays)
        result = Tensor(out, requires_grad=needs)
        if needs:
            result.node = (self, ctx, tuple(inputs))
        return result

    def forward(self, ctx, *arrays):
        raise NotImplementedError

    def backward(self, ctx, grad):
        raise NotImplementedError


@infrastructure("argument validation")
def as_tensor(value, name: str) -> Tensor:
    """A Tensor as it is, or an array wrapped (no gradient); InputError otherwise."""
    if isinstance(value, Tensor):
        return value
    return Tensor(np.asarray(value), name=name)
