# Batch-norm statistics and passes (rows = N*H*W pixels, columns = channels), included by
# refseg/_kernels.pyx, which holds the cimports, _array_threads and the fused type real. NumPy
# twins: autograd/_twins.py.

def channel_moments(const real[:, ::1] x, double[::1] mean, double[::1] variance):
    """Per-column mean and (biased) variance of x (rows = N*H*W pixels), two passes in float64."""
    cdef Py_ssize_t rows = x.shape[0], ch = x.shape[1], r, c
    cdef double d
    with nogil:
        for c in range(ch):
            mean[c] = 0
            variance[c] = 0
        for r in range(rows):
            for c in range(ch):
                mean[c] += x[r, c]
        for c in range(ch):
            mean[c] = mean[c] / rows
        for r in range(rows):
            for c in range(ch):
                d = x[r, c] - mean[c]
                variance[c] += d * d
        for c in range(ch):
            variance[c] = variance[c] / rows


def channel_sums(const real[:, ::1] g, const real[:, ::1] xhat, double[::1] sum_g,
                 double[::1] sum_g_xhat):
    """Per-column sums of g and of g * xhat, in float64 (batch-norm backward)."""
    cdef Py_ssize_t rows = g.shape[0], ch = g.shape[1], r, c
    with nogil:
        for c in range(ch):
            sum_g[c] = 0
            sum_g_xhat[c] = 0
        for r in range(rows):
            for c in range(ch):
                sum_g[c] += g[r, c]
                sum_g_xhat[c] += <double> g[r, c] * <double> xhat[r, c]


def batch_norm_forward(const real[:, ::1] x, const real[::1] mean, const real[::1] inv_std,
                       const real[::1] gamma, const real[::1] beta, real[:, ::1] xhat,
                       real[:, ::1] out):
    """xhat = (x - mean) * inv_std and out = xhat * gamma + beta per column, each operation
    rounded as NumPy's elementwise steps are."""
    cdef Py_ssize_t rows = x.shape[0], ch = x.shape[1], r, c
    cdef real centred, normalised, scaled
    with nogil:
        for r in prange(rows, schedule="dynamic", chunksize=_chunk(ch),
                         num_threads=_array_threads(rows * ch)):
            for c in range(ch):
                centred = x[r, c] - mean[c]
                normalised = centred * inv_std[c]
                xhat[r, c] = normalised
                scaled = normalised * gamma[c]
                out[r, c] = scaled + beta[c]


def batch_norm_backward(const real[:, ::1] g, const real[:, ::1] xhat, const real[::1] coef,
                        const real[::1] sum_g, const real[::1] sum_g_xhat, real count,
                        real[:, ::1] dx):
    """dx = coef * ((count * g - sum_g) - xhat * sum_g_xhat) per column (batch-norm input
    gradient in training mode), each operation rounded as NumPy's elementwise steps are."""
    cdef Py_ssize_t rows = g.shape[0], ch = g.shape[1], r, c
    cdef real scaled, centred, correction
    with nogil:
        for r in prange(rows, schedule="dynamic", chunksize=_chunk(ch),
                         num_threads=_array_threads(rows * ch)):
            for c in range(ch):
                scaled = count * g[r, c]
                centred = scaled - sum_g[c]
                correction = xhat[r, c] * sum_g_xhat[c]
                dx[r, c] = coef[c] * (centred - correction)
