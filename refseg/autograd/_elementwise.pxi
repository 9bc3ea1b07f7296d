# Elementwise passes: batch norm folded to one multiply-add per element (inference; with the
# ReLU that follows it, in the same pass), ReLU / ReLU6 as a clamp, the skip connections' sum,
# the convolutions' bias (with their ReLU), zero padding, and softmax's row shift and
# normalisation. NumPy runs each of these on one core; over a whole network (99 batch norms,
# 66 ReLUs at 224x224) they are memory-bound sweeps of tens of megabytes, which two cores
# finish in a little more than half the time.
# Included by refseg/_kernels.pyx, which holds the cimports, _array_threads and the fused type real.
# NumPy twins: autograd/_twins.py.

cdef inline real _clamped(real value, real lo, real hi) noexcept nogil:
    """value clamped to [lo, hi] as np.minimum(np.maximum(value, lo), hi): NaN kept, and a
    value equal to lo becomes lo itself (-0.0 gives +0.0 for lo = 0). The ReLU of every
    kernel here and of the Winograd output transforms."""
    # one expression of selects, which GCC vectorises; early returns it left as branches
    return lo if value <= lo else (hi if value > hi else value)


def channel_affine(const real[:, ::1] x, const real[::1] scale, const real[::1] shift,
                   double low, double high, real[:, ::1] out):
    """out[r, c] = x[r, c] * scale[c] + shift[c], rounded after the product and after the sum
    (as NumPy's ``x * scale + shift`` in two steps), then clamped to [low, high] as ``clamp``
    does (batch norm and the ReLU that follows it in one pass; -inf, inf: no clamp)."""
    cdef Py_ssize_t rows = x.shape[0], ch = x.shape[1], r, c
    cdef real product, lo = <real> low, hi = <real> high
    with nogil:
        for r in prange(rows, schedule="dynamic", chunksize=_chunk(ch),
                         num_threads=_array_threads(rows * ch)):
            for c in range(ch):
                product = x[r, c] * scale[c]
                out[r, c] = _clamped(product + shift[c], lo, hi)


def clamp(const real[::1] x, double low, double high, real[::1] out):
    """out = min(max(x, low), high) elementwise, NaN kept (ReLU: low 0, high inf; ReLU6:
    high 6). Values equal to ``low`` become ``low`` itself, so -0.0 gives +0.0 as np.maximum
    does."""
    cdef Py_ssize_t n = x.shape[0], k
    cdef real lo = <real> low, hi = <real> high
    with nogil:
        for k in prange(n, schedule="dynamic", chunksize=_CHUNK_ELEMENTS,
                         num_threads=_array_threads(n)):
            out[k] = _clamped(x[k], lo, hi)


def relu_mask(const real[::1] x, double low, double high, unsigned char[::1] passes):
    """passes = 1 where low < x, and x < high unless high is inf; else 0 (NaN: 0): where a
    ReLU with these bounds passes its input (``elementwise.relu_passes``)."""
    cdef Py_ssize_t n = x.shape[0], k
    cdef real lo = <real> low, hi = <real> high
    cdef unsigned char uncapped = high == INFINITY
    with nogil:
        for k in prange(n, schedule="dynamic", chunksize=_CHUNK_ELEMENTS,
                         num_threads=_array_threads(n)):
            passes[k] = (<unsigned char> (x[k] > lo)) & ((<unsigned char> (x[k] < hi)) | uncapped)


def masked_gradient(const real[::1] g, const unsigned char[::1] passes, real[::1] out):
    """out = g * passes, the mask as a number of g's type (0 or 1), as NumPy multiplies a float
    array by a bool one: the ReLU's backward."""
    cdef Py_ssize_t n = g.shape[0], k
    with nogil:
        for k in prange(n, schedule="dynamic", chunksize=_CHUNK_ELEMENTS,
                         num_threads=_array_threads(n)):
            out[k] = g[k] * <real> passes[k]


def add_arrays(const real[::1] x, const real[::1] y, real[::1] out):
    """out = x + y elementwise."""
    cdef Py_ssize_t n = x.shape[0], k
    with nogil:
        for k in prange(n, schedule="dynamic", chunksize=_CHUNK_ELEMENTS,
                         num_threads=_array_threads(n)):
            out[k] = x[k] + y[k]


def channel_add(const real[:, ::1] x, const real[::1] shift, double low, double high,
                real[:, ::1] out):
    """out[r, c] = x[r, c] + shift[c] (a convolution's bias; out may be x itself), clamped to
    [low, high] as ``clamp`` does (the ReLU after the convolution; -inf, inf: no clamp)."""
    cdef Py_ssize_t rows = x.shape[0], ch = x.shape[1], r, c
    cdef real lo = <real> low, hi = <real> high
    with nogil:
        for r in prange(rows, schedule="dynamic", chunksize=_chunk(ch),
                         num_threads=_array_threads(rows * ch)):
            for c in range(ch):
                out[r, c] = _clamped(x[r, c] + shift[c], lo, hi)


def zero_pad(const real[:, :, :, ::1] x, Py_ssize_t top, Py_ssize_t left,
             real[:, :, :, ::1] out):
    """out = x placed at (top, left) in zeros: out[n, top + i, left + j] = x[n, i, j], every
    other element 0 (out's shape sets the bottom and right margins)."""
    cdef Py_ssize_t n_img = out.shape[0], h = out.shape[1], w = out.shape[2], ch = out.shape[3]
    cdef Py_ssize_t xh = x.shape[1], xw = x.shape[2], row, n, y, i
    cdef real *dst
    with nogil:
        for row in prange(n_img * h, schedule="dynamic", chunksize=_chunk(w * ch),
                           num_threads=_array_threads(n_img * h * w * ch)):
            n = row // h
            y = row - n * h
            dst = &out[n, y, 0, 0]
            i = y - top
            if i < 0 or i >= xh:
                _zero_run(dst, w * ch)
                continue
            _zero_run(dst, left * ch)
            _copy_run(dst + left * ch, &x[n, i, 0, 0], xw * ch)
            _zero_run(dst + (left + xw) * ch, (w - left - xw) * ch)


def subtract_row_max(const real[:, ::1] x, real[:, ::1] out):
    """out[r, c] = x[r, c] - max over c of x[r] (softmax's shift), the maximum taken left to
    right: a NaN makes it NaN, and of equal values (-0.0 and 0.0) the later wins."""
    cdef Py_ssize_t rows = x.shape[0], ch = x.shape[1], r, c
    cdef real top, value
    with nogil:
        for r in prange(rows, schedule="dynamic", chunksize=_chunk(ch),
                         num_threads=_array_threads(rows * ch)):
            top = x[r, 0]
            for c in range(1, ch):
                if top != top:
                    break
                value = x[r, c]
                if not (value < top):
                    top = value
            for c in range(ch):
                out[r, c] = x[r, c] - top


def divide_by_row_sum(const real[:, ::1] e, real[:, ::1] out):
    """out[r, c] = e[r, c] / (e[r, 0] + e[r, 1] + ...), the sum taken left to right (as
    NumPy sums 7 values or fewer; softmax uses this kernel for such rows only)."""
    cdef Py_ssize_t rows = e.shape[0], ch = e.shape[1], r, c
    cdef real total
    with nogil:
        for r in prange(rows, schedule="dynamic", chunksize=_chunk(ch),
                         num_threads=_array_threads(rows * ch)):
            total = e[r, 0]
            for c in range(1, ch):
                total = total + e[r, c]
            for c in range(ch):
                out[r, c] = e[r, c] / total
