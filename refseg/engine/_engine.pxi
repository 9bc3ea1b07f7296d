# The engine's kernels (refseg/engine/): thin wrappers of the C micro-kernels of
# engine/engine_kernels.c, which choose AVX-512, AVX2 + FMA or portable loops at run time.
# Shapes, dtypes, contiguity and the offsets' ranges are checked by refseg/engine/runtime.py;
# these trust them. Each has a NumPy twin of the same name in refseg/engine/_twins.py, held
# within the tolerance stated there (the vector backends fuse multiply and add).
#
# Included by refseg/_kernels.pyx.

from libc.stdint cimport int32_t, int64_t

cdef extern from "engine_kernels.h" nogil:
    int ENGINE_PANEL
    int ENGINE_MAX_TAPS
    int c_engine_cpu_backend "engine_cpu_backend"()
    void engine_conv_c(int backend, int threads, int order, int batch,
                       const float *x, int64_t x_image, const int32_t *in_off,
                       int pixels, int taps, int cin,
                       const float *w, const float *bias, int cout,
                       float *y, int64_t y_image, const int32_t *out_off,
                       const float *r, int64_t r_image, const int32_t *res_off,
                       float lo, float hi, float *y2, const float *scale2,
                       const float *shift2, float lo2, float hi2)
    int ENGINE_DOT_MAX
    void engine_dot_c(int backend, int threads, int batch,
                      const float *x, int64_t x_image, const int32_t *in_off,
                      int pixels, int taps, int cin, const float *w, const float *bias,
                      int cout, float *y, int64_t y_image, const int32_t *out_off,
                      const float *r, int64_t r_image, const int32_t *res_off,
                      float lo, float hi, int softmax)
    void engine_gather_c(int threads, int batch, const float *cols, int64_t cols_image,
                         const int32_t *g_off, int pixels, int taps, const float *bias,
                         int cout, float *y, int64_t y_image, const int32_t *out_off,
                         const float *r, int64_t r_image, const int32_t *res_off,
                         float lo, float hi, int softmax)
    void engine_depthwise_c(int backend, int threads, const float *x, int n, int h, int w,
                            int c, const float *k, int kh, int kw, int stride, int pad_top,
                            int pad_left, const float *bias, float lo, float hi, float *y,
                            int ho, int wo)
    void engine_max_pool_c(int backend, int threads, const float *x, int n, int h, int w,
                           int c, int pool, int stride, int pad_top, int pad_left, float *y,
                           int ho, int wo)
    size_t c_engine_winograd_chunk "engine_winograd_chunk"(int batch, int ho, int wo, int cin,
                                                           int cout, int tile)
    void engine_winograd_c(int backend, int threads, int batch, const float *x, int h, int w,
                           int cin, int pad_top, int pad_left, const float *u,
                           const float *bias, int cout, float *y, int ho, int wo,
                           const float *r, float lo, float hi, float *scratch, int64_t chunk,
                           int tile)
    void engine_winograd_weights_c(int backend, int threads, const float *packed, int cin,
                                   int first, int count, int tile, float *u)
    void engine_affine_c(int threads, const float *x, int64_t pixels, int c,
                         const float *scale, const float *shift, float lo, float hi, float *y)

ENGINE_PANEL_WIDTH = ENGINE_PANEL
ENGINE_TAPS_LIMIT = ENGINE_MAX_TAPS
ENGINE_DOT_LIMIT = ENGINE_DOT_MAX


def engine_max_threads():
    """The threads of the next parallel region (OpenMP's ``omp_get_max_threads``: the
    ``OMP_NUM_THREADS`` of the process, or what ``omp_set_num_threads`` set since)."""
    return openmp.omp_get_max_threads()


def engine_cpu_backend():
    """The fastest engine backend this CPU runs: 2 AVX-512F, 1 AVX2 + FMA, 0 portable."""
    return c_engine_cpu_backend()


