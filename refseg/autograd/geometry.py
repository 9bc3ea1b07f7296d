"""Window geometry of convolution and pooling, with Keras' "valid" and "same" paddings.

Output pixel i of a window op reads input rows ``i * stride - pad + a`` for ``a = 0..k-1``;
rows outside the input read zero. Checked against Keras 3 (``tests/autograd/test_autograd_keras.py``).
"""
from __future__ import annotations

import numpy as np

from refseg.errors import InputError
from refseg.cite import implements, infrastructure

PADDINGS = ("valid", "same")


@infrastructure("argument validation of the window ops")
def int_pair(value, name: str, op: str) -> tuple[int, int]:
    """``value`` as (rows, columns): an int for both, or a pair of them, each >= 1.

    Raises InputError naming ``op`` and the argument ``name`` otherwise.
    """
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2 or not all(isinstance(v, (int, np.integer)) and v >= 1 for v in pair):
        raise InputError(f"{op}: {name} must be a positive int or a pair of them, got {value!r}")
    return int(pair[0]), int(pair[1])


@implements("claim2.fusion", "claim4.propagation")
def flipped_kernel(w: np.ndarray) -> np.ndarray:
    """The kernel of the adjoint stride-1 convolution: flipped in space, in and out exchanged.

    Parameters
    ----------
    w : ndarray of shape (kh, kw, A, B)

    Returns
    -------
    ndarray of shape (kh, kw, B, A), C-contiguous, a new array.
    """
    return np.ascontiguousarray(w[::-1, ::-1].transpose(0, 1, 3, 2))


@implements("claim4.propagation")
def conv_output(size: int, kernel: int, stride: int, padding: str, op: str) -> tuple[int, int]:
    """(output size, padding before) of a convolution or pooling along one axis.

    Parameters
    ----------
    size, kernel, stride : int
        Input length, window length, step (all >= 1).
    padding : {"valid", "same"}
        "valid": no padding, ``(size - kernel) // stride + 1`` outputs. "same":
        ``ceil(size / stride)`` outputs; total padding ``max((out - 1) * stride + kernel - size,
        0)``, the odd pixel at the end (Keras / TensorFlow).
    op : str
        Name used in error messages.

    Returns
    -------
    (int, int)

    References
    ----------
    [0146]-[0195] ("Padding" read as Keras padding="same").
    """
    _check(size, kernel, stride, padding, op)
    if padding == "valid":
        if size < kernel:
            raise InputError(f"{op}: input length {size} is shorter than the window {kernel} "
                             "with padding='valid'")
        return (size - kernel) // stride + 1, 0
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return out, total // 2


@implements("claim4.propagation")
def transpose_output(size: int, kernel: int, stride: int, padding: str,
                     op: str) -> tuple[int, int]:
    """(output size, crop before) of a transposed convolution along one axis, as Keras.

    Parameters
    ----------
    size, kernel, stride : int
    padding : {"valid", "same"}
        "valid": ``size * stride + max(kernel - stride, 0)`` outputs, no crop. "same":
        ``size * stride`` outputs: the full transposed convolution (length
        ``(size - 1) * stride + kernel``) cropped from index ``max(kernel - stride, 0) // 2``
        and padded with zeros at the end when shorter (kernel < stride), as Keras 3 does
        (measured); this is the padding before of the "same" convolution it is the adjoint of.
    op : str

    Returns
    -------
    (int, int)
        The crop is the ``pad`` of the equivalent window geometry: output index
        ``o = i * stride - crop + a``.

    References
    ----------
    [0146], [0152], [0194]; ``spec/measurements.md``, M-keras-padding.
    """
    _check(size, kernel, stride, padding, op)
    if padding == "valid":
        return size * stride + max(kernel - stride, 0), 0
    return size * stride, max(kernel - stride, 0) // 2


def _check(size, kernel, stride, padding, op):
    if padding not in PADDINGS:
        raise InputError(f"{op}: padding must be one of {PADDINGS}, got {padding!r}")
    if min(size, kernel, stride) < 1:
        raise InputError(f"{op}: sizes must be >= 1 (input {size}, kernel {kernel}, "
                         f"stride {stride})")
