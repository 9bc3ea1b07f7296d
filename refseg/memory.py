"""glibc's allocator while a job makes a few whole-image arrays once each: memory that follows
the arrays alive.

``refseg edges`` peaks at a few whole-image arrays, each made once. With glibc's defaults, the
threshold above which a block is mapped on its own rises to the size of the last mapped block
freed (up to 32 MiB), and the heap keeps what is freed below it: the decoder's and each
operator's freed memory then add up to about a byte per pixel beside the extraction's peak.
``return_freed_memory`` fixes both thresholds at glibc's start-up values for the length of a
``with`` block, so that every block above 128 KiB is mapped on its own and unmapped when freed,
and hands back what the heap holds on entry.

The user's own settings (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``,
``MALLOC_MMAP_MAX_`` or ``glibc.malloc`` tunables in ``GLIBC_TUNABLES``) stand: the block then changes nothing. On a C
library without ``mallopt`` (musl, macOS) it does nothing. A part of the program that fixed
thresholds of its own (the engine's ``keep_freed_memory``) registers them with
``thresholds_after_blocks``, and they are put back when a block ends.
"""
from __future__ import annotations

import contextlib
import ctypes
import os

INFRASTRUCTURE = "the C allocator's thresholds: memory only, no claim element"

#: ``mallopt`` parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_MMAP_MAX = -4

#: glibc's start-up values of both thresholds (malloc.h's DEFAULT_MMAP_THRESHOLD_MIN and
#: DEFAULT_TRIM_THRESHOLD), which ``return_freed_memory`` fixes for a while.
GLIBC_MMAP_THRESHOLD = 128 << 10
GLIBC_TRIM_THRESHOLD = 128 << 10
#: glibc's start-up count of blocks it may map on their own at once (DEFAULT_MMAP_MAX).
GLIBC_MMAP_MAX = 65536

#: Environment variables through which glibc takes these settings at start-up.
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_MAX_")

# (mmap, trim) thresholds to put back after a block, or None: glibc's start-up values stay
_AFTER: list = [None]


def user_has_chosen(environ=None) -> bool:
    """Whether the environment sets glibc's thresholds (then refseg leaves them alone)."""
    environ = os.environ if environ is None else environ
    return (any(name in environ for name in USER_SETTINGS)
            or "glibc.malloc" in environ.get("GLIBC_TUNABLES", ""))


def c_function(name, argtypes):
    """The C library's function ``name`` (returning int), or None where it has none."""
    try:
        function = getattr(ctypes.CDLL(None), name)
    except (AttributeError, OSError):
        return None
    function.argtypes = argtypes
    function.restype = ctypes.c_int
    return function


def set_thresholds(mmap_threshold: int, trim_threshold: int,
                   mmap_max: int = GLIBC_MMAP_MAX) -> bool:
    """Fix glibc's mmap and trim thresholds and the most blocks it maps on their own (0: none,
    every block comes from the heap); whether all three were set."""
    mallopt = c_function("mallopt", (ctypes.c_int, ctypes.c_int))
    return mallopt is not None and bool(mallopt(M_MMAP_THRESHOLD, mmap_threshold)
                                        and mallopt(M_TRIM_THRESHOLD, trim_threshold)
                                        and mallopt(M_MMAP_MAX, mmap_max))


def thresholds_after_blocks(mmap_threshold: int, trim_threshold: int,
                            mmap_max: int = GLIBC_MMAP_MAX) -> None:
    """The settings that ``return_freed_memory`` puts back when a block ends."""
    _AFTER[0] = (mmap_threshold, trim_threshold, mmap_max)


@contextlib.contextmanager
def return_freed_memory():
    """Within the block, glibc's start-up thresholds, fixed: each block above 128 KiB is mapped
    on its own (as many as glibc maps by default) and unmapped when freed, and free memory at
    the top of the heap is handed back.

    On entry the free memory the heap already holds is handed back too (``malloc_trim``); on
    exit the thresholds registered with :func:`thresholds_after_blocks` are set again (none
    registered: the start-up values stay). With the user's own settings the block runs
    unchanged.
    """
    if user_has_chosen() or not set_thresholds(GLIBC_MMAP_THRESHOLD, GLIBC_TRIM_THRESHOLD):
        yield
        return
    trim = c_function("malloc_trim", (ctypes.c_size_t,))
    if trim is not None:
        trim(0)
    try:
        yield
    finally:
        if _AFTER[0] is not None:
            set_thresholds(*_AFTER[0])
