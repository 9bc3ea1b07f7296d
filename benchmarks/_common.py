"""What the benchmark scripts share (they run as ``python benchmarks/<script>.py``).

* the prologue: :func:`start` parses the arguments, pins the thread counts before NumPy,
  refseg or torch load (:func:`pin_threads`) and chooses refseg's row loops; the scripts
  import NumPy and the libraries they time after it;
* thread counts at run time: :func:`all_cores`, :class:`ThreadSwitch` (through
  ``refseg.engine.training.threads``), with :func:`working_threads`, which counts the threads that really
  computed during a call;
* the machine and the software: :func:`machine_lines` (CPU model and the row loops refseg
  chose), :func:`environment_lines` (versions, thread variables, allocator, BLAS);
* timing: :func:`time_rounds` (interleaved rounds, each call with the load other processes
  put on the machine meanwhile), :func:`wait_until_quiet`, :func:`measure_sgemm` (the float32
  matrix-product ceiling), and :class:`Report`, the Markdown report printed as it grows;
* memory: :func:`proc_status_mb`, :func:`reset_peak_rss`, :func:`minor_faults`.

The background load (the neighbour processes and their options) is ``_neighbours.py``'s.
"""
import contextlib
import gc
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def all_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def pin_threads(threads: int) -> None:
    """Set every thread-count variable. OpenMP and OpenBLAS read them once, when they load:
    call this before NumPy, refseg or torch is imported (a benchmark module imports NumPy
    inside its functions, not at its top, for this)."""
    if "numpy" in sys.modules:
        # OpenBLAS loaded already: its thread count and the short spin refseg sets would be
        # shown in the header but not in effect (its idle threads then spin after each product
        # and halve refseg's next prediction on 2 cores)
        raise SystemExit("benchmark setup: NumPy was imported before the thread settings")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(threads)
    # the waiting policies refseg sets when it is imported first (refseg/__init__.py), here for
    # the whole process whatever loads first; torch, in the same process, runs under them too
    import refseg  # noqa: F401

    engine_for_the_process()


#: The training engine's block, open for the rest of the process (``engine_for_the_process``).
_ENGINE = contextlib.ExitStack()


def engine_for_the_process() -> None:
    """refseg's convolutions on training's engine (``refseg.engine.training``) from now on in
    this thread, as ``refseg train``, ``predict`` and ``evaluate`` run them: the benchmarks time
    refseg as a user runs it, not its reference route. Once per process."""
    if not _ENGINE._exit_callbacks:
        from refseg.engine.training import training_engine

        _ENGINE.enter_context(training_engine())


def add_row_loops_argument(parser) -> None:
    parser.add_argument("--row-loops", choices=("auto", "baseline"), default="auto",
                        help="auto: the row loops refseg chooses (AVX-512 where the CPU has "
                             "it); baseline: the plain x86-64 loops, as on a CPU without "
                             "AVX-512 (default auto)")


def start(parse_args):
    """The scripts' prologue: ``parse_args()``, then the thread counts pinned to
    ``--threads`` before the libraries load, and the baseline row loops chosen when
    ``--row-loops baseline`` asks for them. Returns the arguments."""
    args = parse_args()
    pin_threads(args.threads)
    if getattr(args, "row_loops", "auto") == "baseline":
        from refseg import _kernels

        _kernels.use_avx512(False)
    return args


def load_torch(threads: int):
    """torch, imported now (not at the script's start: a child process that measures
    refseg's memory must not load it) and set to ``threads`` threads."""
    import torch

    torch.set_num_threads(threads)
    return torch


# --- the machine ---------------------------------------------------------------------------------

def cpu_info() -> tuple[str, set, str]:
    """The CPU's model name, flags and "family F model M" (first processor), from
    /proc/cpuinfo. Virtual machines often name only the brand ("AMD EPYC"): the family and
    model tell the core generation (AMD family 23 model 1: Zen 1; 25 model 1: Zen 3; 25 model
    17: Zen 4)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block ends here
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    generation = (f"family {fields['cpu family']} model {fields['model']}"
                  if "cpu family" in fields and "model" in fields else "family unknown")
    return (fields.get("model name", "unknown"), set(fields.get("flags", "").split()),
            generation)


def l2_per_core() -> str:
    """The first core's L2 size as sysfs gives it ("1024K"), or "unknown"."""
    caches = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(caches.glob("index*")):
        try:
            if (index / "level").read_text().strip() == "2":
                return (index / "size").read_text().strip()
        except OSError:
            continue
    return "unknown"


