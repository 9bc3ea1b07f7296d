"""The matrix products on refseg's one thread pool (``refseg.engine.training.products``), their
tiles on BLAS: the tile loop against its twin bit for bit, against NumPy's float64 products
within rounding, the same bits at any thread count, and the BLAS it calls kept at one thread of
its own. The tiles on the engine's micro-kernels: ``test_products_engine.py``."""
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refseg.engine.training.products import (PARALLEL_MIN_MACS, TILES_PER_THREAD, matmul,
                                             matmul_stack, product_kernels, product_tiles)
from refseg.engine.training.threads import kernel_blas_pool, limit_threads

from anchors import require

pytestmark = pytest.mark.claim("claim4.propagation")

DTYPES = [np.float32, np.float64]


@pytest.fixture(autouse=True)
def blas_tiles():
    """Every product here on BLAS, whatever ``product_kernel`` would choose on this CPU."""
    with product_kernels("blas"):
        yield


def _operand(rng, planes, rows, cols, dtype, transposed):
    """(planes, rows, cols), stored row-major or as the transposed view of (cols, rows)
    planes."""
    if transposed:
        return rng.standard_normal((planes, cols, rows)).astype(dtype).transpose(0, 2, 1)
    return rng.standard_normal((planes, rows, cols)).astype(dtype)


SHAPES = st.tuples(st.integers(1, 3), st.integers(1, 300), st.integers(0, 90),
                   st.integers(1, 200))  # planes, m, k, n


def _both(a, b, b_plane, start, accumulate):
    outs = []
    for backend in ("cython", "numpy"):
        out = start.copy()
        matmul_stack(a, b, out, b_plane=b_plane, accumulate=accumulate, backend=backend)
        outs.append(out)
    return outs


@pytest.mark.parametrize("dtype", DTYPES)
@settings(max_examples=40, deadline=None)
@given(shape=SHAPES, layout=st.tuples(st.booleans(), st.booleans()), accumulate=st.booleans(),
       permuted=st.booleans(), seed=st.integers(0, 2**16))
def test_tile_loop_equals_its_twin_bit_for_bit(dtype, shape, layout, accumulate, permuted,
                                               seed):
    """Both sides make the same BLAS calls on the same tiles; any difference is a tile or a
    pointer computed wrongly. One exception, held to the rounding bound instead: float64
    products with one output column. There OpenBLAS 0.3.30's SkylakeX kernels (seen on an AMD
    Zen 4) gave SciPy's Python wrapper and its Cython BLAS results 1 ulp apart for the same
    arguments, in up to a third of the draws; float32, and float64 with more columns, agreed
    to the bit."""
    planes, m, k, n = shape
    rng = np.random.default_rng(seed)
    a = _operand(rng, planes, m, k, dtype, layout[0])
    b = _operand(rng, planes, k, n, dtype, layout[1])
    b_plane = rng.permutation(planes) if permuted else None
    start = rng.standard_normal((planes, m, n)).astype(dtype)
    fast, twin = _both(a, b, b_plane, start, accumulate)
    one_column_float64 = dtype == np.float64 and n == 1
    assert fast.dtype == twin.dtype == dtype
    assert one_column_float64 or np.array_equal(fast, twin)
    expected = (np.matmul(a.astype(np.float64), b.astype(np.float64)[
        np.arange(planes) if b_plane is None else b_plane]) + (start if accumulate else 0))
    # float32: k + 1 roundings of terms of size |a||b|, bounded by the sum of |terms|
    scale = np.matmul(np.abs(a).astype(np.float64), np.abs(b).astype(np.float64)[
        np.arange(planes) if b_plane is None else b_plane]) + (np.abs(start) if accumulate
                                                                else 0)
    eps = np.finfo(dtype).eps
    for result in (fast, twin):
        assert np.all(np.abs(result - expected) <= (k + 2) * eps * scale + 1e-300)


@pytest.mark.parametrize("shape", [(1, 3136, 64, 256), (36, 392, 128, 128), (1, 49, 512, 2048),
                                   (16, 50, 64, 64), (1, 1, 401408, 3)])
