# Depthwise convolution and max pooling (NHWC), included by refseg/_kernels.pyx, which holds
# the cimports, _array_threads and the fused type real. NumPy twins: autograd/_twins.py.
# Their loops count a window's taps as the work of each output element (kh*kw units of
# _array_threads' bound): MobileNetV2's depthwise layers in training hold 0.2-0.9 M elements,
# nine multiply-adds each, and would otherwise run on one thread.

def depthwise_forward(const real[:, :, :, ::1] x, const real[:, ::1] w, Py_ssize_t kh,
                      Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t pt, Py_ssize_t pl,
                      real[:, :, :, ::1] out):
    """out[n, i, j, c] = sum over (a, b) row-major of x[n, i*sh-pt+a, j*sw-pl+b, c] * w[a*kw+b, c]."""
    cdef Py_ssize_t n_img = x.shape[0], h = x.shape[1], wd = x.shape[2], ch = x.shape[3]
    cdef Py_ssize_t ho = out.shape[1], wo = out.shape[2], row, n, i, j, a, b, c, y, xx
    with nogil:
        for row in prange(n_img * ho, schedule="dynamic", chunksize=_chunk(wo * ch),
                           num_threads=_array_threads(n_img * ho * wo * ch * kh * kw)):
            n = row // ho
            i = row - n * ho
            for j in range(wo):
                for c in range(ch):
                    out[n, i, j, c] = 0
                for a in range(kh):
                    y = i * sh - pt + a
                    if y < 0 or y >= h:
                        continue
                    for b in range(kw):
                        xx = j * sw - pl + b
                        if xx < 0 or xx >= wd:
                            continue
                        for c in range(ch):
                            out[n, i, j, c] = out[n, i, j, c] + x[n, y, xx, c] * w[a * kw + b, c]


def depthwise_backward_input(const real[:, :, :, ::1] g, const real[:, ::1] w, Py_ssize_t kh,
                             Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t pt,
                             Py_ssize_t pl, real[:, :, :, ::1] dx):
    """dx[n, y, x, c] = sum over (a, b) row-major of g[n, i, j, c] * w[a*kw+b, c] where
    y = i*sh - pt + a and x = j*sw - pl + b (a gather: rows run in parallel race-free)."""
    cdef Py_ssize_t n_img = dx.shape[0], h = dx.shape[1], wd = dx.shape[2], ch = dx.shape[3]
    cdef Py_ssize_t ho = g.shape[1], wo = g.shape[2], row, n, y, xx, a, b, c, ti, tj, i, j
    with nogil:
        for row in prange(n_img * h, schedule="dynamic", chunksize=_chunk(wd * ch),
                           num_threads=_array_threads(n_img * h * wd * ch * kh * kw)):
            n = row // h
            y = row - n * h
            for xx in range(wd):
                for c in range(ch):
                    dx[n, y, xx, c] = 0
                for a in range(kh):
                    ti = y + pt - a
                    if ti < 0 or ti % sh != 0 or ti // sh >= ho:
                        continue
                    i = ti // sh
                    for b in range(kw):
                        tj = xx + pl - b
                        if tj < 0 or tj % sw != 0 or tj // sw >= wo:
                            continue
                        j = tj // sw
                        for c in range(ch):
                            dx[n, y, xx, c] = dx[n, y, xx, c] + g[n, i, j, c] * w[a * kw + b, c]


def depthwise_backward_weight(const real[:, :, :, ::1] x, const real[:, :, :, ::1] g,
                              Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw,
                              Py_ssize_t pt, Py_ssize_t pl, double[:, ::1] dw):
    """dw[a*kw+b, c] = sum over n, i, j of x[n, i*sh-pt+a, j*sw-pl+b, c] * g[n, i, j, c],
    accumulated in float64 (a reduction: the twin sums in another order, see its docstring)."""
    cdef Py_ssize_t n_img = x.shape[0], h = x.shape[1], wd = x.shape[2], ch = x.shape[3]
    cdef Py_ssize_t ho = g.shape[1], wo = g.shape[2], tap, n, i, j, a, b, c, y, xx
    with nogil:
        for tap in prange(kh * kw, schedule="dynamic", chunksize=1,
                           num_threads=_array_threads(n_img * ho * wo * ch * kh * kw)):
            a = tap // kw
            b = tap - a * kw
            for c in range(ch):
                dw[tap, c] = 0
            for n in range(n_img):
                for i in range(ho):
                    y = i * sh - pt + a
                    if y < 0 or y >= h:
                        continue
                    for j in range(wo):
                        xx = j * sw - pl + b
                        if xx < 0 or xx >= wd:
                            continue
                        for c in range(ch):
                            dw[tap, c] += <double> x[n, y, xx, c] * <double> g[n, i, j, c]