def machine_lines() -> list[str]:
    """Markdown lines: the CPU and which row loops refseg's direct convolution kernels run."""
    from refseg.engine.training.backend import row_loops

    model, flags, generation = cpu_info()
    path, supported = row_loops()
    isa = ", ".join(f"{flag} {'yes' if flag in flags else 'no'}" for flag in ("avx2", "avx512f"))
    described = {"avx512": "AVX-512 (avx512f, chosen at run time)",
                 "baseline": "baseline x86-64 loops (" + ("the AVX-512 path switched off)"
                                                          if supported else
                                                          "no AVX-512 path on this CPU)")}[path]
    return [f"- CPU: {model} ({generation}, L2 {l2_per_core()} per core); {all_cores()} cores "
            f"available; /proc/cpuinfo flags: {isa}",
            f"- refseg row loops (direct convolution kernels): **{described}**"]


# --- the software and its settings ---------------------------------------------------------------

def blas_info() -> list[dict]:
    try:
        import threadpoolctl
    except ImportError:
        return []
    return threadpoolctl.threadpool_info()


def source_state() -> str:
    """The commit of the checkout these benchmarks belong to, whether its refseg/ has
    uncommitted changes, and whether the refseg being measured (usually an installed copy) has
    the checkout's Python and Cython sources: the numbers belong to that code, not to the
    commit alone."""
    import refseg

    root = Path(__file__).resolve().parent.parent

    def git(*cmd):
        return subprocess.run(["git", "-C", str(root), *cmd], capture_output=True, text=True,
                              check=False).stdout.strip()

    head = git("rev-parse", "--short", "HEAD")
    if not head:
        return "benchmarks not in a git checkout"
    dirty = git("status", "--porcelain", "--", "refseg")
    state = f"checkout HEAD {head}" + (" + uncommitted changes in refseg/" if dirty
                                       else ", refseg/ clean")
    measured = Path(refseg.__file__).resolve().parent
    # the measured copy's sources that the checkout also has (a wheel may leave some out)
    pairs = [(p, root / "refseg" / p.relative_to(measured)) for p in measured.rglob("*")
             if p.suffix in (".py", ".pyx", ".pxi", ".c", ".h") and p.name != "_kernels.c"]
    compared = [(p, q) for p, q in pairs if q.is_file()]
    differ = sum(p.read_bytes() != q.read_bytes() for p, q in compared)
    only_measured = len(pairs) - len(compared)
    return (state + f"; measured refseg ({measured}): {len(compared) - differ} of "
            f"{len(compared)} source files as in the checkout"
            + (f", {only_measured} not in it" if only_measured else ""))


def allocator_line() -> str:
    """glibc's thresholds in this process: refseg's (``refseg.engine.allocator``) or the
    environment's."""
    from refseg.engine import allocator

    if allocator.applied:
        return (f"- glibc malloc: mmap threshold {allocator.MMAP_THRESHOLD >> 20} MiB, trim "
                f"threshold {allocator.TRIM_THRESHOLD >> 20} MiB, no block mapped on its own "
                f"(mmap max {allocator.MMAP_MAX}; set by refseg's engine when it "
                f"first ran; torch and Keras in this process allocate under the same "
                f"settings from then on)")
    chosen = [f"{k}={os.environ[k]}" for k in allocator.USER_SETTINGS if k in os.environ]
    tunables = os.environ.get("GLIBC_TUNABLES")
    return ("- glibc malloc: left as the environment sets it: "
            + (", ".join(chosen + ([f"GLIBC_TUNABLES={tunables}"] if tunables else []))
               or "glibc's defaults (no mallopt)"))