def test_products_of_the_networks_shapes_depend_on_the_thread_count_alone(shape):
    """Which thread takes which tile cannot change a bit: two runs at two threads agree, and
    one thread makes one BLAS call per plane (the twin's call with a whole-plane tile). Shapes
    of ResNet50V2's 1x1 convolutions at 56x56 and 7x7, a Winograd stack, a bias gradient."""
    from refseg.engine.training import _twins

    planes, m, k, n = shape
    rng = np.random.default_rng(1)
    a = rng.standard_normal((planes, m, k)).astype(np.float32)
    b = rng.standard_normal((planes, k, n)).astype(np.float32)
    with limit_threads(2):
        first, second = matmul_stack(a, b), matmul_stack(a, b)
    assert np.array_equal(first, second)
    with limit_threads(1):
        single = matmul_stack(a, b)
    whole = np.empty_like(single)
    none = np.empty(0, np.float32)
    _twins.gemm_stack(a, b, np.arange(planes), whole, False, m, n, False, none, none,
                      -np.inf, np.inf, False)
    assert np.array_equal(single, whole)
    exact = np.matmul(a.astype(np.float64), b.astype(np.float64))
    bound = (k + 2) * np.finfo(np.float32).eps * np.matmul(np.abs(a).astype(np.float64),
                                                           np.abs(b).astype(np.float64))
    assert np.all(np.abs(first - exact) <= bound) and np.all(np.abs(single - exact) <= bound)


def _one_thread_inside_the_block(a, b):
    """matmul_stack(a, b) on 1 OpenMP thread inside bits_independent_of_load opened at 2."""
    from refseg import _kernels
    from refseg.engine.training.threads import bits_independent_of_load

    with limit_threads(2), bits_independent_of_load() as tiles:
        assert tiles == 2
        _kernels.set_openmp_threads(1)
        try:
            return matmul_stack(a, b)
        finally:
            _kernels.set_openmp_threads(2)


@pytest.mark.parametrize("shape", [(1, 1, 28672, 64), (1, 1, 57344, 256), (1, 1006, 41, 38),
                                   (1, 3136, 64, 256), (36, 392, 128, 128)])
def test_inside_bits_independent_of_load_one_thread_gives_the_bits_of_two(shape):
    """Inside the block a product keeps the tiles of the block's count (2) when fewer threads
    run it. Bias gradients of a training step at batch 8 (a row of ones times 28,672 and
    57,344 rows) and a shape whose tiles OpenBLAS rounded otherwise than the whole product
    among them."""
    planes, m, k, n = shape
    rng = np.random.default_rng(2)
    a = (np.ones((planes, m, k), np.float32) if m == 1
         else rng.standard_normal((planes, m, k)).astype(np.float32))
    b = rng.standard_normal((planes, k, n)).astype(np.float32)
    with limit_threads(2):
        two = matmul_stack(a, b)
    assert np.array_equal(_one_thread_inside_the_block(a, b), two)


@settings(max_examples=25, deadline=None)
@given(shape=st.tuples(st.integers(1, 3), st.integers(1, 1200), st.integers(1, 300),
                       st.integers(1, 300)), seed=st.integers(0, 2 ** 16))
def test_inside_bits_independent_of_load_any_product_keeps_its_bits_on_fewer_threads(shape,
                                                                                     seed):
    planes, m, k, n = shape
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((planes, m, k)).astype(np.float32)
    b = rng.standard_normal((planes, k, n)).astype(np.float32)
    with limit_threads(2):
        two = matmul_stack(a, b)
    assert np.array_equal(_one_thread_inside_the_block(a, b), two)


@pytest.mark.claim("claim2.fusion", "claim2.backbones")
@pytest.mark.parametrize("dtype", DTYPES)
@settings(max_examples=30, deadline=None)
@given(shape=st.tuples(st.integers(1, 2), st.integers(1, 700), st.integers(0, 40),
                       st.integers(1, 300)),
       tail=st.sampled_from(["affine", "shift", "clamp"]),
       bounds=st.sampled_from([(-np.inf, np.inf), (0.0, np.inf), (0.0, 6.0)]),
       threads=st.sampled_from([1, 2]), seed=st.integers(0, 2**16))
