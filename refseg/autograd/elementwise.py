"""Elementwise ops and explicit padding: add, relu, relu6, softmax, zero_pad2d.

References: [0150]-[0192] (Add: multi-scale fusion), [0140], [0226]-[0229] (ReLU, ReLU6),
[0194]-[0195] (softmax), [0137] (zero padding in ResNet50).
"""
from __future__ import annotations

import numpy as np

from refseg.autograd.tensor import Op, Tensor, as_tensor
from refseg.backend import kernels
from refseg.errors import InputError
from refseg.cite import implements, infrastructure


def _flat(a) -> np.ndarray:
    """a as a contiguous 1-D array (a view when it already is contiguous)."""
    return np.ascontiguousarray(a).reshape(-1)


@infrastructure("where an elementwise op writes its result: memory only, no claim element")
def output_buffer(x: np.ndarray, reuse_input: bool) -> np.ndarray:
    """Where an elementwise op writes its result: x itself when the caller lets the op
    overwrite its input and x's buffer can take the result in place (C-contiguous, writeable),
    else a fresh array of x's shape and dtype.

    Writing in place saves an activation's memory (in training the graph would otherwise hold
    both the input and the output) and the clearing of fresh pages; the values are the same.
    """
    if reuse_input and x.flags.c_contiguous and x.flags.writeable:
        return x
    return np.empty(x.shape, dtype=x.dtype)


@implements("claim2.fusion", "claim4.propagation")
class Add(Op):
    """x + y for equal shapes (the skip connections of [0150]-[0192]). With ``reuse_input``
    the sum may be written into x's array (see :func:`output_buffer`)."""

    name = "add"

    def __init__(self, backend="cython", reuse_input=False):
        self.backend, self.reuse_input = backend, bool(reuse_input)

    def forward(self, ctx, x, y):
        if x.shape != y.shape:
            raise InputError(f"add: shapes differ: {x.shape} and {y.shape}")
        out = output_buffer(x, self.reuse_input)
        kernels(self.backend).add_arrays(_flat(x), _flat(y), out.reshape(-1))
        return out

    def backward(self, ctx, grad):
        return grad, grad


#: The clamp bounds that change no value: an op without a ReLU in its last pass.
UNCLAMPED = (-np.inf, np.inf)


@implements("claim2.fusion", "claim2.backbones")
def relu_bounds(relu: bool, cap: float | None, op: str) -> tuple[float, float]:
    """The bounds the ReLU op clamps to: [0, inf), or [0, cap] for ReLU6 (cap 6); UNCLAMPED
    without ``relu``. For the ops that compute a ReLU in their own last pass (batch norm, the
    convolutions); InputError for a cap without ``relu``, naming ``op``."""
    if cap is not None and not relu:
        raise InputError(f"{op}: a cap needs relu=True")
    return (0.0, np.inf if cap is None else float(cap)) if relu else UNCLAMPED


@implements("claim4.propagation")
def relu_passes(values: np.ndarray, bounds: tuple[float, float],
                backend: str = "cython") -> np.ndarray:
    """Where a ReLU with ``bounds`` passes its input, i.e. where its gradient is 1: low <
    values < high, elementwise (bool, values' shape). The ReLU's input and its clamped output
    give the same mask (NaN: False), so an op that clamps in place can take it from its
    output. On refseg's threads (``relu_mask``) for a C-contiguous float array."""
    values = np.asarray(values)
    mask = np.empty(values.shape, dtype=bool)
    if values.dtype in (np.float32, np.float64) and values.flags.c_contiguous:
        kernels(backend).relu_mask(values.reshape(-1), *bounds, mask.reshape(-1).view(np.uint8))
        return mask
    low, high = bounds
    mask[...] = values > low
    if high < np.inf:
        mask &= values < high
    return mask


@implements("claim4.propagation")
def masked_gradient(grad: np.ndarray, mask: np.ndarray, backend: str = "cython") -> np.ndarray:
    """grad * mask (a bool mask of ``relu_passes`` of grad's shape): the ReLU's backward, a new
    array. On refseg's threads (``masked_gradient``) for C-contiguous float arrays; the same
    values as NumPy's product."""
    grad = np.asarray(grad)
    if not (grad.dtype in (np.float32, np.float64) and grad.flags.c_contiguous
            and mask.flags.c_contiguous and mask.size == grad.size):
        return grad * mask.reshape(grad.shape)
    out = np.empty(grad.shape, dtype=grad.dtype)
    kernels(backend).masked_gradient(grad.reshape(-1), mask.reshape(-1).view(np.uint8),
                                     out.reshape(-1))
    return out


