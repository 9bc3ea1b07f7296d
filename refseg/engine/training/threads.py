"""The thread counts of the native libraries that refseg's numbers run on.

refseg's parallel work runs on one pool, OpenMP's (libgomp): its compiled kernels, and the
network's matrix products, which are tiles of single-threaded calls of SciPy's OpenBLAS handed
out to the OpenMP threads (``refseg.engine.training.products``; ``single_threaded_blas`` keeps that
OpenBLAS at one thread of its own). NumPy's OpenBLAS, a separate library in the wheels, is left
as it is. This module finds the libraries that the process has loaded (``/proc/self/maps``)
and calls their own thread functions through ctypes, so that it needs nothing beyond the
standard library.

How many of OpenMP's threads a network run uses follows the machine's load
(``sized_to_load``): a thread whose core another process keeps busy only takes turns with it,
and refseg's runs measured slower on two such threads than on one. A product is cut into tiles
by the thread count, and OpenBLAS may round a tile's elements otherwise than the whole
product's (seen for 1 of 300 random float32 shapes, and for the bias gradients of a
``--train-backbone`` step at batch 8, sums over 28,672 rows that a row of ones times the
gradient makes; not in the prediction at 224x224, which gave the same bits on 1 and 2
threads). Everything else refseg computes in parallel gives each element the same bits on any
count. So training cuts its products into the tiles of one count throughout, whatever count
runs them (``bits_independent_of_load``), and outputs that must be reproducible to the bit
(the golden bundle's network part) are computed with the pools pinned (``limit_threads``).
"""
from __future__ import annotations

import collections
import contextlib
import ctypes
import functools
import math
import os
import statistics
import threading
import time
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
    """Within the block, every loaded OpenBLAS and OpenMP pool uses ``threads`` threads, whatever
    the machine's load (``sized_to_load`` changes nothing inside it); the previous counts are
    restored after it.

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
    _PINS[0] += 1
    try:
        for pool in pools:
            pool.set(threads)
        yield pools
    finally:
        _PINS[0] -= 1
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
    OpenMP's threads (``refseg.engine.training.products``), and a BLAS call that started threads of its
    own there would put two pools back on the cores. Called before every product (a read of
    one integer), so that a thread count set since (``limit_threads``, the user's own BLAS
    calls) is put back. Does nothing for a BLAS that is not OpenBLAS."""
    pool = kernel_blas_pool()
    if pool is not None and pool.get() != 1:
        pool.set(1)


# --- the thread count of a run, from the machine's load ------------------------------------

#: Set this environment variable to "0" to run every network run on OpenMP's thread count
#: whatever the load (read at each run).
ADAPTIVE_ENV = "REFSEG_ADAPTIVE_THREADS"

_STAT = Path("/proc/stat")


@dataclass(frozen=True)
class CpuReading:
    """A moment's cumulative counters: ``wall`` (time.monotonic, s), ``busy`` (CPU seconds the
    cores this process may run on spent on any process, steal and idle left out) and ``own``
    (CPU seconds of this process, all its threads)."""

    wall: float
    busy: float
    own: float


def read_cpu(stat: bytes | None = None, cpus=None, own: float | None = None) -> CpuReading | None:
    """The counters now, from ``/proc/stat`` (its per-core lines, user + nice + system + irq +
    softirq, in clock ticks) for the cores in ``cpus`` (default: this process's affinity);
    None where they cannot be read. ``stat`` and ``own`` stand in for the file and the
    process's CPU time (tests)."""
    wall = time.monotonic()
    if cpus is None:
        cpus = os.sched_getaffinity(0)
    if stat is None:
        try:
            stat = _STAT.read_bytes()
        except OSError:
            return None
    tick = os.sysconf("SC_CLK_TCK")
    busy = 0
    for line in stat.splitlines():
        if not line.startswith(b"cpu"):
            break
        fields = line.split()
        if fields[0] == b"cpu" or len(fields) < 8 or int(fields[0][3:]) not in cpus:
            continue
        user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[1:8])
        busy += user + nice + system + irq + softirq
    return CpuReading(wall, busy / tick, time.process_time() if own is None else own)


def cores_used_by_others(before: CpuReading, after: CpuReading) -> float:
    """Cores' worth of CPU time that other processes used between two readings: the cores'
    busy time less this process's own, over the wall time (0 for no time between them)."""
    elapsed = after.wall - before.wall
    if elapsed <= 0:
        return 0.0
    return max(0.0, ((after.busy - before.busy) - (after.own - before.own)) / elapsed)