def engine_conv(const float[::1] x, Py_ssize_t x_image, const int32_t[::1] in_off,
                Py_ssize_t pixels, Py_ssize_t taps, Py_ssize_t cin,
                const float[::1] w, const float[::1] bias, Py_ssize_t cout,
                float[::1] y, Py_ssize_t y_image, const int32_t[::1] out_off,
                const float[::1] r, Py_ssize_t r_image, const int32_t[::1] res_off,
                float lo, float hi, Py_ssize_t batch, int backend, int threads, int order,
                float[::1] y2=None, const float[::1] scale2=None,
                const float[::1] shift2=None, float lo2=-INFINITY, float hi2=INFINITY):
    """Indirect convolution with packed weights and its epilogue, into ``y`` (see
    engine_kernels.c); with ``y2`` (like y) also ``clamp(y * scale2 + shift2, lo2, hi2)``
    there, ``scale2`` and ``shift2`` padded to whole panels. ``in_off``, ``out_off``, ``r``
    and ``res_off`` may be None."""
    cdef float *second = NULL
    cdef const float *sp = NULL
    cdef const float *hp = NULL
    if y2 is not None:
        if y2.shape[0] != y.shape[0] or scale2 is None or shift2 is None or \
                scale2.shape[0] < (cout + ENGINE_PANEL - 1) // ENGINE_PANEL * ENGINE_PANEL or \
                shift2.shape[0] != scale2.shape[0]:
            raise ValueError("engine_conv: the second output does not fit")
        second, sp, hp = &y2[0], &scale2[0], &shift2[0]
    cdef const int32_t *ip = NULL
    cdef const int32_t *op = NULL
    cdef const int32_t *rp = NULL
    cdef const float *res = NULL
    if in_off is not None:
        ip = &in_off[0]
    if out_off is not None:
        op = &out_off[0]
    if res_off is not None:
        rp = &res_off[0]
    if r is not None:
        res = &r[0]
    with nogil:
        engine_conv_c(backend, threads, order, batch, &x[0], x_image, ip, pixels, taps, cin,
                      &w[0], &bias[0], cout, &y[0], y_image, op, res, r_image, rp, lo, hi,
                      second, sp, hp, lo2, hi2)


def engine_dot(const float[::1] x, Py_ssize_t x_image, const int32_t[::1] in_off,
               Py_ssize_t pixels, Py_ssize_t taps, Py_ssize_t cin,
               const float[::1] w, const float[::1] bias, Py_ssize_t cout,
               float[::1] y, Py_ssize_t y_image, const int32_t[::1] out_off,
               const float[::1] r, Py_ssize_t r_image, const int32_t[::1] res_off,
               float lo, float hi, Py_ssize_t batch, int backend, int threads,
               bint softmax):
    """engine_conv for at most ENGINE_DOT_MAX output channels, one dot product per output,
    weights ``w`` (taps, cout, cin) flat; with ``softmax`` the softmax over each pixel's
    outputs last."""
    cdef const int32_t *ip = NULL
    cdef const int32_t *op = NULL
    cdef const int32_t *rp = NULL
    cdef const float *res = NULL
    if in_off is not None:
        ip = &in_off[0]
    if out_off is not None:
        op = &out_off[0]
    if res_off is not None:
        rp = &res_off[0]
    if r is not None:
        res = &r[0]
    with nogil:
        engine_dot_c(backend, threads, batch, &x[0], x_image, ip, pixels, taps, cin, &w[0],
                     &bias[0], cout, &y[0], y_image, op, res, r_image, rp, lo, hi, softmax)


def engine_gather(const float[::1] cols, Py_ssize_t cols_image, const int32_t[::1] g_off,
                  Py_ssize_t pixels, Py_ssize_t taps, const float[::1] bias, Py_ssize_t cout,
                  float[::1] y, Py_ssize_t y_image, const int32_t[::1] out_off,
                  const float[::1] r, Py_ssize_t r_image, const int32_t[::1] res_off,
                  float lo, float hi, Py_ssize_t batch, int threads, bint softmax):
    """Each output the sum of its taps' columns (``g_off`` (pixels, taps) offsets into one
    image's columns, -1 none) plus ``bias``, clamped, plus the residual, with ``softmax`` the
    softmax over the pixel's outputs; at most ENGINE_DOT_MAX outputs."""
    cdef const int32_t *op = NULL
    cdef const int32_t *rp = NULL
    cdef const float *res = NULL
    if cout < 1 or cout > ENGINE_DOT_MAX or g_off.shape[0] < pixels * taps:
        raise ValueError("engine_gather: outputs or offsets do not fit")
    if out_off is not None:
        op = &out_off[0]
    if res_off is not None:
        rp = &res_off[0]
    if r is not None:
        res = &r[0]
    with nogil:
        engine_gather_c(threads, batch, &cols[0], cols_image, &g_off[0], pixels, taps,
                        &bias[0], cout, &y[0], y_image, op, res, r_image, rp, lo, hi, softmax)


def engine_depthwise(const float[:, :, :, ::1] x, const float[:, :, ::1] k,
                     const float[::1] bias, Py_ssize_t stride, Py_ssize_t pad_top,
                     Py_ssize_t pad_left, float lo, float hi, float[:, :, :, ::1] y,
                     int backend, int threads):
    """Depthwise convolution x (N, H, W, C) * k (kh, kw, C) + bias, clamped, into y
    (N, Ho, Wo, C); reads outside x are zero."""
    with nogil:
        engine_depthwise_c(backend, threads, &x[0, 0, 0, 0], x.shape[0], x.shape[1],
                           x.shape[2], x.shape[3], &k[0, 0, 0], k.shape[0], k.shape[1],
                           stride, pad_top, pad_left, &bias[0], lo, hi, &y[0, 0, 0, 0],
                           y.shape[1], y.shape[2])


