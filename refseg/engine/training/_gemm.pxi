# Matrix products on refseg's one thread pool, included by refseg/_kernels.pyx, which holds the
# cimports and the fused type real. NumPy twin: autograd/_twins.py (gemm_stack). The Python
# side, with the validation and the tile rule, is engine/training/products.py.
#
# OpenBLAS runs its own thread pool beside libgomp's. Two pools on two cores take turns badly:
# each spins or sleeps on its own schedule, and a product split evenly over two threads waits
# for the slower one whenever another process holds a core. Here every product is cut into
# tiles of the output, each tile is one single-threaded BLAS call (SciPy's OpenBLAS, kept at
# one thread by products.py), and the OpenMP threads take the tiles as they come free
# (dynamic schedule): a thread slowed by a neighbour simply does fewer tiles.
#
# Each output element is computed by the one BLAS call of its tile, over the whole inner
# dimension; the tiles depend on the shapes and the thread count (products.py), not on which
# thread takes which tile.
#
# A float32 product can instead run each tile on the engine's own panel micro-kernels
# (engine_kernels.c, engine_gemm_c: AVX-512, AVX2 or portable), whose sums do not depend on
# the tiles at all; products.py decides which (``product_kernel``).
from scipy.linalg.cython_blas cimport sgemm, dgemm
from libc.stdint cimport int64_t

cdef extern from "engine_kernels.h" nogil:
    int engine_gemm_c(int backend, int m, int n, int k, const float *a, int64_t lda,
                      int a_trans, const float *b, int64_t ldb, int b_trans, float *c,
                      int64_t ldc, int accumulate)


cdef inline void _blas_gemm(char *op_b, char *op_a, int n, int m, int k, const real *b,
                            int ldb, const real *a, int lda, real beta, real *c,
                            int ldc) noexcept nogil:
    """Row-major c (m x n) = a (m x k) @ b (k x n) + beta * c, as the column-major product
    c^T = b^T a^T that Fortran BLAS computes."""
    cdef real one = 1
    if real is float:
        sgemm(op_b, op_a, &n, &m, &k, &one, <float *> b, &ldb, <float *> a, &lda, &beta, c,
              &ldc)
    else:
        dgemm(op_b, op_a, &n, &m, &k, &one, <double *> b, &ldb, <double *> a, &lda, &beta,
              c, &ldc)


# SciPy's OpenBLAS runs slowly on a thread until that thread has made one product with
# full-sized packed blocks. Measured on the Zen 1 (2 cores, AVX2), SciPy's sgemm on one thread
# in a fresh process, then after one product of 128 x 384 by 384 x 384 (1.5 ms) on the same
# thread: 25 products of 784 x 256 by 256 x 96, 98-101 -> 28 ms; 49 x 4608 by 4608 x 512,
# 12.1-12.4 -> 8.7-8.8 ms; 16 of 49 x 576 by 576 x 576, 24-27 -> 20 ms; the same as after a
# 2000 x 2000 product, and it stays so. Each thread has its own state: a product on one leaves
# the other slow. Smaller products (64 rows, or 192 columns) ended it for some shapes
# only. The cause inside OpenBLAS was not found. Each thread therefore makes that product
# once, on scratch memory, before its first tile. It changes no result: a product's bits
# depend on its shapes and operands alone (the twin, which never makes it, is tested equal).
cdef extern from *:
    """
    static __thread int refseg_blas_thread_prepared = 0;
    static inline int refseg_blas_prepared(void) { return refseg_blas_thread_prepared; }
    static inline void refseg_blas_mark_prepared(void) { refseg_blas_thread_prepared = 1; }
    """
    int _blas_prepared "refseg_blas_prepared"() noexcept nogil
    void _blas_mark_prepared "refseg_blas_mark_prepared"() noexcept nogil