def window_maximum(const real[:, :, :, ::1] x, Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh,
                   Py_ssize_t sw, Py_ssize_t pt, Py_ssize_t pl, real[:, :, :, ::1] out):
    """Max pooling at inference (no argmax): out[n, i, j, c] is the maximum of the window's
    taps inside x, taken in row-major tap order as np.maximum takes it (the value so far stays
    when it is >= the next or NaN: a NaN wins, and of equal values the earlier stays); -inf
    for a window entirely in the padding."""
    cdef Py_ssize_t n_img = x.shape[0], h = x.shape[1], wd = x.shape[2], ch = x.shape[3]
    cdef Py_ssize_t ho = out.shape[1], wo = out.shape[2], row, n, i, j, a, b, c, y, xx
    cdef bint empty
    cdef real value, best
    cdef real *dst
    cdef const real *src
    with nogil:
        for row in prange(n_img * ho, schedule="dynamic", chunksize=_chunk(wo * ch),
                           num_threads=_array_threads(n_img * ho * wo * ch * kh * kw)):
            n = row // ho
            i = row - n * ho
            for j in range(wo):
                dst = &out[n, i, j, 0]
                empty = True
                for a in range(kh):
                    y = i * sh - pt + a
                    if y < 0 or y >= h:
                        continue
                    for b in range(kw):
                        xx = j * sw - pl + b
                        if xx < 0 or xx >= wd:
                            continue
                        src = &x[n, y, xx, 0]
                        if empty:
                            _copy_run(dst, src, ch)
                            empty = False
                            continue
                        for c in range(ch):
                            best = dst[c]
                            value = src[c]
                            dst[c] = best if (best >= value or best != best) else value
                if empty:
                    for c in range(ch):
                        dst[c] = -INFINITY


def max_pool_forward(const real[:, :, :, ::1] x, Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh,
                     Py_ssize_t sw, Py_ssize_t pt, Py_ssize_t pl, real[:, :, :, ::1] out,
                     long[:, :, :, ::1] argmax):
    """Window maximum over positions inside the input (the first maximum in row-major window
    order wins a tie); argmax holds its flat index into x (-1, and out 0, for a window
    entirely in the padding)."""
    cdef Py_ssize_t n_img = x.shape[0], h = x.shape[1], wd = x.shape[2], ch = x.shape[3]
    cdef Py_ssize_t ho = out.shape[1], wo = out.shape[2], row, n, i, j, a, b, c, y, xx
    cdef long first
    cdef bint take
    cdef real *dst
    cdef long *arg
    cdef const real *src
    with nogil:
        for row in prange(n_img * ho, schedule="dynamic", chunksize=_chunk(wo * ch),
                           num_threads=_array_threads(n_img * ho * wo * ch * kh * kw)):
            n = row // ho
            i = row - n * ho
            for j in range(wo):
                dst = &out[n, i, j, 0]
                arg = &argmax[n, i, j, 0]
                for c in range(ch):
                    arg[c] = -1
                for a in range(kh):
                    y = i * sh - pt + a
                    if y < 0 or y >= h:
                        continue
                    for b in range(kw):
                        xx = j * sw - pl + b
                        if xx < 0 or xx >= wd:
                            continue
                        src = &x[n, y, xx, 0]
                        first = ((n * h + y) * wd + xx) * ch
                        # selects rather than branches: which tap wins is data, and a
                        # mispredicted branch per value cost more than the loop itself
                        for c in range(ch):
                            take = (arg[c] < 0) | (src[c] > dst[c])
                            dst[c] = src[c] if take else dst[c]
                            arg[c] = first + c if take else arg[c]
                for c in range(ch):
                    if arg[c] < 0:  # a window entirely in the padding
                        dst[c] = 0


def max_pool_backward(const real[:, :, :, ::1] g, const long[:, :, :, ::1] argmax,
                      real[::1] dx_flat):
    """dx_flat[argmax] += g, serially (windows may overlap)."""
    cdef Py_ssize_t n_img = g.shape[0], ho = g.shape[1], wo = g.shape[2], ch = g.shape[3]
    cdef Py_ssize_t n, i, j, c, k
    with nogil:
        for k in range(dx_flat.shape[0]):
            dx_flat[k] = 0
        for n in range(n_img):
            for i in range(ho):
                for j in range(wo):
                    for c in range(ch):
                        if argmax[n, i, j, c] >= 0:
                            dx_flat[argmax[n, i, j, c]] += g[n, i, j, c]
