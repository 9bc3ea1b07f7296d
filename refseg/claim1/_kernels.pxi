# Claim-1 kernels (feature extraction on float64 gray images), included by refseg/_kernels.pyx,
# which holds the cimports and _threads they use. NumPy twins: claim1/_reference.py.
import numpy as np


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
        for r in prange(rows, schedule="guided", num_threads=_threads(rows * cols)):
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
        for r in prange(rows, schedule="guided", num_threads=_threads(rows * cols)):
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
        for r in prange(rows, schedule="guided", num_threads=_threads(rows * cols)):
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
        for r in prange(rows, schedule="guided", num_threads=_threads(rows * cols)):
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
        for r in prange(rows, schedule="guided", num_threads=_threads(rows * cols)):
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
        for r in prange(rows, schedule="guided", num_threads=_threads(rows * cols)):
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
        for r in prange(rows, schedule="guided", num_threads=_threads(rows * cols)):
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
        for r in prange(rows, schedule="guided", num_threads=_threads(rows * cols)):
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
