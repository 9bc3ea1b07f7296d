"""Running a compiled kernel and its NumPy twin side by side, for the bit-identity tests.

Equality is exact (``np.array_equal``), not approximate: both sides add the same terms in the
same order, and the build disables floating-point contraction (setup.py), so any difference is
a bug in one of them.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from refseg import _kernels as fast
from refseg import _twins as twin
from refseg.engine.training.backend import engine_kernels

#: the reference's twins and the training engine's (``engine/training/_twins.py``) together
engine_twin = engine_kernels("numpy")


def both(name, *inputs, outputs):
    """Run kernel ``name`` on both backends (the reference's twin, or the training engine's);
    return the two lists of output arrays."""
    results = []
    for module in (fast, twin if hasattr(twin, name) else engine_twin):
        outs = [np.zeros(shape, dtype=dtype) for shape, dtype in outputs]
        getattr(module, name)(*inputs, *outs)
        results.append(outs)
    return results


#: Rows enough for the network kernels' two-thread split (PARALLEL_MIN_ELEMENTS, with 4 or more
#: columns): hypothesis draws small arrays, which run on one thread.
PARALLEL_ROWS = fast.PARALLEL_MIN_ELEMENTS // 4 + 7


def assert_same(pair):
    for a, b in zip(*pair):
        assert a.dtype == b.dtype and np.array_equal(a, b)


def with_specials(values, dtype):
    """values with NaN, +-inf, -0.0 and 0.0 planted in the first elements."""
    out = values.astype(dtype).reshape(-1)
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 6.0], dtype=dtype)
    out[:min(out.size, specials.size)] = specials[:out.size]
    return out.reshape(values.shape)


#: Examples of each elementwise check on PARALLEL_ROWS rows: a fifth of the profile's. Only the
#: seed and the column count vary there, and each example runs a million elements through both
#: backends; the drawn small arrays keep the profile's full count.
PARALLEL_EXAMPLES = max(6, settings().max_examples // 5)


def elementwise_cases(max_channels, *claims):
    """The two tests of one elementwise kernel check ``check(x, dtype, rng)``, in both dtypes:
    on a drawn array of up to 40 rows of up to ``max_channels`` columns (one thread), and on
    PARALLEL_ROWS uniform rows of a drawn column count (all threads), each with NaN, infinities
    and signed zeros planted first. Returns the pair (small, on all threads)."""
    def decorate(check):
        def small(dtype, values, seed):
            check(with_specials(values, dtype), dtype, np.random.default_rng(seed))

        def on_all_threads(dtype, columns, seed):
            rng = np.random.default_rng(seed)
            check(with_specials(rng.uniform(-10, 10, (PARALLEL_ROWS, columns)), dtype), dtype,
                  rng)

        slow_ok = [HealthCheck.too_slow]
        small = settings(suppress_health_check=slow_ok)(given(
            values=hnp.arrays(np.float64, st.tuples(st.integers(1, 40),
                                                    st.integers(1, max_channels)),
                              elements=st.floats(-10, 10)),
            seed=st.integers(0, 2**16))(small))
        on_all_threads = settings(suppress_health_check=slow_ok, max_examples=PARALLEL_EXAMPLES)(
            given(columns=st.integers(1, max_channels), seed=st.integers(0, 2**16))(
                on_all_threads))
        tests = []
        for test, suffix in ((small, ""), (on_all_threads, "_on_all_threads")):
            test = pytest.mark.parametrize("dtype", [np.float32, np.float64])(test)
            test = pytest.mark.claim(*claims)(test)
            test.__name__ = test.__qualname__ = check.__name__.replace("check_", "test_") + suffix
            test.__doc__ = check.__doc__
            tests.append(test)
        return tuple(tests)
    return decorate