@implements("claim2.fusion", "claim4.propagation")
class ReLU(Op):
    """max(x, 0); with ``cap``, min(max(x, 0), cap) (ReLU6 for cap 6). The gradient is 1 where
    0 < x (< cap), else 0 (at the kinks, 0, as torch and TensorFlow). With ``reuse_input``
    the result may be written into x's array (see :func:`output_buffer`): backward needs only
    where x passed, never x itself."""

    name = "relu"

    def __init__(self, cap: float | None = None, backend="cython", reuse_input=False):
        self.cap = cap
        self.bounds = relu_bounds(True, cap, self.name)
        self.backend, self.reuse_input = backend, bool(reuse_input)
        if cap is not None:
            self.name = "relu6" if cap == 6 else f"relu{cap:g}"

    def forward(self, ctx, x):
        if ctx.recording:
            ctx.save_for_backward(relu_passes(x, self.bounds, self.backend))
        out = output_buffer(x, self.reuse_input)
        kernels(self.backend).clamp(_flat(x), *self.bounds, out.reshape(-1))
        return out

    def backward(self, ctx, grad):
        (pass_through,) = ctx.saved
        return (masked_gradient(grad, pass_through, self.backend),)


#: Channels up to which softmax runs on the compiled row kernels: NumPy sums up to 7 values
#: left to right, as ``divide_by_row_sum`` does (longer rows it sums pairwise).
SOFTMAX_ROW_KERNEL_MAX = 7


@implements("claim2.fusion", "claim4.propagation")
class Softmax(Op):
    """exp(x - max) / sum over the last (channel) axis."""

    name = "softmax"
    keeps_output = True  # backward reads p: no later op may overwrite it

    def __init__(self, backend="cython"):
        self.backend = backend

    def forward(self, ctx, x):
        if x.shape[-1] > SOFTMAX_ROW_KERNEL_MAX:
            e = np.exp(x - x.max(axis=-1, keepdims=True))
            p = e / e.sum(axis=-1, keepdims=True)
        else:
            # the shift and the normalisation compiled, NumPy's own exp between them: the
            # same values as the two lines above, without NumPy's slow reductions over a
            # short last axis
            x2 = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
            p = np.empty_like(x2)
            kernels(self.backend).subtract_row_max(x2, p)
            np.exp(p, out=p)
            kernels(self.backend).divide_by_row_sum(p, p)
            p = p.reshape(x.shape)
        ctx.save_for_backward(p)
        return p

    def backward(self, ctx, grad):
        (p,) = ctx.saved
        return (p * (grad - (grad * p).sum(axis=-1, keepdims=True)),)


@implements("claim2.backbones", "claim4.propagation")
class ZeroPad2D(Op):
    """Keras ZeroPadding2D: ((top, bottom), (left, right)) zeros around NHWC images."""

    name = "zero_pad2d"

    def __init__(self, padding, backend="cython"):
        self.backend = backend
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
        n, h, w, c = x.shape
        out = np.empty((n, h + t + b, w + l + r, c), dtype=x.dtype)
        kernels(self.backend).zero_pad(np.ascontiguousarray(x), t, l, out)
        return out

    def backward(self, ctx, grad):
        (t, _), (l, _) = self.padding
        _, h, w, _ = ctx.shape
        return (grad[:, t:t + h, l:l + w].copy(),)  # never a view of grad (see backward)


@implements("claim2.fusion", "claim4.propagation")
def add(x, y, *, backend="cython", reuse_input=False) -> Tensor:
    """Elementwise sum of two tensors of equal shape (multi-scale fusion, [0150]).

    ``reuse_input=True`` lets the sum overwrite x's array: only for an x that nothing else
    reads afterwards and that the op which made it does not keep (``Op.keeps_output``).
    """
    return Add(backend, reuse_input)(as_tensor(x, "x"), as_tensor(y, "y"))


@implements("claim2.fusion", "claim4.propagation")
def relu(x, *, backend="cython", reuse_input=False) -> Tensor:
    """max(x, 0) (the decoder's activation, [0140], [0195]); ``reuse_input`` as for
    :func:`add`."""
    return ReLU(backend=backend, reuse_input=reuse_input)(as_tensor(x, "x"))


@implements("claim2.backbones", "claim4.propagation")
def relu6(x, *, backend="cython", reuse_input=False) -> Tensor:
    """min(max(x, 0), 6) (MobileNetV2's activation, [0140], [0226]-[0229]); ``reuse_input`` as
    for :func:`add`."""
    return ReLU(6.0, backend, reuse_input)(as_tensor(x, "x"))


@implements("claim2.fusion", "claim4.propagation")
def softmax(x, *, backend="cython") -> Tensor:
    """Softmax over the last axis (the prediction layer's activation, [0194]-[0195])."""
    return Softmax(backend)(as_tensor(x, "x"))


@implements("claim2.backbones", "claim4.propagation")
def zero_pad2d(x, padding, *, backend="cython") -> Tensor:
    """Zero padding ((top, bottom), (left, right)) of NHWC images ([0137])."""
    return ZeroPad2D(padding, backend)(as_tensor(x, "x"))
