# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, nonecheck=False
"""Hot loops of refseg, compiled. Each has an obvious NumPy twin in ``_reference.py``.

The kernels trust their inputs: shapes, dtypes, contiguity and parameter ranges are checked
by the Python functions that call them (``preprocess.py``, ``operators.py``, ``vote.py``).
They release the GIL and split rows over OpenMP threads; every output element is computed by
one thread in a fixed arithmetic order, so results do not depend on the thread count, and the
build uses ``-ffp-contract=off`` so that they match the twins bit for bit.

Border rule everywhere: reflect-101 (``dcb|abcd|cba``; OpenCV ``BORDER_REFLECT_101``,
NumPy ``np.pad(mode="reflect")``, SciPy ``mode="mirror"``). See spec ``R-border``.
"""
cimport openmp
from cython.parallel cimport prange
from libc.math cimport sqrt
from libc.stdlib cimport calloc, malloc, free
from libc.string cimport memcpy, memset

import numpy as np


# Images with fewer pixels run on one thread: below this, starting and joining threads costs
# more than it saves, and on a loaded machine a parallel loop waits for descheduled threads.
cdef Py_ssize_t _PARALLEL_MIN_PIXELS = 262144
PARALLEL_MIN_PIXELS = _PARALLEL_MIN_PIXELS


cdef inline int _threads(Py_ssize_t pixels) noexcept nogil:
    return openmp.omp_get_max_threads() if pixels >= _PARALLEL_MIN_PIXELS else 1


cdef inline Py_ssize_t _reflect101(Py_ssize_t i, Py_ssize_t n) noexcept nogil:
    """Index i in [-1, n] folded into [0, n) by reflect-101; a length-1 axis maps to 0."""
    if n == 1:
        return 0
    if i < 0:
        return -i
    if i >= n:
        return 2 * n - 2 - i
    return i


def rgb_to_gray(const unsigned char[:, :, ::1] rgb, double wr, double wg, double wb,
                double scale, double[:, ::1] out):
    """out[r, c] = ((wr * R + wg * G) + wb * B) / scale, in float64."""
    cdef Py_ssize_t rows = rgb.shape[0], cols = rgb.shape[1], r, c
    with nogil:
        for r in prange(rows, schedule="static", num_threads=_threads(rows * cols)):
            for c in range(cols):
                out[r, c] = ((wr * rgb[r, c, 0] + wg * rgb[r, c, 1]) + wb * rgb[r, c, 2]) / scale


cdef inline double _sum9(const double *a, const double *b, const double *d,
                         Py_ssize_t cm, Py_ssize_t c0, Py_ssize_t cp,
                         double k0, double k1, double k2, double k3, double k4, double k5,
                         double k6, double k7, double k8) noexcept nogil:
    """One 3x3 correlation sum over rows a (above), b (centre), d (below) and columns
    cm, c0, cp, terms added row-major from 0.0 (the twin adds them in the same order)."""
    cdef double acc = 0.0
    acc = acc + k0 * a[cm]
    acc = acc + k1 * a[c0]
    acc = acc + k2 * a[cp]
    acc = acc + k3 * b[cm]
    acc = acc + k4 * b[c0]
    acc = acc + k5 * b[cp]
    acc = acc + k6 * d[cm]
    acc = acc + k7 * d[c0]
    acc = acc + k8 * d[cp]
    return acc


cdef inline void _correlate_row(const double *a, const double *b, const double *d,
                                Py_ssize_t cols, const double *k, double *out) noexcept nogil:
    # coefficients in locals: no aliasing with out, so the interior loop can be vectorised
    cdef double k0 = k[0], k1 = k[1], k2 = k[2], k3 = k[3], k4 = k[4]
    cdef double k5 = k[5], k6 = k[6], k7 = k[7], k8 = k[8]
    cdef Py_ssize_t c
    out[0] = _sum9(a, b, d, _reflect101(-1, cols), 0, _reflect101(1, cols),
                   k0, k1, k2, k3, k4, k5, k6, k7, k8)
    for c in range(1, cols - 1):  # interior: no reflection
        out[c] = _sum9(a, b, d, c - 1, c, c + 1, k0, k1, k2, k3, k4, k5, k6, k7, k8)
    if cols > 1:
        out[cols - 1] = _sum9(a, b, d, cols - 2, cols - 1, _reflect101(cols, cols),
                              k0, k1, k2, k3, k4, k5, k6, k7, k8)


