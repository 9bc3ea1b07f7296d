# Batch-norm statistics and passes (rows = N*H*W pixels, columns = channels), included by
# refseg/_kernels.pyx, which holds the cimports, _array_threads and the fused type real. NumPy
# twins: autograd/_twins_training.py.

# The column reductions split the channels into blocks of this many columns, one block per
# thread at a time, so that each column is still summed over the rows in row order (the same
# bits on any thread count) while both threads work. 16 float32 values are one cache line.
cdef enum:
    _COLUMN_BLOCK = 16


# The training kernels read or write two or three arrays per element and recompute xhat: each
# element counts as this many units of _array_threads' work, so that a training batch's layers
# from 262,144 elements on split across the threads (the inference batch norm, one
# multiply-add per element, is channel_affine's).
cdef Py_ssize_t _BATCH_NORM_WORK_PER_ELEMENT = 4


cdef inline int _column_threads(Py_ssize_t rows, Py_ssize_t ch) noexcept nogil:
    return _array_threads(rows * ch * _BATCH_NORM_WORK_PER_ELEMENT) if ch > _COLUMN_BLOCK else 1


cdef void _moments_block(const real *x, Py_ssize_t rows, Py_ssize_t ch, Py_ssize_t first,
                         Py_ssize_t width, double *mean, double *variance) noexcept nogil:
    """Columns first .. first + width - 1 of channel_moments."""
    cdef double sums[_COLUMN_BLOCK]
    cdef double squares[_COLUMN_BLOCK]
    cdef Py_ssize_t r, c
    cdef const real *row
    cdef double d
    for c in range(width):
        sums[c] = 0
        squares[c] = 0
    for r in range(rows):
        row = x + r * ch + first
        for c in range(width):
            sums[c] += row[c]
    for c in range(width):
        sums[c] = sums[c] / rows
    for r in range(rows):
        row = x + r * ch + first
        for c in range(width):
            d = row[c] - sums[c]
            squares[c] += d * d
    for c in range(width):
        mean[first + c] = sums[c]
        variance[first + c] = squares[c] / rows


def channel_moments(const real[:, ::1] x, double[::1] mean, double[::1] variance):
    """Per-column mean and (biased) variance of x (rows = N*H*W pixels), two passes in float64,
    each column summed over the rows in row order (blocks of columns run in parallel)."""
    cdef Py_ssize_t rows = x.shape[0], ch = x.shape[1], block
    cdef Py_ssize_t blocks = (ch + _COLUMN_BLOCK - 1) // _COLUMN_BLOCK
    with nogil:
        for block in prange(blocks, schedule="dynamic", chunksize=1,
                            num_threads=_column_threads(rows, ch)):
            _moments_block(&x[0, 0], rows, ch, block * _COLUMN_BLOCK,
                           min(_COLUMN_BLOCK, ch - block * _COLUMN_BLOCK), &mean[0],
                           &variance[0])


cdef void _gradient_sums_block(const real *x, const real *mean, const real *inv_std,
                               const real *g, const unsigned char *passes, Py_ssize_t rows,
                               Py_ssize_t ch, Py_ssize_t first, Py_ssize_t width,
                               double *sum_g, double *sum_g_xhat) noexcept nogil:
    """Columns first .. first + width - 1 of batch_norm_gradient_sums."""
    cdef double sums[_COLUMN_BLOCK]
    cdef double products[_COLUMN_BLOCK]
    cdef Py_ssize_t r, c, at
    cdef real gm, xhat
    for c in range(width):
        sums[c] = 0
        products[c] = 0
    for r in range(rows):
        at = r * ch + first
        for c in range(width):
            gm = g[at + c]
            if passes != NULL:
                gm = gm * <real> passes[at + c]
            xhat = (x[at + c] - mean[first + c]) * inv_std[first + c]
            sums[c] += gm
            products[c] += <double> gm * <double> xhat
    for c in range(width):
        sum_g[first + c] = sums[c]
        sum_g_xhat[first + c] = products[c]


