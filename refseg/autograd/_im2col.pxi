# Column matrices of window ops (NHWC), included by refseg/_kernels.pyx, which holds the
# cimports, _array_threads and the fused type real. NumPy twins: autograd/_twins.py.

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
    (0 outside). A window's row of kw taps reads kw neighbouring pixels, kw*C contiguous
    values in both arrays: one copy for the taps inside the image, a clear on either side for
    those outside (3 channels, the 7x7 stem of ResNet50V2: runs of 21 values instead of 3). A
    range of rows lets callers build the column matrix a cache-sized block at a time."""
    cdef Py_ssize_t n_img = x.shape[0], h = x.shape[1], w = x.shape[2], ch = x.shape[3]
    cdef Py_ssize_t rows = cols.shape[0] // wo, k, row, n, i, j, a, y, x0, first, last
    cdef real *dst
    with nogil:
        for k in prange(rows, schedule="dynamic", chunksize=_chunk(wo * kh * kw * ch),
                        num_threads=_array_threads(rows * wo * kh * kw * ch)):
            row = row_start + k
            n = row // ho
            i = row - n * ho
            for j in range(wo):
                x0 = j * sw - pl
                first = max(0, -x0)  # taps b in [first, last) land inside the image
                last = min(kw, w - x0)
                for a in range(kh):
                    dst = &cols[k * wo + j, a * kw * ch]
                    y = i * sh - pt + a
                    if y < 0 or y >= h or first >= last:
                        _zero_run(dst, kw * ch)
                        continue
                    _zero_run(dst, first * ch)
                    _copy_run(dst + first * ch, &x[n, y, x0 + first, 0], (last - first) * ch)
                    _zero_run(dst + last * ch, (kw - last) * ch)


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
        for row in prange(n_img * h, schedule="dynamic", chunksize=_chunk(w * kh * kw * ch),
                          num_threads=_array_threads(n_img * h * w * kh * kw * ch)):
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
        for block in prange(blocks, schedule="dynamic", chunksize=1,
                            num_threads=_array_threads(n_img * h * w * kh * kw * ch)):
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
