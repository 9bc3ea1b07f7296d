"""The one comparison helper of the cross-checks against torch and Keras (per-op tolerances
live beside each test file's cases)."""
import numpy as np


def assert_close(name, ours, theirs, rtol, atol, *, measured, key_depth):
    """Assert |ours - theirs| <= atol + rtol * |theirs| elementwise; record the differences.

    ``name`` is "op/.../what" (e.g. "conv2d/float64/dW"); the maxima of the absolute and the
    relative difference (over elements with |theirs| > 1e-3, where a relative difference means
    something) are printed with ``-s`` and kept in ``measured`` under the first ``key_depth``
    parts of the name, with the smallest atol used: (max abs, max rel, atol).
    """
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    assert ours.shape == theirs.shape, f"{name}: shape {ours.shape} != {theirs.shape}"
    assert ours.dtype == theirs.dtype, f"{name}: dtype {ours.dtype} != {theirs.dtype}"
    a, b = ours.astype(np.float64), theirs.astype(np.float64)
    diff = np.abs(a - b)
    big = np.abs(b) > 1e-3
    max_abs = float(diff.max(initial=0.0))
    max_rel = float((diff[big] / np.abs(b[big])).max(initial=0.0))
    key = "/".join(name.split("/")[:key_depth])
    prev = measured.get(key, (0.0, 0.0, np.inf))
    measured[key] = (max(prev[0], max_abs), max(prev[1], max_rel), min(prev[2], atol))
    print(f"crosscheck {name}: max abs {max_abs:.3g}, max rel {max_rel:.3g} (atol {atol:.3g})")
    bad = diff > atol + rtol * np.abs(b)
    assert not bad.any(), (f"{name}: {int(bad.sum())} of {bad.size} elements differ beyond "
                           f"rtol={rtol}, atol={atol:.3g}; max abs {max_abs:.3g}, max rel "
                           f"{max_rel:.3g}")
