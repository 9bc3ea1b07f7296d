"""The engine's one switch: ``use_engine(False)`` sends every op to the reference route."""
from __future__ import annotations

import contextlib
import contextvars

from refseg.errors import InputError

INFRASTRUCTURE = "the switch between the engine and the reference route"

_ENABLED: contextvars.ContextVar[bool] = contextvars.ContextVar("refseg_engine", default=True)


@contextlib.contextmanager
def use_engine(enabled: bool):
    """Within the block, the engine runs (True, the default outside any block) or every op
    takes the reference route (False): the engine's entry points
    (``refseg.engine.training.training_engine``) then install nothing.

    Raises
    ------
    InputError
        ``enabled`` is not a bool.
    """
    if not isinstance(enabled, bool):
        raise InputError(f"use_engine: expected True or False, got {enabled!r}")
    token = _ENABLED.set(enabled)
    try:
        yield
    finally:
        _ENABLED.reset(token)


def engine_enabled() -> bool:
    """Whether the engine runs here (see ``use_engine``)."""
    return _ENABLED.get()
