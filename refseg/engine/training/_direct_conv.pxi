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
#
# Included by refseg/_kernels.pyx, which holds the cimports, _array_threads and the fused type real.
# NumPy twins: autograd/_twins.py.

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


# The float32 row loops for AVX-512 are C (direct_conv_avx512.c: GCC's target attribute and
# vector types, which Cython cannot express), chosen at run time where the CPU has it; the
# header says how their results compare with those of the loops below.
cdef extern from "direct_conv_avx512.h":
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
    cdef int threads = _array_threads(n_img * ho * wo * taps * cout // 8)
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
    cdef int threads = _array_threads(n_img * ho * wo * taps * cout // 8)
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
