"""The thread counts of the native libraries that refseg's numbers run on.

refseg's parallel work runs on one pool, OpenMP's (libgomp): its compiled kernels, and the
network's matrix products, which are tiles of single-threaded calls of SciPy's OpenBLAS handed
out to the OpenMP threads (``refseg.autograd.products``; ``single_threaded_blas`` keeps that
OpenBLAS at one thread of its own). NumPy's OpenBLAS, a separate library in the wheels, is left
as it is. How a product is cut into tiles depends on the thread count, and a float32 sum split
otherwise is rounded otherwise, so outputs that must be reproducible to the bit (the golden
bundle's network part) are computed with the pools pinned (``limit_threads``). This module
finds the libraries that the process has loaded (``/proc/self/maps``) and calls their own
thread functions through ctypes, so that it needs nothing beyond the standard library.
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
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


def _needed_libraries(path: str) -> list[str]:
    """The DT_NEEDED entries (file names of the libraries it links) of a 64-bit little-endian
    ELF shared object, [] for any other file."""
    data = Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return []

    def unsigned(offset, size):
        return int.from_bytes(data[offset:offset + size], "little")

    section_table, entry_size, count = unsigned(0x28, 8), unsigned(0x3A, 2), unsigned(0x3C, 2)
    sections = [(unsigned(o + 4, 4), unsigned(o + 0x18, 8), unsigned(o + 0x20, 8),
                 unsigned(o + 0x28, 4))
                for o in range(section_table, section_table + count * entry_size, entry_size)]
    names = []
    for kind, offset, size, link in sections:
        if kind != 6:  # SHT_DYNAMIC; its sh_link is the section of its strings
            continue
        strings = sections[link][1]
        for entry in range(offset, offset + size, 16):
            if unsigned(entry, 8) == 1:  # DT_NEEDED
                start = strings + unsigned(entry + 8, 8)
                names.append(data[start:data.index(b"\0", start)].decode())
    return names


@functools.cache
def kernel_blas_pool() -> NativePool | None:
    """The thread functions of the BLAS library that refseg's products call (the one that
    ``scipy.linalg.cython_blas`` links), None if it is not an OpenBLAS this module knows.

    Found from the libraries that module links, not by name alone: NumPy's wheels carry their
    own OpenBLAS beside SciPy's, torch may load a third, and distributions link NumPy and SciPy
    to one.
    """
    from scipy.linalg import cython_blas

    needed = set(_needed_libraries(cython_blas.__file__))
    pools = [p for p in native_pools()
             if p.kind == "openblas" and os.path.basename(p.path) in needed]
    return pools[0] if pools else None


def single_threaded_blas() -> None:
    """Keep the BLAS of refseg's products at one thread of its own: the products run on
    OpenMP's threads (``refseg.autograd.products``), and a BLAS call that started threads of its
    own there would put two pools back on the cores. Called before every product (a read of
    one integer), so that a thread count set since (``limit_threads``, the user's own BLAS
    calls) is put back. Does nothing for a BLAS that is not OpenBLAS."""
    pool = kernel_blas_pool()
    if pool is not None and pool.get() != 1:
        pool.set(1)
