# The reference route's matrix product, included by refseg/_kernels.pyx, which holds the
# shared declarations (real, _chunk).
#
# Every output element is one sum over k in the order 0, 1, ..., K - 1, started from 0, each
# product rounded and then added (no fused multiply-add: -ffp-contract=off): the order that
# twin writes as a loop of NumPy operations. The loops are blocked so that a block of B stays
# in cache, and rows are split over the threads; neither changes any element's order of
# operations, so the bits depend on neither the thread count nor the CPU's vector width.

# Rows of B (terms of the sum) and columns of B per block: a block of 128 x 512 float32 is
# 256 KiB, which stays in a core's L2 cache while a thread's rows run through it.
cdef Py_ssize_t _MATMUL_DEPTH_BLOCK = 128
cdef Py_ssize_t _MATMUL_WIDTH_BLOCK = 512
# Output rows handed to a thread at a time.
cdef Py_ssize_t _MATMUL_ROWS = 16


def matmul_ordered(real[:, :] a, real[:, ::1] b, real[:, ::1] out):
    """out = a @ b, each element summed over k in order from 0.

    a (M, K) any strides, b (K, N) C-contiguous, out (M, N) C-contiguous, not overlapping a
    or b. Parallel over blocks of _MATMUL_ROWS rows, on one thread below
    _PARALLEL_MIN_ELEMENTS multiply-adds.
    """
    cdef Py_ssize_t m = a.shape[0], depth = a.shape[1], n = b.shape[1]
    cdef Py_ssize_t blocks = (m + _MATMUL_ROWS - 1) // _MATMUL_ROWS
    cdef Py_ssize_t depth_blocks = (depth + _MATMUL_DEPTH_BLOCK - 1) // _MATMUL_DEPTH_BLOCK
    cdef Py_ssize_t width_blocks = (n + _MATMUL_WIDTH_BLOCK - 1) // _MATMUL_WIDTH_BLOCK
    cdef Py_ssize_t block, kb, jb, i, i0, i1, k, k0, k1, j, j0, j1
    cdef real aik
    cdef real *row
    cdef const real *brow
    cdef int threads = _array_threads(m * depth * n // 16)
    for block in prange(blocks, nogil=True, schedule="dynamic", num_threads=threads):
        i0 = block * _MATMUL_ROWS
        i1 = min(i0 + _MATMUL_ROWS, m)
        for i in range(i0, i1):
            row = &out[i, 0]
            for j in range(n):
                row[j] = 0
        for kb in range(depth_blocks):
            k0 = kb * _MATMUL_DEPTH_BLOCK
            k1 = min(k0 + _MATMUL_DEPTH_BLOCK, depth)
            for jb in range(width_blocks):
                j0 = jb * _MATMUL_WIDTH_BLOCK
                j1 = min(j0 + _MATMUL_WIDTH_BLOCK, n)
                for i in range(i0, i1):
                    row = &out[i, 0]
                    for k in range(k0, k1):
                        aik = a[i, k]
                        brow = &b[k, 0]
                        for j in range(j0, j1):
                            row[j] = row[j] + aik * brow[j]