def engine_winograd_chunk(Py_ssize_t batch, Py_ssize_t ho, Py_ssize_t wo, Py_ssize_t cin,
                          Py_ssize_t cout, int tile=2):
    """Tiles per chunk of a Winograd F(tile x tile, 3x3) call: its scratch holds ``(tile +
    2)**2 * chunk * (cin + cout rounded up to whole panels)`` floats."""
    if tile not in (2, 4):
        raise ValueError("engine_winograd_chunk: tile 2 or 4")
    return c_engine_winograd_chunk(batch, ho, wo, cin, cout, tile)


def engine_winograd(const float[:, :, :, ::1] x, Py_ssize_t pad_top, Py_ssize_t pad_left,
                    const float[::1] u, const float[::1] bias, float[:, :, :, ::1] y,
                    const float[:, :, :, ::1] r, float lo, float hi, float[::1] scratch,
                    int backend, int threads, int tile=2):
    """Stride-1 3x3 convolution of x (N, H, W, Cin) by Winograd F(tile x tile, 3x3), tile 2
    or 4, with the transformed, packed weights ``u`` ((tile + 2)**2 x panels x Cin x 16), its
    bias, clamp and residual ``r`` (like y, or None), into y (N, Ho, Wo, Cout); reads outside x
    are zero. ``scratch`` holds at least ``(tile + 2)**2 * engine_winograd_chunk(...) * (Cin +
    Cout in whole panels)`` floats."""
    cdef const float *res = NULL
    cdef Py_ssize_t cout = y.shape[3]
    cdef Py_ssize_t coutp = (cout + ENGINE_PANEL - 1) // ENGINE_PANEL * ENGINE_PANEL
    if tile not in (2, 4):
        raise ValueError("engine_winograd: tile 2 or 4")
    cdef Py_ssize_t positions = (tile + 2) * (tile + 2)
    cdef Py_ssize_t chunk = c_engine_winograd_chunk(x.shape[0], y.shape[1], y.shape[2],
                                                  x.shape[3], cout, tile)
    if scratch.shape[0] < positions * chunk * (x.shape[3] + coutp):
        raise ValueError("engine_winograd: scratch too small")
    if u.shape[0] != positions * coutp * x.shape[3] or bias.shape[0] < coutp:
        raise ValueError("engine_winograd: weights do not fit the shapes")
    if r is not None:
        res = &r[0, 0, 0, 0]
    with nogil:
        engine_winograd_c(backend, threads, x.shape[0], &x[0, 0, 0, 0], x.shape[1],
                          x.shape[2], x.shape[3], pad_top, pad_left, &u[0], &bias[0], cout,
                          &y[0, 0, 0, 0], y.shape[1], y.shape[2], res, lo, hi, &scratch[0],
                          chunk, tile)


def engine_winograd_weights(const float[::1] packed, Py_ssize_t cin, Py_ssize_t first,
                            Py_ssize_t count, int tile, float[::1] u, int backend, int threads):
    """Winograd F(tile x tile, 3x3)'s weights of panels [first, first + count) of a packed
    3x3 kernel (``packed``: panels x 9 x Cin x 16), into ``u`` ((tile + 2)**2 x count x Cin x
    16): what ``panels.winograd_weights`` gives for those output channels, to the bit."""
    if tile not in (2, 4):
        raise ValueError("engine_winograd_weights: tile 2 or 4")
    if first < 0 or count < 1 or cin < 1 or \
            packed.shape[0] < (first + count) * 9 * cin * ENGINE_PANEL or \
            u.shape[0] != (tile + 2) * (tile + 2) * count * cin * ENGINE_PANEL:
        raise ValueError("engine_winograd_weights: the arrays do not fit the shapes")
    with nogil:
        engine_winograd_weights_c(backend, threads, &packed[0], cin, first, count, tile,
                                  &u[0])


def engine_max_pool(const float[:, :, :, ::1] x, Py_ssize_t pool, Py_ssize_t stride,
                    Py_ssize_t pad_top, Py_ssize_t pad_left, float[:, :, :, ::1] y,
                    int backend, int threads):
    """Max pooling of x (N, H, W, C) over pool x pool windows, into y (N, Ho, Wo, C); reads
    outside x are 0 (a folded zero padding)."""
    if y.shape[0] != x.shape[0] or y.shape[3] != x.shape[3] or pool < 1 or stride < 1:
        raise ValueError("engine_max_pool: shapes do not fit")
    with nogil:
        engine_max_pool_c(backend, threads, &x[0, 0, 0, 0], x.shape[0], x.shape[1],
                          x.shape[2], x.shape[3], pool, stride, pad_top, pad_left,
                          &y[0, 0, 0, 0], y.shape[1], y.shape[2])


def engine_affine(const float[:, ::1] x, const float[::1] scale, const float[::1] shift,
                  float lo, float hi, float[:, ::1] y, int threads):
    """y[p, c] = clamp(x[p, c] * scale[c] + shift[c], lo, hi) for x, y (P, C)."""
    with nogil:
        engine_affine_c(threads, &x[0, 0], x.shape[0], x.shape[1], &scale[0], &shift[0], lo,
                        hi, &y[0, 0])