def test_a_products_tail_equals_the_pass_after_it_bit_for_bit(dtype, shape, tail, bounds,
                                                               threads, seed):
    """scale, shift and bounds applied to each tile as its BLAS call returns give what the
    product followed by channel_affine, channel_add or clamp gives (the batch norm, the bias,
    the ReLU after a convolution), on both backends and at 1 and 2 threads, where 2 threads cut
    the larger products into tiles; -0.0, ties at the bounds and a NaN included. Each backend
    is held to its own product followed by the pass: the product itself can differ between
    the backends by the one exception of ``test_tile_loop_equals_its_twin_bit_for_bit``
    (float64, one output column: within the rounding bound of the sum, not bit for bit), which
    is checked here by its condition."""
    planes, m, k, n = shape
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((planes, m, k)).astype(dtype)
    b = rng.standard_normal((planes, k, n)).astype(dtype)
    scale = rng.standard_normal(n).astype(dtype) if tail == "affine" else None
    shift = rng.standard_normal(n).astype(dtype) if tail != "clamp" else None
    if shift is not None:
        shift[::7] = -0.0
        shift[0] = np.nan
    from refseg import _twins as passes

    unsigned = np.uint32 if dtype == np.float32 else np.uint64
    plains = {}
    for backend in ("cython", "numpy"):
        with limit_threads(threads):
            plain = matmul_stack(a, b, backend=backend)
            fused = matmul_stack(a, b, scale=scale, shift=shift, bounds=bounds,
                                 backend=backend)
        plains[backend] = plain
        expected = plain.copy()
        for plane in expected:
            if tail == "affine":
                passes.channel_affine(plane, scale, shift, *bounds, plane)
            elif tail == "shift":
                passes.channel_add(plane, shift, *bounds, plane)
            else:
                passes.clamp(plane, *bounds, plane)
        # the bits themselves: -0.0 and +0.0 differ here, as do two NaNs' payloads
        np.testing.assert_array_equal(fused.view(unsigned), expected.view(unsigned))
    if dtype == np.float64 and n == 1:
        # the exception's own condition, held to the rounding bound of a sum of k products (as
        # in test_tile_loop_equals_its_twin_bit_for_bit): ulps of the result are no bound where
        # the terms cancel (9 ulps were drawn on an Intel Xeon at k = 16)
        exact = np.matmul(a.astype(np.float64), b.astype(np.float64))
        scale = np.matmul(np.abs(a), np.abs(b))
        for plain in plains.values():
            assert np.all(np.abs(plain - exact) <= (k + 2) * np.finfo(dtype).eps * scale + 1e-300)
    else:
        np.testing.assert_array_equal(plains["cython"].view(unsigned),
                                      plains["numpy"].view(unsigned))


def test_a_products_tail_is_refused_where_it_means_nothing():
    a, b = np.ones((1, 4, 3), np.float32), np.ones((1, 3, 5), np.float32)
    with pytest.raises(ValueError, match="neither goes with accumulate"):
        matmul_stack(a, b, np.zeros((1, 4, 5), np.float32), accumulate=True,
                     shift=np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="scale needs a shift"):
        matmul_stack(a, b, scale=np.ones(5, np.float32))
    with pytest.raises(ValueError, match=r"shift shape \(4,\) does not match 5 columns"):
        matmul_stack(a, b, shift=np.zeros(4, np.float32))


@settings(max_examples=200, deadline=None)
@given(planes=st.integers(1, 64), m=st.integers(1, 60000), n=st.integers(1, 4096),
       k=st.integers(1, 5000), threads=st.integers(1, 8))
