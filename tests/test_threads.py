"""refseg's own thread control of the native libraries, read back by threadpoolctl (an anchor:
an independent reading of the same libraries' thread counts), and the thread count of a network
run sized to the machine's load, on real and on simulated neighbours."""
import math
import os
import time

import numpy as np
import pytest
# loads SciPy's own OpenBLAS, so that both BLAS copies are checked
import scipy.linalg  # noqa: F401
from hypothesis import given, settings
from hypothesis import strategies as st

from anchors import require
from refseg import _kernels
from refseg.engine.training import threads
from refseg.errors import InputError
from refseg.engine.training.threads import limit_threads, native_pools

pytestmark = pytest.mark.infrastructure


def _counts(threadpoolctl):
    return {os.path.realpath(i["filepath"]): i["num_threads"]
            for i in threadpoolctl.threadpool_info()
            if i["internal_api"] in ("openblas", "openmp")}


def test_limit_threads_pins_every_pool_threadpoolctl_sees_and_restores_them():
    threadpoolctl = require("threadpoolctl")
    ours = {os.path.realpath(p.path) for p in native_pools()}
    before = _counts(threadpoolctl)
    assert before and set(before) <= ours, (before, ours)
    assert any("openblas" in path for path in before) and \
        any("gomp" in os.path.basename(path) for path in before)
    with limit_threads(1):
        assert set(_counts(threadpoolctl).values()) == {1}
    assert _counts(threadpoolctl) == before


def test_limit_threads_restores_the_counts_when_the_block_raises():
    threadpoolctl = require("threadpoolctl")
    before = _counts(threadpoolctl)
    with pytest.raises(KeyError):
        with limit_threads(1):
            raise KeyError("inside")
    assert _counts(threadpoolctl) == before


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", None])
def test_limit_threads_refuses_what_is_not_a_positive_integer(bad):
    with pytest.raises(InputError, match="threads: expected a positive integer"):
        with limit_threads(bad):
            pass


# --- the thread count of a run, from the machine's load ------------------------------------


@settings(max_examples=300, deadline=None)
@given(ceiling=st.integers(1, 64), cores=st.integers(1, 64),
       others=st.floats(0, 80, allow_nan=False), more=st.floats(0, 10, allow_nan=False))
def test_threads_for_load_gives_up_one_thread_per_core_others_keep_more_than_half_busy(
        ceiling, cores, others, more):
    chosen = threads.threads_for_load(ceiling, cores, others)
    assert 1 <= chosen <= ceiling
    # a core counts as taken from a half on, and only the free cores limit the count
    assert chosen == max(1, min(ceiling, cores - int(np.floor(others + 0.5))))
    assert threads.threads_for_load(ceiling, cores, others + more) <= chosen
    if others < 0.5:
        assert chosen == min(ceiling, cores)


def test_threads_for_load_on_two_cores():
    assert [threads.threads_for_load(2, 2, o) for o in (0.0, 0.49, 0.5, 0.9, 1.4, 1.6, 3.0)] \
        == [2, 2, 1, 1, 1, 1, 1]
    assert threads.threads_for_load(2, 8, 5.0) == 2 and threads.threads_for_load(8, 8, 2.2) == 6


STAT = b"""cpu  900 9 90 9000 9 9 9 0 0 0
cpu0 100 1 10 1000 5 2 3 40 0 0
cpu1 200 2 20 2000 5 4 6 50 0 0
cpu2 400 4 40 4000 5 8 12 60 0 0
intr 12345
procs_running 3
"""


def test_read_cpu_sums_the_busy_fields_of_the_process_cores_only():
    tick = os.sysconf("SC_CLK_TCK")
    reading = threads.read_cpu(STAT, cpus={0, 2}, own=1.5)
    # user + nice + system + irq + softirq of cpu0 and cpu2; idle, iowait and steal left out
    assert reading.busy == pytest.approx((116 + 464) / tick, rel=0, abs=1e-12)
    assert reading.own == 1.5
    assert threads.read_cpu(STAT, cpus={5}, own=0.0).busy == 0


def test_cores_used_by_others_is_the_busy_time_less_the_process_own_over_the_wall_time():
    before = threads.CpuReading(wall=10.0, busy=100.0, own=5.0)
    assert threads.cores_used_by_others(before, threads.CpuReading(12.0, 104.0, 6.0)) == 1.5
    # the process's own time is never counted, and clock ticks can trail a precise own time
    assert threads.cores_used_by_others(before, threads.CpuReading(12.0, 103.0, 8.0)) == 0.0
    assert threads.cores_used_by_others(before, before) == 0.0


