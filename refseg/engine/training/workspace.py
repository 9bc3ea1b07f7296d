"""Scratch memory shared by the convolution algorithms: one vector per dtype and slot, grown as
needed and reused by every op.

Column matrices and Winograd's transformed tiles are temporaries. Writing them into memory
that is already mapped avoids the page faults of a fresh allocation on every call. Only one op
at a time uses the workspace (an op finishes with it before it returns), so nothing an op
returns may be a view of it.
"""
from __future__ import annotations

import numpy as np

INFRASTRUCTURE = "scratch memory reused by the convolutions: speed only, no claim element"

_BUFFERS: dict = {}


def workspace(size: int, dtype, slot: str = "columns") -> np.ndarray:
    """A scratch vector of ``size`` elements of ``dtype``, in ``slot``.

    Its contents are whatever the last user left; it stays valid until the next call for the
    same dtype and slot. Slots are buffers that one op uses at the same time: the Winograd
    path keeps its transformed kernel in "winograd kernel" while it transforms blocks of tiles
    in "columns".
    """
    key = (np.dtype(dtype), slot)
    buffer = _BUFFERS.get(key)
    if buffer is None or buffer.size < size:
        buffer = np.empty(max(size, 1), dtype=key[0])
        _BUFFERS[key] = buffer
    return buffer[:size]
