"""The matrix products of the convolutions, on refseg's one thread pool.

Every product of the network (im2col times kernel, the Winograd products, the kernel and bias
gradients) runs here: the output is cut into tiles, each tile is one single-threaded call of
SciPy's BLAS over the whole inner dimension, and refseg's OpenMP threads take the tiles as
they come free (``engine/training/_gemm.pxi``). There is then one pool of threads, libgomp's, instead
of two (libgomp's for the kernels and OpenBLAS's for NumPy's products), and a thread that
another process slows down does fewer tiles instead of holding up an even share.

The tiles depend on the shapes and the thread count alone (``product_tiles``; one thread:
one BLAS call per product), so results are reproducible at a given thread count
(``refseg.engine.training.threads.limit_threads``), and at any count inside
``refseg.engine.training.threads.bits_independent_of_load``, which cuts for one count whichever runs. The
twin (backend ``"numpy"``) makes the same calls one after another.

SciPy's OpenBLAS is set back to one thread of its own before every product
(``refseg.engine.training.threads.single_threaded_blas``), which holds for the whole process; NumPy's BLAS, a
separate library in NumPy's and SciPy's wheels, is left as it is.

On a CPU with AVX-512, float32 products of at least a panel's columns run each tile on the
prediction engine's own micro-kernels instead (``product_kernel``; ``engine_gemm_c`` in
``engine/engine_kernels.c``). OpenBLAS picks its kernels when it loads, from the CPU or from
``OPENBLAS_CORETYPE``; an environment that names an older core (``Haswell`` on an AVX-512
machine) halves its float32 rate, and a training step with it. The engine's kernels are chosen
at run time from the CPU alone, and their sums do not depend on the tiles: such a product has
the same bits at any thread count, inside ``bits_independent_of_load`` or not.
"""
from __future__ import annotations

import contextlib
import contextvars

import numpy as np

from refseg.autograd.elementwise import UNCLAMPED
from refseg.engine.training.backend import engine_kernels as kernels
from refseg.errors import InputError
from refseg.engine.training.threads import single_threaded_blas, tiling_threads
from refseg.cite import implements, infrastructure

#: Products with fewer multiply-adds than this are one BLAS call, on the calling thread:
#: handing out tiles costs more than it saves below it (about 20 us of work on one core).
PARALLEL_MIN_MACS = 1 << 20

#: Tiles per thread at most. More tiles than threads let the dynamic schedule even out a
#: thread that shares its core with another process; each tile beyond the first repacks one
#: operand, which REPACK_SIDE bounds. Measured at 224x224 on 2 cores, in one process: 2 and 4
#: per thread equal with a busy neighbour (batch 1 and 8), 2 about 5 % faster quiet at batch 8.
TILES_PER_THREAD = 2

#: Output rows (or columns) per extra tile at least. A tile repacks the whole operand along
#: the side it does not split; packing costs about 20 multiply-adds' time per value here, so a
#: product split along m rows into t tiles costs (t - 1) * 20 / m more: 10 % at m / 200.
REPACK_SIDE = 200

#: Tile sides are multiples of this (OpenBLAS's single-precision kernels work on 16 x 4 and
#: 16 x 8 blocks on x86-64).
TILE_STEP = 16

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))

#: Fewest output rows and columns of a float32 product that the engine's micro-kernels take
#: (``product_kernel``): below a tile of rows (AVX-512: 12) or a panel of columns (16) most of
#: each micro-kernel call would compute padding, and BLAS's narrow kernels do better (the
#: 3-class layers, and the bias gradients' row of ones).
ENGINE_MIN_ROWS = 12
ENGINE_MIN_COLUMNS = 16

#: The kernels of float32 products: "auto" (``product_kernel`` decides), "blas" or "engine".
PRODUCT_KERNELS = ("auto", "blas", "engine")
_PRODUCT_KERNEL = contextvars.ContextVar("refseg_product_kernel", default="auto")


