# Winograd transforms for 3x3 convolutions, included by refseg/_kernels.pyx, which holds the
# cimports, _array_threads and the fused type real. NumPy twins: autograd/_twins.py.

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
# outside. Every transformed value is computed by one thread in the fixed order of the C loops
# (the twins in autograd/_twins.py use the same order), so results do not depend on the
# thread count.
#
# The per-tile loops are C (winograd_f2x2.c, which says why), called through the drivers below
# with the tile's row pointers gathered on the stack.
cdef extern from "winograd_f2x2.h":
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
            for p in prange(tiles, schedule="dynamic", chunksize=_chunk(planes * ch),
                            num_threads=_array_threads(tiles * planes * ch)):
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
                                       real low, real high, bint clamped, real *out,
                                       Py_ssize_t n, Py_ssize_t y0, Py_ssize_t x0,
                                       Py_ssize_t ho, Py_ssize_t wo, Py_ssize_t cout,
                                       Py_ssize_t tile) noexcept nogil:
    """The transform of the tile whose tile x tile outputs start at row y0, column x0 of image
    n: its destination pixels (NULL past the edges) in a stack array of this call, then the C
    loop; then, if clamped, each of those pixels clamped to [low, high] (``_clamped``, as
    ``clamp`` does), while they are still in cache."""
    cdef real *dst[16]
    cdef Py_ssize_t u, v, o
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
    if not clamped:
        return
    for u in range(tile * tile):
        if dst[u] == NULL:
            continue
        for o in range(cout):
            dst[u][o] = _clamped(dst[u][o], low, high)


cdef _output_transform(const real[:, :, :] m, const real[::1] bias, double low, double high,
                       Py_ssize_t th, Py_ssize_t tw, Py_ssize_t tile_start,
                       real[:, :, :, ::1] out, Py_ssize_t tile):
    """The output transform of F(tile x tile, 3x3) for tiles tile_start .. + m.shape[1] - 1:
    tiles in parallel, each writing its own pixels (clamped to [low, high]; -inf, inf: not
    clamped)."""
    cdef real lo = <real> low, hi = <real> high
    cdef bint clamped = low > -INFINITY or high < INFINITY
    cdef Py_ssize_t ho = out.shape[1], wo = out.shape[2], cout = out.shape[3]
    cdef Py_ssize_t tiles = m.shape[1], stride = m.strides[0] // sizeof(real)
    cdef Py_ssize_t planes = (tile + 2) * (tile + 2)
    cdef Py_ssize_t p
    cdef TilePosition at
    _check_planes(m, planes)
    with nogil:
        for p in prange(tiles, schedule="dynamic", chunksize=_chunk(planes * cout),
                        num_threads=_array_threads(tiles * planes * cout)):
            at = _tile_position(tile_start + p, th, tw)
            _winograd_output_tile(&m[0, p, 0], stride, &bias[0], lo, hi, clamped,
                                  &out[0, 0, 0, 0], at.n, tile * at.row, tile * at.col, ho,
                                  wo, cout, tile)


def winograd_output(const real[:, :, :] m, const real[::1] bias, double low, double high,
                    Py_ssize_t th, Py_ssize_t tw, Py_ssize_t tile_start,
                    real[:, :, :, ::1] out):
    """out[n, 2ti + u, 2tj + v, o] = (A^T M A)[u, v] + bias[o] with M[k] = m[k, p, o], for
    tile t = tile_start + p, clamped to [low, high] as ``clamp`` does (a ReLU after the
    convolution; -inf, inf: no clamp); the outputs of a partial tile past the bottom or right
    edge of out are not written. Tiles run in parallel and write disjoint pixels."""
    _output_transform(m, bias, low, high, th, tw, tile_start, out, 2)


def winograd_kernel(const real[:, :, :, ::1] w, real[:, :, :] u):
    """u[k, c, o] = (G g G^T)[k // 4, k % 4] for the 3x3 kernel g[a, b] = w[a, b, c, o]: G
    down each column b of g, then along each row of G g. Blocks of kernel entries run in
    parallel (the network's bound on elements, 25 values read and written per entry); each
    entry is computed by one thread."""
    cdef Py_ssize_t size = w.shape[2] * w.shape[3], stride = u.strides[0] // sizeof(real)
    cdef Py_ssize_t block = _CHUNK_ELEMENTS, blocks = (size + block - 1) // block, i
    _check_planes(u)
    with nogil:
        for i in prange(blocks, schedule="dynamic", chunksize=1,
                        num_threads=_array_threads(25 * size)):
            if real is float:
                _winograd_kernel_f(&w[0, 0, 0, 0], size, &u[0, 0, 0], stride, i * block,
                                   min(size, (i + 1) * block))
            else:
                _winograd_kernel_d(&w[0, 0, 0, 0], size, &u[0, 0, 0], stride, i * block,
                                   min(size, (i + 1) * block))


# The adjoints, for the kernel gradient: y = A^T M A gives dM = A dy A^T per tile (the
# pixels of a partial tile past the output's edge have no gradient: 0), U = G g G^T gives
# dg = G^T dU G, and dU[k] = V[k]^T dM[k] summed over tiles (matrix products, in conv_winograd.py).
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
            for p in prange(tiles, schedule="dynamic", chunksize=_chunk(16 * ch),
                            num_threads=_array_threads(tiles * 16 * ch)):
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
# The per-tile loops are C (winograd_f4x4.c), called by the same drivers as F(2x2, 3x3)'s.
cdef extern from "winograd_f4x4.h":
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


def winograd4_output(const real[:, :, :] m, const real[::1] bias, double low, double high,
                     Py_ssize_t th, Py_ssize_t tw, Py_ssize_t tile_start,
                     real[:, :, :, ::1] out):
    """out[n, 4ti + u, 4tj + v, o] = (A^T M A)[u, v] + bias[o] with M[k] = m[k, p, o], for
    tile t = tile_start + p, clamped to [low, high]; outputs past the bottom or right edge of
    out are not written. F(4x4, 3x3)'s output transform, as winograd_output is F(2x2, 3x3)'s."""
    _output_transform(m, bias, low, high, th, tw, tile_start, out, 4)


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
