"""The training engine's kernels for a backend: the compiled ones, or their NumPy twins.

The engine's kernels are compiled into ``refseg._kernels`` beside the reference's; their twins
live in ``engine/training/_twins.py``, outside the reference's ``refseg._twins`` (the reference
never imports the engine). Backend ``"numpy"`` here is the reference's twins and the engine's
together, so that an engine module reaches every kernel it calls through one handle.
"""
from __future__ import annotations

from types import SimpleNamespace

from refseg.backend import kernels

INFRASTRUCTURE = "the switch between the engine's compiled kernels and their NumPy twins"

_LOADED: dict = {}


def engine_kernels(backend: str):
    """The kernels of ``backend`` ("cython" or "numpy"), the engine's among them."""
    found = _LOADED.get(backend)
    if found is not None:
        return found
    module = kernels(backend)  # checks the name
    if backend == "numpy":
        from refseg.engine.training import _twins as engine_twins

        names = {name: getattr(module, name) for name in module.__all__}
        names.update({name: value for name, value in vars(engine_twins).items()
                      if not name.startswith("_") and callable(value)
                      and getattr(value, "__module__", None) == engine_twins.__name__})
        module = SimpleNamespace(**names)
    _LOADED[backend] = module
    return module


def twin_names() -> list[str]:
    """The names of the engine's twins (its kernels in ``refseg._kernels``)."""
    from refseg.engine.training import _twins as engine_twins

    return sorted(name for name, value in vars(engine_twins).items()
                  if not name.startswith("_") and callable(value)
                  and getattr(value, "__module__", None) == engine_twins.__name__)


def row_loops() -> tuple[str, bool]:
    """Which float32 row loops the direct convolution kernels run now, and whether this CPU
    can run the AVX-512 ones.

    Returns
    -------
    path : str
        ``"avx512"`` (the loops of ``engine/training/direct_conv_avx512.c``) or ``"baseline"``
        (the plain x86-64 loops of ``engine/training/_direct_conv.pxi``). The kernels choose
        AVX-512 at import where the CPU has it; ``_kernels.use_avx512`` switches it off for
        tests.
    supported : bool
        The CPU has AVX-512F (``__builtin_cpu_supports("avx512f")``).

    Notes
    -----
    Read through ``use_avx512``, the kernels' only handle on the choice: asking for AVX-512
    returns the current setting and then holds the CPU's support, and the current setting is
    put back at once. Not safe against another thread switching the loops at the same time.
    """
    from refseg import _kernels

    active = _kernels.use_avx512(True)
    supported = _kernels.use_avx512(active)
    return ("avx512" if active else "baseline"), bool(supported)
