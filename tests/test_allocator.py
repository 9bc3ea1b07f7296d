"""glibc's allocator thresholds: the engine's (``refseg.engine.allocator``), set when
training's engine or a plan first runs unless the user set them, with which freed arrays' memory is
reused without a page fault (``import refseg`` alone leaves glibc's defaults); and
``refseg.memory.return_freed_memory``, glibc's start-up thresholds fixed for a block."""
import subprocess
import sys

import pytest

from refseg.engine.allocator import keep_freed_memory

pytestmark = pytest.mark.infrastructure

# Three 20 MB arrays made, touched and freed, twice; then the minor page faults of a third
# round. Each array is below the 32 MiB mmap threshold, so it comes from the heap, and the 60 MB
# freed at its top is more than glibc's default trim threshold lets it keep. With {floats} =
# 10 << 20 the arrays are 40 MB, above any mmap threshold glibc allows.
PROBE = """
import contextlib
import resource
import numpy as np
from refseg.memory import return_freed_memory

{setup}

def cycle():
    arrays = [np.ones({floats}, np.float32) for _ in range(3)]
    del arrays

block = return_freed_memory() if {returned} else contextlib.nullcontext()
cycle(); cycle()
with block:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    cycle()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
cycle()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
cycle()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


#: What runs before the rounds: training's engine entered, a plan run, or nothing.
SETUPS = {
    "training": "from refseg.engine.training import training_engine\n"
                "with training_engine():\n    pass",
    "plan": "from refseg import engine\nfrom refseg.models import ResMobileNet\n"
            "engine.plan(ResMobileNet((32, 32), seed=0), mode='estimate').run("
            "np.zeros((1, 32, 32, 3), np.float32))",
    "none": "",
}


def probe_faults(extra_env, folder, returned=False, engine="training", floats=5 << 20):
    """The probe's faults in a fresh interpreter, run outside the checkout so that it imports
    the installed package: in its third round (inside ``return_freed_memory`` when
    ``returned``), and in the second round after it."""
    import os

    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    env.update(extra_env)
    out = subprocess.run([sys.executable, "-c", PROBE.format(returned=returned,
                                                             setup=SETUPS[engine],
                                                             floats=floats)],
                         env=env,
                         capture_output=True, text=True, check=True, cwd=folder)
    return [int(line) for line in out.stdout.split()]


def faults(extra_env, folder):
    return probe_faults(extra_env, folder)[0]


def test_freed_arrays_are_reused_without_page_faults(tmp_path):
    """With refseg's thresholds the third round faults no page in (0 measured; at most a few
    allowed for the interpreter's own). With glibc's default trim threshold, which the user's
    setting keeps (refseg then leaves the allocator alone), the same round faults in every
    page again: 1,566 with transparent huge pages, 15,363 without."""
    assert faults({}, tmp_path) <= 10
    assert faults({"MALLOC_TRIM_THRESHOLD_": "131072"}, tmp_path) >= 500


def test_import_alone_leaves_glibcs_thresholds(tmp_path):
    """Without the engine having run, the same round faults its pages in again: the
    reference leaves the allocator as glibc set it."""
    assert probe_faults({}, tmp_path, engine="none")[0] >= 500


def test_a_plan_run_keeps_freed_memory_as_training_does(tmp_path):
    """A plan's first run sets the thresholds (a batch-8 prediction frees 40 MB activations
    layer after layer): the third round faults no page in."""
    assert probe_faults({}, tmp_path, engine="plan", floats=10 << 20)[0] <= 10


def test_blocks_above_any_mmap_threshold_are_reused_too(tmp_path):
    """40 MB arrays, which glibc would map and unmap one by one: with the engine's settings the
    third round faults no page in; inside ``return_freed_memory`` they are mapped and handed
    back again, and with the user's own ``MALLOC_MMAP_MAX_`` refseg leaves glibc alone."""
    big = 10 << 20
    engine_round, after_block = probe_faults({}, tmp_path, floats=big)
    assert engine_round <= 10 and after_block <= 10
    inside, after = probe_faults({}, tmp_path, returned=True, floats=big)
    assert inside >= 500 and after <= 10
    assert probe_faults({"MALLOC_MMAP_MAX_": "65536"}, tmp_path, floats=big)[0] >= 500


@pytest.mark.parametrize("environ", [{"MALLOC_MMAP_THRESHOLD_": "65536"},
                                     {"MALLOC_TRIM_THRESHOLD_": "0"},
                                     {"MALLOC_MMAP_MAX_": "0"},
                                     {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}])
def test_the_users_own_thresholds_stand(environ):
    assert keep_freed_memory(environ) is False


def test_the_thresholds_are_set_where_mallopt_exists():
    import ctypes

    has_mallopt = hasattr(ctypes.CDLL(None), "mallopt")
    assert keep_freed_memory({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"}) is has_mallopt


def test_within_return_freed_memory_freed_arrays_go_back_and_afterwards_stay(tmp_path):
    """Inside the block glibc's start-up thresholds hold: the round after two others faults
    its pages in afresh (its memory was handed back), as with the user's default thresholds
    above (1,566 measured). After the block refseg's thresholds hold again: the first round
    after it faults its memory in once, and the second reuses it (0 measured)."""
    inside, after = probe_faults({}, tmp_path, returned=True)
    assert inside >= 500 and after <= 10


def test_return_freed_memory_leaves_the_users_thresholds_alone(tmp_path):
    """With the user's own thresholds refseg never set its own, and the block changes
    nothing: the rounds after it fault as rounds do without it."""
    env = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}
    assert max(probe_faults(env, tmp_path, returned=True)) <= 10
