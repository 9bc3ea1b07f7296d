"""Worker processes: how many, how each one starts, and a map over them in order.

A leaf of refseg (no NumPy, nothing of refseg's but its errors, citations and vocabulary):
the claim-1 extraction of a data set (:mod:`refseg.data.inputs`), the synthetic welds
(:mod:`refseg.data.synthetic`) and the golden reference arrays (:mod:`refseg.golden.scale`)
spread their work with it.
"""
from __future__ import annotations

import ctypes
import os
import signal
from concurrent.futures import ProcessPoolExecutor

from refseg.errors import InputError
from refseg.cite import infrastructure
from refseg.vocabulary import MAX_JOBS

_PR_SET_PDEATHSIG = 1


@infrastructure("the number of worker processes")
def default_jobs() -> int:
    """Cores this process may use (the default number of worker processes)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)


@infrastructure("argument validation")
def checked_jobs(jobs) -> int:
    """``jobs`` as an int from 1 to :data:`MAX_JOBS` (None: :func:`default_jobs`, at most
    :data:`MAX_JOBS`); InputError otherwise."""
    jobs = min(default_jobs(), MAX_JOBS) if jobs is None else jobs
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= MAX_JOBS:
        raise InputError(f"--jobs: expected an integer from 1 to {MAX_JOBS}, got {jobs!r}")
    return jobs


def _worker_start(parent: int) -> None:
    """Set up a worker: it dies with its parent (a killed command leaves no orphans behind)
    and leaves Ctrl-C to the parent, which reports it once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: the pool's own shutdown is all there is
    if os.getppid() != parent:  # the parent died before the request took hold
        os._exit(1)


@infrastructure("worker processes")
def worker_pool(jobs: int, items: int) -> ProcessPoolExecutor:
    """A pool of ``min(jobs, items)`` processes (never more workers than work items: a pool
    starts all its processes at once), each set up by ``_worker_start``."""
    return ProcessPoolExecutor(max_workers=max(1, min(jobs, items)),
                               initializer=_worker_start, initargs=(os.getpid(),))


@infrastructure("worker processes")
def map_in_workers(function, work: list, jobs: int, chunksize: int = 4) -> list:
    """``[function(item) for item in work]``, in that order, on ``jobs`` worker processes
    (in this process for one job or fewer than two items)."""
    if jobs == 1 or len(work) < 2:
        return [function(item) for item in work]
    with worker_pool(jobs, len(work)) as pool:
        return list(pool.map(function, work, chunksize=chunksize))