def threads_for_load(ceiling: int, cores: int, others: float) -> int:
    """The threads a run starts: ``ceiling`` (OpenMP's count), less one for each of the
    ``cores`` that other processes kept more than half busy (``others`` cores' worth), and at
    least one."""
    taken = math.floor(others + 0.5)
    return max(1, min(ceiling, cores - taken))


#: Seconds kept per thread count and kind of run; their mean decides between the counts.
TIMED_RUNS = 5

#: This many loaded runs of a kind after its choice is made (or changes), the count that is
#: not the faster one runs once, so that a change in the load reaches the choice; each recheck
#: that leaves the choice as it was doubles the wait for the next, up to RECHECK_MOST runs.
#: Every recheck costs its run: beside a busy loop a batch-1 prediction on the second thread
#: took 103 ms against 89 (Zen 5), and one run in eight at that price kept the default count
#: about 2 % behind one thread's.
RECHECK_EVERY = 8
RECHECK_MOST = 64

#: The share of the time that more threads must save, by mean, to be chosen over fewer
#: beside other processes (and each of their kept runs must beat the median of the fewer
#: threads' runs): a thread that saves nothing only takes its core's time from them.
MORE_THREADS_GAIN = 0.05

#: Kinds of run whose timings are kept at most (then all are forgotten and measured anew).
KINDS_KEPT = 64


def mean_seconds(seconds) -> float:
    """The mean of the kept timings (``math.fsum``: the same value whatever their order)."""
    return math.fsum(seconds) / len(seconds)


def median_seconds(seconds) -> float:
    """The median of the kept timings (the mean of the middle two for an even count)."""
    return statistics.median(seconds)


class ThreadChoice:
    """Between the two thread counts a loaded machine leaves in doubt, for one kind of run: the
    last TIMED_RUNS wall times on each, and the choice between them.

    With another process on the cores, whether fewer threads are faster depends on the
    neighbour as much as on the run. Measured on 2 cores of an Intel Xeon: beside a busy
    loop, a batch-1 prediction took 6 % longer on 2 threads than on 1; beside a neighbour
    computing in bursts on 2 threads, a batch-8 prediction took 18 % less time on 2. So the
    counts are timed, not assumed. More threads must win by their mean, the time a long job
    spends per run, and in every one of their kept runs against the median of the fewer
    threads' runs: beside a neighbour running NumPy products on 2 threads, a batch-1
    prediction's runs on 2 threads of a Zen 5 were bimodal (105-111 ms at best, 147-173 by
    median, against 119-148 on 1 thread); a median of three hid the slow ones, a mean of five
    with one or two slow runs among them chose 2 threads in runs of the benchmark where the
    median of five did too. Fewer threads need only not lose: the target is never to be
    slower than one thread."""

    def __init__(self):
        self.seconds: dict[int, collections.deque] = {}
        self.chosen: int | None = None
        self.wait = RECHECK_EVERY  # runs from one recheck to the next
        self.since = 0  # runs since the choice changed or was last rechecked

    def pick(self, candidates) -> int:
        """The count to run next, of two: each in turn until it has TIMED_RUNS timings, then
        the one with more threads if its mean time is MORE_THREADS_GAIN below the other's and
        its slowest kept run faster than the other's median, else the one with fewer; the
        count not chosen once RECHECK_EVERY runs after the choice is made or changes, and
        after twice as many runs each time a recheck leaves it as it was (at most
        RECHECK_MOST)."""
        for threads in candidates:
            if len(self.seconds.get(threads, ())) < TIMED_RUNS:
                return threads
        fewer, more = sorted(candidates)
        mean = {t: mean_seconds(self.seconds[t]) for t in (fewer, more)}
        faster = (mean[more] < (1 - MORE_THREADS_GAIN) * mean[fewer]
                  and max(self.seconds[more]) < median_seconds(self.seconds[fewer]))
        chosen, other = (more, fewer) if faster else (fewer, more)
        if chosen != self.chosen:
            self.chosen, self.wait, self.since = chosen, RECHECK_EVERY, 0
        self.since += 1
        if self.since < self.wait:
            return chosen
        self.since, self.wait = 0, min(2 * self.wait, RECHECK_MOST)
        return other

    def record(self, threads: int, seconds: float) -> None:
        self.seconds.setdefault(threads, collections.deque(maxlen=TIMED_RUNS)).append(seconds)


class _Depth(threading.local):
    blocks = 0  # sized_to_load blocks open on this thread


