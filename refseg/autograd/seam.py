"""The one place that decides how the autograd's convolutions and Adam's update are computed.

Outside any block, every convolution takes the reference route of ``refseg.autograd.conv``:
im2col and one matrix product in a fixed order, then the bias, batch norm and ReLU as written;
Adam's update is ``refseg.autograd.optim.AdamUpdate``'s one loop. A faster implementation
(training's engine, ``refseg.engine.training``) offers its own op classes, each a subclass
of a reference op with the same inputs, outputs and gradients to rounding, and installs them for the length of a ``with`` block (``ops_replaced``). The
reference never imports an implementation; an implementation reaches the reference only
through this module.

The choice is held per thread and per asynchronous context (a ``ContextVar``), so that one
part of a program can run the reference while another trains.
"""
from __future__ import annotations

import contextlib
import contextvars

from refseg.errors import InputError

INFRASTRUCTURE = "the choice between the reference ops and an installed faster implementation"

_REPLACEMENTS: contextvars.ContextVar[dict | None] = contextvars.ContextVar(
    "refseg_replaced_ops", default=None)


@contextlib.contextmanager
def ops_replaced(replacements: dict):
    """Within the block, each reference op class in ``replacements`` is computed by the class it
    maps to.

    Parameters
    ----------
    replacements : dict of type to type
        {reference op class: its subclass}. A block inside another replaces on top of the
        outer block's classes; ``{}`` leaves them as they are.

    Raises
    ------
    InputError
        A replacement is not a subclass of the op it replaces.
    """
    for reference, replacement in replacements.items():
        if not (isinstance(replacement, type) and issubclass(replacement, reference)):
            raise InputError(f"ops_replaced: {replacement!r} is not a subclass of "
                             f"{reference.__name__}")
    outer = _REPLACEMENTS.get() or {}
    token = _REPLACEMENTS.set({**outer, **replacements})
    try:
        yield
    finally:
        _REPLACEMENTS.reset(token)


@contextlib.contextmanager
def reference_ops():
    """Within the block, every op takes the reference route, whatever an outer block
    installed."""
    token = _REPLACEMENTS.set(None)
    try:
        yield
    finally:
        _REPLACEMENTS.reset(token)


def op_class(reference: type) -> type:
    """The class that computes ``reference`` here: its installed replacement, or itself."""
    replacements = _REPLACEMENTS.get()
    if not replacements:
        return reference
    return replacements.get(reference, reference)
