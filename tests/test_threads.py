"""refseg's own thread control of the native libraries, read back by threadpoolctl (an anchor:
an independent reading of the same libraries' thread counts)."""
import os

import pytest
# loads SciPy's own OpenBLAS, so that both BLAS copies are checked
import scipy.linalg  # noqa: F401

from anchors import require
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