class _Machine:
    """A simulated machine for ``read_cpu``: its ``/proc/stat`` file (per-core busy ticks),
    its clock and this process's CPU time, advanced by the test."""

    def __init__(self, path, cores):
        self.path, self.cores = path, sorted(cores)
        self.ticks = {core: 0 for core in self.cores}
        self.wall, self.own = 100.0, 2.0
        self.write()

    def write(self):
        # a core this process may not run on, always busy, must never be counted
        outside = max(self.cores) + 1
        lines = [b"cpu  1 2 3 4 5 6 7 8 0 0"]
        lines += [b"cpu%d %d 0 0 5000 7 0 0 900 0 0" % (c, t) for c, t in self.ticks.items()]
        lines += [b"cpu%d %d 0 0 0 0 0 0 0 0 0" % (outside, 10 ** 9 + int(self.wall * 100)),
                  b"intr 1", b"procs_running 2"]
        self.path.write_bytes(b"\n".join(lines) + b"\n")

    def run(self, seconds, neighbour_cores, own_cores):
        """``seconds`` of wall time in which other processes keep ``neighbour_cores`` busy
        and this process ``own_cores``, spread over the first cores."""
        tick = os.sysconf("SC_CLK_TCK")
        spent = (neighbour_cores + own_cores) * seconds * tick
        for core in self.cores:
            share = min(spent, seconds * tick)
            self.ticks[core] += round(share)
            spent -= share
        self.wall += seconds
        self.own += own_cores * seconds
        self.write()

    def monotonic(self):
        return self.wall

    def process_time(self):
        return self.own


@pytest.mark.parametrize("neighbour, own, expected", [
    (1.0, 0.0, 1.0),    # a busy neighbour on one core, this process idle
    (0.0, 1.0, 0.0),    # this process spinning alone: its own time is taken out
    (1.0, 1.0, 1.0),    # both
    (0.5, 0.0, 0.5),
    (0.0, 0.0, 0.0),
])
def test_read_cpu_on_a_simulated_machine_sees_a_busy_neighbour_and_not_this_process(
        tmp_path, monkeypatch, neighbour, own, expected):
    """``read_cpu`` and ``cores_used_by_others`` on a simulated ``/proc/stat``, clock and
    process time: others' load is read as what it is, this process's own time never
    counts, and cores outside the process's affinity are left out. (A test on the real
    machine's load would fail whenever anything else runs beside the suite.)"""
    machine = _Machine(tmp_path / "stat", {3, 5})
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda pid: {3, 5})
    monkeypatch.setattr(threads, "_STAT", machine.path)
    monkeypatch.setattr(threads, "time", machine)
    start = threads.read_cpu()
    machine.run(0.8, neighbour, own)
    others = threads.cores_used_by_others(start, threads.read_cpu())
    assert others == pytest.approx(expected, abs=1.5 / (0.8 * os.sysconf("SC_CLK_TCK")))


def test_read_cpu_reads_the_real_proc_stat():
    """On the machine itself (no assertion on its load): the counters are read, never run
    backwards, and the process's own time is its CPU time."""
    first = threads.read_cpu()
    assert first is not None and first.busy > 0
    deadline = time.process_time() + 0.05
    while time.process_time() < deadline:
        pass
    second = threads.read_cpu()
    assert second.wall >= first.wall and second.busy >= first.busy
    assert second.own - first.own >= 0.05
    assert threads.cores_used_by_others(first, second) >= 0.0


@settings(max_examples=200, deadline=None)
@given(times=st.lists(st.tuples(st.floats(0.01, 1), st.floats(0.01, 1)), min_size=1,
                      max_size=30))
