"""glibc's allocator settings for refseg's arrays: keep freed memory for the next array.

A batch-8 prediction at 224x224 allocates and frees activations of 4-40 MB layer after layer.
glibc's defaults hand such blocks back to the kernel: blocks above a threshold that adapts up
to 32 MiB are mapped and unmapped one by one, and the top of the heap is trimmed when more
than twice that is free. Every new array then faults its pages in afresh, and the kernel zeroes
each page first. On the 2-core Zen 4 of docs/performance.md that cost a batch-8 prediction
about 2,900 page faults and 57-105 ms of system time. With the thresholds fixed as below, it
was 6-8 faults and 8-39 ms, and the wall time 0.85-1.07 of the default's in nine pairs of runs
(median 0.92; at batch 1, which faults a few pages only, no difference beyond the noise). The
price is that a process keeps the memory of its largest prediction until it exits.

``keep_freed_memory`` sets both thresholds through ``mallopt``. The engine calls it when it
first runs (``refseg.engine.training.training_engine``), unless the environment already sets either threshold for glibc (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_``, or ``glibc.malloc`` tunables in ``GLIBC_TUNABLES``): then the
user's choice stands. On a C library without ``mallopt`` (musl, macOS) it does nothing.

A job whose peak is a few whole-image arrays made once each (``refseg edges``) wants the
opposite: memory that follows the arrays alive. ``return_freed_memory`` gives glibc back its
start-up thresholds for the length of a ``with`` block (a 24-megapixel photograph otherwise
keeps the decoder's freed 5-8 bytes per pixel beside the extraction's peak).
"""
from __future__ import annotations

import contextlib
import ctypes
import os

from refseg.cite import infrastructure

#: ``mallopt`` parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

#: Blocks of this size and below come from the heap. glibc allows no more than 32 MiB on
#: 64-bit systems: the larger arrays of a batch-8 prediction (8 x 112 x 112 x 96 float32,
#: 38.5 MB) are still mapped one by one.
MMAP_THRESHOLD = 32 << 20

#: Free memory at the top of the heap beyond which glibc returns it to the kernel.
TRIM_THRESHOLD = 1 << 30

#: glibc's start-up values of both thresholds (malloc.h's DEFAULT_MMAP_THRESHOLD_MIN and
#: DEFAULT_TRIM_THRESHOLD), which ``return_freed_memory`` restores for a while.
GLIBC_MMAP_THRESHOLD = 128 << 10
GLIBC_TRIM_THRESHOLD = 128 << 10

#: Environment variables through which glibc takes these settings at start-up.
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")

#: Whether this process runs with the thresholds above (set by ``keep_freed_memory``), for the
#: benchmark reports.
applied = False
#: Whether ``keep_freed_memory`` has been called in this process.
considered = False


def _user_has_chosen(environ) -> bool:
    return (any(name in environ for name in USER_SETTINGS)
            or "glibc.malloc" in environ.get("GLIBC_TUNABLES", ""))


@infrastructure("the C allocator's thresholds: speed only, no claim element")
def keep_freed_memory(environ=None) -> bool:
    """Fix glibc's mmap and trim thresholds (``MMAP_THRESHOLD``, ``TRIM_THRESHOLD``) so that
    freed arrays stay in the process for the next ones.

    Parameters
    ----------
    environ : mapping, optional
        The environment to look for the user's own settings in; default ``os.environ``.

    Returns
    -------
    bool
        Whether both thresholds were set: False when the environment sets them (the user's
        choice stands) or the C library has no ``mallopt``.
    """
    global applied, considered
    considered = True
    if _user_has_chosen(os.environ if environ is None else environ):
        return False
    applied = _set_thresholds(MMAP_THRESHOLD, TRIM_THRESHOLD)
    return applied


def _c_function(name, argtypes):
    """The C library's function ``name``, or None where it has none."""
    try:
        function = getattr(ctypes.CDLL(None), name)
    except (AttributeError, OSError):
        return None
    function.argtypes = argtypes
    function.restype = ctypes.c_int
    return function


def _set_thresholds(mmap_threshold: int, trim_threshold: int) -> bool:
    mallopt = _c_function("mallopt", (ctypes.c_int, ctypes.c_int))
    return mallopt is not None and bool(mallopt(M_MMAP_THRESHOLD, mmap_threshold)
                                        and mallopt(M_TRIM_THRESHOLD, trim_threshold))


@infrastructure("the C allocator's thresholds: memory only, no claim element")
@contextlib.contextmanager
def return_freed_memory():
    """Within the block, glibc's start-up thresholds: each block above 128 KiB is mapped on
    its own and unmapped when freed, and free memory at the top of the heap is handed back.

    On entry the free memory the heap already holds is handed back too (``malloc_trim``); on
    exit the thresholds of :func:`keep_freed_memory` are set again. Where they were never set
    (the user's own settings stand, or there is no ``mallopt``) the block runs unchanged.
    """
    if not applied:
        yield
        return
    _set_thresholds(GLIBC_MMAP_THRESHOLD, GLIBC_TRIM_THRESHOLD)
    trim = _c_function("malloc_trim", (ctypes.c_size_t,))
    if trim is not None:
        trim(0)
    try:
        yield
    finally:
        _set_thresholds(MMAP_THRESHOLD, TRIM_THRESHOLD)