cdef void _prepare_blas_thread() noexcept nogil:
    """The preparing product on the calling thread, once per thread (a thread-local flag).
    Without the memory for it, the thread goes without: it is speed only."""
    if _blas_prepared():
        return
    _blas_mark_prepared()
    cdef int m = 128, k = 384, n = 384
    cdef float *a = <float *> calloc(m * k + k * n + m * n, sizeof(float))
    if a == NULL:
        return
    cdef float *b = a + m * k
    cdef float *c = b + k * n
    cdef char op = b'N'
    _blas_gemm[float](&op, &op, n, m, k, b, n, a, k, 0, c, n)
    free(a)


cdef inline void _tile_epilogue(real *c, Py_ssize_t ldc, Py_ssize_t rows, Py_ssize_t cols,
                                const real *scale, const real *shift, real lo,
                                real hi) noexcept nogil:
    """A tile's rows, while they are still in cache: c = c * scale + shift per column (no scale:
    c + shift; neither: c) clamped to [lo, hi], each step rounded as channel_affine,
    channel_add and clamp round it, so the tile holds what those passes would write."""
    cdef Py_ssize_t i, j
    cdef real *row
    cdef real product
    for i in range(rows):
        row = c + i * ldc
        if scale != NULL:
            for j in range(cols):
                product = row[j] * scale[j]
                row[j] = _clamped(product + shift[j], lo, hi)
        elif shift != NULL:
            for j in range(cols):
                row[j] = _clamped(row[j] + shift[j], lo, hi)
        else:
            for j in range(cols):
                row[j] = _clamped(row[j], lo, hi)