def test_thread_choice_times_each_count_then_runs_the_faster_and_rechecks_the_other(times):
    """The picks for candidates (1, 2) given the wall time each run would take on 1 and on 2
    threads: 1 until it has TIMED_RUNS timings, then 2 until it has, then 2 only where the
    mean of its last TIMED_RUNS timings is MORE_THREADS_GAIN below 1's and the slowest of them
    below the median of 1's; the count not chosen RECHECK_EVERY runs after the choice is made
    or changes, then after twice as many runs each time the choice stays (RECHECK_MOST at
    most)."""
    choice, kept = threads.ThreadChoice(), {1: [], 2: []}
    chosen, wait, since = None, threads.RECHECK_EVERY, 0
    for on_one, on_two in times:
        picked = choice.pick((1, 2))
        if len(kept[1]) < threads.TIMED_RUNS:
            expected = 1
        elif len(kept[2]) < threads.TIMED_RUNS:
            expected = 2
        else:
            last = {t: sorted(kept[t][-threads.TIMED_RUNS:]) for t in (1, 2)}
            means = {t: math.fsum(last[t]) / threads.TIMED_RUNS for t in (1, 2)}
            median_one = last[1][threads.TIMED_RUNS // 2]
            faster = 2 if (means[2] < (1 - threads.MORE_THREADS_GAIN) * means[1]
                           and last[2][-1] < median_one) else 1
            if faster != chosen:
                chosen, wait, since = faster, threads.RECHECK_EVERY, 0
            since += 1
            expected = faster
            if since == wait:
                expected, since, wait = 3 - faster, 0, min(2 * wait, threads.RECHECK_MOST)
        assert picked == expected
        seconds = on_one if picked == 1 else on_two
        kept[picked].append(seconds)
        choice.record(picked, seconds)


def test_thread_choice_rechecks_less_often_while_the_choice_stands():
    """Beside a busy loop, 1 thread at 89 ms and 2 at 103 (a batch-1 prediction, Zen 5): after
    the timed runs, the rechecks on 2 threads come 8, 16, 32, 64, 64 runs apart; once 2
    threads' kept runs are the faster (the neighbour gone), the choice comes over at once and
    the next recheck, on 1 thread, is 8 runs after."""
    choice = threads.ThreadChoice()
    picks = []
    for run in range(2 * threads.TIMED_RUNS + 8 + 16 + 32 + 64 + 64):
        picked = choice.pick((1, 2))
        picks.append(picked)
        choice.record(picked, 0.089 if picked == 1 else 0.103)
    rechecks = [run for run, picked in enumerate(picks) if picked == 2][threads.TIMED_RUNS:]
    start = 2 * threads.TIMED_RUNS - 1
    assert [b - a for a, b in zip([start] + rechecks, rechecks)] == [8, 16, 32, 64, 64]
    for _ in range(threads.TIMED_RUNS):  # 2 threads now 60 ms: each recheck on 2 keeps it
        choice.record(2, 0.060)
    assert [choice.pick((1, 2)) for _ in range(8)] == [2] * 7 + [1]


def test_more_threads_must_win_by_their_mean_and_in_every_kept_run():
    """1-thread runs at 145 ms; 2-thread runs as beside a NumPy neighbour, fast (107 ms) or
    slow (150-190). Three fast runs and two slow: the mean (136) is 6 % below, but a slow run
    is above 145: 1 thread. All five at 107-140: 2 threads. All five at 140: not 5 % faster:
    1 thread. One very fast run among slow ones: 1 thread, which the mean alone would not
    have chosen."""
    def chosen(on_two):
        choice = threads.ThreadChoice()
        for seconds in [0.145] * threads.TIMED_RUNS:
            choice.record(1, seconds)
        for seconds in on_two:
            choice.record(2, seconds)
        return choice.pick((1, 2))

    assert chosen([0.107, 0.107, 0.107, 0.170, 0.190]) == 1
    assert chosen([0.107, 0.120, 0.107, 0.140, 0.110]) == 2
    assert chosen([0.140] * 5) == 1
    assert chosen([0.010, 0.150, 0.150, 0.150, 0.150]) == 1  # mean 0.122
    assert chosen([0.120] * 5) == 2


def test_sized_to_load_runs_fewer_threads_beside_a_neighbour_and_puts_the_count_back(
        loaded_machine):
    with threads.sized_to_load() as first:
        assert first == _kernels.openmp_threads() == 2  # no earlier reading: the ceiling
    with threads.sized_to_load() as second:
        assert second == _kernels.openmp_threads() == 1
        with threads.sized_to_load() as inner:  # the outer block decides
            assert inner == 1 == _kernels.openmp_threads()
        assert _kernels.openmp_threads() == 1
    assert _kernels.openmp_threads() == 2


def test_sized_to_load_changes_nothing_when_pinned_or_switched_off(loaded_machine,
                                                                    monkeypatch):
    with threads.sized_to_load():
        pass
    with limit_threads(2):
        with threads.sized_to_load() as count:
            assert count == 2 == _kernels.openmp_threads()
    monkeypatch.setenv(threads.ADAPTIVE_ENV, "0")
    with threads.sized_to_load() as count:
        assert count == 2 == _kernels.openmp_threads()


def test_sized_to_load_puts_the_count_back_when_the_block_raises(loaded_machine):
    with threads.sized_to_load():
        pass
    with pytest.raises(KeyError):
        with threads.sized_to_load():
            assert _kernels.openmp_threads() == 1
            raise KeyError("inside")
    assert _kernels.openmp_threads() == 2


@pytest.mark.claim("claim2.fusion", "claim4.propagation")
def test_the_reference_route_gives_the_same_bits_on_one_and_two_threads():
    """A float32 prediction and a training step's gradients on the reference route (no engine
    installed) are the same bits on 1 thread and on 2: every product sums in one order."""
    from refseg import autograd as ag
    from refseg.models import ResMobileNet

    model = ResMobileNet((64, 64), seed=3)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 64, 64, 3)).astype(np.float32)
    labels = np.random.default_rng(1).integers(0, 3, (2, 64, 64))
    results = []
    for count in (1, 2):
        with limit_threads(count):
            prediction = model.predict(x)
            p = model.decode(model.taps(x))
            ag.categorical_crossentropy(p, labels).backward()
            grads = [t.grad.copy() for t in model.trainable_parameters()]
            for t in model.trainable_parameters():
                t.grad = None
        results.append((prediction, grads))
    (one, one_grads), (two, two_grads) = results
    assert np.array_equal(one, two)
    assert one_grads and len(one_grads) == len(two_grads)
    for a, b in zip(one_grads, two_grads):
        assert np.array_equal(a, b)