def environment_lines(threads: int, torch=None) -> list[str]:
    """Markdown lines: the platform, the machine, refseg's source state, the versions, the
    thread variables, the allocator, the BLAS pools and (when loaded) torch's settings."""
    import numpy as np

    import refseg

    lines = [
        f"- {platform.platform()}, {platform.processor() or platform.machine()}, "
        f"{all_cores()} cores available; Python {platform.python_version()}",
        *machine_lines(),
        f"- refseg {getattr(refseg, '__version__', '?')} ({source_state()}), "
        f"NumPy {np.__version__}, "
        f"torch {torch.__version__ if torch else 'not loaded'}",
        f"- threads T = {threads}: OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, "
        f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}, "
        f"torch.get_num_threads()={torch.get_num_threads() if torch else '-'}",
        "- OPENBLAS_CORETYPE=" + os.environ.get("OPENBLAS_CORETYPE", "(unset)")
        + ", OPENBLAS_L2_SIZE=" + os.environ.get("OPENBLAS_L2_SIZE", "(unset)")
        + ", OPENBLAS_THREAD_TIMEOUT=" + os.environ.get("OPENBLAS_THREAD_TIMEOUT", "(unset)")
        + ", OMP_WAIT_POLICY=" + os.environ.get("OMP_WAIT_POLICY", "(unset)")
        + ", GOMP_SPINCOUNT=" + os.environ.get("GOMP_SPINCOUNT", "(unset)"),
        allocator_line(),
    ]
    pools = blas_info()
    if pools:
        for p in pools:
            lines.append(f"- threadpoolctl: {p.get('internal_api')} {p.get('version')} "
                         f"kernel={p.get('architecture')} threads={p.get('num_threads')} "
                         f"({Path(p.get('filepath', '')).name})")
    else:
        lines.append("- threadpoolctl not installed: BLAS kernel not reported "
                     "(see np.show_config())")
    if torch is not None:
        lines.append(f"- torch: mkldnn={torch.backends.mkldnn.is_available()}, "
                     f"cpu capability {torch.backends.cpu.get_cpu_capability()}")
    return lines


# --- thread counts at run time -------------------------------------------------------------------

class ThreadSwitch:
    """Runs a call with every OpenMP and OpenBLAS pool of the process at another thread count,
    then puts the counts back: ``refseg.engine.training.threads``' runtime limiting, with the pools looked up
    once (``limit_threads`` reads /proc/self/maps at every entry). torch uses the same
    libgomp as refseg when both are loaded, so this changes torch's OpenMP count too while it
    is active; the benchmarks time torch outside it."""

    def __init__(self):
        from refseg.engine.training.threads import native_pools

        self.pools = native_pools()
        if not any(p.kind == "openblas" for p in self.pools):
            raise SystemExit("no OpenBLAS pool found: refseg's thread count cannot be set at "
                             "run time in this process")

    @contextlib.contextmanager
    def at(self, threads: int):
        previous = [(p, p.threads) for p in self.pools]
        try:
            for p in self.pools:
                p.set(threads)
            yield
        finally:
            for p, count in previous:
                p.set(count)

    def wrap(self, threads: int, fn):
        """A callable running ``fn`` at ``threads`` threads."""
        def run():
            with self.at(threads):
                return fn()
        return run

    def describe(self) -> str:
        return ", ".join(f"{p.kind} {os.path.basename(p.path)} ({p.threads})"
                         for p in self.pools)


def _thread_cpu_s() -> dict:
    """CPU seconds (user + system) of each thread of this process, by thread id."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out[tid] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return out


def working_threads(fn, share: float = 0.1) -> tuple[int, float]:
    """Run ``fn`` once; return how many threads of this process computed during it (CPU time
    at least ``share`` of the busiest thread's) and the busiest thread's CPU seconds. This is
    what a thread count really did, whatever the libraries were asked for: the clock ticks
    are 10 ms, so the call should take at least ~0.1 s."""
    before = _thread_cpu_s()
    fn()
    after = _thread_cpu_s()
    used = [after[t] - before.get(t, 0.0) for t in after]
    top = max(used, default=0.0)
    return (sum(u >= share * top for u in used) if top > 0 else 0), top


# --- load from other processes -------------------------------------------------------------------

class OtherLoad:
    """Average number of cores used by other processes since the last reset: busy time of
    the whole machine (/proc/stat) minus this process's own CPU time (and its children's)."""

    def __init__(self):
        self.reset()

    @staticmethod
    def _machine_busy_s() -> float:
        with open("/proc/stat") as f:
            user, nice, system, _idle, _iowait, irq, softirq, steal = map(
                int, f.readline().split()[1:9])
        return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _own_s() -> float:
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system

    def reset(self) -> None:
        self._start = (time.perf_counter(), self._machine_busy_s(), self._own_s())

    def cores(self) -> float:
        wall = time.perf_counter() - self._start[0]
        others = (self._machine_busy_s() - self._start[1]) - (self._own_s() - self._start[2])
        return max(others, 0.0) / wall if wall > 0 else 0.0


# --- memory --------------------------------------------------------------------------------------

def proc_status_mb(field: str) -> float:
    """A memory line of /proc/self/status (VmRSS, VmHWM, ...) in MiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise KeyError(field)


