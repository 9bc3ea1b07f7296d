# Elementwise passes of inference (no gradient kept): batch norm folded to one multiply-add per
# element, ReLU / ReLU6 as a clamp, and the skip connections' sum. NumPy runs each of these on
# one core; over a whole network (99 batch norms, 66 ReLUs at 224x224) they are memory-bound
# sweeps of tens of megabytes, which two cores finish in a little more than half the time.
# Included by refseg/_kernels.pyx, which holds the cimports, _threads and the fused type real.
# NumPy twins: autograd/_reference.py.

def channel_affine(const real[:, ::1] x, const real[::1] scale, const real[::1] shift,
                   real[:, ::1] out):
    """out[r, c] = x[r, c] * scale[c] + shift[c], rounded after the product and after the sum
    (as NumPy's ``x * scale + shift`` in two steps)."""
    cdef Py_ssize_t rows = x.shape[0], ch = x.shape[1], r, c
    cdef real product
    with nogil:
        for r in prange(rows, schedule="guided", num_threads=_threads(rows * ch)):
            for c in range(ch):
                product = x[r, c] * scale[c]
                out[r, c] = product + shift[c]


def clamp(const real[::1] x, double low, double high, real[::1] out):
    """out = min(max(x, low), high) elementwise, NaN kept (ReLU: low 0, high inf; ReLU6:
    high 6). Values equal to ``low`` become ``low`` itself, so -0.0 gives +0.0 as np.maximum
    does."""
    cdef Py_ssize_t n = x.shape[0], k
    cdef real value, lo = <real> low, hi = <real> high
    with nogil:
        for k in prange(n, schedule="guided", num_threads=_threads(n)):
            value = x[k]
            if value <= lo:
                value = lo
            elif value > hi:
                value = hi
            out[k] = value


def add_arrays(const real[::1] x, const real[::1] y, real[::1] out):
    """out = x + y elementwise."""
    cdef Py_ssize_t n = x.shape[0], k
    with nogil:
        for k in prange(n, schedule="guided", num_threads=_threads(n)):
            out[k] = x[k] + y[k]