def batch_norm_gradient_sums(const real[:, ::1] x, const real[::1] mean,
                             const real[::1] inv_std, const real[:, ::1] g,
                             const unsigned char[:, ::1] passes, double[::1] sum_g,
                             double[::1] sum_g_xhat):
    """Per-column sums of gm and of gm * xhat in float64 (batch-norm backward), each column
    over the rows in row order, where xhat = (x - mean) * inv_std (the forward's, recomputed)
    and gm = g * passes (the ReLU's mask, 0 or 1, as a number of g's type; None: gm = g)."""
    cdef Py_ssize_t rows = x.shape[0], ch = x.shape[1], block
    cdef Py_ssize_t blocks = (ch + _COLUMN_BLOCK - 1) // _COLUMN_BLOCK
    cdef const unsigned char *mask = NULL
    if passes is not None:
        mask = &passes[0, 0]
    with nogil:
        for block in prange(blocks, schedule="dynamic", chunksize=1,
                            num_threads=_column_threads(rows, ch)):
            _gradient_sums_block(&x[0, 0], &mean[0], &inv_std[0], &g[0, 0], mask, rows, ch,
                                 block * _COLUMN_BLOCK,
                                 min(_COLUMN_BLOCK, ch - block * _COLUMN_BLOCK), &sum_g[0],
                                 &sum_g_xhat[0])


def batch_norm_forward(const real[:, ::1] x, const real[::1] mean, const real[::1] inv_std,
                       const real[::1] gamma, const real[::1] beta, double low, double high,
                       real[:, ::1] out, unsigned char[:, ::1] passes):
    """out = ((x - mean) * inv_std) * gamma + beta per column, each operation rounded as
    NumPy's elementwise steps are, then clamped to [low, high] as ``clamp`` does (a ReLU;
    -inf, inf: none). passes (None: not written) = low < out, and out < high unless high is
    inf: the ReLU's mask, as ``elementwise.relu_passes`` makes it (the same before and after
    the clamp)."""
    cdef Py_ssize_t rows = x.shape[0], ch = x.shape[1], r, c
    cdef real lo = <real> low, hi = <real> high, value
    cdef bint masked = passes is not None
    cdef unsigned char uncapped = high == INFINITY
    cdef const real *src
    cdef const real *m = &mean[0]
    cdef const real *s = &inv_std[0]
    cdef const real *gm = &gamma[0]
    cdef const real *bt = &beta[0]
    cdef real *dst
    cdef unsigned char *flags
    with nogil:
        for r in prange(rows, schedule="dynamic", chunksize=_chunk(ch),
                         num_threads=_array_threads(rows * ch * _BATCH_NORM_WORK_PER_ELEMENT)):
            src = &x[r, 0]
            dst = &out[r, 0]
            for c in range(ch):
                value = ((src[c] - m[c]) * s[c]) * gm[c]
                dst[c] = _clamped(value + bt[c], lo, hi)
            if masked:
                # a second sweep of the row, in cache: the mask's byte stores in the loop
                # above keep it from vectorising
                flags = &passes[r, 0]
                for c in range(ch):
                    flags[c] = (<unsigned char> (dst[c] > lo)
                                & (<unsigned char> (dst[c] < hi) | uncapped))


def batch_norm_backward(const real[:, ::1] g, const unsigned char[:, ::1] passes,
                        const real[:, ::1] x, const real[::1] mean, const real[::1] inv_std,
                        const real[::1] coef, const real[::1] sum_g,
                        const real[::1] sum_g_xhat, real count, real[:, ::1] dx):
    """dx = coef * ((count * gm - sum_g) - xhat * sum_g_xhat) per column (batch-norm input
    gradient in training mode), with gm and xhat as in ``batch_norm_gradient_sums``, each
    operation rounded as NumPy's elementwise steps are."""
    cdef Py_ssize_t rows = g.shape[0], ch = g.shape[1], r, c
    cdef real gm, xhat, scaled, centred, correction
    cdef bint masked = passes is not None
    with nogil:
        for r in prange(rows, schedule="dynamic", chunksize=_chunk(ch),
                         num_threads=_array_threads(rows * ch * _BATCH_NORM_WORK_PER_ELEMENT)):
            for c in range(ch):
                gm = g[r, c]
                if masked:
                    gm = gm * <real> passes[r, c]
                xhat = (x[r, c] - mean[c]) * inv_std[c]
                scaled = count * gm
                centred = scaled - sum_g[c]
                correction = xhat * sum_g_xhat[c]
                dx[r, c] = coef[c] * (centred - correction)
