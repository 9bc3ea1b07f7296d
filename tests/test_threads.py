"""refseg's own thread control of the native libraries, read back by threadpoolctl (an anchor:
an independent reading of the same libraries' thread counts)."""
import os
import subprocess
import sys
import time

import numpy as np
import pytest
# loads SciPy's own OpenBLAS, so that both BLAS copies are checked
import scipy.linalg  # noqa: F401

from anchors import require
from refseg import threads
from refseg.errors import InputError
from refseg.threads import limit_threads, native_pools

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


# --- threads adapted to the load of other processes ---------------------------------------

class _Clock:
    """Stand-ins for the three readings adapted_thread_count takes: wall time, the machine's
    busy CPU seconds and this process's CPU seconds."""

    def __init__(self, monkeypatch):
        self.wall = self.busy = self.own = 0.0
        monkeypatch.setattr(threads, "_last_sample", None)
        monkeypatch.setattr(threads, "_machine_busy_seconds", lambda: self.busy)
        monkeypatch.setattr("time.monotonic", lambda: self.wall)
        monkeypatch.setattr(os, "times", lambda: os.times_result((self.own, 0.0, 0.0, 0.0,
                                                                 self.wall)))
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})

    def advance(self, seconds, own_cores, other_cores):
        self.wall += seconds
        self.own += seconds * own_cores
        self.busy += seconds * (own_cores + other_cores)


@pytest.mark.parametrize("other, expected", [(0.0, 2), (0.3, 2), (0.7, 1), (1.0, 1),
                                             (1.4, 1), (2.0, 1)])
def test_the_thread_count_leaves_the_cores_other_processes_use(monkeypatch, other, expected):
    clock = _Clock(monkeypatch)
    assert threads.adapted_thread_count(2) == 2  # first call: no window yet
    clock.advance(1.0, own_cores=1.5, other_cores=other)  # our own use does not count
    assert threads.adapted_thread_count(2) == expected
    assert threads.adapted_thread_count(1) == 1


def test_short_windows_keep_the_last_choice_and_stale_ones_start_again(monkeypatch):
    clock = _Clock(monkeypatch)
    threads.adapted_thread_count(2)
    clock.advance(1.0, own_cores=0.0, other_cores=1.0)
    assert threads.adapted_thread_count(2) == 1
    clock.advance(threads.LOAD_WINDOW_MIN / 2, own_cores=0.0, other_cores=0.0)
    assert threads.adapted_thread_count(2) == 1  # too short to tell: as before
    clock.advance(threads.LOAD_WINDOW_MAX + 1, own_cores=0.0, other_cores=1.0)
    assert threads.adapted_thread_count(2) == 2  # too old to tell: all threads, new window
    clock.advance(1.0, own_cores=0.0, other_cores=0.0)
    assert threads.adapted_thread_count(2) == 2


def test_a_busy_neighbour_shows_as_other_load():
    """The real readings: a busy loop in a child process counts as about one core."""
    child = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        first = threads._LoadSample(time.monotonic(), threads._machine_busy_seconds(),
                                    sum(os.times()[:2]), 2)
        time.sleep(1.0)
        second = threads._LoadSample(time.monotonic(), threads._machine_busy_seconds(),
                                     sum(os.times()[:2]), 2)
    finally:
        child.kill()
        child.wait()
    assert 0.6 <= threads.other_load(first, second) <= 2.0 + 0.05


def test_a_running_cap_changes_no_bit_of_a_prediction_or_a_feature_map(monkeypatch):
    """Fewer running threads, same tiles and same per-element order: the same bits."""
    from refseg import _kernels
    from refseg.claim1.features import extract
    from refseg.data.synthetic import weld_image
    from refseg.models import ResMobileNet

    model = ResMobileNet((64, 96), seed=3)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 64, 96, 3)).astype(np.float32)
    rgb = weld_image(1, shape=(520, 640)).rgb
    seen = []

    def one_thread(planned):
        seen.append(_kernels.running_threads())
        return 1

    with limit_threads(2):
        assert _kernels.running_threads() == 2
        free = model.predict(x), extract(rgb).final_weight
        monkeypatch.setattr(threads, "adapted_thread_count", one_thread)
        with threads.load_adapted_threads():
            assert _kernels.running_threads() == 1
            capped_extract = extract(rgb).final_weight
        capped_predict = model.predict(x)
        assert seen == [2, 2] and _kernels.running_threads() == 2
    assert np.array_equal(free[0], capped_predict) and np.array_equal(free[1], capped_extract)
