"""Worker processes: how many, how each one starts, and a map over them in order.

A leaf of refseg (no NumPy, nothing of refseg's but its errors and citations): the claim-1
extraction of a data set (:mod:`refseg.data.inputs`), the synthetic welds
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

_PR_SET_PDEATHSIG = 1


@infrastructure("the number of worker processes")
def default_jobs() -> int:
    """Cores this process may use (the default number of worker processes)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)


@infrastructure("argument validation")
def checked_jobs(jobs) -> int:
    """``jobs`` as a positive int (None: :func:`default_jobs`); InputError otherwise."""
    jobs = default_jobs() if jobs is None else jobs
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise InputError(f"--jobs: expected a positive integer, got {jobs!r}")
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
def worker_pool(jobs: int) -> ProcessPoolExecutor:
    """A pool of ``jobs`` processes, each set up by ``_worker_start``."""
    return ProcessPoolExecutor(max_workers=jobs, initializer=_worker_start,
                               initargs=(os.getpid(),))


@infrastructure("worker processes")
def map_in_workers(function, work: list, jobs: int, chunksize: int = 4) -> list:
    """``[function(item) for item in work]``, in that order, on ``jobs`` worker processes
    (in this process for one job or fewer than two items)."""
    if jobs == 1 or len(work) < 2:
        return [function(item) for item in work]
    with worker_pool(min(jobs, len(work))) as pool:
        return list(pool.map(function, work, chunksize=chunksize))