def test_tiles_cover_the_output_and_stay_few(planes, m, n, k, threads):
    rows, cols = product_tiles(planes, m, n, k, threads)
    assert 1 <= rows and 1 <= cols and (rows >= m or cols >= n)  # one side is never split
    per_plane = -(-m // rows) * -(-n // cols)
    assert per_plane * planes <= max(planes, TILES_PER_THREAD * threads + planes - 1)
    if threads == 1 or planes * m * n * k < PARALLEL_MIN_MACS:
        assert (rows, cols) == (m, n)


@pytest.mark.parametrize("planes, m, n, k, tiles", [
    (1, 144, 576, 5184, 4),   # 3 tiles of 192 columns would leave a thread idle a third
    (3, 400, 64, 500, 6),     # three planes on two threads: each split in two
    (36, 9, 576, 576, 36),    # the planes alone make whole rounds
])
def test_tiles_come_in_whole_rounds_of_the_threads(planes, m, n, k, tiles):
    rows, cols = product_tiles(planes, m, n, k, 2)
    assert planes * -(-m // rows) * -(-n // cols) == tiles


def test_matmul_reads_transposed_views_and_writes_into_strided_rows():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((700, 300)).astype(np.float32)
    b = rng.standard_normal((200, 300)).astype(np.float32)
    out = np.zeros((700, 400), dtype=np.float32)[:, ::2]  # rows not contiguous
    matmul(a, b.T, out)
    assert np.allclose(out, a.astype(np.float64) @ b.T.astype(np.float64), atol=1e-3)


def test_matmul_edge_shapes_and_other_dtypes():
    empty = matmul(np.ones((4, 0), np.float32), np.ones((0, 5), np.float32))
    assert empty.shape == (4, 5) and not empty.any()
    kept = np.full((2, 2), 3.0, np.float32)
    matmul(np.ones((2, 0), np.float32), np.ones((0, 2), np.float32), kept, accumulate=True)
    assert (kept == 3).all()
    assert matmul(np.ones((0, 3), np.float32), np.ones((3, 2), np.float32)).shape == (0, 2)
    ints = matmul(np.arange(6).reshape(2, 3), np.arange(6).reshape(3, 2))
    assert np.array_equal(ints, np.arange(6).reshape(2, 3) @ np.arange(6).reshape(3, 2))
    with pytest.raises(ValueError):
        matmul_stack(np.ones((1, 2, 3), np.float32), np.ones((1, 4, 2), np.float32))


@pytest.mark.infrastructure
def test_the_kernels_blas_is_put_back_to_one_thread_before_each_product():
    """A thread count set by others (here: limit_threads(2) on every pool) must not reach the
    BLAS calls made from OpenMP's threads."""
    threadpoolctl = require("threadpoolctl")
    pool = kernel_blas_pool()
    assert pool is not None, "SciPy's wheels ship OpenBLAS: its thread functions must be found"
    info = {i["filepath"]: i for i in threadpoolctl.threadpool_info()}
    assert any(path.endswith(pool.path.rsplit("/", 1)[-1]) for path in info), (pool.path, info)
    a = np.ones((2000, 300), np.float32)
    with limit_threads(2):
        assert pool.get() == 2
        matmul(a, a.T[:, :500])
        assert pool.get() == 1


_FRESH_THREAD_SCRIPT = """
import numpy as np
from refseg.engine.training.products import matmul_stack, product_kernels
from refseg.engine.training.threads import limit_threads

rng = np.random.default_rng(5)
for planes, m, k, n in ((1, 49, 4608, 512), (4, 784, 256, 96)):
    a = rng.standard_normal((planes, m, k)).astype(np.float32)
    b = rng.standard_normal((planes, k, n)).astype(np.float32)
    with limit_threads(1), product_kernels("blas"):
        # the twin first: its BLAS calls come from this thread before any tile loop has run
        fresh = matmul_stack(a, b, backend="numpy")
        prepared = matmul_stack(a, b)
        again = matmul_stack(a, b, backend="numpy")
    print(int(np.array_equal(fresh, prepared)), int(np.array_equal(fresh, again)))
"""


@pytest.mark.infrastructure
def test_a_threads_first_product_gives_the_bits_of_a_prepared_thread(tmp_path):
    """The tile loop makes one preparing product on each thread before its first tile (SciPy's
    OpenBLAS runs slowly on a thread until then, ``engine/training/_gemm.pxi``). In a fresh process,
    products made on a thread that has not been prepared (the twin's, first) and after it must
    agree bit for bit with the tile loop's."""
    run = subprocess.run([sys.executable, "-c", _FRESH_THREAD_SCRIPT], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["1", "1", "1", "1"], run.stdout
