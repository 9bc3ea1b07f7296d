"""Running a compiled kernel and its NumPy twin side by side, for the bit-identity tests.

Equality is exact (``np.array_equal``), not approximate: both sides add the same terms in the
same order, and the build disables floating-point contraction (setup.py), so any difference is
a bug in one of them.
"""
import numpy as np

from refseg import _kernels as fast
from refseg import _twins as twin

def both(name, *inputs, outputs):
    """Run kernel ``name`` on both backends; return the two lists of output arrays."""
    results = []
    for module in (fast, twin):
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
