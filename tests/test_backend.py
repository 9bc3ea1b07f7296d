"""The read-back of which row loops the direct convolution kernels run."""
import pytest

from refseg import _kernels
from refseg.backend import row_loops

pytestmark = pytest.mark.infrastructure


def _cpu_has_avx512f() -> bool:
    """Linux's report of the CPU's flags: a reading of AVX-512F independent of the
    __builtin_cpu_supports check the kernels make."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return "avx512f" in line.split(":", 1)[1].split()
    raise AssertionError("/proc/cpuinfo has no flags line")


def test_row_loops_reports_the_cpu_and_the_default_choice():
    path, supported = row_loops()
    assert supported == _cpu_has_avx512f()
    assert path == ("avx512" if supported else "baseline")


def test_row_loops_follows_the_switch_and_leaves_it_as_it_was():
    original = _kernels.use_avx512(True)
    try:
        _kernels.use_avx512(False)
        assert row_loops()[0] == "baseline"
        assert _kernels.use_avx512(False) is False  # the read-back did not switch it on
        _kernels.use_avx512(True)
        assert row_loops()[0] == ("avx512" if _cpu_has_avx512f() else "baseline")
        assert _kernels.use_avx512(True) == _cpu_has_avx512f()  # nor off
    finally:
        _kernels.use_avx512(original)