def reset_peak_rss() -> bool:
    """Make VmHWM equal to the current RSS (Linux >= 4.0); False where not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


# --- timing --------------------------------------------------------------------------------------
# On 2 cores, one other busy process changes everything: a 2-thread OpenBLAS GEMM then waits
# for its descheduled partner thread at every barrier (10x slower was seen here), while
# torch's OpenMP degrades far less. So every measurement carries the CPU that other processes
# used meanwhile, and --wait-quiet can hold a measurement back until the machine is idle.

def wait_until_quiet(max_seconds: float, threshold: float = 0.2) -> float:
    """Sleep (in 1 s probes) until other processes use under `threshold` cores, at most
    `max_seconds`; returns the seconds waited."""
    waited = 0.0
    while waited < max_seconds:
        load = OtherLoad()
        time.sleep(1.0)
        if load.cores() < threshold:
            break
        waited += 1.0
    return waited


def balanced_orders(n: int) -> list[list[int]]:
    """The rows of a balanced Latin square (Williams' design) on n items: over its rows every
    item runs once in every position and right after every other item once (twice for odd n,
    whose square takes 2n rows). Rotating one order by one each round keeps each item's
    predecessor: in the prediction benchmark refseg's default-thread run always came right
    after torch's one-thread run, whose return to two threads slowed the next call beside a
    bursty neighbour (a batch-1 prediction 107 against 93 ms median with the order swapped),
    and the T / 1 thread ratio read that as refseg's."""
    first, low, high = [0], 1, n - 1
    while len(first) < n:
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    rows = [[(item + shift) % n for item in first] for shift in range(n)]
    return rows + [row[::-1] for row in rows] if n % 2 else rows


def time_rounds(fns: dict, repeat: int, warmup: int = 2, wait_quiet: float = 0.0):
    """Seconds and other-process load (cores) of each call: `warmup` untimed calls each, then
    `repeat` rounds in which every callable runs once, each round in the next order of a
    balanced Latin square (``balanced_orders``), so that a slow spell of the shared machine,
    and whatever the previous call leaves behind, hits all of them alike; each round first
    waits up to `wait_quiet` seconds for a quiet machine. The garbage collector is off while
    timing, as in timeit: a collection would land on whichever run happens to trigger it."""
    names = list(fns)
    orders = balanced_orders(len(names))
    for _ in range(warmup):
        for name in names:
            fns[name]()
    times = {name: [] for name in names}
    loads = {name: [] for name in names}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(repeat):
            wait_until_quiet(wait_quiet)
            for name in (names[i] for i in orders[r % len(orders)]):
                load = OtherLoad()
                start = time.perf_counter()
                fns[name]()
                times[name].append(time.perf_counter() - start)
                loads[name].append(load.cores())
    finally:
        if gc_was_enabled:
            gc.enable()
    return times, loads


def median_ms(samples) -> float:
    return 1e3 * statistics.median(samples)


def min_ms(samples) -> float:
    return 1e3 * min(samples)


def measure_sgemm(shapes: dict, repeat: int) -> dict:
    """Median GFLOP/s of np.matmul (float32, C-contiguous) for each labelled (M, K, N)."""
    import numpy as np

    rng = np.random.default_rng(1)
    fns = {}
    for label, (m, k, n) in shapes.items():
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        fns[label] = (lambda a=a, b=b: a @ b)
    times, _ = time_rounds(fns, repeat)
    return {label: 2.0 * np.prod(shapes[label]) / statistics.median(t) / 1e9
            for label, t in times.items()}


def verdict(ok: bool) -> str:
    return "**holds**" if ok else "**missed**"


class Report:
    """The Markdown report: each line printed as it comes, and kept for ``--write``."""

    def __init__(self):
        self.lines: list[str] = []
        self.started = time.perf_counter()

    def __call__(self, *lines: str) -> None:
        for line in lines:
            print(line, flush=True)
            self.lines.append(line)

    def header(self, title: str, script: str, environment: list[str], *more: str) -> None:
        """The title, the command line and the environment lines."""
        import datetime

        self(f"# {title}", "",
             f"Run {datetime.datetime.now():%Y-%m-%d %H:%M}: `python benchmarks/{script} "
             + " ".join(sys.argv[1:]) + "`", "", *environment, *more, "")

    def finish(self, path: Path | None) -> None:
        """The total run time; the report written to ``path`` if one is given."""
        self(f"Total run time {time.perf_counter() - self.started:.0f} s.")
        if path is not None:
            path.write_text("\n".join(self.lines) + "\n")
            print(f"\nwrote {path}")
