# Claim-1 kernels (feature extraction on float64 gray images), included by refseg/_kernels.pyx,
# which holds the cimports and _threads they use. NumPy twins: claim1/_twins.py.
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
        for r in prange(rows, schedule="dynamic", chunksize=_chunk(cols),
                        num_threads=_threads(rows * cols)):
            for c in range(cols):
                out[r, c] = ((wr * rgb[r, c, 0] + wg * rgb[r, c, 1]) + wb * rgb[r, c, 2]) / scale


cdef inline double _sum9(const double *a, const double *b, const double *d,
                         Py_ssize_t cm, Py_ssize_t c0, Py_ssize_t cp,
                         double k0, double k1, double k2, double k3, double k4, double k5,
                         double k6, double k7, double k8) noexcept nogil:
    """One 3x3 correlation sum over rows a (above), b (centre), d (below) and columns
    cm, c0, cp. The nine products are grouped as the square's symmetries pair them: the
    corners along the two diagonals, the side neighbours across the centre, corners plus sides,
    then the centre. Each pair maps onto a pair under every flip and transpose, and addition is
    commutative, so a kernel with those symmetries gives the flipped image's result exactly
    flipped (the twin groups the same way)."""
    cdef double corners = (k0 * a[cm] + k8 * d[cp]) + (k2 * a[cp] + k6 * d[cm])
    cdef double sides = (k1 * a[c0] + k7 * d[c0]) + (k3 * b[cm] + k5 * b[cp])
    return (corners + sides) + k4 * b[c0]


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
    """3x3 correlation with reflect-101 border, the products summed as _sum9 groups them."""
    cdef Py_ssize_t rows = src.shape[0], cols = src.shape[1], r
    cdef double k[9]
    cdef int i
    for i in range(9):
        k[i] = kernel[i // 3, i % 3]
    with nogil:
        for r in prange(rows, schedule="dynamic", chunksize=_chunk(cols),
                        num_threads=_threads(rows * cols)):
            _correlate_row(&src[_reflect101(r - 1, rows), 0], &src[r, 0],
                           &src[_reflect101(r + 1, rows), 0], cols, k, &out[r, 0])


cdef inline double _difference3(double s0, double s1, double s2,
                                double first_minus, double first_plus,
                                double middle_minus, double middle_plus,
                                double last_minus, double last_plus) noexcept nogil:
    """s0 (first_plus - first_minus) + s2 (last_plus - last_minus), then + s1 (middle_plus -
    middle_minus): the differences across the centre first, so that equal values cancel
    exactly, then the smoothing weights, the outer pair before the middle."""
    return ((s0 * (first_plus - first_minus) + s2 * (last_plus - last_minus))
            + s1 * (middle_plus - middle_minus))


cdef inline void _gradient_at(const double *a, const double *b, const double *d,
                              Py_ssize_t cm, Py_ssize_t c, Py_ssize_t cp, double s0, double s1,
                              double s2, double *gx, double *gy, double *magnitude) noexcept nogil:
    """gx, gy and magnitude at column c of rows a (above), b (centre), d (below). gx takes the
    rows as first, middle and last, gy the columns cm, c, cp: the same expression, so a
    transposed image gives gx and gy transposed and swapped, exactly."""
    cdef double x = _difference3(s0, s1, s2, a[cm], a[cp], b[cm], b[cp], d[cm], d[cp])
    cdef double y = _difference3(s0, s1, s2, a[cm], d[cm], a[c], d[c], a[cp], d[cp])
    gx[c] = x
    gy[c] = y
    magnitude[c] = sqrt(x * x + y * y)


cdef inline void _gradient_row(const double[:, ::1] src, Py_ssize_t r, const double *smooth,
                               double *gx, double *gy, double *magnitude) noexcept nogil:
    """Row r of gx, gy (the kernels outer(smooth, [-1, 0, 1]) and its transpose, reflect-101)
    and sqrt(gx*gx + gy*gy)."""
    cdef Py_ssize_t rows = src.shape[0], cols = src.shape[1], c
    cdef const double *a = &src[_reflect101(r - 1, rows), 0]
    cdef const double *b = &src[r, 0]
    cdef const double *d = &src[_reflect101(r + 1, rows), 0]
    cdef double s0 = smooth[0], s1 = smooth[1], s2 = smooth[2]
    _gradient_at(a, b, d, _reflect101(-1, cols), 0, _reflect101(1, cols), s0, s1, s2,
                 gx, gy, magnitude)
    for c in range(1, cols - 1):  # interior: no reflection
        _gradient_at(a, b, d, c - 1, c, c + 1, s0, s1, s2, gx, gy, magnitude)
    if cols > 1:
        _gradient_at(a, b, d, cols - 2, cols - 1, _reflect101(cols, cols), s0, s1, s2,
                     gx, gy, magnitude)


def gradient3x3(const double[:, ::1] src, const double[::1] smooth, double[:, ::1] gx,
                double[:, ::1] gy, double[:, ::1] magnitude):
    """gx, gy: 3x3 correlations (reflect-101) with outer(smooth, [-1, 0, 1]) and its
    transpose, each a difference across the centre weighted by smooth; magnitude =
    sqrt(gx*gx + gy*gy)."""
    cdef Py_ssize_t rows = src.shape[0], cols = src.shape[1], r
    cdef double s[3]
    cdef int i
    for i in range(3):
        s[i] = smooth[i]
    with nogil:
        for r in prange(rows, schedule="dynamic", chunksize=_chunk(cols),
                        num_threads=_threads(rows * cols)):
            _gradient_row(src, r, s, &gx[r, 0], &gy[r, 0], &magnitude[r, 0])


def gradient_magnitude3x3(const double[:, ::1] src, const double[::1] smooth,
                          double[:, ::1] magnitude):
    """magnitude of gradient3x3, without keeping gx and gy (each thread writes them to rows
    of its own)."""
    cdef Py_ssize_t rows = src.shape[0], cols = src.shape[1], r
    cdef int threads = _threads(rows * cols)
    cdef double s[3]
    cdef int i
    cdef double[:, :, ::1] scratch = np.empty((threads, 2, cols))
    for i in range(3):
        s[i] = smooth[i]
    with nogil:
        for r in prange(rows, schedule="dynamic", chunksize=_chunk(cols), num_threads=threads):
            _gradient_row(src, r, s, &scratch[openmp.omp_get_thread_num(), 0, 0],
                          &scratch[openmp.omp_get_thread_num(), 1, 0], &magnitude[r, 0])


def threshold_above(const double[:, ::1] src, double threshold, unsigned char[:, ::1] out):
    """out = 1 where src > threshold, else 0."""
    cdef Py_ssize_t rows = src.shape[0], cols = src.shape[1], r, c
    with nogil:
        for r in prange(rows, schedule="dynamic", chunksize=_chunk(cols),
                        num_threads=_threads(rows * cols)):
            for c in range(cols):
                out[r, c] = 1 if src[r, c] > threshold else 0


cdef inline double _mag_at(const double *m, Py_ssize_t r, Py_ssize_t c,
                           Py_ssize_t rows, Py_ssize_t cols) noexcept nogil:
    if r < 0 or c < 0 or r >= rows or c >= cols:
        return 0.0
    return m[r * cols + c]


cdef inline void _suppress_row(const double *gx, const double *gy, const double *magnitude,
                               Py_ssize_t r, Py_ssize_t rows, Py_ssize_t cols, double low,
                               double high, double tan_lo, double tan_hi,
                               unsigned char *out) noexcept nogil:
    """Row r of non_maximum_suppression (gx, gy, out point at row r, magnitude at row 0).
    Each label is formed in a local and stored once: a store through a byte pointer may
    alias anything, and would make the compiler reload every pointer after it."""
    cdef const double *centre = magnitude + r * cols
    cdef Py_ssize_t c, dr, dc
    cdef double m, ax, ay, before, after
    cdef bint axis
    cdef unsigned char label
    for c in range(cols):
        m = centre[c]
        label = 0
        if m > low:
            ax = fabs(gx[c])
            ay = fabs(gy[c])
            # (dr, dc) points to the second neighbour, the first is opposite it
            axis = True
            if ay < tan_lo * ax:
                dr = 0
                dc = 1
            elif ay > tan_hi * ax:
                dr = 1
                dc = 0
            else:
                axis = False
                dr = 1
                dc = 1 if (gx[c] < 0) == (gy[c] < 0) else -1
            if 0 < r < rows - 1 and 0 < c < cols - 1:
                before = centre[c - dr * cols - dc]
                after = centre[c + dr * cols + dc]
            else:
                before = _mag_at(magnitude, r - dr, c - dc, rows, cols)
                after = _mag_at(magnitude, r + dr, c + dc, rows, cols)
            if m > before and (m > after or (axis and m == after)):
                label = 2 if m > high else 1
        out[c] = label


def non_maximum_suppression(const double[:, ::1] gx, const double[:, ::1] gy,
                            const double[:, ::1] magnitude, double low, double high,
                            double tan_lo, double tan_hi, unsigned char[:, ::1] out):
    """Canny candidates: 0 suppressed, 1 weak (> low), 2 strong (> high).

    A pixel survives when its magnitude exceeds both neighbours across the quantised gradient
    direction (``>`` on the first neighbour, ``>=`` on the second for the axis directions,
    ``>`` on both diagonals); magnitudes outside the image count as 0. Spec ``R-canny``.
    """
    cdef Py_ssize_t rows = gx.shape[0], cols = gx.shape[1], r
    with nogil:
        for r in prange(rows, schedule="dynamic", chunksize=_chunk(cols),
                        num_threads=_threads(rows * cols)):
            _suppress_row(&gx[r, 0], &gy[r, 0], &magnitude[0, 0], r, rows, cols, low, high,
                          tan_lo, tan_hi, &out[r, 0])


def non_maximum_suppression3x3(const double[:, ::1] src, const double[::1] smooth,
                               const double[:, ::1] magnitude, double low, double high,
                               double tan_lo, double tan_hi, unsigned char[:, ::1] out):
    """non_maximum_suppression with gx and gy of gradient3x3(src, smooth) formed row by row
    in each thread's own scratch rows instead of read from whole images: the same arithmetic
    (no floating-point contraction), so the same candidates, without 16 bytes per pixel."""
    cdef Py_ssize_t rows = src.shape[0], cols = src.shape[1], r
    cdef int threads = _threads(rows * cols), t
    cdef double s[3]
    cdef int i
    cdef double[:, :, ::1] scratch = np.empty((threads, 3, cols))
    for i in range(3):
        s[i] = smooth[i]
    with nogil:
        for r in prange(rows, schedule="dynamic", chunksize=_chunk(cols), num_threads=threads):
            t = openmp.omp_get_thread_num()
            _gradient_row(src, r, s, &scratch[t, 0, 0], &scratch[t, 1, 0], &scratch[t, 2, 0])
            _suppress_row(&scratch[t, 0, 0], &scratch[t, 1, 0], &magnitude[0, 0], r, rows,
                          cols, low, high, tan_lo, tan_hi, &out[r, 0])


# Low half of a packed hysteresis stack entry: the column.
cdef Py_ssize_t _COLUMN_MASK = 0xFFFFFFFF


cdef inline Py_ssize_t _grow(const unsigned char *candidates, unsigned char *out,
                             Py_ssize_t *stack, Py_ssize_t top, Py_ssize_t r, Py_ssize_t c,
                             Py_ssize_t cols) noexcept nogil:
    """Marks candidate (r, c) and pushes it, packed as r << 32 | c, if not reached yet."""
    cdef Py_ssize_t p = r * cols + c
    if candidates[p] != 0 and out[p] == 0:
        out[p] = 1
        stack[top] = (r << 32) | c
        top = top + 1
    return top


def hysteresis(const unsigned char[:, ::1] candidates, unsigned char[:, ::1] out):
    """out = 1 on every candidate 8-connected (through candidates) to a strong one.
    Rows and columns must each be below 2**31 (they are packed in one stack entry)."""
    cdef Py_ssize_t rows = candidates.shape[0], cols = candidates.shape[1]
    cdef Py_ssize_t n = rows * cols, top = 0, p, r, c, dr, dc
    cdef const unsigned char *cand = &candidates[0, 0]
    cdef unsigned char *reached = &out[0, 0]
    cdef Py_ssize_t *stack = <Py_ssize_t *> malloc(max(n, 1) * sizeof(Py_ssize_t))
    if stack == NULL:
        raise MemoryError("hysteresis: cannot allocate the pixel stack")
    try:
        with nogil:
            memset(reached, 0, n)
            for p in range(n):
                if cand[p] != 2 or reached[p] != 0:
                    continue
                reached[p] = 1
                stack[0] = ((p // cols) << 32) | (p % cols)
                top = 1
                while top > 0:
                    top = top - 1
                    r = stack[top] >> 32
                    c = stack[top] & _COLUMN_MASK
                    if 0 < r < rows - 1 and 0 < c < cols - 1:
                        top = _grow(cand, reached, stack, top, r - 1, c - 1, cols)
                        top = _grow(cand, reached, stack, top, r - 1, c, cols)
                        top = _grow(cand, reached, stack, top, r - 1, c + 1, cols)
                        top = _grow(cand, reached, stack, top, r, c - 1, cols)
                        top = _grow(cand, reached, stack, top, r, c + 1, cols)
                        top = _grow(cand, reached, stack, top, r + 1, c - 1, cols)
                        top = _grow(cand, reached, stack, top, r + 1, c, cols)
                        top = _grow(cand, reached, stack, top, r + 1, c + 1, cols)
                        continue
                    for dr in range(-1, 2):
                        if r + dr < 0 or r + dr >= rows:
                            continue
                        for dc in range(-1, 2):
                            if c + dc >= 0 and c + dc < cols:
                                top = _grow(cand, reached, stack, top, r + dr, c + dc, cols)
    finally:
        free(stack)


cdef inline bint _crosses(double centre, double other, double threshold) noexcept nogil:
    """centre < 0 < other with a jump larger than threshold."""
    return centre < 0.0 and other > 0.0 and other - centre > threshold


cdef inline bint _opposite_jump(double a, double b, double threshold) noexcept nogil:
    """a and b of opposite signs, differing by more than threshold (no branches)."""
    return (((a < 0.0) & (b > 0.0)) | ((a > 0.0) & (b < 0.0))) & \
        ((a - b > threshold) | (b - a > threshold))


cdef inline unsigned char _zero_crossing_at(const double[:, ::1] response, Py_ssize_t r,
                                            Py_ssize_t c, Py_ssize_t rows, Py_ssize_t cols,
                                            double threshold) noexcept nogil:
    """The rule of zero_crossings at any pixel, consulting only neighbours inside the image."""
    cdef double v = response[r, c]
    if v < 0.0:
        return ((c > 0 and _crosses(v, response[r, c - 1], threshold))
                or (c + 1 < cols and _crosses(v, response[r, c + 1], threshold))
                or (r > 0 and _crosses(v, response[r - 1, c], threshold))
                or (r + 1 < rows and _crosses(v, response[r + 1, c], threshold)))
    if v == 0.0:
        return ((0 < c < cols - 1
                 and _opposite_jump(response[r, c - 1], response[r, c + 1], threshold))
                or (0 < r < rows - 1
                    and _opposite_jump(response[r - 1, c], response[r + 1, c], threshold)))
    return 0


cdef inline void _zero_crossings_interior(const double *above, const double *centre,
                                          const double *below, Py_ssize_t cols,
                                          double threshold, unsigned char *out) noexcept nogil:
    """The rule of zero_crossings on columns 1..cols-2 of an interior row, where every
    neighbour exists. A negative pixel is marked when its largest neighbour n is positive
    with n - v > threshold: some neighbour qualifies exactly when the largest one does
    (rounding of n - v keeps the order of n), so one comparison chain replaces four, without
    branches on the pixel's sign, which is unpredictable. Exact zeros are rare: a branch."""
    cdef Py_ssize_t c
    cdef double v, left, right, up, down, n
    for c in range(1, cols - 1):
        v = centre[c]
        left = centre[c - 1]
        right = centre[c + 1]
        up = above[c]
        down = below[c]
        n = left if left > right else right
        n = up if up > n else n
        n = down if down > n else n
        out[c] = (v < 0.0) & (n > 0.0) & (n - v > threshold)
        if v == 0.0:
            out[c] = _opposite_jump(left, right, threshold) | _opposite_jump(up, down, threshold)


def zero_crossings(const double[:, ::1] response, double threshold, unsigned char[:, ::1] out):
    """Marks the negative side of each sign change between 4-neighbours whose jump exceeds
    threshold, and exact zeros lying between opposite signs (left/right or up/down).
    Neighbours outside the image are not consulted. Spec ``R-log``."""
    cdef Py_ssize_t rows = response.shape[0], cols = response.shape[1], r, c
    with nogil:
        for r in prange(rows, schedule="dynamic", chunksize=_chunk(cols),
                        num_threads=_threads(rows * cols)):
            if 0 < r < rows - 1 and cols > 2:
                _zero_crossings_interior(&response[r - 1, 0], &response[r, 0],
                                         &response[r + 1, 0], cols, threshold, &out[r, 0])
                out[r, 0] = _zero_crossing_at(response, r, 0, rows, cols, threshold)
                out[r, cols - 1] = _zero_crossing_at(response, r, cols - 1, rows, cols,
                                                     threshold)
            else:
                for c in range(cols):
                    out[r, c] = _zero_crossing_at(response, r, c, rows, cols, threshold)


def weighted_vote(const unsigned char[:, :, ::1] edges, const double[::1] weights,
                  double offset, double[:, ::1] final_weight):
    """F = ((w0*X0 + w1*X1) + w2*X2) + w3*X3 - offset, X = 2 on an edge (> 0), 1 elsewhere.
    edges has shape (4, rows, cols)."""
    cdef Py_ssize_t rows = edges.shape[1], cols = edges.shape[2], r, c, k
    cdef double f
    with nogil:
        for r in prange(rows, schedule="dynamic", chunksize=_chunk(cols),
                        num_threads=_threads(rows * cols)):
            for c in range(cols):
                f = 0.0
                for k in range(4):
                    f = f + weights[k] * (2.0 if edges[k, r, c] != 0 else 1.0)
                final_weight[r, c] = f - offset


cdef inline void _row_range(const double *v, Py_ssize_t n, bint absolute, double *lo,
                            double *hi) noexcept nogil:
    """min and max of v[0..n) (of |v| when absolute); two accumulators of each, so that the
    comparisons of neighbouring values do not wait for each other."""
    cdef Py_ssize_t c
    cdef double x0, x1, lo0, lo1, hi0, hi1
    lo0 = fabs(v[0]) if absolute else v[0]
    lo1 = lo0
    hi0 = lo0
    hi1 = lo0
    if absolute:
        for c in range(0, n - 1, 2):
            x0 = fabs(v[c])
            x1 = fabs(v[c + 1])
            lo0 = x0 if x0 < lo0 else lo0
            lo1 = x1 if x1 < lo1 else lo1
            hi0 = x0 if x0 > hi0 else hi0
            hi1 = x1 if x1 > hi1 else hi1
    else:
        for c in range(0, n - 1, 2):
            x0 = v[c]
            x1 = v[c + 1]
            lo0 = x0 if x0 < lo0 else lo0
            lo1 = x1 if x1 < lo1 else lo1
            hi0 = x0 if x0 > hi0 else hi0
            hi1 = x1 if x1 > hi1 else hi1
    x0 = fabs(v[n - 1]) if absolute else v[n - 1]
    lo0 = x0 if x0 < lo0 else lo0
    hi0 = x0 if x0 > hi0 else hi0
    lo[0] = lo1 if lo1 < lo0 else lo0
    hi[0] = hi1 if hi1 > hi0 else hi0


def value_range(const double[:, ::1] values, bint absolute, double[::1] out):
    """out = (min, max) of the values, or of their magnitudes when ``absolute``; the values
    are finite (a NaN would be skipped by the comparisons)."""
    cdef Py_ssize_t rows = values.shape[0], cols = values.shape[1], r
    cdef double lo, hi
    cdef double[:, ::1] row_range = np.empty((rows, 2))
    with nogil:
        for r in prange(rows, schedule="dynamic", chunksize=_chunk(cols),
                        num_threads=_threads(rows * cols)):
            _row_range(&values[r, 0], cols, absolute, &row_range[r, 0], &row_range[r, 1])
        lo = row_range[0, 0]
        hi = row_range[0, 1]
        for r in range(1, rows):
            lo = row_range[r, 0] if row_range[r, 0] < lo else lo
            hi = row_range[r, 1] if row_range[r, 1] > hi else hi
    out[0] = lo
    out[1] = hi


# Counters per thread in histogram and edge_statistics (a power of two): consecutive pixels
# of one bin land in different counters, so increments of one bin do not wait for each other.
cdef int _HISTOGRAM_LANES = 4
# Padding of each lane's counters (in counters): with 256 bins unpadded, lanes 0 and 2 lie
# 4096 bytes apart and the processor takes their counters of one bin for the same address.
cdef Py_ssize_t _LANE_PADDING = 8


def histogram(const double[:, ::1] values, double low, double high, bint absolute,
              long[::1] counts):
    """counts[k] = number of values (of magnitudes when ``absolute``) whose bin
    x = (v - low) * (nbins / (high - low)) truncates to k, with x clamped to [0, nbins - 1]
    (and a NaN x, from 0 * inf when high - low is subnormal, put in bin 0) so that no value
    can index outside counts. Integer counts: the sum over threads is exact."""
    cdef Py_ssize_t rows = values.shape[0], cols = values.shape[1], r, c, k, lane
    cdef Py_ssize_t nbins = counts.shape[0]
    cdef int threads = _threads(rows * cols), t
    cdef double scale = nbins / (high - low)
    cdef double x, v
    cdef long[:, ::1] partial = np.zeros((threads * _HISTOGRAM_LANES, nbins + _LANE_PADDING),
                                         dtype=np.int_)
    with nogil:
        for r in prange(rows, schedule="dynamic", chunksize=_chunk(cols), num_threads=threads):
            lane = openmp.omp_get_thread_num() * _HISTOGRAM_LANES
            for c in range(cols):
                v = fabs(values[r, c]) if absolute else values[r, c]
                x = (v - low) * scale
                if not (x >= 0.0):
                    k = 0
                elif x >= nbins - 1:
                    k = nbins - 1
                else:
                    k = <Py_ssize_t> x
                partial[lane + (c & (_HISTOGRAM_LANES - 1)), k] += 1
        for k in range(nbins):
            counts[k] = 0
        for t in range(threads * _HISTOGRAM_LANES):
            for k in range(nbins):
                counts[k] += partial[t, k]


def edge_statistics(const unsigned char[:, :, ::1] edges, double[:, ::1] mean_image,
                    double[::1] sums, double[::1] squared_deviations):
    """For binary maps (value != 0 is 1) of shape (4, rows, cols): the mean image
    ((e0 + e1) + e2 + e3) / 4, each map's sum, and each map's sum of (e_k - mean)^2.

    A pixel's four bits make a code 0..15; the kernel counts the codes (integers, exact in any
    order) and forms the sums from the counts. Every term is a multiple of 1/16 and every sum
    stays far below 2**53 / 16, so the results are exact and equal the twin's."""
    cdef Py_ssize_t rows = edges.shape[1], cols = edges.shape[2], r, c, k, code, lane
    cdef int threads = _threads(rows * cols), t
    cdef double m, e
    cdef double means[16]
    cdef long total[16]
    cdef long[:, ::1] counts = np.zeros((threads * _HISTOGRAM_LANES, 16), dtype=np.int_)
    for code in range(16):
        means[code] = (((<double> (code & 1) + <double> ((code >> 1) & 1))
                        + <double> ((code >> 2) & 1)) + <double> ((code >> 3) & 1)) / 4.0
    with nogil:
        for r in prange(rows, schedule="dynamic", chunksize=_chunk(cols), num_threads=threads):
            lane = openmp.omp_get_thread_num() * _HISTOGRAM_LANES
            for c in range(cols):
                code = ((edges[0, r, c] != 0) | ((edges[1, r, c] != 0) << 1)
                        | ((edges[2, r, c] != 0) << 2) | ((edges[3, r, c] != 0) << 3))
                mean_image[r, c] = means[code]
                counts[lane + (c & (_HISTOGRAM_LANES - 1)), code] += 1
        for code in range(16):
            total[code] = 0
            for t in range(threads * _HISTOGRAM_LANES):
                total[code] += counts[t, code]
        for k in range(4):
            sums[k] = 0.0
            squared_deviations[k] = 0.0
            for code in range(16):
                e = <double> ((code >> k) & 1)
                m = means[code]
                sums[k] += total[code] * e
                squared_deviations[k] += total[code] * ((e - m) * (e - m))