def correlate3x3(const double[:, ::1] src, const double[:, ::1] kernel, double[:, ::1] out):
    """3x3 correlation with reflect-101 border."""
    cdef Py_ssize_t rows = src.shape[0], cols = src.shape[1], r
    cdef double k[9]
    cdef int i
    for i in range(9):
        k[i] = kernel[i // 3, i % 3]
    with nogil:
        for r in prange(rows, schedule="static", num_threads=_threads(rows * cols)):
            _correlate_row(&src[_reflect101(r - 1, rows), 0], &src[r, 0],
                           &src[_reflect101(r + 1, rows), 0], cols, k, &out[r, 0])


def gradient3x3(const double[:, ::1] src, const double[:, ::1] kx, const double[:, ::1] ky,
                double[:, ::1] gx, double[:, ::1] gy, double[:, ::1] magnitude):
    """gx, gy: 3x3 correlations (reflect-101); magnitude = sqrt(gx*gx + gy*gy)."""
    cdef Py_ssize_t rows = src.shape[0], cols = src.shape[1], r, c
    cdef double wx[9]
    cdef double wy[9]
    cdef int i
    cdef double *px
    cdef double *py
    cdef double *pm
    for i in range(9):
        wx[i] = kx[i // 3, i % 3]
        wy[i] = ky[i // 3, i % 3]
    with nogil:
        for r in prange(rows, schedule="static", num_threads=_threads(rows * cols)):
            _correlate_row(&src[_reflect101(r - 1, rows), 0], &src[r, 0],
                           &src[_reflect101(r + 1, rows), 0], cols, wx, &gx[r, 0])
            _correlate_row(&src[_reflect101(r - 1, rows), 0], &src[r, 0],
                           &src[_reflect101(r + 1, rows), 0], cols, wy, &gy[r, 0])
            px = &gx[r, 0]
            py = &gy[r, 0]
            pm = &magnitude[r, 0]
            for c in range(cols):
                pm[c] = sqrt(px[c] * px[c] + py[c] * py[c])


def threshold_above(const double[:, ::1] src, double threshold, unsigned char[:, ::1] out):
    """out = 1 where src > threshold, else 0."""
    cdef Py_ssize_t rows = src.shape[0], cols = src.shape[1], r, c
    with nogil:
        for r in prange(rows, schedule="static", num_threads=_threads(rows * cols)):
            for c in range(cols):
                out[r, c] = 1 if src[r, c] > threshold else 0


cdef inline double _mag_at(const double[:, ::1] m, Py_ssize_t r, Py_ssize_t c,
                           Py_ssize_t rows, Py_ssize_t cols) noexcept nogil:
    if r < 0 or c < 0 or r >= rows or c >= cols:
        return 0.0
    return m[r, c]


def non_maximum_suppression(const double[:, ::1] gx, const double[:, ::1] gy,
                            const double[:, ::1] magnitude, double low, double high,
                            double tan_lo, double tan_hi, unsigned char[:, ::1] out):
    """Canny candidates: 0 suppressed, 1 weak (> low), 2 strong (> high).

    A pixel survives when its magnitude exceeds both neighbours across the quantised gradient
    direction (``>`` on the first neighbour, ``>=`` on the second for the axis directions,
    ``>`` on both diagonals); magnitudes outside the image count as 0. Spec ``R-canny``.
    """
    cdef Py_ssize_t rows = gx.shape[0], cols = gx.shape[1], r, c
    cdef double m, ax, ay, a, b
    cdef unsigned char keep
    with nogil:
        for r in prange(rows, schedule="static", num_threads=_threads(rows * cols)):
            for c in range(cols):
                m = magnitude[r, c]
                out[r, c] = 0
                if not (m > low):
                    continue
                ax = gx[r, c]
                ay = gy[r, c]
                if ax < 0:
                    ax = -ax
                if ay < 0:
                    ay = -ay
                if ay < tan_lo * ax:
                    keep = m > _mag_at(magnitude, r, c - 1, rows, cols) and \
                        m >= _mag_at(magnitude, r, c + 1, rows, cols)
                elif ay > tan_hi * ax:
                    keep = m > _mag_at(magnitude, r - 1, c, rows, cols) and \
                        m >= _mag_at(magnitude, r + 1, c, rows, cols)
                elif (gx[r, c] < 0) == (gy[r, c] < 0):
                    keep = m > _mag_at(magnitude, r - 1, c - 1, rows, cols) and \
                        m > _mag_at(magnitude, r + 1, c + 1, rows, cols)
                else:
                    keep = m > _mag_at(magnitude, r - 1, c + 1, rows, cols) and \
                        m > _mag_at(magnitude, r + 1, c - 1, rows, cols)
                if keep:
                    out[r, c] = 2 if m > high else 1


def hysteresis(const unsigned char[:, ::1] candidates, unsigned char[:, ::1] out):
    """out = 1 on every candidate 8-connected (through candidates) to a strong one."""
    cdef Py_ssize_t rows = candidates.shape[0], cols = candidates.shape[1]
    cdef Py_ssize_t n = rows * cols, top = 0, r, c, p, q, dr, dc, rr, cc
    cdef Py_ssize_t *stack = <Py_ssize_t *> malloc(max(n, 1) * sizeof(Py_ssize_t))
    if stack == NULL:
        raise MemoryError("hysteresis: cannot allocate the pixel stack")
    try:
        with nogil:
            for r in range(rows):
                for c in range(cols):
                    out[r, c] = 0
            for r in range(rows):
                for c in range(cols):
                    if candidates[r, c] == 2 and out[r, c] == 0:
                        out[r, c] = 1
                        stack[top] = r * cols + c
                        top = top + 1
                        while top > 0:
                            top = top - 1
                            p = stack[top]
                            rr = p // cols
                            cc = p - rr * cols
                            for dr in range(-1, 2):
                                for dc in range(-1, 2):
                                    if rr + dr < 0 or rr + dr >= rows:
                                        continue
                                    if cc + dc < 0 or cc + dc >= cols:
                                        continue
                                    if candidates[rr + dr, cc + dc] != 0 and \
                                            out[rr + dr, cc + dc] == 0:
                                        out[rr + dr, cc + dc] = 1
                                        q = (rr + dr) * cols + cc + dc
                                        stack[top] = q
                                        top = top + 1
    finally:
        free(stack)


cdef inline bint _crosses(double centre, double other, double threshold) noexcept nogil:
    """centre < 0 < other with a jump larger than threshold."""
    return centre < 0.0 and other > 0.0 and other - centre > threshold


def zero_crossings(const double[:, ::1] response, double threshold, unsigned char[:, ::1] out):
    """Marks the negative side of each sign change between 4-neighbours whose jump exceeds
    threshold, and exact zeros lying between opposite signs (left/right or up/down).
    Neighbours outside the image are not consulted. Spec ``R-log``."""
    cdef Py_ssize_t rows = response.shape[0], cols = response.shape[1], r, c
    cdef double v, a, b
    cdef unsigned char hit
    with nogil:
        for r in prange(rows, schedule="static", num_threads=_threads(rows * cols)):
            for c in range(cols):
                v = response[r, c]
                hit = 0
                if v < 0.0:
                    if c > 0 and _crosses(v, response[r, c - 1], threshold):
                        hit = 1
                    elif c + 1 < cols and _crosses(v, response[r, c + 1], threshold):
                        hit = 1
                    elif r > 0 and _crosses(v, response[r - 1, c], threshold):
                        hit = 1
                    elif r + 1 < rows and _crosses(v, response[r + 1, c], threshold):
                        hit = 1
                elif v == 0.0:
                    if c > 0 and c + 1 < cols:
                        a = response[r, c - 1]
                        b = response[r, c + 1]
                        if ((a < 0.0 and b > 0.0) or (a > 0.0 and b < 0.0)) and \
                                (a - b > threshold or b - a > threshold):
                            hit = 1
                    if hit == 0 and r > 0 and r + 1 < rows:
                        a = response[r - 1, c]
                        b = response[r + 1, c]
                        if ((a < 0.0 and b > 0.0) or (a > 0.0 and b < 0.0)) and \
                                (a - b > threshold or b - a > threshold):
                            hit = 1
                out[r, c] = hit


def weighted_vote(const unsigned char[:, :, ::1] edges, const double[::1] weights,
                  double offset, double[:, ::1] final_weight):
    """F = ((w0*X0 + w1*X1) + w2*X2) + w3*X3 - offset, X = 2 on an edge (> 0), 1 elsewhere.
    edges has shape (4, rows, cols)."""
    cdef Py_ssize_t rows = edges.shape[1], cols = edges.shape[2], r, c, k
    cdef double f
    with nogil:
        for r in prange(rows, schedule="static", num_threads=_threads(rows * cols)):
            for c in range(cols):
                f = 0.0
                for k in range(4):
                    f = f + weights[k] * (2.0 if edges[k, r, c] != 0 else 1.0)
                final_weight[r, c] = f - offset


def histogram(const double[:, ::1] values, double low, double high, long[::1] counts):
    """counts[k] = number of values whose bin x = (v - low) * (nbins / (high - low)) truncates
    to k, with x clamped to [0, nbins - 1] (and a NaN x, from 0 * inf when high - low is
    subnormal, put in bin 0) so that no value can index outside counts."""
    cdef Py_ssize_t rows = values.shape[0], cols = values.shape[1], r, c, k
    cdef Py_ssize_t nbins = counts.shape[0]
    cdef double scale = nbins / (high - low)
    cdef double x
    with nogil:
        for k in range(nbins):
            counts[k] = 0
        for r in range(rows):
            for c in range(cols):
                x = (values[r, c] - low) * scale
                if not (x >= 0.0):
                    k = 0
                elif x >= nbins - 1:
                    k = nbins - 1
                else:
                    k = <Py_ssize_t> x
                counts[k] += 1


def edge_statistics(const unsigned char[:, :, ::1] edges, double[:, ::1] mean_image,
                    double[::1] sums, double[::1] squared_deviations):
    """For binary maps (value != 0 is 1) of shape (4, rows, cols): the mean image
    ((e0 + e1) + e2 + e3) / 4, each map's sum, and each map's sum of (e_k - mean)^2.
    Every term is a multiple of 1/16, so the sums are exact whatever their order."""
    cdef Py_ssize_t rows = edges.shape[1], cols = edges.shape[2], r, c, k
    cdef double e0, e1, e2, e3, m
    cdef double[:, ::1] partial = np.zeros((rows, 8))
    with nogil:
        for r in prange(rows, schedule="static", num_threads=_threads(rows * cols)):
            for c in range(cols):
                e0 = 1.0 if edges[0, r, c] != 0 else 0.0
                e1 = 1.0 if edges[1, r, c] != 0 else 0.0
                e2 = 1.0 if edges[2, r, c] != 0 else 0.0
                e3 = 1.0 if edges[3, r, c] != 0 else 0.0
                m = (((e0 + e1) + e2) + e3) / 4.0
                mean_image[r, c] = m
                partial[r, 0] += e0
                partial[r, 1] += e1
                partial[r, 2] += e2
                partial[r, 3] += e3
                partial[r, 4] += (e0 - m) * (e0 - m)
                partial[r, 5] += (e1 - m) * (e1 - m)
                partial[r, 6] += (e2 - m) * (e2 - m)
                partial[r, 7] += (e3 - m) * (e3 - m)
        for k in range(4):
            sums[k] = 0.0
            squared_deviations[k] = 0.0
        for r in range(rows):
            for k in range(4):
                sums[k] += partial[r, k]
                squared_deviations[k] += partial[r, 4 + k]


# ------------------------------------------------------------------------------------------
# Autograd kernels (NHWC). Geometry: output pixel (i, j) of a window op reads input rows
# i * stride - pad_top + a, a = 0..kh-1 (columns likewise); reads outside the input are zero.

ctypedef fused real:
    float
    double


cdef inline void _add_run(real *out, const real *src, Py_ssize_t count) noexcept nogil:
    """out[c] = out[c] + src[c] over a contiguous run (vectorised by the compiler)."""
    cdef Py_ssize_t c
    for c in range(count):
        out[c] = out[c] + src[c]


# Below this many values a run is copied or cleared by an inline loop: a call to memcpy or
# memset costs more than moving a few values (3 channels: the decoder's last layers).
cdef Py_ssize_t _SHORT_RUN = 16


cdef inline void _copy_run(real *out, const real *src, Py_ssize_t count) noexcept nogil:
    cdef Py_ssize_t c
    if count >= _SHORT_RUN:
        memcpy(out, src, count * sizeof(real))
    else:
        for c in range(count):
            out[c] = src[c]


cdef inline void _zero_run(real *out, Py_ssize_t count) noexcept nogil:
    cdef Py_ssize_t c
    if count >= _SHORT_RUN:
        memset(out, 0, count * sizeof(real))
    else:
        for c in range(count):
            out[c] = 0


def im2col(const real[:, :, :, ::1] x, Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh,
           Py_ssize_t sw, Py_ssize_t pt, Py_ssize_t pl, Py_ssize_t ho, Py_ssize_t wo,
           Py_ssize_t row_start, real[:, ::1] cols):
    """For output rows r = row_start .. row_start + len(cols) / wo - 1 (r = n*ho + i):
    cols[(r - row_start)*wo + j, (a*kw + b)*C + c] = x[n, i*sh - pt + a, j*sw - pl + b, c]
    (0 outside). Each (pixel, tap) is a contiguous run of C values in both arrays: one copy
    or clear. A range of rows lets callers build the column matrix a cache-sized block at a
    time."""
    cdef Py_ssize_t n_img = x.shape[0], h = x.shape[1], w = x.shape[2], ch = x.shape[3]
    cdef Py_ssize_t rows = cols.shape[0] // wo, k, row, n, i, j, a, b, y, xx
    cdef real *dst
    with nogil:
        for k in prange(rows, schedule="static",
                        num_threads=_threads(rows * wo * kh * kw * ch // 8)):
            row = row_start + k
            n = row // ho
            i = row - n * ho
            for j in range(wo):
                dst = &cols[k * wo + j, 0]
                for a in range(kh):
                    y = i * sh - pt + a
                    for b in range(kw):
                        xx = j * sw - pl + b
                        if y < 0 or y >= h or xx < 0 or xx >= w:
                            _zero_run(dst + (a * kw + b) * ch, ch)
                        else:
                            _copy_run(dst + (a * kw + b) * ch, &x[n, y, xx, 0], ch)


cdef inline Py_ssize_t _window_of(Py_ssize_t y, Py_ssize_t pad, Py_ssize_t tap,
                                  Py_ssize_t stride, Py_ssize_t windows) noexcept nogil:
    """Along one axis: the window whose tap ``tap`` lands on pixel y (window i covers pixels
    i*stride - pad ..), or -1 when no window of the ``windows`` does."""
    cdef Py_ssize_t t = y + pad - tap
    if t < 0 or t % stride != 0 or t // stride >= windows:
        return -1
    return t // stride


def col2im(const real[:, ::1] cols, Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw,
           Py_ssize_t pt, Py_ssize_t pl, Py_ssize_t ho, Py_ssize_t wo, real[:, :, :, ::1] out):
    """The adjoint of im2col: out[n, y, x, c] = sum over (a, b) (row-major) of the cols entries
    that im2col copied from (y, x). Written as a gather, so rows run in parallel race-free."""
    cdef Py_ssize_t n_img = out.shape[0], h = out.shape[1], w = out.shape[2], ch = out.shape[3]
    cdef Py_ssize_t row, n, y, xx, a, b, i, j
    cdef real *dst
    with nogil:
        for row in prange(n_img * h, schedule="static",
                          num_threads=_threads(n_img * h * w * kh * kw * ch // 8)):
            n = row // h
            y = row - n * h
            for xx in range(w):
                dst = &out[n, y, xx, 0]
                _zero_run(dst, ch)
                for a in range(kh):
                    i = _window_of(y, pt, a, sh, ho)
                    if i < 0:
                        continue
                    for b in range(kw):
                        j = _window_of(xx, pl, b, sw, wo)
                        if j >= 0:
                            _add_run(dst, &cols[(n * ho + i) * wo + j, (a * kw + b) * ch], ch)


# Channels per block of col2im_transposed: one 64-byte line of float32 output.
cdef Py_ssize_t _CHANNEL_BLOCK = 16


def col2im_transposed(const real[:, ::1] cols_t, Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh,
                      Py_ssize_t sw, Py_ssize_t pt, Py_ssize_t pl, Py_ssize_t ho,
                      Py_ssize_t wo, real[:, :, :, ::1] out):
    """col2im of the transposed column matrix: cols_t[(a*kw + b)*C + c, (n*ho + i)*wo + j]
    holds what cols[(n*ho + i)*wo + j, (a*kw + b)*C + c] holds, and out is what col2im(cols)
    gives, bit for bit: each tap (a, b) in row-major order adds its row block to the pixels it
    lands on, and one tap lands on a pixel from one window at most, so every pixel receives
    the same terms in the same order. Blocks of _CHANNEL_BLOCK channels run in parallel (each
    thread owns its channels); a tap's block is that many rows of cols_t, walked along the
    windows."""
    cdef Py_ssize_t n_img = out.shape[0], h = out.shape[1], w = out.shape[2], ch = out.shape[3]
    cdef Py_ssize_t blocks = (ch + _CHANNEL_BLOCK - 1) // _CHANNEL_BLOCK
    cdef Py_ssize_t block, c0, c1, c, tap, n, i, j, y, xx, base, window
    with nogil:
        for block in prange(blocks, schedule="static",
                            num_threads=_threads(n_img * h * w * kh * kw * ch // 8)):
            c0 = block * _CHANNEL_BLOCK
            c1 = min(c0 + _CHANNEL_BLOCK, ch)
            for n in range(n_img):
                for y in range(h):
                    for xx in range(w):
                        for c in range(c0, c1):
                            out[n, y, xx, c] = 0
            for tap in range(kh * kw):
                base = tap * ch
                for n in range(n_img):
                    for i in range(ho):
                        y = i * sh - pt + tap // kw
                        if y < 0 or y >= h:
                            continue
                        window = (n * ho + i) * wo
                        for j in range(wo):
                            xx = j * sw - pl + tap % kw
                            if 0 <= xx < w:
                                for c in range(c0, c1):
                                    out[n, y, xx, c] = (out[n, y, xx, c]
                                                        + cols_t[base + c, window + j])


def depthwise_forward(const real[:, :, :, ::1] x, const real[:, ::1] w, Py_ssize_t kh,
                      Py_ssize_t kw, Py_ssize_t sh, Py_ssize_t sw, Py_ssize_t pt, Py_ssize_t pl,
                      real[:, :, :, ::1] out):
    """out[n, i, j, c] = sum over (a, b) row-major of x[n, i*sh-pt+a, j*sw-pl+b, c] * w[a*kw+b, c]."""
    cdef Py_ssize_t n_img = x.shape[0], h = x.shape[1], wd = x.shape[2], ch = x.shape[3]
    cdef Py_ssize_t ho = out.shape[1], wo = out.shape[2], row, n, i, j, a, b, c, y, xx
    with nogil:
        for row in prange(n_img * ho, schedule="static", num_threads=_threads(n_img * ho * wo * ch)):
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
        for row in prange(n_img * h, schedule="static", num_threads=_threads(n_img * h * wd * ch)):
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
        for tap in prange(kh * kw, schedule="static", num_threads=_threads(n_img * ho * wo * ch)):
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


def max_pool_forward(const real[:, :, :, ::1] x, Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t sh,
                     Py_ssize_t sw, Py_ssize_t pt, Py_ssize_t pl, real[:, :, :, ::1] out,
                     long[:, :, :, ::1] argmax):
    """Window maximum over positions inside the input (the first maximum in row-major window
    order wins a tie); argmax holds its flat index into x."""
    cdef Py_ssize_t n_img = x.shape[0], h = x.shape[1], wd = x.shape[2], ch = x.shape[3]
    cdef Py_ssize_t ho = out.shape[1], wo = out.shape[2], row, n, i, j, a, b, c, y, xx
    cdef real v
    with nogil:
        for row in prange(n_img * ho, schedule="static", num_threads=_threads(n_img * ho * wo * ch)):
            n = row // ho
            i = row - n * ho
            for j in range(wo):
                for c in range(ch):
                    argmax[n, i, j, c] = -1
                for a in range(kh):
                    y = i * sh - pt + a
                    if y < 0 or y >= h:
                        continue
                    for b in range(kw):
                        xx = j * sw - pl + b
                        if xx < 0 or xx >= wd:
                            continue
                        for c in range(ch):
                            v = x[n, y, xx, c]
                            if argmax[n, i, j, c] < 0 or v > out[n, i, j, c]:
                                out[n, i, j, c] = v
                                argmax[n, i, j, c] = ((n * h + y) * wd + xx) * ch + c
                for c in range(ch):
                    if argmax[n, i, j, c] < 0:  # a window entirely in the padding
                        out[n, i, j, c] = 0


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
        for r in prange(rows, schedule="static", num_threads=_threads(rows * ch)):
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
        for r in prange(rows, schedule="static", num_threads=_threads(rows * ch)):
            for c in range(ch):
                scaled = count * g[r, c]
                centred = scaled - sum_g[c]
                correction = xhat[r, c] * sum_g_xhat[c]
                dx[r, c] = coef[c] * (centred - correction)


def adam_update(real[::1] param, const real[::1] grad, real[::1] m, real[::1] v, double lr,
                double beta1, double beta2, double eps, double bias1, double bias2):
    """m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr * (m / bias1) / (sqrt(v / bias2) + eps),
    with bias_k = 1 - beta_k^t; elementwise, in the parameter's precision."""
    cdef Py_ssize_t n = param.shape[0], k
    cdef real g, mk, vk
    with nogil:
        for k in prange(n, schedule="static", num_threads=_threads(n // 4)):
            g = grad[k]
            mk = <real> (beta1 * m[k] + (1.0 - beta1) * g)
            vk = <real> (beta2 * v[k] + (1.0 - beta2) * g * g)
            m[k] = mk
            v[k] = vk
            param[k] = <real> (param[k] - lr * (mk / bias1) / (sqrt(vk / bias2) + eps))



# ------------------------------------------------------------------------------------------
# Elementwise passes of inference (no gradient kept): batch norm folded to one multiply-add per
# element, ReLU / ReLU6 as a clamp, and the skip connections' sum. NumPy runs each of these on
# one core; over a whole network (99 batch norms, 66 ReLUs at 224x224) they are memory-bound
# sweeps of tens of megabytes, which two cores finish in a little more than half the time.

def channel_affine(const real[:, ::1] x, const real[::1] scale, const real[::1] shift,
                   real[:, ::1] out):
    """out[r, c] = x[r, c] * scale[c] + shift[c], rounded after the product and after the sum
    (as NumPy's ``x * scale + shift`` in two steps)."""
    cdef Py_ssize_t rows = x.shape[0], ch = x.shape[1], r, c
    cdef real product
    with nogil:
        for r in prange(rows, schedule="static", num_threads=_threads(rows * ch)):
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
        for k in prange(n, schedule="static", num_threads=_threads(n)):
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
        for k in prange(n, schedule="static", num_threads=_threads(n)):
            out[k] = x[k] + y[k]

# ------------------------------------------------------------------------------------------
# Direct stride-1 convolution for few channels (the prediction layer: 3 -> 3 channels). There
# im2col + GEMM is mostly copying (K = kh*kw*Cin = 27, N = Cout = 3), so these kernels compute
# the sums themselves. The input is copied to a zero-padded planar layout (one row of each
# channel contiguous), so that the inner loops run over LANES neighbouring output pixels with
# unit stride and the compiler keeps LANES accumulators in vector registers. A job is a band of
# SMALL_BAND output rows of one image: its thread copies the band's input rows into a buffer
# of its own and computes the band from it at once, while those rows are in its L1/L2 cache.
# Copying the whole batch first (2.8 MB at 4 x 224 x 224 x 3, more than a core's L2; half of
# it copied by the other core) left the row loops waiting for memory, and a buffer of that
# size, allocated and freed on every call, was mapped afresh each time (page faults).

cdef enum:
    LANES = 16  # output pixels per block of accumulators
    SMALL_BAND = 8  # output rows per job: 10 planar rows of 3 x 258 floats fit in L1


cdef inline Py_ssize_t _round_up(Py_ssize_t n, Py_ssize_t to) noexcept nogil:
    return (n + to - 1) // to * to


cdef void _tap_offsets(Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t ch, Py_ssize_t width,
                       Py_ssize_t *offsets) noexcept nogil:
    """Tap t = (a*kw + b)*C + c of a window reads row a, plane c of the planar layout,
    shifted by b: its offset from the window's first element."""
    cdef Py_ssize_t a, b, c
    for a in range(kh):
        for b in range(kw):
            for c in range(ch):
                offsets[(a * kw + b) * ch + c] = (a * ch + c) * width + b


cdef void _planar_band(const real[:, :, :, ::1] x, Py_ssize_t n, Py_ssize_t y0,
                       Py_ssize_t count, Py_ssize_t pl, Py_ssize_t cols, Py_ssize_t width,
                       real *planes) noexcept nogil:
    """planes[(r*C + c)*width + u] = x[n, y0 + r, u - pl, c] for r < count and u < cols, 0
    outside x and from column cols on: rows y0 .. y0 + count - 1 of image n, each stored
    channel by channel. Columns from cols on are read by no output (only by the lanes past the
    row's end, which are dropped), so they stay 0 whatever x holds there."""
    cdef Py_ssize_t h = x.shape[1], wd = x.shape[2], ch = x.shape[3]
    cdef Py_ssize_t r, c, u, sy
    cdef Py_ssize_t u0 = min(max(pl, 0), cols)            # first column holding input
    cdef Py_ssize_t u1 = max(min(wd + pl, cols), u0)      # one past the last
    cdef const real *src
    cdef real *dst
    for r in range(count):
        sy = y0 + r
        dst = planes + r * ch * width
        if sy < 0 or sy >= h or u1 == u0:
            memset(dst, 0, ch * width * sizeof(real))
            continue
        for c in range(ch):
            memset(dst + c * width, 0, u0 * sizeof(real))
            memset(dst + c * width + u1, 0, (width - u1) * sizeof(real))
        src = &x[n, sy, u0 - pl, 0]
        dst = dst + u0
        if ch == 3:
            # the prediction layer's case, with the channel count known to the compiler
            if real is float:
                if _AVX512:
                    _planes3_avx512(src, u1 - u0, dst, dst + width, dst + 2 * width)
                    continue
            for u in range(u1 - u0):
                dst[u] = src[3 * u]
                dst[width + u] = src[3 * u + 1]
                dst[2 * width + u] = src[3 * u + 2]
        else:
            for u in range(u1 - u0):
                for c in range(ch):
                    dst[c * width + u] = src[u * ch + c]


# The float32 row loops of the direct kernels, also compiled for AVX-512 (GCC target attribute
# and vector types) and chosen at run time where the CPU has it: 64 pixels per block in four
# 16-wide accumulators (a last block of at most 32 pixels in two). The plain build targets
# x86-64 (SSE2), where 16 pixels in four 4-wide accumulators already cover the latency of the
# adds but each instruction does a quarter of the work. Forward: the same multiplies and adds
# in the same order per output (no FMA: -ffp-contract=off), so the same results bit for bit.
# Kernel gradient: 64 partial sums per row instead of 16, so float32 results differ between
# AVX-512 and other machines by rounding (as BLAS results do); each machine's results still do
# not depend on the thread count.
cdef extern from *:
    """
    #if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
    #define REFSEG_WIDE_LANES 64
    /* GCC vector types: 16 floats, 8 floats, 8 doubles, and the first and last with 4- and
       8-byte alignment for unaligned loads and stores */
    typedef float refseg_v16 __attribute__((vector_size(64)));
    typedef float refseg_v16u __attribute__((vector_size(64), aligned(4)));
    typedef float refseg_v8f __attribute__((vector_size(32)));
    typedef double refseg_v8d __attribute__((vector_size(64)));
    typedef double refseg_v8du __attribute__((vector_size(64), aligned(8)));
    __attribute__((target("avx512f")))
    static void refseg_small_row_avx512(const float *rows, const Py_ssize_t *offsets,
                                        const float *wt, const float *bias, Py_ssize_t taps,
                                        Py_ssize_t cout, Py_ssize_t wo, float *out)
    {
        float acc[REFSEG_WIDE_LANES];
        for (Py_ssize_t o = 0; o < cout; o++) {
            const float *w_o = wt + o * taps;
            for (Py_ssize_t j0 = 0; j0 < wo; j0 += REFSEG_WIDE_LANES) {
                refseg_v16 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
                if (wo - j0 > 32) {
                    for (Py_ssize_t t = 0; t < taps; t++) {
                        const float wv = w_o[t];  /* vector * scalar: wv in every lane */
                        const refseg_v16u *src = (const refseg_v16u *)(rows + offsets[t] + j0);
                        a0 = a0 + src[0] * wv;
                        a1 = a1 + src[1] * wv;
                        a2 = a2 + src[2] * wv;
                        a3 = a3 + src[3] * wv;
                    }
                } else {
                    for (Py_ssize_t t = 0; t < taps; t++) {
                        const float wv = w_o[t];
                        const refseg_v16u *src = (const refseg_v16u *)(rows + offsets[t] + j0);
                        a0 = a0 + src[0] * wv;
                        a1 = a1 + src[1] * wv;
                    }
                }
                memcpy(acc, &a0, sizeof a0);
                memcpy(acc + 16, &a1, sizeof a1);
                memcpy(acc + 32, &a2, sizeof a2);
                memcpy(acc + 48, &a3, sizeof a3);
                Py_ssize_t n = wo - j0 < REFSEG_WIDE_LANES ? wo - j0 : REFSEG_WIDE_LANES;
                for (Py_ssize_t l = 0; l < n; l++) out[(j0 + l) * cout + o] = acc[l] + bias[o];
            }
        }
    }
    /* adds the sum of a[u] * b[u] (of a[u] if b is NULL), u < count, to lanes[0..7]: 64
       partial sums over the row in float32 (only the first 32 in a last block of at most 32
       pixels), added pairwise into 16, then partial sums l and l + 8 in float64 into lane l */
    __attribute__((target("avx512f")))
    static inline void refseg_small_dot_avx512(const float *a, const float *b,
                                               Py_ssize_t count, double *lanes)
    {
        refseg_v16 p0 = {0}, p1 = {0}, p2 = {0}, p3 = {0};
        refseg_v8f low, high;
        Py_ssize_t u = 0;
        for (; count - u > 32; u += REFSEG_WIDE_LANES) {
            const refseg_v16u *x = (const refseg_v16u *)(a + u);
            if (b) {
                const refseg_v16u *y = (const refseg_v16u *)(b + u);
                p0 = p0 + x[0] * y[0];
                p1 = p1 + x[1] * y[1];
                p2 = p2 + x[2] * y[2];
                p3 = p3 + x[3] * y[3];
            } else {
                p0 = p0 + x[0];
                p1 = p1 + x[1];
                p2 = p2 + x[2];
                p3 = p3 + x[3];
            }
        }
        if (u < count) {
            const refseg_v16u *x = (const refseg_v16u *)(a + u);
            if (b) {
                const refseg_v16u *y = (const refseg_v16u *)(b + u);
                p0 = p0 + x[0] * y[0];
                p1 = p1 + x[1] * y[1];
            } else {
                p0 = p0 + x[0];
                p1 = p1 + x[1];
            }
        }
        p0 = (p0 + p1) + (p2 + p3);
        memcpy(&low, &p0, sizeof low);
        memcpy(&high, (const float *)&p0 + 8, sizeof high);
        *(refseg_v8du *)lanes = *(refseg_v8du *)lanes
            + (__builtin_convertvector(low, refseg_v8d) + __builtin_convertvector(high, refseg_v8d));
    }
    /* adds one output row of conv_small_weight: to lanes[(t*cout + o)*8 ..] the dot of the
       row's tap-t input (rows + offsets[t]) with output channel o of g (g_row + o*width), to
       lanes[(taps*cout + o)*8 ..] the sum of that channel; wo pixels, zero up to width */
    __attribute__((target("avx512f")))
    static void refseg_small_weight_row_avx512(const float *rows, const Py_ssize_t *offsets,
                                               Py_ssize_t taps, const float *g_row,
                                               Py_ssize_t cout, Py_ssize_t width,
                                               Py_ssize_t wo, double *lanes)
    {
        for (Py_ssize_t t = 0; t < taps; t++)
            for (Py_ssize_t o = 0; o < cout; o++)
                refseg_small_dot_avx512(rows + offsets[t], g_row + o * width, wo,
                                        lanes + (t * cout + o) * 8);
        for (Py_ssize_t o = 0; o < cout; o++)
            refseg_small_dot_avx512(g_row + o * width, NULL, wo, lanes + (taps * cout + o) * 8);
    }
    /* d0[u], d1[u], d2[u] = src[3u], src[3u + 1], src[3u + 2] for u < count (a row of three
       channels into three planes), 16 pixels at a time: two two-vector permutations per
       plane (the pixels in the first two loaded vectors, then those in the third) */
    __attribute__((target("avx512f")))
    static void refseg_planes3_avx512(const float *src, Py_ssize_t count, float *d0,
                                      float *d1, float *d2)
    {
        typedef int refseg_i16 __attribute__((vector_size(64)));
        static const refseg_i16 first[3] = {
            {0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 0, 0, 0, 0, 0},
            {1, 4, 7, 10, 13, 16, 19, 22, 25, 28, 31, 0, 0, 0, 0, 0},
            {2, 5, 8, 11, 14, 17, 20, 23, 26, 29, 0, 0, 0, 0, 0, 0}};
        static const refseg_i16 second[3] = {
            {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 17, 20, 23, 26, 29},
            {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 18, 21, 24, 27, 30},
            {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 19, 22, 25, 28, 31}};
        float *dst[3] = {d0, d1, d2};
        Py_ssize_t u = 0;
        for (; u + 16 <= count; u += 16) {
            const refseg_v16u *in = (const refseg_v16u *)(src + 3 * u);
            const refseg_v16 a = in[0], b = in[1], c = in[2];
            for (int p = 0; p < 3; p++)
                *(refseg_v16u *)(dst[p] + u) =
                    __builtin_shuffle(__builtin_shuffle(a, b, first[p]), c, second[p]);
        }
        for (; u < count; u++) {
            d0[u] = src[3 * u];
            d1[u] = src[3 * u + 1];
            d2[u] = src[3 * u + 2];
        }
    }
    static int refseg_has_avx512(void) { return __builtin_cpu_supports("avx512f"); }
    #else
    #define REFSEG_WIDE_LANES 64
    static void refseg_small_row_avx512(const float *rows, const Py_ssize_t *offsets,
                                        const float *wt, const float *bias, Py_ssize_t taps,
                                        Py_ssize_t cout, Py_ssize_t wo, float *out) {}
    static void refseg_small_weight_row_avx512(const float *rows, const Py_ssize_t *offsets,
                                               Py_ssize_t taps, const float *g_row,
                                               Py_ssize_t cout, Py_ssize_t width,
                                               Py_ssize_t wo, double *lanes) {}
    static void refseg_planes3_avx512(const float *src, Py_ssize_t count, float *d0,
                                      float *d1, float *d2) {}
    static int refseg_has_avx512(void) { return 0; }
    #endif
    """
    int WIDE_LANES "REFSEG_WIDE_LANES"
    void _small_row_avx512 "refseg_small_row_avx512"(
        const float *rows, const Py_ssize_t *offsets, const float *wt, const float *bias,
        Py_ssize_t taps, Py_ssize_t cout, Py_ssize_t wo, float *out) noexcept nogil
    void _small_weight_row_avx512 "refseg_small_weight_row_avx512"(
        const float *rows, const Py_ssize_t *offsets, Py_ssize_t taps, const float *g_row,
        Py_ssize_t cout, Py_ssize_t width, Py_ssize_t wo, double *lanes) noexcept nogil
    void _planes3_avx512 "refseg_planes3_avx512"(
        const float *src, Py_ssize_t count, float *d0, float *d1, float *d2) noexcept nogil
    int _has_avx512 "refseg_has_avx512"() noexcept nogil


cdef bint _AVX512 = _has_avx512()


def use_avx512(bint enabled):
    """Let the direct kernels use their AVX-512 float32 loops (where the CPU has AVX-512; on by
    default) or not; returns the previous setting. For tests of both paths."""
    global _AVX512
    previous = _AVX512
    _AVX512 = enabled and _has_avx512()
    return previous


cdef inline void _small_forward_row(const real *rows, const Py_ssize_t *offsets,
                                    const real *wt, const real *bias, Py_ssize_t taps,
                                    Py_ssize_t cout, Py_ssize_t wo, real *out) noexcept nogil:
    """One output row: out[j*cout + o] = (sum over t < taps of rows[offsets[t] + j] *
    wt[o*taps + t]) + bias[o], each sum from 0 in tap order, LANES pixels at a time. The taps
    are one flat loop (not three nested ones) so that GCC vectorises the accumulators across
    it."""
    cdef real acc[LANES]
    cdef Py_ssize_t o, blk, j0, t, l
    cdef const real *src
    cdef const real *wo_t
    cdef real wv
    for o in range(cout):
        wo_t = wt + o * taps
        for blk in range(_round_up(wo, LANES) // LANES):
            j0 = blk * LANES
            for l in range(LANES):
                acc[l] = 0
            for t in range(taps):
                wv = wo_t[t]
                src = rows + offsets[t] + j0
                for l in range(LANES):
                    acc[l] = acc[l] + src[l] * wv
            for l in range(min(LANES, wo - j0)):
                out[(j0 + l) * cout + o] = acc[l] + bias[o]


def conv_small_forward(const real[:, :, :, ::1] x, const real[:, ::1] w, const real[::1] bias,
                       Py_ssize_t kh, Py_ssize_t kw, Py_ssize_t pt, Py_ssize_t pl,
                       real[:, :, :, ::1] out):
    """Stride-1 convolution plus bias: out[n, i, j, o] = (sum over (a, b, c) row-major of
    x[n, i - pt + a, j - pl + b, c] * w[(a*kw + b)*C + c, o]) + bias[o] (x read as 0 outside),
    each sum from 0 in that order. For few channels: kh*kw*C*Cout products per pixel. Bands
    of rows are handed out dynamically: on a shared machine a descheduled thread then delays
    only the band it holds, and each row is still computed by one thread in a fixed order."""
    cdef Py_ssize_t n_img = x.shape[0], ch = x.shape[3]
    cdef Py_ssize_t ho = out.shape[1], wo = out.shape[2], cout = out.shape[3]
    cdef Py_ssize_t taps = kh * kw * ch
    cdef bint wide = real is float and _AVX512
    # every block of `lanes` outputs reads lanes + kw - 1 columns: pad the width to whole blocks
    cdef Py_ssize_t width = _round_up(wo, WIDE_LANES if wide else LANES) + kw - 1
    cdef Py_ssize_t bands = (ho + SMALL_BAND - 1) // SMALL_BAND  # per image
    cdef Py_ssize_t per_thread = (SMALL_BAND + kh - 1) * ch * width
    cdef int threads = _threads(n_img * ho * wo * taps * cout // 8)
    cdef Py_ssize_t job, n, i, i0, count, o, t
    cdef real *planes
    cdef real *scratch = <real *> malloc(max(threads * per_thread, 1) * sizeof(real))
    cdef real *wt = <real *> malloc(max(taps * cout, 1) * sizeof(real))
    cdef Py_ssize_t *offsets = <Py_ssize_t *> malloc(max(taps, 1) * sizeof(Py_ssize_t))
    if scratch == NULL or wt == NULL or offsets == NULL:
        free(scratch)
        free(wt)
        free(offsets)
        raise MemoryError("conv_small_forward: cannot allocate the scratch buffers")
    try:
        with nogil:
            _tap_offsets(kh, kw, ch, width, offsets)
            # the weights of tap t per output channel contiguous
            for t in range(taps):
                for o in range(cout):
                    wt[o * taps + t] = w[t, o]
            for job in prange(n_img * bands, schedule="dynamic", num_threads=threads):
                n = job // bands
                i0 = (job - n * bands) * SMALL_BAND
                count = min(SMALL_BAND, ho - i0)
                planes = scratch + openmp.omp_get_thread_num() * per_thread
                # input rows i0 - pt .. i0 - pt + count + kh - 2, the columns the outputs read
                _planar_band(x, n, i0 - pt, count + kh - 1, pl, wo + kw - 1, width, planes)
                for i in range(count):
                    if real is float:
                        if wide:
                            _small_row_avx512(planes + i * ch * width, offsets, wt, &bias[0],
                                              taps, cout, wo, &out[n, i0 + i, 0, 0])
                            continue
                    _small_forward_row(planes + i * ch * width, offsets, wt, &bias[0], taps,
                                       cout, wo, &out[n, i0 + i, 0, 0])
    finally:
        free(scratch)
        free(wt)
        free(offsets)


cdef inline double _small_dot(const real *a, const real *b, Py_ssize_t count) noexcept nogil:
    """sum of a[u] * b[u], u < count (a multiple of LANES), in LANES partial sums of the
    input's type (vector registers), added up in float64."""
    cdef real part[LANES]
    cdef Py_ssize_t u0, l
    cdef double total = 0.0
    for l in range(LANES):
        part[l] = 0
    for u0 in range(count // LANES):
        for l in range(LANES):
            part[l] = part[l] + a[u0 * LANES + l] * b[u0 * LANES + l]
    for l in range(LANES):
        total = total + part[l]
    return total


cdef inline double _small_sum(const real *a, Py_ssize_t count) noexcept nogil:
    """sum of a[u], u < count, as _small_dot."""
    cdef real part[LANES]
    cdef Py_ssize_t u0, l
    cdef double total = 0.0
    for l in range(LANES):
        part[l] = 0
    for u0 in range(count // LANES):
        for l in range(LANES):
            part[l] = part[l] + a[u0 * LANES + l]
    for l in range(LANES):
        total = total + part[l]
    return total


def conv_small_weight(const real[:, :, :, ::1] x, const real[:, :, :, ::1] g, Py_ssize_t kh,
                      Py_ssize_t kw, Py_ssize_t pt, Py_ssize_t pl, double[:, ::1] dw,
                      double[::1] dbias):
    """The kernel and bias gradients of conv_small_forward: dw[(a*kw + b)*C + c, o] = sum over
    n, i, j of x[n, i - pt + a, j - pl + b, c] * g[n, i, j, o] (x read as 0 outside), and
    dbias[o] = sum of g[..., o]. Each output row's sums are taken in the input's precision
    (LANES partial sums over the row's pixels; for float32 on AVX-512, 64, added pairwise into
    16 and those in pairs into 8 float64 lanes), then in float64: over the rows of a band of
    SMALL_BAND rows in row order (lane by lane on AVX-512, the lanes added in order at the
    band's end), then the bands in order. The bands are fixed by the shape, so the result is
    independent of the thread count and of which thread took which band, and equal to the
    twin's float64 sums to rounding (a reduction in another order)."""
    cdef Py_ssize_t n_img = x.shape[0], ch = x.shape[3]
    cdef Py_ssize_t ho = g.shape[1], wo = g.shape[2], cout = g.shape[3]
    cdef bint wide = real is float and _AVX512
    cdef Py_ssize_t width_g = _round_up(wo, WIDE_LANES if wide else LANES)
    cdef Py_ssize_t width = width_g + kw - 1, taps = kh * kw * ch
    cdef Py_ssize_t bands = (ho + SMALL_BAND - 1) // SMALL_BAND  # per image
    # per band: the taps*cout kernel-gradient sums, then the cout bias-gradient sums
    cdef Py_ssize_t per_band = (taps + 1) * cout
    cdef Py_ssize_t x_planes = (SMALL_BAND + kh - 1) * ch * width
    cdef Py_ssize_t per_thread = x_planes + SMALL_BAND * cout * width_g
    cdef int threads = _threads(n_img * ho * wo * taps * cout // 8)
    cdef Py_ssize_t job, n, i, i0, count, o, k, l
    cdef real *planes
    cdef double *lanes
    cdef double total
    cdef Py_ssize_t *offsets = <Py_ssize_t *> malloc(max(taps, 1) * sizeof(Py_ssize_t))
    cdef real *scratch = <real *> malloc(max(threads * per_thread, 1) * sizeof(real))
    cdef double *scratch_lanes = <double *> malloc(max(threads * per_band * 8, 1)
                                                   * sizeof(double))
    cdef double *partial = <double *> malloc(max(n_img * bands * per_band, 1) * sizeof(double))
    if scratch == NULL or scratch_lanes == NULL or partial == NULL or offsets == NULL:
        free(scratch)
        free(scratch_lanes)
        free(partial)
        free(offsets)
        raise MemoryError("conv_small_weight: cannot allocate the scratch buffers")
    try:
        with nogil:
            _tap_offsets(kh, kw, ch, width, offsets)
            for job in prange(n_img * bands, schedule="dynamic", num_threads=threads):
                n = job // bands
                i0 = (job - n * bands) * SMALL_BAND
                count = min(SMALL_BAND, ho - i0)
                planes = scratch + openmp.omp_get_thread_num() * per_thread
                _planar_band(x, n, i0 - pt, count + kh - 1, pl, wo + kw - 1, width, planes)
                # g in the same planar layout, zero past column wo: those columns of x add 0
                _planar_band(g, n, i0, count, 0, wo, width_g, planes + x_planes)
                if real is float:
                    if wide:
                        lanes = scratch_lanes + openmp.omp_get_thread_num() * per_band * 8
                        memset(lanes, 0, per_band * 8 * sizeof(double))
                        for i in range(count):
                            _small_weight_row_avx512(planes + i * ch * width, offsets, taps,
                                                     planes + x_planes + i * cout * width_g,
                                                     cout, width_g, wo, lanes)
                        for k in range(per_band):
                            total = 0.0
                            for l in range(8):
                                total = total + lanes[k * 8 + l]
                            partial[job * per_band + k] = total
                        continue
                for k in range(per_band):
                    partial[job * per_band + k] = 0.0
                for i in range(count):
                    for k in range(taps):
                        for o in range(cout):
                            partial[job * per_band + k * cout + o] += _small_dot(
                                planes + i * ch * width + offsets[k],
                                planes + x_planes + (i * cout + o) * width_g, width_g)
                    for o in range(cout):
                        partial[job * per_band + taps * cout + o] += _small_sum(
                            planes + x_planes + (i * cout + o) * width_g, width_g)
            for k in range(taps * cout):
                dw[k // cout, k % cout] = 0
            for o in range(cout):
                dbias[o] = 0
            for job in range(n_img * bands):
                for k in range(taps * cout):
                    dw[k // cout, k % cout] += partial[job * per_band + k]
                for o in range(cout):
                    dbias[o] += partial[job * per_band + taps * cout + o]
    finally:
        free(scratch)
        free(scratch_lanes)
        free(partial)
        free(offsets)


# ------------------------------------------------------------------------------------------
# Winograd F(2x2, 3x3) for stride-1 3x3 convolutions (Lavin and Gray, "Fast Algorithms for
# Convolutional Neural Networks", CVPR 2016, arXiv:1509.09308). Each 2x2 block of outputs
# ("tile") is A^T [sum over c of (G g G^T) * (B^T d B)] A, d the 4x4 input window of the tile
# in channel c, g the 3x3 kernel from channel c, * the elementwise product: 16 matrix products
# (tiles x Cin) @ (Cin x Cout), 16 multiply-adds per tile and channel pair instead of the 36 of
# the direct sum, 2.25 times fewer.
#
#   B^T = [1  0 -1  0]     G = [ 1    0    0 ]     A^T = [1  1  1  0]
#         [0  1  1  0]         [1/2  1/2  1/2]           [0  1 -1 -1]
#         [0 -1  1  0]         [1/2 -1/2  1/2]
#         [0  1  0 -1]         [ 0    0    1 ]
#
# The transformed arrays are (16, ., .): entry k = 4*xi + nu holds row xi, column nu of the 4x4
# transform. Tile t = (n*th + ti)*tw + tj covers output rows 2ti, 2ti + 1 and columns 2tj,
# 2tj + 1 of image n and reads input rows 2ti - pt + r, r = 0..3 (columns likewise), 0
# outside. Every transformed value is computed by one thread in the fixed order written below
# (the twins in _reference.py use the same order), so results do not depend on the thread
# count.
#
# The per-tile loops are C (below), one body for float and double through a macro: every
# source and destination row is a restrict pointer, which Cython cannot declare, and without
# it the compiler does not vectorise a loop over channels that reads 16 rows and writes 16
# (it would need run-time overlap checks between all of them). Only adds, subtractions and
# exact halvings: vector width and contraction (off, setup.py) change no bit.



cdef extern from *:
    """
    /* B^T (4 values) and A^T (4 -> 2) and G (3 -> 4): the order of operations is the twins' */
    #define REFSEG_BT(d0, d1, d2, d3, t) do { \
        (t)[0] = (d0) - (d2); (t)[1] = (d1) + (d2); (t)[2] = (d2) - (d1); (t)[3] = (d1) - (d3); \
    } while (0)
    #define REFSEG_AT(m0, m1, m2, m3, y) do { \
        (y)[0] = ((m0) + (m1)) + (m2); (y)[1] = ((m1) - (m2)) - (m3); \
    } while (0)
    #define REFSEG_G(g0, g1, g2, t, half) do { \
        (t)[0] = (g0); (t)[1] = (((g0) + (g1)) + (g2)) * (half); \
        (t)[2] = (((g0) - (g1)) + (g2)) * (half); (t)[3] = (g2); \
    } while (0)

    #include <string.h>
    /* channels of a partial output tile computed at a time, on the stack */
    #define REFSEG_PART_LANES 64

    #define REFSEG_WINOGRAD(T, SUFFIX) \
    /* the (B^T d B) of one tile: o_k[c], k = 4 xi + nu, from d[r][s] = s_{4r + s}[c] */ \
    static inline void refseg_winograd_bdb_##SUFFIX( \
            const T *restrict s0, const T *restrict s1, const T *restrict s2, \
            const T *restrict s3, const T *restrict s4, const T *restrict s5, \
            const T *restrict s6, const T *restrict s7, const T *restrict s8, \
            const T *restrict s9, const T *restrict s10, const T *restrict s11, \
            const T *restrict s12, const T *restrict s13, const T *restrict s14, \
            const T *restrict s15, T *restrict o0, T *restrict o1, T *restrict o2, \
            T *restrict o3, T *restrict o4, T *restrict o5, T *restrict o6, T *restrict o7, \
            T *restrict o8, T *restrict o9, T *restrict o10, T *restrict o11, \
            T *restrict o12, T *restrict o13, T *restrict o14, T *restrict o15, Py_ssize_t ch) \
    { \
        for (Py_ssize_t c = 0; c < ch; c++) { \
            T c0[4], c1[4], c2[4], c3[4], v0[4], v1[4], v2[4], v3[4]; \
            /* B^T d down each column s: c_s[xi] */ \
            REFSEG_BT(s0[c], s4[c], s8[c], s12[c], c0); \
            REFSEG_BT(s1[c], s5[c], s9[c], s13[c], c1); \
            REFSEG_BT(s2[c], s6[c], s10[c], s14[c], c2); \
            REFSEG_BT(s3[c], s7[c], s11[c], s15[c], c3); \
            /* (B^T d) B along each row xi: v_xi[nu] */ \
            REFSEG_BT(c0[0], c1[0], c2[0], c3[0], v0); \
            REFSEG_BT(c0[1], c1[1], c2[1], c3[1], v1); \
            REFSEG_BT(c0[2], c1[2], c2[2], c3[2], v2); \
            REFSEG_BT(c0[3], c1[3], c2[3], c3[3], v3); \
            o0[c] = v0[0]; o1[c] = v0[1]; o2[c] = v0[2]; o3[c] = v0[3]; \
            o4[c] = v1[0]; o5[c] = v1[1]; o6[c] = v1[2]; o7[c] = v1[3]; \
            o8[c] = v2[0]; o9[c] = v2[1]; o10[c] = v2[2]; o11[c] = v2[3]; \
            o12[c] = v3[0]; o13[c] = v3[1]; o14[c] = v3[2]; o15[c] = v3[3]; \
        } \
    } \
    /* dst[k*stride + c] = (B^T d B)[k / 4][k % 4], d[r][s] = src[4r + s][c], c < ch */ \
    static void refseg_winograd_input_##SUFFIX(const T *const *src, T *dst, \
                                               Py_ssize_t stride, Py_ssize_t ch) \
    { \
        refseg_winograd_bdb_##SUFFIX( \
            src[0], src[1], src[2], src[3], src[4], src[5], src[6], src[7], src[8], src[9], \
            src[10], src[11], src[12], src[13], src[14], src[15], dst, dst + stride, \
            dst + 2 * stride, dst + 3 * stride, dst + 4 * stride, dst + 5 * stride, \
            dst + 6 * stride, dst + 7 * stride, dst + 8 * stride, dst + 9 * stride, \
            dst + 10 * stride, dst + 11 * stride, dst + 12 * stride, dst + 13 * stride, \
            dst + 14 * stride, dst + 15 * stride, ch); \
    } \
    /* y_{2u + v}[o] = (A^T M A)[u][v] + bias[o], M[k] = m_k[o], o in [o0, o1) */ \
    static inline void refseg_winograd_ama_##SUFFIX( \
            const T *restrict m, Py_ssize_t stride, const T *restrict bias, \
            T *restrict y00, T *restrict y01, T *restrict y10, T *restrict y11, Py_ssize_t cout) \
    { \
        const T *restrict m0 = m, *restrict m1 = m + stride, *restrict m2 = m + 2 * stride; \
        const T *restrict m3 = m + 3 * stride, *restrict m4 = m + 4 * stride; \
        const T *restrict m5 = m + 5 * stride, *restrict m6 = m + 6 * stride; \
        const T *restrict m7 = m + 7 * stride, *restrict m8 = m + 8 * stride; \
        const T *restrict m9 = m + 9 * stride, *restrict m10 = m + 10 * stride; \
        const T *restrict m11 = m + 11 * stride, *restrict m12 = m + 12 * stride; \
        const T *restrict m13 = m + 13 * stride, *restrict m14 = m + 14 * stride; \
        const T *restrict m15 = m + 15 * stride; \
        for (Py_ssize_t o = 0; o < cout; o++) { \
            T t0[2], t1[2], t2[2], t3[2], y0[2], y1[2]; \
            /* A^T M down each column nu: t_nu[u] */ \
            REFSEG_AT(m0[o], m4[o], m8[o], m12[o], t0); \
            REFSEG_AT(m1[o], m5[o], m9[o], m13[o], t1); \
            REFSEG_AT(m2[o], m6[o], m10[o], m14[o], t2); \
            REFSEG_AT(m3[o], m7[o], m11[o], m15[o], t3); \
            /* (A^T M) A along each row u: y_u[v] */ \
            REFSEG_AT(t0[0], t1[0], t2[0], t3[0], y0); \
            REFSEG_AT(t0[1], t1[1], t2[1], t3[1], y1); \
            y00[o] = y0[0] + bias[o]; y01[o] = y0[1] + bias[o]; \
            y10[o] = y1[0] + bias[o]; y11[o] = y1[1] + bias[o]; \
        } \
    } \
    /* dst[2u + v][o] = (A^T M A)[u][v] + bias[o], M[k] = m[k*stride + o], o < cout; a tile \
       with a NULL dst (past the output's edge) goes through a scratch tile on the stack, \
       LANES channels at a time, and only its pixels inside the output are copied */ \
    static void refseg_winograd_output_##SUFFIX(const T *m, Py_ssize_t stride, \
                                                const T *bias, T *const *dst, \
                                                Py_ssize_t cout) \
    { \
        if (dst[0] && dst[1] && dst[2] && dst[3]) { \
            refseg_winograd_ama_##SUFFIX(m, stride, bias, dst[0], dst[1], dst[2], dst[3], \
                                          cout); \
            return; \
        } \
        T part[4][REFSEG_PART_LANES]; \
        for (Py_ssize_t o0 = 0; o0 < cout; o0 += REFSEG_PART_LANES) { \
            Py_ssize_t n = cout - o0 < REFSEG_PART_LANES ? cout - o0 : REFSEG_PART_LANES; \
            refseg_winograd_ama_##SUFFIX(m + o0, stride, bias + o0, part[0], part[1], \
                                          part[2], part[3], n); \
            for (int k = 0; k < 4; k++) \
                if (dst[k]) memcpy(dst[k] + o0, part[k], n * sizeof(T)); \
        } \
    } \
    /* the (G g G^T) of kernel entries e0 <= e < e1: o_k[e], k = 4 xi + nu, from \
       g[a][b] = g_{3a + b}[e] */ \
    static inline void refseg_winograd_ggg_##SUFFIX( \
            const T *restrict g0, const T *restrict g1, const T *restrict g2, \
            const T *restrict g3, const T *restrict g4, const T *restrict g5, \
            const T *restrict g6, const T *restrict g7, const T *restrict g8, \
            T *restrict o0, T *restrict o1, T *restrict o2, T *restrict o3, T *restrict o4, \
            T *restrict o5, T *restrict o6, T *restrict o7, T *restrict o8, T *restrict o9, \
            T *restrict o10, T *restrict o11, T *restrict o12, T *restrict o13, \
            T *restrict o14, T *restrict o15, Py_ssize_t e0, Py_ssize_t e1) \
    { \
        const T half = (T)0.5; \
        for (Py_ssize_t e = e0; e < e1; e++) { \
            T c0[4], c1[4], c2[4], v0[4], v1[4], v2[4], v3[4]; \
            /* G g down each column b: c_b[xi] */ \
            REFSEG_G(g0[e], g3[e], g6[e], c0, half); \
            REFSEG_G(g1[e], g4[e], g7[e], c1, half); \
            REFSEG_G(g2[e], g5[e], g8[e], c2, half); \
            /* (G g) G^T along each row xi: v_xi[nu] */ \
            REFSEG_G(c0[0], c1[0], c2[0], v0, half); \
            REFSEG_G(c0[1], c1[1], c2[1], v1, half); \
            REFSEG_G(c0[2], c1[2], c2[2], v2, half); \
            REFSEG_G(c0[3], c1[3], c2[3], v3, half); \
            o0[e] = v0[0]; o1[e] = v0[1]; o2[e] = v0[2]; o3[e] = v0[3]; \
            o4[e] = v1[0]; o5[e] = v1[1]; o6[e] = v1[2]; o7[e] = v1[3]; \
            o8[e] = v2[0]; o9[e] = v2[1]; o10[e] = v2[2]; o11[e] = v2[3]; \
            o12[e] = v3[0]; o13[e] = v3[1]; o14[e] = v3[2]; o15[e] = v3[3]; \
        } \
    } \
    /* u[k*stride + e] = (G g G^T)[k / 4][k % 4], g[a][b] = w[(3a + b)*size + e], \
       e0 <= e < e1 */ \
    static void refseg_winograd_kernel_##SUFFIX(const T *w, Py_ssize_t size, T *u, \
                                                Py_ssize_t stride, Py_ssize_t e0, \
                                                Py_ssize_t e1) \
    { \
        refseg_winograd_ggg_##SUFFIX( \
            w, w + size, w + 2 * size, w + 3 * size, w + 4 * size, w + 5 * size, \
            w + 6 * size, w + 7 * size, w + 8 * size, u, u + stride, u + 2 * stride, \
            u + 3 * stride, u + 4 * stride, u + 5 * stride, u + 6 * stride, u + 7 * stride, \
            u + 8 * stride, u + 9 * stride, u + 10 * stride, u + 11 * stride, \
            u + 12 * stride, u + 13 * stride, u + 14 * stride, u + 15 * stride, e0, e1); \
    }

    /* A (4 x 2) applied to two values: (d0, d0 + d1, d0 - d1, -d1); G^T (3 x 4) applied to four: \
       (u0 + (u1 + u2) / 2, (u1 - u2) / 2, (u1 + u2) / 2 + u3) */
    #define REFSEG_A(d0, d1, t) do { \
        (t)[0] = (d0); (t)[1] = (d0) + (d1); (t)[2] = (d0) - (d1); (t)[3] = -(d1); \
    } while (0)
    #define REFSEG_GT(u0, u1, u2, u3, t, half) do { \
        (t)[0] = (u0) + ((u1) + (u2)) * (half); (t)[1] = ((u1) - (u2)) * (half); \
        (t)[2] = ((u1) + (u2)) * (half) + (u3); \
    } while (0)

    #define REFSEG_WINOGRAD_ADJOINT(T, SUFFIX) \
    /* o_k[c] = (A dy A^T)[k / 4][k % 4], dy[u][v] = s_{2u + v}[c], c < ch */ \
    static inline void refseg_winograd_ada_##SUFFIX( \
            const T *restrict s0, const T *restrict s1, const T *restrict s2, \
            const T *restrict s3, T *restrict o0, T *restrict o1, T *restrict o2, \
            T *restrict o3, T *restrict o4, T *restrict o5, T *restrict o6, T *restrict o7, \
            T *restrict o8, T *restrict o9, T *restrict o10, T *restrict o11, \
            T *restrict o12, T *restrict o13, T *restrict o14, T *restrict o15, Py_ssize_t ch) \
    { \
        for (Py_ssize_t c = 0; c < ch; c++) { \
            T c0[4], c1[4], v0[4], v1[4], v2[4], v3[4]; \
            /* A dy down each column v: c_v[xi] */ \
            REFSEG_A(s0[c], s2[c], c0); \
            REFSEG_A(s1[c], s3[c], c1); \
            /* (A dy) A^T along each row xi: v_xi[nu] */ \
            REFSEG_A(c0[0], c1[0], v0); \
            REFSEG_A(c0[1], c1[1], v1); \
            REFSEG_A(c0[2], c1[2], v2); \
            REFSEG_A(c0[3], c1[3], v3); \
            o0[c] = v0[0]; o1[c] = v0[1]; o2[c] = v0[2]; o3[c] = v0[3]; \
            o4[c] = v1[0]; o5[c] = v1[1]; o6[c] = v1[2]; o7[c] = v1[3]; \
            o8[c] = v2[0]; o9[c] = v2[1]; o10[c] = v2[2]; o11[c] = v2[3]; \
            o12[c] = v3[0]; o13[c] = v3[1]; o14[c] = v3[2]; o15[c] = v3[3]; \
        } \
    } \
    /* dst[k*stride + c] = (A dy A^T)[k / 4][k % 4], dy[u][v] = src[2u + v][c], c < ch */ \
    static void refseg_winograd_output_adjoint_##SUFFIX(const T *const *src, T *dst, \
                                                        Py_ssize_t stride, Py_ssize_t ch) \
    { \
        refseg_winograd_ada_##SUFFIX( \
            src[0], src[1], src[2], src[3], dst, dst + stride, dst + 2 * stride, \
            dst + 3 * stride, dst + 4 * stride, dst + 5 * stride, dst + 6 * stride, \
            dst + 7 * stride, dst + 8 * stride, dst + 9 * stride, dst + 10 * stride, \
            dst + 11 * stride, dst + 12 * stride, dst + 13 * stride, dst + 14 * stride, \
            dst + 15 * stride, ch); \
    } \
    /* g_{3a + b}[e] = (G^T dU G)[a][b], dU[xi][nu] = u_{4 xi + nu}[e], e0 <= e < e1 */ \
    static inline void refseg_winograd_gug_##SUFFIX( \
            const T *restrict u0, const T *restrict u1, const T *restrict u2, \
            const T *restrict u3, const T *restrict u4, const T *restrict u5, \
            const T *restrict u6, const T *restrict u7, const T *restrict u8, \
            const T *restrict u9, const T *restrict u10, const T *restrict u11, \
            const T *restrict u12, const T *restrict u13, const T *restrict u14, \
            const T *restrict u15, T *restrict g0, T *restrict g1, T *restrict g2, \
            T *restrict g3, T *restrict g4, T *restrict g5, T *restrict g6, T *restrict g7, \
            T *restrict g8, Py_ssize_t e0, Py_ssize_t e1) \
    { \
        const T half = (T)0.5; \
        for (Py_ssize_t e = e0; e < e1; e++) { \
            T c0[3], c1[3], c2[3], c3[3], r0[3], r1[3], r2[3]; \
            /* G^T dU down each column nu: c_nu[a] */ \
            REFSEG_GT(u0[e], u4[e], u8[e], u12[e], c0, half); \
            REFSEG_GT(u1[e], u5[e], u9[e], u13[e], c1, half); \
            REFSEG_GT(u2[e], u6[e], u10[e], u14[e], c2, half); \
            REFSEG_GT(u3[e], u7[e], u11[e], u15[e], c3, half); \
            /* (G^T dU) G along each row a: r_a[b] */ \
            REFSEG_GT(c0[0], c1[0], c2[0], c3[0], r0, half); \
            REFSEG_GT(c0[1], c1[1], c2[1], c3[1], r1, half); \
            REFSEG_GT(c0[2], c1[2], c2[2], c3[2], r2, half); \
            g0[e] = r0[0]; g1[e] = r0[1]; g2[e] = r0[2]; \
            g3[e] = r1[0]; g4[e] = r1[1]; g5[e] = r1[2]; \
            g6[e] = r2[0]; g7[e] = r2[1]; g8[e] = r2[2]; \
        } \
    } \
    /* w[(3a + b)*size + e] = (G^T dU G)[a][b], dU[xi][nu] = u[(4 xi + nu)*stride + e] */ \
    static void refseg_winograd_kernel_adjoint_##SUFFIX(const T *u, Py_ssize_t stride, T *w, \
                                                        Py_ssize_t size) \
    { \
        refseg_winograd_gug_##SUFFIX( \
            u, u + stride, u + 2 * stride, u + 3 * stride, u + 4 * stride, u + 5 * stride, \
            u + 6 * stride, u + 7 * stride, u + 8 * stride, u + 9 * stride, \
            u + 10 * stride, u + 11 * stride, u + 12 * stride, u + 13 * stride, \
            u + 14 * stride, u + 15 * stride, w, w + size, w + 2 * size, w + 3 * size, \
            w + 4 * size, w + 5 * size, w + 6 * size, w + 7 * size, w + 8 * size, 0, size); \
    }

    REFSEG_WINOGRAD(float, f)
    REFSEG_WINOGRAD(double, d)
    REFSEG_WINOGRAD_ADJOINT(float, f)
    REFSEG_WINOGRAD_ADJOINT(double, d)
    """
    void _winograd_input_f "refseg_winograd_input_f"(
        const float **src, float *dst, Py_ssize_t stride, Py_ssize_t ch) noexcept nogil
    void _winograd_input_d "refseg_winograd_input_d"(
        const double **src, double *dst, Py_ssize_t stride, Py_ssize_t ch) noexcept nogil
    void _winograd_output_f "refseg_winograd_output_f"(
        const float *m, Py_ssize_t stride, const float *bias, float **dst,
        Py_ssize_t cout) noexcept nogil
    void _winograd_output_d "refseg_winograd_output_d"(
        const double *m, Py_ssize_t stride, const double *bias, double **dst,
        Py_ssize_t cout) noexcept nogil
    void _winograd_output_adjoint_f "refseg_winograd_output_adjoint_f"(
        const float **src, float *dst, Py_ssize_t stride, Py_ssize_t ch) noexcept nogil
    void _winograd_output_adjoint_d "refseg_winograd_output_adjoint_d"(
        const double **src, double *dst, Py_ssize_t stride, Py_ssize_t ch) noexcept nogil
    void _winograd_kernel_adjoint_f "refseg_winograd_kernel_adjoint_f"(
        const float *u, Py_ssize_t stride, float *w, Py_ssize_t size) noexcept nogil
    void _winograd_kernel_adjoint_d "refseg_winograd_kernel_adjoint_d"(
        const double *u, Py_ssize_t stride, double *w, Py_ssize_t size) noexcept nogil
    void _winograd_kernel_f "refseg_winograd_kernel_f"(
        const float *w, Py_ssize_t size, float *u, Py_ssize_t stride, Py_ssize_t e0,
        Py_ssize_t e1) noexcept nogil
    void _winograd_kernel_d "refseg_winograd_kernel_d"(
        const double *w, Py_ssize_t size, double *u, Py_ssize_t stride, Py_ssize_t e0,
        Py_ssize_t e1) noexcept nogil


cdef _check_planes(const real[:, :, :] a, Py_ssize_t planes=16):
    """The Winograd arrays are 16 (F(2x2, 3x3)) or 36 (F(4x4, 3x3)) planes, each
    C-contiguous, at any (whole-element) distance from each other: the loops index a plane
    from its first element."""
    cdef Py_ssize_t item = sizeof(real)
    if (a.shape[0] != planes or a.strides[2] != item or a.strides[1] != a.shape[2] * item
            or a.strides[0] % item != 0):
        raise ValueError(f"Winograd arrays must be {planes} C-contiguous planes")


cdef struct TilePosition:
    Py_ssize_t n, row, col  # image, tile row, tile column


cdef inline TilePosition _tile_position(Py_ssize_t t, Py_ssize_t th, Py_ssize_t tw) noexcept nogil:
    """Tile t of N images with th x tw tiles each, numbered image by image, row by row."""
    cdef TilePosition at
    at.n = t // (th * tw)
    at.row = (t - at.n * th * tw) // tw
    at.col = t - (at.n * th + at.row) * tw
    return at


cdef inline void _winograd_input_tile(const real *x, Py_ssize_t n, Py_ssize_t h,
                                      Py_ssize_t w, Py_ssize_t ch, Py_ssize_t y0,
                                      Py_ssize_t x0, Py_ssize_t side, const real *zeros,
                                      real *dst, Py_ssize_t stride) noexcept nogil:
    """The transform of the tile whose side x side window (4: F(2x2, 3x3), 6: F(4x4, 3x3))
    starts at row y0, column x0 of image n: the window's pixel pointers (a row of zeros outside
    the input) in a stack array of this call (tiles run in parallel), then the C loop."""
    cdef const real *src[36]
    cdef Py_ssize_t r, s, y, xx
    for r in range(side):
        y = y0 + r
        for s in range(side):
            xx = x0 + s
            if y < 0 or y >= h or xx < 0 or xx >= w:
                src[side * r + s] = zeros
            else:
                src[side * r + s] = x + ((n * h + y) * w + xx) * ch
    if real is float:
        if side == 4:
            _winograd_input_f(src, dst, stride, ch)
        else:
            _winograd4_input_f(src, dst, stride, ch)
    else:
        if side == 4:
            _winograd_input_d(src, dst, stride, ch)
        else:
            _winograd4_input_d(src, dst, stride, ch)


cdef _input_transform(const real[:, :, :, ::1] x, Py_ssize_t pt, Py_ssize_t pl, Py_ssize_t th,
                      Py_ssize_t tw, Py_ssize_t tile_start, real[:, :, :] v, Py_ssize_t tile):
    """The input transform of F(tile x tile, 3x3) for tiles tile_start .. + v.shape[1] - 1:
    tiles in parallel."""
    cdef Py_ssize_t h = x.shape[1], w = x.shape[2], ch = x.shape[3]
    cdef Py_ssize_t tiles = v.shape[1], stride = v.strides[0] // sizeof(real)
    cdef Py_ssize_t side = tile + 2, planes = side * side
    cdef Py_ssize_t p
    cdef TilePosition at
    _check_planes(v, planes)
    cdef real *zeros = <real *> calloc(max(ch, 1), sizeof(real))
    if zeros == NULL:
        raise MemoryError("Winograd input transform: cannot allocate a row of zeros")
    try:
        with nogil:
            for p in prange(tiles, schedule="static",
                            num_threads=_threads(tiles * planes * ch // 8)):
                at = _tile_position(tile_start + p, th, tw)
                _winograd_input_tile(&x[0, 0, 0, 0], at.n, h, w, ch, tile * at.row - pt,
                                     tile * at.col - pl, side, zeros, &v[0, p, 0], stride)
    finally:
        free(zeros)


def winograd_input(const real[:, :, :, ::1] x, Py_ssize_t pt, Py_ssize_t pl, Py_ssize_t th,
                   Py_ssize_t tw, Py_ssize_t tile_start, real[:, :, :] v):
    """v[k, p, c] = (B^T d B)[k // 4, k % 4] for tile t = tile_start + p of a th x tw grid per
    image, d[r, s] = x[n, 2ti - pt + r, 2tj - pl + s, c] (0 outside x). Tiles run in parallel;
    a range of tiles lets callers transform a cache-sized block at a time."""
    _input_transform(x, pt, pl, th, tw, tile_start, v, 2)


cdef inline void _winograd_output_tile(const real *m, Py_ssize_t stride, const real *bias,
                                       real *out, Py_ssize_t n, Py_ssize_t y0, Py_ssize_t x0,
                                       Py_ssize_t ho, Py_ssize_t wo, Py_ssize_t cout,
                                       Py_ssize_t tile) noexcept nogil:
    """The transform of the tile whose tile x tile outputs start at row y0, column x0 of image
    n: its destination pixels (NULL past the edges) in a stack array of this call, then the C
    loop."""
    cdef real *dst[16]
    cdef Py_ssize_t u, v
    for u in range(tile):
        for v in range(tile):
            if y0 + u < ho and x0 + v < wo:
                dst[tile * u + v] = out + ((n * ho + y0 + u) * wo + x0 + v) * cout
            else:
                dst[tile * u + v] = NULL
    if real is float:
        if tile == 2:
            _winograd_output_f(m, stride, bias, dst, cout)
        else:
            _winograd4_output_f(m, stride, bias, dst, cout)
    else:
        if tile == 2:
            _winograd_output_d(m, stride, bias, dst, cout)
        else:
            _winograd4_output_d(m, stride, bias, dst, cout)


cdef _output_transform(const real[:, :, :] m, const real[::1] bias, Py_ssize_t th,
                       Py_ssize_t tw, Py_ssize_t tile_start, real[:, :, :, ::1] out,
                       Py_ssize_t tile):
    """The output transform of F(tile x tile, 3x3) for tiles tile_start .. + m.shape[1] - 1:
    tiles in parallel, each writing its own pixels."""
    cdef Py_ssize_t ho = out.shape[1], wo = out.shape[2], cout = out.shape[3]
    cdef Py_ssize_t tiles = m.shape[1], stride = m.strides[0] // sizeof(real)
    cdef Py_ssize_t planes = (tile + 2) * (tile + 2)
    cdef Py_ssize_t p
    cdef TilePosition at
    _check_planes(m, planes)
    with nogil:
        for p in prange(tiles, schedule="static",
                        num_threads=_threads(tiles * planes * cout // 8)):
            at = _tile_position(tile_start + p, th, tw)
            _winograd_output_tile(&m[0, p, 0], stride, &bias[0], &out[0, 0, 0, 0], at.n,
                                  tile * at.row, tile * at.col, ho, wo, cout, tile)


def winograd_output(const real[:, :, :] m, const real[::1] bias, Py_ssize_t th,
                    Py_ssize_t tw, Py_ssize_t tile_start, real[:, :, :, ::1] out):
    """out[n, 2ti + u, 2tj + v, o] = (A^T M A)[u, v] + bias[o] with M[k] = m[k, p, o], for
    tile t = tile_start + p; the outputs of a partial tile past the bottom or right edge of
    out are not written. Tiles run in parallel and write disjoint pixels."""
    _output_transform(m, bias, th, tw, tile_start, out, 2)


def winograd_kernel(const real[:, :, :, ::1] w, real[:, :, :] u):
    """u[k, c, o] = (G g G^T)[k // 4, k % 4] for the 3x3 kernel g[a, b] = w[a, b, c, o]: G
    down each column b of g, then along each row of G g.

    On one thread: the 16 matrix products come right after it, and after a parallel region
    libgomp's workers keep spinning for a while on the cores that OpenBLAS's threads then
    need. Measured (2 cores, 256 -> 256 channels at 14x14, batch 4, forward): Winograd took
    1.3-1.5 times the im2col route's time with this transform on two threads and 0.8 times
    with it on one; the transform itself takes 1.5 ms instead of 0.9 ms at 576 -> 576."""
    cdef Py_ssize_t size = w.shape[2] * w.shape[3], stride = u.strides[0] // sizeof(real)
    _check_planes(u)
    with nogil:
        if real is float:
            _winograd_kernel_f(&w[0, 0, 0, 0], size, &u[0, 0, 0], stride, 0, size)
        else:
            _winograd_kernel_d(&w[0, 0, 0, 0], size, &u[0, 0, 0], stride, 0, size)


# The adjoints, for the kernel gradient: y = A^T M A gives dM = A dy A^T per tile (the
# pixels of a partial tile past the output's edge have no gradient: 0), U = G g G^T gives
# dg = G^T dU G, and dU[k] = V[k]^T dM[k] summed over tiles (matrix products, in conv.py).
#
#   A = [1  0]     G^T = [1  1/2  1/2  0]
#       [1  1]           [0  1/2 -1/2  0]
#       [1 -1]           [0  1/2  1/2  1]
#       [0 -1]


cdef inline void _winograd_output_adjoint_tile(const real *g, Py_ssize_t n, Py_ssize_t ho,
                                               Py_ssize_t wo, Py_ssize_t ch, Py_ssize_t y0,
                                               Py_ssize_t x0, const real *zeros, real *dst,
                                               Py_ssize_t stride) noexcept nogil:
    """The adjoint output transform of the tile whose outputs start at row y0, column x0 of
    image n: its four gradient pixels (a row of zeros past the edges), then the C loop."""
    cdef const real *src[4]
    cdef Py_ssize_t u, v
    for u in range(2):
        for v in range(2):
            if y0 + u < ho and x0 + v < wo:
                src[2 * u + v] = g + ((n * ho + y0 + u) * wo + x0 + v) * ch
            else:
                src[2 * u + v] = zeros
    if real is float:
        _winograd_output_adjoint_f(src, dst, stride, ch)
    else:
        _winograd_output_adjoint_d(src, dst, stride, ch)


def winograd_output_adjoint(const real[:, :, :, ::1] g, Py_ssize_t th, Py_ssize_t tw,
                            Py_ssize_t tile_start, real[:, :, :] m):
    """m[k, p, o] = (A dy A^T)[k // 4, k % 4] for tile t = tile_start + p, dy[u, v] =
    g[n, 2ti + u, 2tj + v, o] (0 past the bottom or right edge of g): the gradient of
    winograd_output's M given the gradient g of its output. Tiles run in parallel."""
    cdef Py_ssize_t ho = g.shape[1], wo = g.shape[2], ch = g.shape[3]
    cdef Py_ssize_t tiles = m.shape[1], stride = m.strides[0] // sizeof(real)
    cdef Py_ssize_t p
    cdef TilePosition at
    _check_planes(m)
    cdef real *zeros = <real *> calloc(max(ch, 1), sizeof(real))
    if zeros == NULL:
        raise MemoryError("winograd_output_adjoint: cannot allocate a row of zeros")
    try:
        with nogil:
            for p in prange(tiles, schedule="static",
                            num_threads=_threads(tiles * 16 * ch // 8)):
                at = _tile_position(tile_start + p, th, tw)
                _winograd_output_adjoint_tile(&g[0, 0, 0, 0], at.n, ho, wo, ch, 2 * at.row,
                                              2 * at.col, zeros, &m[0, p, 0], stride)
    finally:
        free(zeros)


def winograd_kernel_adjoint(const real[:, :, :] u, real[:, :, :, ::1] w):
    """w[a, b, c, o] = (G^T dU G)[a, b] with dU[xi, nu] = u[4 xi + nu, c, o]: the gradient of
    winograd_kernel's input given the gradient u of its output. On one thread, as
    winograd_kernel."""
    cdef Py_ssize_t size = w.shape[2] * w.shape[3], stride = u.strides[0] // sizeof(real)
    _check_planes(u)
    with nogil:
        if real is float:
            _winograd_kernel_adjoint_f(&u[0, 0, 0], stride, &w[0, 0, 0, 0], size)
        else:
            _winograd_kernel_adjoint_d(&u[0, 0, 0], stride, &w[0, 0, 0, 0], size)


# Winograd F(4x4, 3x3): 4x4 output tiles from 6x6 input windows, 36 products per tile instead
# of F(2x2, 3x3)'s 16 per 2x2 tile (2.25 instead of 4 multiplies per output), for the forward
# and the input gradient of the larger layers; kernel gradients stay on F(2x2, 3x3). The
# interpolation points are 0, 1, -1, 2, -2 and infinity:
#
#   B^T = [4  0 -5  0  1  0]   G = [ 1/4     0     0]   A^T = [1  1  1  1  1  0]
#         [0 -4 -4  1  1  0]       [-1/6  -1/6  -1/6]         [0  1 -1  2 -2  0]
#         [0  4 -4 -1  1  0]       [-1/6   1/6  -1/6]         [0  1  1  4  4  0]
#         [0 -2 -1  2  1  0]       [1/24  1/12   1/6]         [0  1 -1  8 -8  1]
#         [0  2 -1 -2  1  0]       [1/24 -1/12   1/6]
#         [0  4  0 -5  0  1]       [   0     0     1]
#
# Each transform works on a block of channels at a time: the first pass reads the tile's rows
# (or planes) and writes into arrays on the stack, the second reads those and writes the
# result, both through helpers whose restrict parameters let the compiler vectorise over the
# channels without checking for overlap (without them the second pass ran scalar, 1.6 times
# F(2x2, 3x3)'s time for the input transform).
cdef extern from *:
    """
    /* channels of one tile transformed at a time */
    #define REFSEG_W4_LANES 32
    /* B^T (6 values), A^T (6 -> 4) and G (3 -> 6): the order of operations is the twins' */
    #define REFSEG_BT4(d0, d1, d2, d3, d4, d5, t, four, five, two) do { \
        (t)[0] = ((d0) * (four) - (d2) * (five)) + (d4); \
        (t)[1] = ((d3) + (d4)) - ((d1) + (d2)) * (four); \
        (t)[2] = ((d4) - (d3)) + ((d1) - (d2)) * (four); \
        (t)[3] = ((d4) - (d2)) + ((d3) - (d1)) * (two); \
        (t)[4] = ((d4) - (d2)) - ((d3) - (d1)) * (two); \
        (t)[5] = ((d1) * (four) - (d3) * (five)) + (d5); \
    } while (0)
    #define REFSEG_AT4(m0, m1, m2, m3, m4, m5, y, two, four, eight) do { \
        (y)[0] = ((m0) + ((m1) + (m2))) + ((m3) + (m4)); \
        (y)[1] = ((m1) - (m2)) + ((m3) - (m4)) * (two); \
        (y)[2] = ((m1) + (m2)) + ((m3) + (m4)) * (four); \
        (y)[3] = (((m1) - (m2)) + ((m3) - (m4)) * (eight)) + (m5); \
    } while (0)
    #define REFSEG_G4(g0, g1, g2, t, quarter, sixth, twelfth, twentyfourth) do { \
        (t)[0] = (g0) * (quarter); \
        (t)[1] = (((g0) + (g1)) + (g2)) * -(sixth); \
        (t)[2] = (((g0) - (g1)) + (g2)) * -(sixth); \
        (t)[3] = ((g0) * (twentyfourth) + (g1) * (twelfth)) + (g2) * (sixth); \
        (t)[4] = ((g0) * (twentyfourth) - (g1) * (twelfth)) + (g2) * (sixth); \
        (t)[5] = (g2); \
    } while (0)

    #define REFSEG_WINOGRAD4(T, SUFFIX) \
    /* the transforms applied to n-vectors: out_i[c] = sum_j M[i][j] in_j[c]; restrict \
       parameters let the compiler vectorise over c without checking for overlap */ \
    static inline void refseg_bt4_##SUFFIX( \
            const T *restrict d0, const T *restrict d1, const T *restrict d2, \
            const T *restrict d3, const T *restrict d4, const T *restrict d5, \
            T *restrict o0, T *restrict o1, T *restrict o2, T *restrict o3, \
            T *restrict o4, T *restrict o5, Py_ssize_t n) \
    { \
        const T four = (T)4, five = (T)5, two = (T)2; \
        for (Py_ssize_t c = 0; c < n; c++) { \
            T t[6]; \
            REFSEG_BT4(d0[c], d1[c], d2[c], d3[c], d4[c], d5[c], t, four, five, two); \
            o0[c] = t[0]; o1[c] = t[1]; o2[c] = t[2]; o3[c] = t[3]; o4[c] = t[4]; o5[c] = t[5]; \
        } \
    } \
    static inline void refseg_at4_##SUFFIX( \
            const T *restrict m0, const T *restrict m1, const T *restrict m2, \
            const T *restrict m3, const T *restrict m4, const T *restrict m5, \
            const T *restrict bias, T *restrict y0, T *restrict y1, T *restrict y2, \
            T *restrict y3, Py_ssize_t n) \
    { \
        const T two = (T)2, four = (T)4, eight = (T)8; \
        if (bias) { \
            for (Py_ssize_t c = 0; c < n; c++) { \
                T t[4]; \
                REFSEG_AT4(m0[c], m1[c], m2[c], m3[c], m4[c], m5[c], t, two, four, eight); \
                y0[c] = t[0] + bias[c]; y1[c] = t[1] + bias[c]; \
                y2[c] = t[2] + bias[c]; y3[c] = t[3] + bias[c]; \
            } \
        } else { \
            for (Py_ssize_t c = 0; c < n; c++) { \
                T t[4]; \
                REFSEG_AT4(m0[c], m1[c], m2[c], m3[c], m4[c], m5[c], t, two, four, eight); \
                y0[c] = t[0]; y1[c] = t[1]; y2[c] = t[2]; y3[c] = t[3]; \
            } \
        } \
    } \
    static inline void refseg_g4_##SUFFIX( \
            const T *restrict g0, const T *restrict g1, const T *restrict g2, \
            T *restrict o0, T *restrict o1, T *restrict o2, T *restrict o3, \
            T *restrict o4, T *restrict o5, Py_ssize_t n) \
    { \
        const T quarter = (T)0.25, sixth = (T)(1.0 / 6), twelfth = (T)(1.0 / 12); \
        const T twentyfourth = (T)(1.0 / 24); \
        for (Py_ssize_t e = 0; e < n; e++) { \
            T t[6]; \
            REFSEG_G4(g0[e], g1[e], g2[e], t, quarter, sixth, twelfth, twentyfourth); \
            o0[e] = t[0]; o1[e] = t[1]; o2[e] = t[2]; o3[e] = t[3]; o4[e] = t[4]; o5[e] = t[5]; \
        } \
    } \
    /* dst[k*stride + c] = (B^T d B)[k / 6][k % 6], d[r][s] = src[6r + s][c], c < ch */ \
    static void refseg_winograd4_input_##SUFFIX(const T *const *src, T *dst, \
                                                Py_ssize_t stride, Py_ssize_t ch) \
    { \
        T t[36][REFSEG_W4_LANES]; \
        for (Py_ssize_t c0 = 0; c0 < ch; c0 += REFSEG_W4_LANES) { \
            Py_ssize_t n = ch - c0 < REFSEG_W4_LANES ? ch - c0 : REFSEG_W4_LANES; \
            /* B^T d down each column s: t[6 xi + s] */ \
            for (int s = 0; s < 6; s++) \
                refseg_bt4_##SUFFIX(src[s] + c0, src[6 + s] + c0, src[12 + s] + c0, \
                                    src[18 + s] + c0, src[24 + s] + c0, src[30 + s] + c0, \
                                    t[s], t[6 + s], t[12 + s], t[18 + s], t[24 + s], \
                                    t[30 + s], n); \
            /* (B^T d) B along each row xi */ \
            for (int xi = 0; xi < 6; xi++) { \
                T *o = dst + 6 * xi * stride + c0; \
                refseg_bt4_##SUFFIX(t[6 * xi], t[6 * xi + 1], t[6 * xi + 2], t[6 * xi + 3], \
                                    t[6 * xi + 4], t[6 * xi + 5], o, o + stride, \
                                    o + 2 * stride, o + 3 * stride, o + 4 * stride, \
                                    o + 5 * stride, n); \
            } \
        } \
    } \
    /* dst[4u + v][o] = (A^T M A)[u][v] + bias[o], M[k] = m[k*stride + o], o < cout; \
       pixels with a NULL dst (past the output's edge) are not written */ \
    static void refseg_winograd4_output_##SUFFIX(const T *m, Py_ssize_t stride, \
                                                 const T *bias, T *const *dst, \
                                                 Py_ssize_t cout) \
    { \
        T t[24][REFSEG_W4_LANES], y[4][REFSEG_W4_LANES]; \
        for (Py_ssize_t o0 = 0; o0 < cout; o0 += REFSEG_W4_LANES) { \
            Py_ssize_t n = cout - o0 < REFSEG_W4_LANES ? cout - o0 : REFSEG_W4_LANES; \
            /* A^T M down each column nu: t[6u + nu] */ \
            for (int nu = 0; nu < 6; nu++) { \
                const T *c = m + nu * stride + o0; \
                refseg_at4_##SUFFIX(c, c + 6 * stride, c + 12 * stride, c + 18 * stride, \
                                    c + 24 * stride, c + 30 * stride, NULL, t[nu], \
                                    t[6 + nu], t[12 + nu], t[18 + nu], n); \
            } \
            /* (A^T M) A along each row u, plus the bias */ \
            for (int u = 0; u < 4; u++) { \
                refseg_at4_##SUFFIX(t[6 * u], t[6 * u + 1], t[6 * u + 2], t[6 * u + 3], \
                                    t[6 * u + 4], t[6 * u + 5], bias + o0, y[0], y[1], \
                                    y[2], y[3], n); \
                for (int v = 0; v < 4; v++) \
                    if (dst[4 * u + v]) memcpy(dst[4 * u + v] + o0, y[v], n * sizeof(T)); \
            } \
        } \
    } \
    /* u[k*stride + e] = (G g G^T)[k / 6][k % 6], g[a][b] = w[(3a + b)*size + e], e < size */ \
    static void refseg_winograd4_kernel_##SUFFIX(const T *w, Py_ssize_t size, T *u, \
                                                 Py_ssize_t stride) \
    { \
        T t[18][REFSEG_W4_LANES]; \
        for (Py_ssize_t e0 = 0; e0 < size; e0 += REFSEG_W4_LANES) { \
            Py_ssize_t n = size - e0 < REFSEG_W4_LANES ? size - e0 : REFSEG_W4_LANES; \
            /* G g down each column b: t[3 xi + b] */ \
            for (int b = 0; b < 3; b++) \
                refseg_g4_##SUFFIX(w + b * size + e0, w + (3 + b) * size + e0, \
                                   w + (6 + b) * size + e0, t[b], t[3 + b], t[6 + b], \
                                   t[9 + b], t[12 + b], t[15 + b], n); \
            /* (G g) G^T along each row xi */ \
            for (int xi = 0; xi < 6; xi++) { \
                T *o = u + 6 * xi * stride + e0; \
                refseg_g4_##SUFFIX(t[3 * xi], t[3 * xi + 1], t[3 * xi + 2], o, o + stride, \
                                   o + 2 * stride, o + 3 * stride, o + 4 * stride, \
                                   o + 5 * stride, n); \
            } \
        } \
    }

    REFSEG_WINOGRAD4(float, f)
    REFSEG_WINOGRAD4(double, d)
    """
    void _winograd4_input_f "refseg_winograd4_input_f"(
        const float **src, float *dst, Py_ssize_t stride, Py_ssize_t ch) noexcept nogil
    void _winograd4_input_d "refseg_winograd4_input_d"(
        const double **src, double *dst, Py_ssize_t stride, Py_ssize_t ch) noexcept nogil
    void _winograd4_output_f "refseg_winograd4_output_f"(
        const float *m, Py_ssize_t stride, const float *bias, float **dst,
        Py_ssize_t cout) noexcept nogil
    void _winograd4_output_d "refseg_winograd4_output_d"(
        const double *m, Py_ssize_t stride, const double *bias, double **dst,
        Py_ssize_t cout) noexcept nogil
    void _winograd4_kernel_f "refseg_winograd4_kernel_f"(
        const float *w, Py_ssize_t size, float *u, Py_ssize_t stride) noexcept nogil
    void _winograd4_kernel_d "refseg_winograd4_kernel_d"(
        const double *w, Py_ssize_t size, double *u, Py_ssize_t stride) noexcept nogil


def winograd4_input(const real[:, :, :, ::1] x, Py_ssize_t pt, Py_ssize_t pl, Py_ssize_t th,
                    Py_ssize_t tw, Py_ssize_t tile_start, real[:, :, :] v):
    """v[k, p, c] = (B^T d B)[k // 6, k % 6] for tile t = tile_start + p of a th x tw grid per
    image, d[r, s] = x[n, 4ti - pt + r, 4tj - pl + s, c] (0 outside x): F(4x4, 3x3)'s input
    transform, as winograd_input is F(2x2, 3x3)'s."""
    _input_transform(x, pt, pl, th, tw, tile_start, v, 4)


def winograd4_output(const real[:, :, :] m, const real[::1] bias, Py_ssize_t th,
                     Py_ssize_t tw, Py_ssize_t tile_start, real[:, :, :, ::1] out):
    """out[n, 4ti + u, 4tj + v, o] = (A^T M A)[u, v] + bias[o] with M[k] = m[k, p, o], for
    tile t = tile_start + p; outputs past the bottom or right edge of out are not written.
    F(4x4, 3x3)'s output transform, as winograd_output is F(2x2, 3x3)'s."""
    _output_transform(m, bias, th, tw, tile_start, out, 4)


def winograd4_kernel(const real[:, :, :, ::1] w, real[:, :, :] u):
    """u[k, c, o] = (G g G^T)[k // 6, k % 6] for the 3x3 kernel g[a, b] = w[a, b, c, o]:
    F(4x4, 3x3)'s kernel transform, on one thread as winograd_kernel."""
    cdef Py_ssize_t size = w.shape[2] * w.shape[3], stride = u.strides[0] // sizeof(real)
    _check_planes(u, 36)
    with nogil:
        if real is float:
            _winograd4_kernel_f(&w[0, 0, 0, 0], size, &u[0, 0, 0], stride)
        else:
            _winograd4_kernel_d(&w[0, 0, 0, 0], size, &u[0, 0, 0], stride)