_DEPTH = _Depth()
_PINS = [0]  # limit_threads blocks open (in any thread)
_TILING: list = [None]  # the count products are cut for inside bits_independent_of_load
_LAST: list = [None]  # the reading taken at the start of the previous sized run
_CHOICES: dict = {}

#: (ceiling, threads) -> runs: how many runs ``sized_to_load`` started on how many threads,
#: by OpenMP's count at the time; for the benchmark reports.
SIZINGS: collections.Counter = collections.Counter()


@contextlib.contextmanager
def bits_independent_of_load(tiles: int | None = None):
    """Within the block (or the function it decorates), the machine's load changes no result:
    every matrix product is cut into the tiles of OpenMP's count at the block's start
    (``tiling_threads``), whichever count ``sized_to_load`` then runs it on. The compiled
    kernels give each element the same bits on any count; the tiles were what the count
    changed. For work whose results must not depend on the load: training, whose resumed runs
    end bit for bit where uninterrupted ones do, beside other processes or none. A block
    inside another keeps the outer block's count. Yields that count. ``tiles`` gives the count
    instead of OpenMP's: a resumed training cuts for the count its run started with, and so
    ends bit for bit where the uninterrupted run does, whatever count it runs on now.

    On fewer threads than its tiles were cut for, a product repacks an operand once per extra
    tile: measured on 2 cores, a prediction on 1 thread took 3-5 % longer with the 2-thread
    tiles than with its own."""
    from refseg._kernels import openmp_threads

    outer = _TILING[0]
    if outer is None:
        _TILING[0] = openmp_threads() if tiles is None else int(tiles)
    try:
        yield _TILING[0]
    finally:
        _TILING[0] = outer


def tiling_threads() -> int:
    """The thread count that matrix products are cut into tiles for
    (``refseg.engine.training.products.product_tiles``): the count of the open
    ``bits_independent_of_load`` block, else OpenMP's current count."""
    if _TILING[0] is not None:
        return _TILING[0]
    from refseg._kernels import openmp_threads

    return openmp_threads()


def _candidates(ceiling: int) -> tuple[int, ...]:
    """The counts in doubt now: (the count the load suggests, OpenMP's count), or OpenMP's
    alone where the load leaves its cores free or cannot be measured."""
    now = read_cpu()
    before, _LAST[0] = _LAST[0], now
    if now is None or before is None:
        return (ceiling,)
    suggested = threads_for_load(ceiling, len(os.sched_getaffinity(0)),
                                 cores_used_by_others(before, now))
    return (ceiling,) if suggested == ceiling else (suggested, ceiling)


@contextlib.contextmanager
def sized_to_load(kind=None):
    """Within the block, refseg's parallel loops started from this thread use a thread count
    chosen for the machine's load; OpenMP's count (the ceiling) is put back after it. Yields
    the count.

    Where other processes kept cores busy since the previous block began
    (``threads_for_load``), the count is in doubt between the ceiling and fewer threads: for a
    ``kind`` of run (any hashable, e.g. the graph and its input shapes) the block's wall time
    is kept and ``ThreadChoice`` chooses; without a kind, the fewer threads run. On free
    cores the ceiling runs. Nothing changes inside ``limit_threads``, inside another such
    block (the outer one decides), with
    ``REFSEG_ADAPTIVE_THREADS=0``, where ``/proc/stat`` cannot be read, and in the first block
    of a process (no earlier reading to measure from). Wraps each network run
    (``Graph.run``): a prediction batch, the taps, an evaluation batch; and each training step
    (``refseg.run.training.training_step``), inside ``bits_independent_of_load``.
    """
    from refseg._kernels import openmp_threads, set_openmp_threads

    ceiling = openmp_threads()
    if _DEPTH.blocks or _PINS[0] or os.environ.get(ADAPTIVE_ENV) == "0":
        _DEPTH.blocks += 1
        try:
            yield ceiling
        finally:
            _DEPTH.blocks -= 1
        return
    candidates = _candidates(ceiling)
    choice = None
    if len(candidates) > 1 and kind is not None:
        if len(_CHOICES) >= KINDS_KEPT and kind not in _CHOICES:
            _CHOICES.clear()
        choice = _CHOICES.setdefault(kind, ThreadChoice())
    threads = candidates[0] if choice is None else choice.pick(candidates)
    SIZINGS[ceiling, threads] += 1
    _DEPTH.blocks += 1
    set_openmp_threads(threads)
    start = time.perf_counter()
    try:
        yield threads
        if choice is not None:
            choice.record(threads, time.perf_counter() - start)
    finally:
        _DEPTH.blocks -= 1
        set_openmp_threads(ceiling)
