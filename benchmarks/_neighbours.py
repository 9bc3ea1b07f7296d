"""The background load of the benchmarks: neighbour processes that share the cores with the
process being measured, one condition at a time.

* ``none``: no neighbour;
* ``busy``: ``--background-cores`` busy Python loops (a core each, no memory traffic);
* ``mixed``: one process running NumPy float32 matrix products on 2 OpenBLAS threads in
  bursts, computing MIXED_DUTY of the time (a test suite or a demo beside the benchmark);
* ``matmul``: the same products on 2 OpenBLAS threads without pause (a second training, a
  NumPy job): both cores contended all the time, and the neighbour's BLAS threads spin at
  their barriers as the benchmark's do.

:func:`background` starts the neighbours of one condition and stops them on leaving (also on
Ctrl-C, an exception or SIGTERM); :func:`add_background_arguments` and
:func:`check_background_arguments` are the ``--background-load`` / ``--background-cores``
options. Run as a script, this file is one neighbour process (``python _neighbours.py
neighbour busy PARENT_PID``); the benchmarks start it through :func:`background`.
"""
import contextlib
import os
import signal
import subprocess
import sys
import time

#: the conditions ``--background-load`` accepts, in the order they are reported
LOADS = ("none", "busy", "mixed", "matmul")
LOAD_HELP = {
    "none": "no neighbour",
    "busy": "{cores} busy Python loop process(es)",
    "mixed": "one process running NumPy float32 matrix products on 2 OpenBLAS threads, "
             "computing {duty:.0%} of the time",
    "matmul": "one process running NumPy float32 matrix products on 2 OpenBLAS threads "
              "without pause",
}
#: the product neighbours' products: square, this size (about 1 ms each on 2 threads)
MIXED_SIZE = 384
#: ... in bursts of this many seconds, with pauses that make them this share of the time: a
#: test suite or a demo beside the benchmark computes in bursts, not all the time ("mixed");
#: "matmul" computes all the time, as a second training or a NumPy job would
MIXED_BURST_S = 0.035
MIXED_DUTY = 0.7
#: seconds the neighbours run before the first measurement of a condition
SETTLE_S = 1.0


def parse_loads(text: str) -> list[str]:
    loads = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in loads if v not in LOADS]
    if bad or not loads:
        raise ValueError(f"--background-load: expected a comma-separated list of {LOADS}, got "
                         f"{text!r}")
    return sorted(set(loads), key=LOADS.index)


def add_background_arguments(parser) -> None:
    parser.add_argument("--background-load", default="none", metavar="LIST",
                        help="conditions to measure under, comma-separated, each in this one "
                             "run: none (no neighbour), busy (busy Python loop processes), "
                             "mixed (a process running NumPy matrix products on 2 threads, "
                             f"{MIXED_DUTY:.0%}% of the time), matmul (the same products "
                             "without pause); default none. The script starts and stops the "
                             "neighbours itself")
    parser.add_argument("--background-cores", type=int, default=1, metavar="N",
                        help="busy loop processes of the busy condition (default 1)")


def check_background_arguments(parser, args) -> None:
    """Turn ``args.background_load`` into a list; parser errors for bad values."""
    try:
        args.background_load = parse_loads(args.background_load)
    except ValueError as error:
        parser.error(str(error))
    if args.background_cores < 1:
        parser.error("--background-cores must be >= 1")


def describe_load(condition: str, cores: int) -> str:
    return LOAD_HELP[condition].format(cores=cores, duty=MIXED_DUTY)


def _neighbour_env(kind: str) -> dict:
    """An ordinary program's environment: no thread pins, nor the waiting policies that
    refseg sets for itself; the mixed neighbour's BLAS on 2 threads."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                        "OPENBLAS_THREAD_TIMEOUT", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    if kind in ("mixed", "matmul"):
        env["OPENBLAS_NUM_THREADS"] = "2"
    return env


def _stop(processes, timeout: float = 3.0) -> None:
    for p in processes:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + timeout
    for p in processes:
        try:
            p.wait(max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _raise_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def background(condition: str, cores: int = 1):
    """Within the block, the neighbours of ``condition`` run beside this process; yields the
    list of their processes. They are stopped on leaving the block, whatever ends it (an
    exception, Ctrl-C, or SIGTERM, which is turned into SystemExit here), and each one asks
    the kernel to kill it if this process dies (PR_SET_PDEATHSIG), so none outlives the
    benchmark even after SIGKILL."""
    if condition == "none":
        yield []
        return
    kind, count = (condition, cores) if condition == "busy" else (condition, 1)
    cmd = [sys.executable, os.path.abspath(__file__), "neighbour", kind, str(os.getpid())]
    processes = []
    previous_term = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    try:
        for _ in range(count):
            processes.append(subprocess.Popen(cmd, env=_neighbour_env(kind),
                                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                              text=True))
        for p in processes:  # each says "ready" once it is at work
            line = p.stdout.readline().strip()
            if line != "ready":
                raise SystemExit(f"background neighbour {kind} did not start "
                                 f"(exit status {p.poll()})")
        time.sleep(SETTLE_S)
        yield processes
    finally:
        _stop(processes)
        signal.signal(signal.SIGTERM, previous_term)


# --- the neighbour processes ---------------------------------------------------------------------

def _die_with_parent(parent: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the benchmark's to handle
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: the parent-pid checks below still end it
    if os.getppid() != parent:  # the parent died before prctl took effect
        sys.exit(0)


def _busy(parent: int) -> None:
    print("ready", flush=True)
    count = 0
    while True:
        count += 1
        if count % 10_000_000 == 0 and os.getppid() != parent:
            return


def _products(parent: int, duty: float) -> None:
    """NumPy float32 products of MIXED_SIZE, in bursts of MIXED_BURST_S computing ``duty`` of
    the time (1: without pause)."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((MIXED_SIZE, MIXED_SIZE), dtype=np.float32)
    b = rng.standard_normal((MIXED_SIZE, MIXED_SIZE), dtype=np.float32)
    a @ b
    print("ready", flush=True)
    pause = MIXED_BURST_S * (1 - duty) / duty
    while os.getppid() == parent:
        end = time.perf_counter() + MIXED_BURST_S
        while time.perf_counter() < end:
            a @ b
        if pause:
            time.sleep(pause)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "neighbour" or sys.argv[2] not in LOADS[1:]:
        raise SystemExit("usage: _neighbours.py neighbour {busy,mixed,matmul} PARENT_PID")
    _die_with_parent(int(sys.argv[3]))
    if sys.argv[2] == "busy":
        _busy(int(sys.argv[3]))
    else:
        _products(int(sys.argv[3]), MIXED_DUTY if sys.argv[2] == "mixed" else 1.0)