@infrastructure("a knob choosing the kernels of the products: speed only, no claim element")
@contextlib.contextmanager
def product_kernels(kind: str):
    """Within the block, float32 products run on ``kind``'s kernels: "blas" (SciPy's BLAS,
    one call per tile), "engine" (the engine's micro-kernels, of the backend that
    ``refseg.engine.runtime`` runs now, whatever the shape) or "auto" (``product_kernel``)."""
    if kind not in PRODUCT_KERNELS:
        raise InputError(f"product_kernels: expected one of {PRODUCT_KERNELS}, got {kind!r}")
    token = _PRODUCT_KERNEL.set(kind)
    try:
        yield
    finally:
        _PRODUCT_KERNEL.reset(token)


@infrastructure("which kernels compute a product: speed only, no claim element")
def product_kernel(dtype, m: int, n: int) -> int:
    """The kernels of a product with ``m`` x ``n`` outputs per plane: -1 for BLAS, else the
    engine backend code (2 AVX-512, 1 AVX2, 0 portable) of ``engine_gemm_c``.

    "auto" gives the engine's AVX-512 kernels to float32 products of at least
    ENGINE_MIN_ROWS x ENGINE_MIN_COLUMNS outputs where the CPU has AVX-512 and the training
    engine's AVX-512 loops are on (``refseg.engine.training.backend.row_loops``), BLAS to the
    rest: on AVX2 the engine's 6 x 16 kernels ran training's products at about half the rate
    of OpenBLAS's own AVX2 kernels (measured on a Zen 5 forced to them). The choice depends on
    the shapes and the machine, never on the tiles, so the bits of a product stay independent
    of the thread count as they were.
    """
    kind = _PRODUCT_KERNEL.get()
    if np.dtype(dtype) != np.float32 or kind == "blas":
        return -1
    from refseg.engine.runtime import backend_code

    backend = backend_code()
    if kind == "engine":
        return backend
    from refseg.engine.training.backend import row_loops

    if (backend == 2 and m >= ENGINE_MIN_ROWS and n >= ENGINE_MIN_COLUMNS
            and row_loops()[0] == "avx512"):
        return 2
    return -1


