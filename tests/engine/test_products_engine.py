"""Training's float32 products on the engine's micro-kernels (``engine_gemm_c``, chosen by
``refseg.engine.training.products.product_kernel``): within the float32 summation bound of
NumPy's float64 products on every kernel backend this CPU runs, the same bits whatever the
tiles and the thread count, the twin within the same bound, and the choice between them and
BLAS."""
import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refseg import _kernels
from refseg.engine.runtime import avx2_kernels, portable_kernels
from refseg.engine.training import _twins
from refseg.engine.training.products import (ENGINE_MIN_COLUMNS, ENGINE_MIN_ROWS,
                                             matmul_stack, product_kernel, product_kernels)
from refseg.engine.training.threads import limit_threads
from refseg.errors import InputError

pytestmark = pytest.mark.claim("claim4.propagation")

#: The kernel backends this machine runs, each with the knob that selects it.
KNOBS = {0: portable_kernels, 1: avx2_kernels, 2: contextlib.nullcontext}
BACKENDS = list(range(_kernels.engine_cpu_backend() + 1))
EPS = np.finfo(np.float32).eps  # 2 u


def _operand(rng, planes, rows, cols, transposed):
    if transposed:
        return rng.standard_normal((planes, cols, rows)).astype(np.float32).transpose(0, 2, 1)
    return rng.standard_normal((planes, rows, cols)).astype(np.float32)


def _exact_and_bound(a, b, b_plane, start, accumulate):
    """The float64 product (plus start) and the bound (k + 2) eps (|a| |b| + |start|): the
    classic bound of a float32 sum of k products, with room for the sum of the blocks."""
    k = a.shape[2]
    planes = np.arange(a.shape[0]) if b_plane is None else b_plane
    a64, b64 = a.astype(np.float64), b.astype(np.float64)[planes]
    exact = np.matmul(a64, b64) + (start if accumulate else 0)
    scale = np.matmul(np.abs(a64), np.abs(b64)) + (np.abs(start) if accumulate else 0)
    return exact, (k + 2) * EPS * scale + 1e-300


SHAPES = st.tuples(st.integers(1, 3), st.integers(1, 300), st.integers(1, 2200),
                   st.integers(1, 130))  # planes, m, k (past two blocks of 1024), n


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=30, deadline=None)
@given(shape=SHAPES, layout=st.tuples(st.booleans(), st.booleans()), accumulate=st.booleans(),
       permuted=st.booleans(), seed=st.integers(0, 2**16))
def test_engine_products_are_within_the_summation_bound_and_the_same_on_any_threads(
        backend, shape, layout, accumulate, permuted, seed):
    """Row-major and transposed operands, accumulation, several blocks of the inner dimension
    and partial panels and strips; 1 and 2 threads (2 cut larger products into tiles) give
    the same bits, since every element is the same sum of the same blocks."""
    planes, m, k, n = shape
    rng = np.random.default_rng(seed)
    a = _operand(rng, planes, m, k, layout[0])
    b = _operand(rng, planes, k, n, layout[1])
    b_plane = rng.permutation(planes) if permuted else None
    start = rng.standard_normal((planes, m, n)).astype(np.float32)
    exact, bound = _exact_and_bound(a, b, b_plane, start, accumulate)
    results = []
    for threads in (1, 2):
        out = start.copy()
        with KNOBS[backend](), product_kernels("engine"), limit_threads(threads):
            matmul_stack(a, b, out, b_plane=b_plane, accumulate=accumulate)
        assert np.all(np.abs(out - exact) <= bound)
        results.append(out)
    assert np.array_equal(results[0], results[1])


@pytest.mark.parametrize("shape", [(3, 96, 1792, 96), (2, 13, 300, 37), (1, 12, 256, 16),
                                   (2, 25, 5, 17), (1, 100, 2100, 200), (1, 7, 700, 250)])
@pytest.mark.parametrize("accumulate", [False, True])
def test_a_k_major_left_operand_gives_the_bits_of_its_row_major_copy(shape, accumulate):
    """On AVX-512 a left operand that lies k-major (a transposed view, as a kernel gradient's
    input does) is read in place by its own micro-kernel instead of being transposed into
    packed rows: the same blocks of the inner dimension, each the same chain of fused
    multiply-adds, so the same bits as the row-major copy of it; several blocks of 1024, partial
    strips of 12 rows and partial panels of 16 columns, and accumulation."""
    if _kernels.engine_cpu_backend() != 2:
        pytest.fail("this check needs a CPU with AVX-512 (the CI's has)")
    planes, m, k, n = shape
    rng = np.random.default_rng(m * n)
    a = _operand(rng, planes, m, k, True)
    b = _operand(rng, planes, k, n, False)
    start = rng.standard_normal((planes, m, n)).astype(np.float32)
    outs = []
    for left in (a, np.ascontiguousarray(a)):
        out = start.copy()
        with product_kernels("engine"), limit_threads(2):
            matmul_stack(left, b, out, accumulate=accumulate)
        outs.append(out)
    assert np.array_equal(outs[0], outs[1])
    exact, bound = _exact_and_bound(a, b, None, start, accumulate)
    assert np.all(np.abs(outs[0] - exact) <= bound)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tiles", [(7, 1000), (1000, 16), (12, 48), (100, 33)])
