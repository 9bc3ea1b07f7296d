"""glibc's allocator settings for the engine's arrays: keep freed memory for the next array.

A batch-8 prediction at 224x224 allocates and frees activations of 4-40 MB layer after layer.
glibc's defaults hand such blocks back to the kernel: blocks above a threshold that adapts up
to 32 MiB are mapped and unmapped one by one, and the top of the heap is trimmed when more
than twice that is free. Every new array then faults its pages in afresh, and the kernel zeroes
each page first. On a 2-core Zen 4 (AMD EPYC, family 25 model 17) that cost a batch-8
prediction about 2,900 page faults and 57-105 ms of system time. With the thresholds fixed as
below, it was 6-8 faults and 8-39 ms, and the wall time 0.85-1.07 of the default's in nine pairs
of runs (median 0.92; at batch 1, which faults a few pages only, no difference beyond the
noise). Blocks above 32 MiB come from the heap too (``MMAP_MAX``). On 2 cores of a Zen 5 (AMD
EPYC, family 26 model 2), the batch-8 prediction faulted 5,700-5,800 pages per call with
glibc's defaults (63-94 ms of system time) and none with these settings; medians of seven calls,
four alternating pairs of fresh processes: 466, 434, 430, 458 ms against 470, 498, 489, 473.
The price is that a process keeps the memory of its largest prediction until it exits.

``keep_freed_memory`` makes these settings through ``mallopt`` when the engine first runs (a
plan's ``run``, or ``refseg.engine.training.training_engine``), unless the environment
already sets any of them for glibc (``refseg.memory.user_has_chosen``): then the user's choice
stands. It registers them with ``refseg.memory``, whose ``return_freed_memory`` blocks
(``refseg edges``) put them back when they end.
"""
from __future__ import annotations

import os

from refseg import memory
from refseg.cite import infrastructure

#: The mmap threshold: blocks of this size and below come from the heap. glibc allows no more
#: than 32 MiB on 64-bit systems.
MMAP_THRESHOLD = 32 << 20

#: The most blocks glibc maps on its own at once: none, so that the blocks above the threshold
#: come from the heap too. Otherwise each of them is mapped and unmapped one by one, and its
#: pages faulted in afresh: the 53 MB kernel gradient of the 2048 -> 720 transposed convolution,
#: made anew in every training step, took 34-48 ms on 2 threads of a Zen 5 (AMD EPYC, family 26
#: model 2) inside the demo's step, where huge pages first had to be assembled, against 13 ms
#: from the heap; the demo's step 370-394 -> 325-328 ms, and the default ``refseg demo`` 182 ->
#: 168 s, peak resident memory 1.26 -> 1.28 GB.
MMAP_MAX = 0

#: Free memory at the top of the heap beyond which glibc returns it to the kernel.
TRIM_THRESHOLD = 1 << 30

#: Environment variables through which glibc takes these settings at start-up.
USER_SETTINGS = memory.USER_SETTINGS

#: Whether this process runs with the thresholds above (set by ``keep_freed_memory``), for the
#: benchmark reports.
applied = False
#: Whether ``keep_freed_memory`` has been called in this process.
considered = False


@infrastructure("the C allocator's thresholds: speed only, no claim element")
def keep_freed_memory(environ=None) -> bool:
    """Fix glibc's mmap and trim thresholds (``MMAP_THRESHOLD``, ``TRIM_THRESHOLD``) and turn
    its mapping of single blocks off (``MMAP_MAX``) so that freed arrays stay in the process
    for the next ones.

    Parameters
    ----------
    environ : mapping, optional
        The environment to look for the user's own settings in; default ``os.environ``.

    Returns
    -------
    bool
        Whether the three settings were made: False when the environment sets any of them
        (the user's choice stands) or the C library has no ``mallopt``.
    """
    global applied, considered
    considered = True
    if memory.user_has_chosen(os.environ if environ is None else environ):
        return False
    applied = memory.set_thresholds(MMAP_THRESHOLD, TRIM_THRESHOLD, MMAP_MAX)
    if applied:
        memory.thresholds_after_blocks(MMAP_THRESHOLD, TRIM_THRESHOLD, MMAP_MAX)
    return applied