@infrastructure("how a product is cut into tiles for the threads: speed only, no claim element")
def product_tiles(planes: int, m: int, n: int, k: int, threads: int) -> tuple[int, int]:
    """(tile rows, tile columns) for ``planes`` products (m x k) @ (k x n) on ``threads``
    threads.

    One tile per plane on one thread, for small products, or when the planes alone make
    enough tiles. Otherwise the longer side of the output is split into between ``threads``
    and ``TILES_PER_THREAD * threads`` tiles in all, fewer when the side is short
    (``REPACK_SIDE``), and rounded up to a multiple of ``threads`` where that stays within
    the bound. The tiles, and so the bits of the result, depend on the shapes and the
    thread count alone.
    """
    whole = (max(m, 1), max(n, 1))
    if threads <= 1 or planes * m * n * k < PARALLEL_MIN_MACS:
        return whole
    split_rows = m >= n
    side = m if split_rows else n
    wanted = max(threads, min(TILES_PER_THREAD * threads, 1 + side // REPACK_SIDE))
    per_plane = -(-wanted // planes)
    # whole rounds: with 3 tiles on 2 threads one thread does two, and on a quiet machine
    # the product takes 2/3 of its one-thread time instead of 1/2
    most = max(planes, TILES_PER_THREAD * threads + planes - 1)
    for more in range(per_plane, most // planes + 1):
        if planes * more % threads == 0:
            per_plane = more
            break
    if per_plane <= 1 or side < 2 * TILE_STEP:
        return whole
    length = -(-side // per_plane)
    length = -(-length // TILE_STEP) * TILE_STEP
    return (length, n) if split_rows else (m, length)


def _blas_operand(x: np.ndarray) -> np.ndarray:
    """x (P, r, c) itself if each plane is a matrix BLAS can read in place (row-major, or a
    transposed view, with a whole-element leading dimension large enough), else a C-contiguous
    copy."""
    item = x.itemsize
    _, rows, cols = x.shape
    s0, s1, s2 = x.strides
    # the stride of an axis of length one never steps: give it the value BLAS checks
    if rows == 1 and s2 == item:
        s1 = max(1, cols) * item
    elif cols == 1 and s1 == item:
        s2 = max(1, rows) * item
    if (s1, s2) != x.strides[1:]:
        x = np.lib.stride_tricks.as_strided(x, strides=(s0, s1, s2), writeable=False)
    if s0 % item == 0:
        if s2 == item and s1 % item == 0 and s1 >= max(1, cols) * item:
            return x
        if s2 != item and s1 == item and s2 % item == 0 and s2 >= max(1, rows) * item:
            return x
    return np.ascontiguousarray(x)


@implements("claim2.fusion", "claim4.propagation")
def matmul_stack(a, b, out=None, *, b_plane=None, accumulate=False, scale=None, shift=None,
                 bounds=UNCLAMPED, backend="cython") -> np.ndarray:
    """Stacked matrix products out[p] = a[p] @ b[b_plane[p]] on refseg's thread pool.

    Parameters
    ----------
    a : ndarray of shape (P, m, k), float32 or float64
    b : ndarray of shape (Q, k, n), a's dtype
        Planes may be transposed views (``u.transpose(0, 2, 1)``): BLAS reads them in place.
    out : ndarray of shape (P, m, n), optional
        Written in place (its rows must be contiguous); must not overlap a or b.
    b_plane : sequence of P ints in [0, Q), optional
        Which plane of b each product takes; default p (then Q = P).
    accumulate : bool
        Add the products to out (BLAS's beta = 1) instead of overwriting it.
    scale, shift : ndarray of shape (n,), a's dtype, optional
        Each product then becomes product * scale + shift per column (shift alone:
        product + shift), rounded after each step, as the batch norm's and the bias's passes
        round it. Not with accumulate.
    bounds : (low, high)
        The result then clamped to [low, high] (a ReLU), as ``clamp`` does.
    backend : {"cython", "numpy"}
        The compiled tile loop or its twin: the same BLAS calls, bit-identical results
        (float64 with n = 1: to 1 ulp on OpenBLAS's SkylakeX kernels).

    Returns
    -------
    ndarray of shape (P, m, n): out.

    Notes
    -----
    1. Tiles from ``product_tiles(P, m, n, k, threads)``, threads = OpenMP's current count,
       or the count of an open ``refseg.engine.training.threads.bits_independent_of_load`` block (for both
       backends).
    2. Each tile: one single-threaded BLAS call (sgemm or dgemm) over the whole of k. The
       cython backend's threads each make one small preparing product first, once per
       thread, which OpenBLAS needs to leave a slow state (``engine/training/_gemm.pxi``); it
       changes no result.
    3. The cython backend hands the tiles of all planes to the OpenMP threads as they come
       free; products below PARALLEL_MIN_MACS stay on the calling thread.
    4. With scale, shift or bounds, each tile takes them as soon as its BLAS call returns,
       while it is in cache: the values of a separate ``channel_affine``, ``channel_add`` or
       ``clamp`` pass, without the pass.
    5. A float32 product that ``product_kernel`` gives to the engine runs each tile on the
       engine's micro-kernels instead of BLAS (the twin: in float64, rounded once); its
       elements then do not depend on the tiles at all.
    Other dtypes fall back to NumPy's matmul.
    """
    planes, m, k = a.shape
    n = b.shape[2]
    plane_index, epilogue = _checked_stack(a, b, b_plane, accumulate, scale, shift, bounds)
    if out is None:
        out = np.zeros((planes, m, n), dtype=np.result_type(a, b)) if accumulate else \
            np.empty((planes, m, n), dtype=np.result_type(a, b))
    if not (a.dtype == b.dtype == out.dtype and out.dtype in _FLOATS):
        return _numpy_stack(a, b, plane_index, out, accumulate, epilogue)
    if m == 0 or n == 0:
        return out
    if k == 0 and not epilogue:
        if not accumulate:
            out[...] = 0
        return out
    target = out
    if out.strides[2] != out.itemsize or out.strides[1] % out.itemsize \
            or out.strides[1] < n * out.itemsize:
        target = np.ascontiguousarray(out) if accumulate else np.empty(out.shape, out.dtype)
    none = np.empty(0, dtype=out.dtype)
    scale = none if scale is None else np.ascontiguousarray(scale, dtype=out.dtype)
    shift = none if shift is None else np.ascontiguousarray(shift, dtype=out.dtype)
    if k == 0:
        _epilogue_of_zeros(target, scale, shift, bounds, backend)
    else:
        engine = product_kernel(out.dtype, m, n)
        if engine < 0:
            single_threaded_blas()
        tile_rows, tile_cols = product_tiles(planes, m, n, k, tiling_threads())
        kernels(backend).gemm_stack(_blas_operand(a), _blas_operand(b), plane_index, target,
                                    accumulate, tile_rows, tile_cols,
                                    planes * m * n * k >= PARALLEL_MIN_MACS, scale, shift,
                                    *bounds, epilogue, engine)
    if target is not out:
        out[...] = target
    return out


def _checked_stack(a, b, b_plane, accumulate, scale, shift, bounds):
    """(the plane of b each product takes, as intp; whether there is an epilogue), or
    InputError for operands and epilogues that do not fit."""
    planes, _, k = a.shape
    n = b.shape[2]
    plane_index = (np.arange(planes, dtype=np.intp) if b_plane is None
                   else np.ascontiguousarray(b_plane, dtype=np.intp))
    if b.shape[1] != k or plane_index.shape != (planes,):
        raise InputError(f"matmul_stack: shapes {a.shape} and {b.shape} do not fit")
    epilogue = scale is not None or shift is not None or tuple(bounds) != UNCLAMPED
    if epilogue and (accumulate or (scale is not None and shift is None)):
        raise InputError("matmul_stack: scale needs a shift, and neither goes with accumulate")
    for label, v in (("scale", scale), ("shift", shift)):
        if v is not None and np.shape(v) != (n,):
            raise InputError(f"matmul_stack: {label} shape {np.shape(v)} does not match "
                             f"{n} columns")
    return plane_index, epilogue


def _numpy_stack(a, b, plane_index, out, accumulate, epilogue) -> np.ndarray:
    """The products of dtypes other than float32 and float64, by NumPy's matmul."""
    if epilogue:
        raise InputError(f"matmul_stack: scale, shift and bounds need float32 or float64, "
                         f"got {out.dtype}")
    product = np.matmul(a, b[plane_index])
    if accumulate:
        out += product
    else:
        out[...] = product
    return out


def _epilogue_of_zeros(target, scale, shift, bounds, backend) -> None:
    """No product to make (k = 0): zeros, and the epilogue as the passes it stands for."""
    target[...] = 0
    for plane in target:
        if len(scale):
            kernels(backend).channel_affine(plane, scale, shift, *bounds, plane)
        elif len(shift):
            kernels(backend).channel_add(plane, shift, *bounds, plane)
        else:
            kernels(backend).clamp(plane.reshape(-1), *bounds, plane.reshape(-1))


@implements("claim2.fusion", "claim4.propagation")
def matmul(a, b, out=None, *, accumulate=False, scale=None, shift=None, bounds=UNCLAMPED,
           backend="cython") -> np.ndarray:
    """a (m, k) @ b (k, n) on refseg's thread pool: ``matmul_stack`` with one plane.

    ``out`` (m, n), if given, is written in place; ``accumulate`` adds to it; ``scale``,
    ``shift`` and ``bounds`` as in ``matmul_stack``.
    """
    if out is None:
        out = (np.zeros if accumulate else np.empty)((a.shape[0], b.shape[1]),
                                                     dtype=np.result_type(a, b))
    matmul_stack(a[None], b[None], out[None], accumulate=accumulate, scale=scale, shift=shift,
                 bounds=bounds, backend=backend)
    return out
