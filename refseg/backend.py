"""Choice of kernel backend: the compiled kernels or their NumPy twins.

Every public function that runs a hot loop takes ``backend="cython"`` (default) or
``backend="numpy"``; both produce bit-identical results (see ``tests/*/test_*_kernels.py``).
"""
from __future__ import annotations

from pathlib import Path
from types import ModuleType

from refseg.errors import InputError

INFRASTRUCTURE = "the switch between compiled kernels and their NumPy twins"

BACKENDS = ("cython", "numpy")


_LOADED: dict[str, ModuleType] = {}


def kernels(backend: str) -> ModuleType:
    """The module holding the kernels for ``backend``."""
    module = _LOADED.get(backend)
    if module is not None:
        # every op calls this, a few hundred times per prediction
        return module
    if backend == "cython":
        from refseg import _kernels as module
    elif backend == "numpy":
        # imported here, not above: the autograd twins live in refseg.autograd, whose modules
        # import this one
        from refseg import _twins as module
    else:
        raise InputError(f"backend: expected one of {BACKENDS}, got {backend!r}")
    _LOADED[backend] = module
    return module


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo``, "" where there is none (not Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""
