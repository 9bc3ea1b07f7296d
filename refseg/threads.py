"""The thread counts of the native libraries that refseg's numbers run on.

Two thread pools compute refseg's results: OpenBLAS's, behind NumPy's (and SciPy's) matrix
products, and OpenMP's (libgomp), behind refseg's compiled kernels. A float32 sum split over
another number of threads is rounded differently, so outputs that must be reproducible to the
bit (the golden bundle's network part) are computed with both pools pinned. This module finds
the libraries that the process has loaded (``/proc/self/maps``) and calls their own thread
functions through ctypes, so that it needs nothing beyond the standard library.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

from refseg.errors import InputError

INFRASTRUCTURE = "thread control of the native libraries, for reproducible results"

#: (getter, setter) symbol names by library kind, first match wins: OpenBLAS as NumPy's wheels
#: build it (64-bit integers: ``64_`` suffix; ``scipy_`` prefix), as SciPy's build it (32-bit,
#: prefixed) and as distributions build it; OpenMP's standard functions.
_SYMBOLS = {
    "openblas": (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
                 ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
                 ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
                 ("openblas_get_num_threads", "openblas_set_num_threads")),
    "openmp": (("omp_get_max_threads", "omp_set_num_threads"),),
}
_MAPS = Path("/proc/self/maps")


@dataclass(frozen=True)
class NativePool:
    """One loaded library with a thread pool: its kind, its file and its thread functions."""

    kind: str
    path: str
    get: object
    set: object

    @property
    def threads(self) -> int:
        return int(self.get())


def _kind(path: str) -> str | None:
    name = os.path.basename(path).lower()
    if "openblas" in name:
        return "openblas"
    if name.startswith(("libgomp", "libomp", "libiomp")):
        return "openmp"
    return None


def native_pools() -> list[NativePool]:
    """The thread pools of the libraries loaded in this process (after loading refseg's kernels
    and NumPy's BLAS, so that both are among them)."""
    import numpy  # noqa: F401  (loads OpenBLAS)

    from refseg import _kernels  # noqa: F401  (loads libgomp)

    try:
        lines = _MAPS.read_text().splitlines()
    except OSError:
        raise InputError(f"{_MAPS}: not readable; refseg controls native threads on Linux "
                         "only") from None
    paths = sorted({line.split(None, 5)[5] for line in lines
                    if len(line.split(None, 5)) == 6 and ".so" in line})
    pools = []
    for path in paths:
        kind = _kind(path)
        if kind is None:
            continue
        try:
            library = ctypes.CDLL(path, mode=os.RTLD_NOLOAD)
        except OSError:
            continue
        for getter, setter in _SYMBOLS[kind]:
            if hasattr(library, getter) and hasattr(library, setter):
                get, set_ = getattr(library, getter), getattr(library, setter)
                get.restype, set_.restype = ctypes.c_int, None
                set_.argtypes = [ctypes.c_int]  # the thread count is a C int in every build
                pools.append(NativePool(kind, path, get, set_))
                break
    return pools


@contextlib.contextmanager
def limit_threads(threads: int):
    """Within the block, every loaded OpenBLAS and OpenMP pool uses ``threads`` threads; the
    previous counts are restored after it.

    Raises
    ------
    InputError
        ``threads`` is not a positive integer, or no BLAS pool is found (NumPy would then run
        its products with a thread count this block does not control).
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise InputError(f"threads: expected a positive integer, got {threads!r}")
    pools = native_pools()
    if not any(p.kind == "openblas" for p in pools):
        raise InputError("no OpenBLAS library found in this process: NumPy's matrix products "
                         "would run on a thread count refseg cannot pin")
    previous = [(p, p.threads) for p in pools]
    try:
        for pool in pools:
            pool.set(threads)
        yield pools
    finally:
        for pool, count in previous:
            pool.set(count)