def test_bits_independent_of_load_pins_the_tiles_and_leaves_the_count_to_the_load(
        loaded_machine):
    with threads.sized_to_load():
        pass
    assert threads.tiling_threads() == 2
    with threads.bits_independent_of_load() as tiles:
        assert tiles == 2
        with threads.sized_to_load() as count:
            assert count == 1 == _kernels.openmp_threads()
            assert threads.tiling_threads() == 2
            with threads.bits_independent_of_load() as inner:  # the outer block's count
                assert inner == 2
            assert threads.tiling_threads() == 2
    with threads.sized_to_load() as count:
        assert count == 1 == threads.tiling_threads()
    assert threads.tiling_threads() == 2

@pytest.mark.parametrize("environ,spin", [({}, "1000"),
                                          ({"GOMP_SPINCOUNT": "77"}, "77"),
                                          ({"OMP_WAIT_POLICY": "PASSIVE"}, None)])
def test_importing_refseg_sets_a_short_openmp_spin_unless_the_user_chose(tmp_path, environ,
                                                                        spin):
    """libgomp's idle threads spin about 20-50 us (GOMP_SPINCOUNT 1000) after each region (a
    region's start then costs 1.5-2 us instead of a 43-48 us wake-up on the Zen 5); a
    user's own spin count or waiting policy stands, and OpenBLAS's timeout is set beside it."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items()
           if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT")}
    env.update(environ)
    out = subprocess.run([sys.executable, "-c", "import os, refseg; print(os.environ.get("
                          "'GOMP_SPINCOUNT'), os.environ.get('OPENBLAS_THREAD_TIMEOUT'))"],
                         env=env, cwd=tmp_path, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(spin), "4"]


@pytest.mark.parametrize("code,environ,late", [
    ("import numpy; import refseg", {}, ["OPENBLAS_THREAD_TIMEOUT"]),
    ("import refseg; import numpy", {}, []),
    ("import numpy; import refseg", {"OPENBLAS_THREAD_TIMEOUT": "4"}, []),
    ("import ctypes; ctypes.CDLL('libgomp.so.1'); import refseg", {}, ["GOMP_SPINCOUNT"]),
    ("import ctypes; ctypes.CDLL('libgomp.so.1'); import numpy; import refseg", {},
     ["OPENBLAS_THREAD_TIMEOUT", "GOMP_SPINCOUNT"]),
    ("import ctypes; ctypes.CDLL('libgomp.so.1'); import refseg", {"OMP_WAIT_POLICY": "ACTIVE"},
     []),
])
def test_importing_refseg_after_the_libraries_that_read_its_settings_warns_once(
        tmp_path, code, environ, late):
    """The settings above only reach NumPy's OpenBLAS and libgomp if refseg is imported first:
    imported after them, refseg says which variable came too late, in one ImportOrderWarning
    naming the user's import line; where the user set the variable, or imported refseg first,
    nothing is said."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items()
           if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "OPENBLAS_THREAD_TIMEOUT")}
    env.update(environ)
    script = tmp_path / "user.py"
    script.write_text("import warnings\nwarnings.simplefilter('always')\n" +
                      code.replace("; ", "\n") + "\n")
    out = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path,
                         capture_output=True, text=True, check=True)
    warned = [line for line in out.stderr.splitlines() if "ImportOrderWarning" in line]
    if not late:
        assert out.stderr == ""
        return
    assert len(warned) == 1, out.stderr
    assert warned[0].startswith(f"{script}:{code.split('; ').index('import refseg') + 3}: ")
    assert [name for name in ("OPENBLAS_THREAD_TIMEOUT", "GOMP_SPINCOUNT")
            if name in warned[0]] == late
