"""Choice of kernel backend: the compiled kernels or their NumPy twins.

Every public function that runs a hot loop takes ``backend="cython"`` (default) or
``backend="numpy"``; both produce bit-identical results (see ``tests/*/test_*_kernels.py``).
"""
from __future__ import annotations

from types import ModuleType

from refseg.errors import InputError

INFRASTRUCTURE = "the switch between compiled kernels and their NumPy twins"

BACKENDS = ("cython", "numpy")


def kernels(backend: str) -> ModuleType:
    """The module holding the kernels for ``backend``."""
    if backend == "cython":
        from refseg import _kernels

        return _kernels
    if backend == "numpy":
        # imported here, not above: the autograd twins live in refseg.autograd, whose modules
        # import this one
        from refseg import _reference

        return _reference
    raise InputError(f"backend: expected one of {BACKENDS}, got {backend!r}")
