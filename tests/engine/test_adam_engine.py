"""Adam's update on training's engine (``FastAdamUpdate``, ``engine/training/adam_update.c``):
bit for bit the reference's ``adam_update`` on every vector unit this CPU runs, on one thread
and on several, its twin bit for bit the kernel, and installed by ``training_engine`` only.

Equality is exact: both sides widen to double, round each operation on its own (the build
disables contraction) and round each result once to float32; division and square root are
correctly rounded at both widths, so vector lanes cannot differ from the scalar loop.
"""
import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from refseg import _kernels
from refseg.autograd import optim, seam
from refseg.autograd.tensor import Tensor
from refseg.engine import use_engine
from refseg.engine.runtime import avx2_kernels, portable_kernels
from refseg.engine.training import _twins, training_engine
from refseg.engine.training.optim import FastAdamUpdate
from refseg.engine.training.threads import limit_threads

pytestmark = pytest.mark.claim("claim4.update")

#: The vector units this machine runs (2 AVX-512F, 1 AVX2, 0 plain C).
UNITS = list(range(_kernels.engine_cpu_backend() + 1))
KNOBS = {0: portable_kernels, 1: avx2_kernels, 2: contextlib.nullcontext}


def _state(values, dtype=np.float32):
    p, g, m, v = (values[i].astype(dtype) for i in range(4))
    return p, g, m, np.abs(v)


def _updated(update, p0, g, m0, v0, t, **kwargs):
    p, m, v = p0.copy(), m0.copy(), v0.copy()
    update(p, g, m, v, 1e-3, 0.9, 0.999, 1e-7, 1 - 0.9 ** t, 1 - 0.999 ** t, **kwargs)
    return p, m, v


def _assert_same(got, want):
    for a, b in zip(got, want):
        assert a.dtype == b.dtype
        assert np.array_equal(a, b, equal_nan=True)


@pytest.mark.parametrize("unit", UNITS)
@settings(deadline=None)
@given(values=hnp.arrays(np.float64, st.tuples(st.just(4), st.integers(1, 70)),
                         elements=st.floats(-1e30, 1e30)), t=st.integers(1, 10000))
def test_the_engine_update_is_the_reference_update_bit_for_bit(unit, values, t):
    """Lengths 1-70 cover whole vectors of 8 and 4 lanes and every tail; values from 1e-30 to
    1e30 in magnitude (g^2 overflowing float32 in v included)."""
    p0, g, m0, v0 = _state(values)
    want = _updated(_kernels.adam_update, p0, g, m0, v0, t)
    _assert_same(_updated(_kernels.vector_adam_update, p0, g, m0, v0, t, backend=unit), want)
    _assert_same(_updated(_twins.vector_adam_update, p0, g, m0, v0, t, backend=unit), want)


@pytest.mark.parametrize("unit", UNITS)
def test_the_engine_update_is_the_same_bits_on_one_thread_and_on_two(unit):
    """Enough elements for the parallel loop (blocks of 16384 over the threads, the last one
    partial); specials planted: NaN and infinite gradients go through as the reference's."""
    rng = np.random.default_rng(3)
    n = _kernels.PARALLEL_MIN_ELEMENTS + 16384 * 3 + 5
    p0, g, m0 = (rng.uniform(-10, 10, n).astype(np.float32) for _ in range(3))
    v0 = rng.uniform(0, 10, n).astype(np.float32)
    g[:4] = [np.nan, np.inf, -np.inf, 0.0]
    want = _updated(_kernels.adam_update, p0, g, m0, v0, 5)
    for threads in (1, 2):
        with limit_threads(threads):
            _assert_same(_updated(_kernels.vector_adam_update, p0, g, m0, v0, 5,
                                  backend=unit), want)


def test_the_kernel_refuses_arrays_of_different_lengths_and_unknown_units():
    p = np.zeros(5, np.float32)
    with pytest.raises(ValueError, match="different lengths"):
        _kernels.vector_adam_update(p, np.zeros(4, np.float32), p.copy(), p.copy(), 1e-3, 0.9,
                                    0.999, 1e-7, 0.1, 0.001, 2)
    with pytest.raises(ValueError, match="backend"):
        _kernels.vector_adam_update(p, p.copy(), p.copy(), p.copy(), 1e-3, 0.9, 0.999, 1e-7,
                                    0.1, 0.001, 3)


@pytest.mark.parametrize("unit", UNITS)
def test_fast_adam_update_runs_the_unit_the_engine_runs(unit):
    with KNOBS[unit]():
        assert FastAdamUpdate("cython").unit == unit


def _trained(engine: bool, dtype, steps: int = 3):
    """Parameters and moments after ``steps`` Adam steps with fixed gradients."""
    rng = np.random.default_rng(11)
    params = [Tensor(rng.standard_normal(shape).astype(dtype), requires_grad=True, name=name)
              for name, shape in (("w", (3, 3, 8, 16)), ("b", (16,)), ("big", (70001,)))]
    adam = optim.Adam(params)
    with use_engine(engine), training_engine():
        for _ in range(steps):
            for p in params:
                p.grad = rng.standard_normal(p.shape).astype(dtype)
            adam.step()
    return [p.data for p in params] + [adam.m[n] for n in adam.names] + \
        [adam.v[n] for n in adam.names]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adam_steps_with_the_engine_end_where_the_reference_does_bit_for_bit(dtype):
    _assert_same(_trained(True, dtype), _trained(False, dtype))


def test_training_engine_installs_the_update_and_use_engine_false_does_not():
    assert seam.op_class(optim.AdamUpdate) is optim.AdamUpdate
    with training_engine():
        assert seam.op_class(optim.AdamUpdate) is FastAdamUpdate
        with seam.reference_ops():
            assert seam.op_class(optim.AdamUpdate) is optim.AdamUpdate
    with use_engine(False), training_engine():
        assert seam.op_class(optim.AdamUpdate) is optim.AdamUpdate


def test_float64_and_strided_arrays_take_the_reference_kernel(monkeypatch):
    """The engine's kernel takes float32 C-contiguous arrays; the rest go to the reference's
    (which would refuse a strided one: the caller passes flat views)."""
    calls = []
    monkeypatch.setattr(optim.AdamUpdate, "__call__",
                        lambda self, *args: calls.append(args[0].dtype))
    update = FastAdamUpdate("cython")
    for dtype in (np.float64, np.float32):
        a = np.zeros(10, dtype)
        update(a, a.copy(), a.copy(), a.copy(), 1e-3, 0.9, 0.999, 1e-7, 0.1, 0.001)
    strided = np.zeros(20, np.float32)[::2]
    update(strided, strided.copy(), strided.copy(), strided.copy(), 1e-3, 0.9, 0.999, 1e-7,
           0.1, 0.001)
    assert calls == [np.float64, np.float32]
