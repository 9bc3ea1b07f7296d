"""The one error type refseg raises for bad input, and the checks that raise it.

NumPy is imported by the check that needs it, not by this module: the command line names
:class:`InputError` while it parses, before anything heavy is loaded.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

INFRASTRUCTURE = "the error type and generic argument validation"


class InputError(ValueError):
    """Bad input: the message names the argument or file and the problem, on one line."""


class ImportOrderWarning(RuntimeWarning):
    """refseg was imported after a library that reads how idle threads wait (NumPy's
    OpenBLAS, OpenMP's libgomp) had loaded, so the settings ``import refseg`` makes for them
    do not apply (``refseg/__init__.py``)."""


def reason(exc: BaseException) -> str:
    """What went wrong, for a one-line error: the exception's message on one line, never
    Python's name for it (a missing key reads "no 'epoch'", an empty message says what kind
    of failure it was)."""
    if isinstance(exc, KeyError) and exc.args:
        key = exc.args[0]
        return key if isinstance(key, str) and " " in key else f"no {key!r}"
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    text = " ".join(str(exc).split())
    if text:
        return text
    return "the data ends early" if isinstance(exc, EOFError) else "unreadable data"


def kind_of(value) -> str:
    """A JSON value's kind in words ("a list", "a string", "null"), for an error line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    for kind, name in ((dict, "an object"), ((list, tuple), "a list"), (str, "a string"),
                       ((int, float), "a number")):
        if isinstance(value, kind):
            return name
    return "a value of another kind"


def as_float_image(array, name: str, *, min_size: int = 1) -> np.ndarray:
    """A finite 2-D float64 C-contiguous copy-or-view of ``array``; InputError otherwise."""
    import numpy as np

    a = np.asarray(array)
    if a.ndim != 2:
        raise InputError(f"{name}: expected a 2-D array (rows, cols), got shape {a.shape}")
    if a.dtype.kind not in "biuf":
        raise InputError(f"{name}: expected a real numeric array, got dtype {a.dtype}")
    if min(a.shape) < min_size:
        raise InputError(f"{name}: image is {a.shape[0]}x{a.shape[1]} pixels; "
                         f"at least {min_size}x{min_size} is needed")
    a = np.ascontiguousarray(a, dtype=np.float64)
    if not np.isfinite(a).all():
        raise InputError(f"{name}: contains NaN or infinite values")
    return a


def check_threshold(value, name: str) -> float:
    """A finite, non-negative float threshold; InputError otherwise."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name}: expected a number, got {value!r}") from None
    if not math.isfinite(v) or v < 0:
        raise InputError(f"{name}: expected a finite number >= 0, got {v}")
    return v
