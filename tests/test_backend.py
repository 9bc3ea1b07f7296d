"""The read-back of which row loops the direct convolution kernels run; every kernel has one
twin, the reference's in refseg._twins, the training engine's in its own wing."""
import pytest

from refseg import _kernels
from refseg.engine.training.backend import row_loops

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


#: The callables of refseg._kernels that are not kernels: its thread and row-loop switches.
CONTROLS = {"openmp_threads", "set_openmp_threads", "use_avx512"}


def test_every_kernel_has_one_twin_of_its_name_and_every_twin_a_kernel():
    """backend "numpy" finds each reference kernel's twin by name in refseg._twins, which
    gathers the public functions of the reference wings' _twins modules, and each of the
    training engine's kernels in engine/training/_twins.py (reached through
    ``engine_kernels``): together those are the kernels, one wing each."""
    import inspect

    from refseg import _twins
    from refseg.engine.training import _twins as engine_twins
    from refseg.engine.training.backend import engine_kernels, twin_names

    # the engine's kernels (engine_*) have their twins in refseg.engine._twins, which the
    # reference's backend never imports (tests/engine/test_engine_kernels.py)
    kernels = {name for name, value in vars(_kernels).items()
               if not name.startswith(("_", "engine_")) and callable(value)} - CONTROLS
    wings = [{name for name, value in vars(wing).items()
              if not name.startswith("_") and inspect.isfunction(value)
              and value.__module__ == wing.__name__}
             for wing in (*_twins.WINGS, engine_twins)]
    assert sorted(_twins.__all__ + twin_names()) == sorted(kernels)
    assert sum(map(len, wings)) == len(kernels) and set().union(*wings) == kernels
    assert all(getattr(_twins, name).__name__ == name for name in _twins.__all__)
    numpy_engine = engine_kernels("numpy")
    assert all(getattr(numpy_engine, name).__name__ == name for name in kernels)