def test_an_engine_products_bits_do_not_depend_on_its_tiles(backend, tiles):
    """The tile loop called with other tiles than product_tiles' (rows x columns), on several
    threads: the same bits as one whole-plane tile, ragged last tiles included; the whole
    plane's 305 rows take b packed a block at a time, tiles of at most 240 rows a pair of
    panels at a time, and the inner dimension spans two blocks."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((2, 305, 1100)).astype(np.float32)
    b = rng.standard_normal((2, 1100, 70)).astype(np.float32)
    none = np.empty(0, np.float32)
    outs = []
    for rows, cols in ((305, 70), tiles):
        out = np.empty((2, 305, 70), np.float32)
        with limit_threads(2):
            _kernels.gemm_stack(a, b, np.arange(2), out, False, rows, cols, True, none, none,
                                -np.inf, np.inf, False, backend)
        outs.append(out)
    assert np.array_equal(outs[0], outs[1])


@settings(max_examples=20, deadline=None)
@given(shape=SHAPES, accumulate=st.booleans(), seed=st.integers(0, 2**16))
def test_the_engine_products_twin_is_within_the_same_bound(shape, accumulate, seed):
    """The twin rounds its float64 product once; held to the bound, and so to the kernel
    within twice it."""
    planes, m, k, n = shape
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((planes, m, k)).astype(np.float32)
    b = rng.standard_normal((planes, k, n)).astype(np.float32)
    start = rng.standard_normal((planes, m, n)).astype(np.float32)
    exact, bound = _exact_and_bound(a, b, None, start, accumulate)
    outs = {}
    for backend in ("cython", "numpy"):
        out = start.copy()
        with product_kernels("engine"):
            matmul_stack(a, b, out, accumulate=accumulate, backend=backend)
        assert np.all(np.abs(out - exact) <= bound)
        outs[backend] = out
    twin = start.copy()
    none = np.empty(0, np.float32)
    _twins.gemm_stack(a, b, np.arange(planes), twin, accumulate, m, n, False, none, none,
                      -np.inf, np.inf, False, 0)
    assert np.array_equal(twin, outs["numpy"])
    assert np.all(np.abs(outs["cython"] - outs["numpy"]) <= 2 * bound)


@pytest.mark.parametrize("bounds", [(-np.inf, np.inf), (0.0, np.inf), (0.0, 6.0)])
def test_an_engine_products_tail_equals_the_pass_after_it_bit_for_bit(bounds):
    """The bias, batch norm and clamp of the tile loop, after the engine's tile, give what the
    product followed by channel_affine gives."""
    from refseg import _twins as passes

    rng = np.random.default_rng(11)
    a = rng.standard_normal((1, 300, 200)).astype(np.float32)
    b = rng.standard_normal((1, 200, 40)).astype(np.float32)
    scale, shift = (rng.standard_normal(40).astype(np.float32) for _ in range(2))
    with product_kernels("engine"), limit_threads(2):
        plain = matmul_stack(a, b)
        fused = matmul_stack(a, b, scale=scale, shift=shift, bounds=bounds)
    expected = plain.copy()
    passes.channel_affine(expected[0], scale, shift, *bounds, expected[0])
    np.testing.assert_array_equal(fused.view(np.uint32), expected.view(np.uint32))


def test_which_products_the_engine_takes():
    """float32 products of at least a strip of rows and a panel of columns, on an AVX-512 CPU
    with the training engine's AVX-512 loops on; BLAS for the rest, for float64, and where
    the knob says so; the knob forces either."""
    avx512 = _kernels.engine_cpu_backend() == 2
    big = (ENGINE_MIN_ROWS, ENGINE_MIN_COLUMNS)
    assert product_kernel(np.float32, *big) == (2 if avx512 else -1)
    assert product_kernel(np.float32, ENGINE_MIN_ROWS - 1, 500) == -1
    assert product_kernel(np.float32, 500, ENGINE_MIN_COLUMNS - 1) == -1
    assert product_kernel(np.float64, 500, 500) == -1
    previous = _kernels.use_avx512(False)
    try:
        assert product_kernel(np.float32, *big) == -1
    finally:
        _kernels.use_avx512(previous)
    with product_kernels("blas"):
        assert product_kernel(np.float32, *big) == -1
    with product_kernels("engine"):
        assert product_kernel(np.float32, 1, 1) == _kernels.engine_cpu_backend()
        assert product_kernel(np.float64, 500, 500) == -1
        with portable_kernels():
            assert product_kernel(np.float32, 1, 1) == 0
    with pytest.raises(InputError, match="product_kernels: expected one of"):
        with product_kernels("openblas"):
            pass


def test_float64_is_refused_by_the_engines_tile_loop():
    a = np.ones((1, 4, 3)), np.ones((1, 3, 5))
    none = np.empty(0)
    with pytest.raises(ValueError, match="float32 products only"):
        _kernels.gemm_stack(a[0], a[1], np.arange(1), np.empty((1, 4, 5)), False, 4, 5, False,
                            none, none, -np.inf, np.inf, False, 2)
