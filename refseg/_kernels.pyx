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
from cython.parallel cimport prange
from libc.math cimport sqrt
from libc.stdlib cimport malloc, free

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
        for r in prange(rows, schedule="static"):
            for c in range(cols):
                out[r, c] = ((wr * rgb[r, c, 0] + wg * rgb[r, c, 1]) + wb * rgb[r, c, 2]) / scale


cdef inline double _correlate_at(const double[:, ::1] src, const double[:, ::1] k,
                                  Py_ssize_t rm, Py_ssize_t r0, Py_ssize_t rp,
                                  Py_ssize_t cm, Py_ssize_t c0, Py_ssize_t cp) noexcept nogil:
    """One 3x3 correlation sum, terms added row-major (the twin adds them in the same order)."""
    cdef double acc = 0.0
    acc = acc + k[0, 0] * src[rm, cm]
    acc = acc + k[0, 1] * src[rm, c0]
    acc = acc + k[0, 2] * src[rm, cp]
    acc = acc + k[1, 0] * src[r0, cm]
    acc = acc + k[1, 1] * src[r0, c0]
    acc = acc + k[1, 2] * src[r0, cp]
    acc = acc + k[2, 0] * src[rp, cm]
    acc = acc + k[2, 1] * src[rp, c0]
    acc = acc + k[2, 2] * src[rp, cp]
    return acc


def correlate3x3(const double[:, ::1] src, const double[:, ::1] kernel, double[:, ::1] out):
    """3x3 correlation with reflect-101 border."""
    cdef Py_ssize_t rows = src.shape[0], cols = src.shape[1], r, c, rm, rp
    with nogil:
        for r in prange(rows, schedule="static"):
            rm = _reflect101(r - 1, rows)
            rp = _reflect101(r + 1, rows)
            for c in range(cols):
                out[r, c] = _correlate_at(src, kernel, rm, r, rp, _reflect101(c - 1, cols), c,
                                          _reflect101(c + 1, cols))


def gradient3x3(const double[:, ::1] src, const double[:, ::1] kx, const double[:, ::1] ky,
                double[:, ::1] gx, double[:, ::1] gy, double[:, ::1] magnitude):
    """gx, gy: 3x3 correlations (reflect-101); magnitude = sqrt(gx*gx + gy*gy)."""
    cdef Py_ssize_t rows = src.shape[0], cols = src.shape[1], r, c, rm, rp, cm, cp
    cdef double ax, ay
    with nogil:
        for r in prange(rows, schedule="static"):
            rm = _reflect101(r - 1, rows)
            rp = _reflect101(r + 1, rows)
            for c in range(cols):
                cm = _reflect101(c - 1, cols)
                cp = _reflect101(c + 1, cols)
                ax = _correlate_at(src, kx, rm, r, rp, cm, c, cp)
                ay = _correlate_at(src, ky, rm, r, rp, cm, c, cp)
                gx[r, c] = ax
                gy[r, c] = ay
                magnitude[r, c] = sqrt(ax * ax + ay * ay)


def threshold_above(const double[:, ::1] src, double threshold, unsigned char[:, ::1] out):
    """out = 1 where src > threshold, else 0."""
    cdef Py_ssize_t rows = src.shape[0], cols = src.shape[1], r, c
    with nogil:
        for r in prange(rows, schedule="static"):
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
        for r in prange(rows, schedule="static"):
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
        for r in prange(rows, schedule="static"):
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
        for r in prange(rows, schedule="static"):
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
        for r in prange(rows, schedule="static"):
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