def gemm_stack(const real[:, :, :] a, const real[:, :, :] b, const Py_ssize_t[::1] b_plane,
               real[:, :, :] out, bint accumulate, Py_ssize_t tile_rows,
               Py_ssize_t tile_cols, bint parallel, const real[::1] scale,
               const real[::1] shift, double low, double high, bint epilogue,
               int engine=-1):
    """out[p] = a[p] @ b[b_plane[p]] (+ out[p] if accumulate) for every plane p, one BLAS call
    per tile of tile_rows x tile_cols outputs, the tiles of all planes shared out over the
    OpenMP threads as they come free (on the calling thread alone unless parallel).

    With epilogue, each tile then becomes tile * scale + shift per output column (an empty
    scale: tile + shift; both empty: the tile itself), clamped to [low, high]: a
    convolution's bias, or the batch norm after it, and its ReLU, at no extra sweep over
    memory.

    With ``engine`` >= 0 (float32 only), each tile is computed by the engine's micro-kernels of
    that backend (2 AVX-512, 1 AVX2, 0 portable) instead of BLAS.

    Each plane of a and b is row-major (element stride 1 along its rows) or a transposed view
    (stride 1 down its columns); out's rows are contiguous. The inner dimension is not empty.
    """
    cdef Py_ssize_t item = sizeof(real)
    cdef Py_ssize_t planes = out.shape[0], m = out.shape[1], n = out.shape[2], k = a.shape[2]
    cdef char op_a = b'N' if a.strides[2] == item else b'T'
    cdef char op_b = b'N' if b.strides[2] == item else b'T'
    cdef int lda = (a.strides[1] if op_a == b'N' else a.strides[2]) // item
    cdef int ldb = (b.strides[1] if op_b == b'N' else b.strides[2]) // item
    cdef int ldc = out.strides[1] // item
    cdef real beta = 1 if accumulate else 0
    cdef Py_ssize_t row_tiles = (m + tile_rows - 1) // tile_rows
    cdef Py_ssize_t col_tiles = (n + tile_cols - 1) // tile_cols
    cdef Py_ssize_t per_plane = row_tiles * col_tiles, total = planes * per_plane
    cdef Py_ssize_t t, p, r, i0, j0
    cdef int threads = openmp.omp_get_max_threads() if parallel and total > 1 else 1
    cdef const real *scale_at = &scale[0] if scale.shape[0] else NULL
    cdef const real *shift_at = &shift[0] if shift.shape[0] else NULL
    cdef real lo = <real> low, hi = <real> high
    cdef Py_ssize_t rows, cols
    cdef bint own = engine >= 0 and real is float
    cdef int failed = 0
    if engine >= 0 and real is not float:
        raise ValueError("gemm_stack: the engine's kernels compute float32 products only")
    with nogil:
        for t in prange(total, schedule="dynamic", chunksize=1, num_threads=threads):
            p = t // per_plane
            r = t - p * per_plane
            i0 = (r // col_tiles) * tile_rows
            j0 = (r - (r // col_tiles) * col_tiles) * tile_cols
            rows = min(tile_rows, m - i0)
            cols = min(tile_cols, n - j0)
            if own:
                if engine_gemm_c(engine, <int> rows, <int> cols, <int> k,
                                 <const float *> &a[p, i0, 0], lda, op_a == b'T',
                                 <const float *> &b[b_plane[p], 0, j0], ldb, op_b == b'T',
                                 <float *> &out[p, i0, j0], ldc, accumulate) != 0:
                    failed += 1
                    continue
            else:
                _prepare_blas_thread()
                _blas_gemm(&op_b, &op_a, <int> cols, <int> rows, <int> k,
                           &b[b_plane[p], 0, j0], ldb, &a[p, i0, 0], lda, beta,
                           &out[p, i0, j0], ldc)
            if epilogue:
                _tile_epilogue(&out[p, i0, j0], ldc, rows, cols,
                               NULL if scale_at == NULL else scale_at + j0,
                               NULL if shift_at == NULL else shift_at + j0, lo, hi)
    if failed:
        raise MemoryError("gemm_stack: no memory for the engine's packed operands")


def openmp_threads():
    """The number of threads the next parallel loop of these kernels uses (OpenMP's
    ``omp_get_max_threads``)."""
    return openmp.omp_get_max_threads()


def set_openmp_threads(int threads):
    """The number of threads of the parallel loops that the calling thread starts from now on
    (OpenMP's ``omp_set_num_threads``; ``refseg.engine.training.threads.sized_to_load`` sets and restores
    it)."""
    openmp.omp_set_num_threads(threads)


# column_sums sums each column over blocks of this many rows, one block per thread at a time,
# then adds the blocks' sums in block order: the same additions in the same order on any
# thread count, with each thread reading whole rows (a block of 16 columns per thread, as the
# batch norm's moments are cut, read one cache line per row and ran at 12 GB/s)
cdef enum:
    _SUM_ROWS = 256


def column_sums(const real[:, ::1] g, double[::1] sums):
    """sums[c] = the sum of column c of g in float64 (the bias gradient: g is (N*H*W, C)):
    the rows of each block of _SUM_ROWS summed in row order, then the blocks' sums in block
    order. A BLAS product of a row of ones and g runs at 5-8 GFLOP/s on one thread (it packs
    the whole of g first): 14 ms of a --train-backbone step against 7 here (Zen 5)."""
    cdef Py_ssize_t rows = g.shape[0], ch = g.shape[1], block, r, c, last
    cdef Py_ssize_t blocks = (rows + _SUM_ROWS - 1) // _SUM_ROWS
    cdef double *partial = <double *> calloc(max(blocks, 1) * ch, sizeof(double))
    cdef double *mine
    cdef const real *row
    if partial == NULL:
        raise MemoryError("column_sums: no memory for the blocks' sums")
    with nogil:
        for block in prange(blocks, schedule="dynamic", chunksize=1,
                            num_threads=_array_threads(rows * ch)):
            mine = partial + block * ch
            last = min(rows, (block + 1) * _SUM_ROWS)
            for r in range(block * _SUM_ROWS, last):
                row = &g[r, 0]
                for c in range(ch):
                    mine[c] += row[c]
        for c in range(ch):
            sums[c] = 0
        for block in range(blocks):
            mine = partial + block * ch
            for c in range(ch):
                sums[c] += mine[c]
    free(partial)
