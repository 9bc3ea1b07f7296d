"""NumPy twins of the training engine's kernels in ``engine/training/_*.pxi`` (the direct
convolution, the Winograd transforms, the tiled matrix products), compiled into
``refseg._kernels``: one section per ``.pxi``.

Same names, same signatures, same arithmetic order as the kernels: the tests hold each pair
equal bit for bit. They are reached through ``refseg.engine.training.backend.engine_kernels``
with backend ``"numpy"``.
"""
import numpy as np

from refseg.autograd._twins import _window_view, channel_add, channel_affine, clamp

# ------------------------------------------------------------------------------------------
# Twins of _direct_conv.pxi.

def conv_small_forward(x, w, bias, kh, kw, pt, pl, out):
    """Twin of ``_kernels.conv_small_forward`` (engine/training/_direct_conv.pxi), for
    ``claim2.fusion`` (the prediction layer, 3 -> 3 channels) and ``claim4.propagation``.

    Stride-1 convolution plus bias, each output a sum from 0 over (a, b, c) row-major, as
    the kernel adds them (zero padding included as 0 * w terms, which leave every sum
    unchanged), then + bias.
    """
    x, w, out = np.asarray(x), np.asarray(w), np.asarray(out)
    c = x.shape[3]
    taps = _window_view(x, kh, kw, 1, 1, pt, pl, out.shape[1], out.shape[2])
    acc = np.zeros(out.shape, dtype=out.dtype)
    for a in range(kh):
        for b in range(kw):
            for ci in range(c):
                acc = acc + taps[a, b][..., ci:ci + 1] * w[(a * kw + b) * c + ci]
    out[...] = acc + np.asarray(bias)


def conv_small_weight(x, g, kh, kw, pt, pl, dw, dbias):
    """Twin of ``_kernels.conv_small_weight`` (engine/training/_direct_conv.pxi), for
    ``claim4.propagation`` (the kernel and bias gradients of the prediction layer of
    ``claim2.fusion``).

    Summed in float64 by NumPy, not in the kernel's order (the kernel sums each row in the
    input's precision): equal to the kernel to that rounding, not bit for bit.
    """
    x, g = np.asarray(x, dtype=np.float64), np.asarray(g, dtype=np.float64)
    c = x.shape[3]
    taps = _window_view(x, kh, kw, 1, 1, pt, pl, g.shape[1], g.shape[2])
    for a in range(kh):
        for b in range(kw):
            k = (a * kw + b) * c
            dw[k:k + c] = np.einsum("nijc,nijo->co", taps[a, b], g)
    dbias[...] = g.sum(axis=(0, 1, 2))


# ------------------------------------------------------------------------------------------
# Twins of _winograd.pxi, F(2x2, 3x3) (F(4x4, 3x3) below, sharing the drivers): the same
# combinations, in the same order, as its C loops.

def _bt_combine(d0, d1, d2, d3):
    """B^T applied to four values (arrays): (d0 - d2, d1 + d2, d2 - d1, d1 - d3)."""
    return d0 - d2, d1 + d2, d2 - d1, d1 - d3


def _tile_coordinates(th, tw, tile_start, tiles):
    """(n, ti, tj) of tiles tile_start .. tile_start + tiles - 1, t = (n*th + ti)*tw + tj."""
    t = np.arange(tile_start, tile_start + tiles)
    return t // (th * tw), t % (th * tw) // tw, t % tw


def _input_transform(x, pt, pl, th, tw, tile_start, v, tile, combine):
    """v[k] = (B^T d B)[k // side, k % side] of each tile's side x side window (side = tile +
    2), B^T applied by ``combine`` down each column, then along each row."""
    x = np.asarray(x)
    n_img, h, w, c = x.shape
    side = tile + 2
    # the input inside a zero frame covering every window: padded[:, q] is row q - pt of x
    padded = np.zeros((n_img, tile * th + 2, tile * tw + 2, c), dtype=x.dtype)
    top, bottom = np.clip([pt, pt + h], 0, tile * th + 2)
    left, right = np.clip([pl, pl + w], 0, tile * tw + 2)
    padded[:, top:bottom, left:right] = x[:, top - pt:bottom - pt, left - pl:right - pl]
    n, ti, tj = _tile_coordinates(th, tw, tile_start, v.shape[1])
    # d[r][s]: (tiles, C), window position (r, s) of each tile
    d = [[padded[n, tile * ti + r, tile * tj + s] for s in range(side)] for r in range(side)]
    columns = [combine(*(d[r][s] for r in range(side))) for s in range(side)]  # [s][xi]
    for xi in range(side):
        row = combine(*(columns[s][xi] for s in range(side)))
        for nu in range(side):
            v[side * xi + nu] = row[nu]


def winograd_input(x, pt, pl, th, tw, tile_start, v):
    """Twin of ``_kernels.winograd_input`` (engine/training/_winograd.pxi), for ``claim2.fusion`` and
    ``claim4.propagation`` (stride-1 3x3 convolutions by Winograd F(2x2, 3x3), forward and
    gradients).

    v[k] = (B^T d B)[k // 4, k % 4] of each tile's 4x4 input window d (0 outside x): B^T down
    each column, then along each row, in :func:`_bt_combine`'s order of operations, the C
    loops'.
    """
    _input_transform(x, pt, pl, th, tw, tile_start, v, 2, _bt_combine)


def _at_combine(m0, m1, m2, m3):
    """A^T applied to four values (arrays): ((m0 + m1) + m2, (m1 - m2) - m3)."""
    return (m0 + m1) + m2, (m1 - m2) - m3


def _output_transform(m, bias, low, high, th, tw, tile_start, out, tile, combine):
    """out = clamp((A^T M A)[u, v] + bias, low, high) per tile, A^T applied by ``combine`` down
    each column, then along each row; pixels past the bottom or right edge of out are not
    written."""
    m, out = np.asarray(m), np.asarray(out)
    _, ho, wo, _ = out.shape
    side = tile + 2
    n, ti, tj = _tile_coordinates(th, tw, tile_start, m.shape[1])
    columns = [combine(*(m[side * xi + nu] for xi in range(side))) for nu in range(side)]
    for u in range(tile):
        row = combine(*(columns[nu][u] for nu in range(side)))
        for v in range(tile):
            y, x = tile * ti + u, tile * tj + v
            inside = (y < ho) & (x < wo)  # a partial tile at the bottom or right edge
            value = row[v][inside] + np.asarray(bias)
            clamp(value, low, high, value)
            out[n[inside], y[inside], x[inside]] = value


def winograd_output(m, bias, low, high, th, tw, tile_start, out):
    """Twin of ``_kernels.winograd_output`` (engine/training/_winograd.pxi), for ``claim2.fusion`` and
    ``claim4.propagation``.

    out = (A^T M A)[u, v] + bias per 2x2 tile: A^T down each column, then along each row, in
    :func:`_at_combine`'s order, the bias added last, then ``clamp(out, low, high)``; pixels
    past the bottom or right edge of out are not written.
    """
    _output_transform(m, bias, low, high, th, tw, tile_start, out, 2, _at_combine)


def _g_combine(g0, g1, g2):
    """G applied to three values (arrays): (g0, ((g0 + g1) + g2) / 2, ((g0 - g1) + g2) / 2, g2)."""
    half = g0.dtype.type(0.5)
    return g0, ((g0 + g1) + g2) * half, ((g0 - g1) + g2) * half, g2


def _kernel_transform(w, u, side, combine):
    """u[k] = (G g G^T)[k // side, k % side] of each 3x3 kernel, G applied by ``combine`` down
    each column, then along each row."""
    w = np.asarray(w)
    columns = [combine(w[0, b], w[1, b], w[2, b]) for b in range(3)]  # [b][xi]
    for xi in range(side):
        row = combine(*(columns[b][xi] for b in range(3)))
        for nu in range(side):
            u[side * xi + nu] = row[nu]


def winograd_kernel(w, u):
    """Twin of ``_kernels.winograd_kernel`` (engine/training/_winograd.pxi), for ``claim2.fusion`` and
    ``claim4.propagation``.

    u[k] = (G g G^T)[k // 4, k % 4] of each 3x3 kernel g: G down each column, then along each
    row, in :func:`_g_combine`'s order (its halvings are exact).
    """
    _kernel_transform(w, u, 4, _g_combine)


def _a_combine(d0, d1):
    """A (4 x 2) applied to two values (arrays): (d0, d0 + d1, d0 - d1, -d1)."""
    return d0, d0 + d1, d0 - d1, -d1


def winograd_output_adjoint(g, th, tw, tile_start, m):
    """Twin of ``_kernels.winograd_output_adjoint`` (engine/training/_winograd.pxi), for
    ``claim4.propagation`` (kernel gradients by the adjoint of F(2x2, 3x3)).

    m[k] = (A dy A^T)[k // 4, k % 4] of each tile's 2x2 block dy of g (0 past the bottom or
    right edge): A down each column, then along each row, in :func:`_a_combine`'s order.
    """
    g = np.asarray(g)
    n_img, ho, wo, c = g.shape
    # the gradient inside a zero frame covering every tile: pixels past the edges give 0
    padded = np.zeros((n_img, 2 * th, 2 * tw, c), dtype=g.dtype)
    padded[:, :ho, :wo] = g
    n, ti, tj = _tile_coordinates(th, tw, tile_start, m.shape[1])
    dy = [[padded[n, 2 * ti + u, 2 * tj + v] for v in range(2)] for u in range(2)]
    columns = [_a_combine(dy[0][v], dy[1][v]) for v in range(2)]  # [v][xi]
    for xi in range(4):
        row = _a_combine(columns[0][xi], columns[1][xi])
        for nu in range(4):
            m[4 * xi + nu] = row[nu]


def _gt_combine(u0, u1, u2, u3):
    """G^T (3 x 4) applied to four values (arrays): (u0 + (u1 + u2) / 2, (u1 - u2) / 2,
    (u1 + u2) / 2 + u3)."""
    half = u0.dtype.type(0.5)
    return u0 + (u1 + u2) * half, (u1 - u2) * half, (u1 + u2) * half + u3


def winograd_kernel_adjoint(u, w):
    """Twin of ``_kernels.winograd_kernel_adjoint`` (engine/training/_winograd.pxi), for
    ``claim4.propagation``.

    w[a, b] = (G^T dU G)[a, b] with dU[xi, nu] = u[4 xi + nu]: G^T down each column, then along
    each row, in :func:`_gt_combine`'s order.
    """
    u = np.asarray(u)
    columns = [_gt_combine(*(u[4 * xi + nu] for xi in range(4))) for nu in range(4)]  # [nu][a]
    for a in range(3):
        row = _gt_combine(*(columns[nu][a] for nu in range(4)))
        for b in range(3):
            w[a, b] = row[b]


# ------------------------------------------------------------------------------------------
# Twins of _winograd.pxi, F(4x4, 3x3): the same combinations, in the same order, as its C
# loops.

def _bt4_combine(d0, d1, d2, d3, d4, d5):
    """B^T (6 x 6) applied to six values (arrays)."""
    four, five, two = (d0.dtype.type(c) for c in (4, 5, 2))
    return (((d0 * four - d2 * five) + d4), ((d3 + d4) - (d1 + d2) * four),
            ((d4 - d3) + (d1 - d2) * four), ((d4 - d2) + (d3 - d1) * two),
            ((d4 - d2) - (d3 - d1) * two), ((d1 * four - d3 * five) + d5))


def winograd4_input(x, pt, pl, th, tw, tile_start, v):
    """Twin of ``_kernels.winograd4_input`` (engine/training/_winograd.pxi), for ``claim2.fusion`` and
    ``claim4.propagation`` (Winograd F(4x4, 3x3): forwards and input gradients of the larger
    layers).

    v[k] = (B^T d B)[k // 6, k % 6] of each tile's 6x6 input window d (0 outside x): B^T down
    each column, then along each row, in :func:`_bt4_combine`'s order, the C loops'.
    """
    _input_transform(x, pt, pl, th, tw, tile_start, v, 4, _bt4_combine)


def _at4_combine(m0, m1, m2, m3, m4, m5):
    """A^T (4 x 6) applied to six values (arrays)."""
    two, four, eight = (m0.dtype.type(c) for c in (2, 4, 8))
    return (((m0 + (m1 + m2)) + (m3 + m4)), ((m1 - m2) + (m3 - m4) * two),
            ((m1 + m2) + (m3 + m4) * four), (((m1 - m2) + (m3 - m4) * eight) + m5))


def winograd4_output(m, bias, low, high, th, tw, tile_start, out):
    """Twin of ``_kernels.winograd4_output`` (engine/training/_winograd.pxi), for ``claim2.fusion`` and
    ``claim4.propagation``.

    out = (A^T M A)[u, v] + bias per 4x4 tile: A^T down each column, then along each row, in
    :func:`_at4_combine`'s order, the bias added last, then ``clamp(out, low, high)``; pixels
    past the bottom or right edge of out are not written.
    """
    _output_transform(m, bias, low, high, th, tw, tile_start, out, 4, _at4_combine)


def _g4_combine(g0, g1, g2):
    """G (6 x 3) applied to three values (arrays); the fractions rounded to g0's dtype."""
    kind = g0.dtype.type
    quarter, sixth, twelfth, twentyfourth = kind(0.25), kind(1 / 6), kind(1 / 12), kind(1 / 24)
    return (g0 * quarter, ((g0 + g1) + g2) * -sixth, ((g0 - g1) + g2) * -sixth,
            (g0 * twentyfourth + g1 * twelfth) + g2 * sixth,
            (g0 * twentyfourth - g1 * twelfth) + g2 * sixth, g2)


def winograd4_kernel(w, u):
    """Twin of ``_kernels.winograd4_kernel`` (engine/training/_winograd.pxi), for ``claim2.fusion`` and
    ``claim4.propagation``.

    u[k] = (G g G^T)[k // 6, k % 6] of each 3x3 kernel g: G down each column, then along each
    row, in :func:`_g4_combine`'s order, the fractions rounded to g's dtype.
    """
    _kernel_transform(w, u, 6, _g4_combine)


# ------------------------------------------------------------------------------------------
# Twin of _gemm.pxi.

def gemm_stack(a, b, b_plane, out, accumulate, tile_rows, tile_cols, parallel, scale, shift,
               low, high, epilogue, engine=-1):
    """Twin of ``_kernels.gemm_stack`` (engine/training/_gemm.pxi), for ``claim2.fusion`` and
    ``claim4.propagation`` (the matrix products of the convolutions and their gradients).

    out[p] = a[p] @ b[b_plane[p]] (+ out[p] if accumulate), tile by tile (tile_rows x
    tile_cols outputs), in order (``parallel`` is the kernel's thread switch); with
    ``epilogue``, then each plane through ``channel_affine`` (scale not empty),
    ``channel_add`` (shift alone) or ``clamp``, elementwise, so the tiling cannot change
    them. Each tile is
    the call the kernel makes, through SciPy's wrapper of the same BLAS: Fortran BLAS sees a
    row-major matrix as its transpose, so the tile is computed as c^T = b^T a^T, with a plane
    stored as a transposed view passed as it lies and marked transposed (the orientation and
    the transposition flags choose OpenBLAS's loops, and so the rounding). With ``engine`` >= 0
    (the engine's micro-kernels, ``engine_gemm_c``), each tile is its float64 product (plus
    out where accumulating) rounded once to float32: held to the kernel within the rounding
    bound, not bit for bit (the kernel fuses multiply and add).
    """
    from scipy.linalg import blas

    gemm = blas.sgemm if out.dtype == np.float32 else blas.dgemm
    _, m, n = out.shape

    def operand(x):
        """x's transpose as Fortran BLAS takes it: (array, transposition flag)."""
        return (x.T, 0) if x.strides[1] == x.itemsize else (x, 1)

    for p in range(out.shape[0]):
        for i0 in range(0, m, tile_rows):
            for j0 in range(0, n, tile_cols):
                tile = out[p, i0:i0 + tile_rows, j0:j0 + tile_cols]
                if engine >= 0:
                    exact = (a[p, i0:i0 + tile_rows].astype(np.float64)
                             @ b[b_plane[p], :, j0:j0 + tile_cols].astype(np.float64))
                    tile[...] = exact + tile if accumulate else exact
                    continue
                first, trans_first = operand(b[b_plane[p], :, j0:j0 + tile_cols])
                second, trans_second = operand(a[p, i0:i0 + tile_rows])
                kwargs = {"beta": 1, "c": tile.T.copy(order="F")} if accumulate else {}
                tile[...] = gemm(1, first, second, trans_a=trans_first, trans_b=trans_second,
                                 **kwargs).T
        if not epilogue:
            continue
        plane = out[p]
        if len(scale):
            channel_affine(plane, scale, shift, low, high, plane)
        elif len(shift):
            channel_add(plane, shift, low, high, plane)
        else:
            clamp(plane, low, high, plane)


# ------------------------------------------------------------------------------------------
# Twin of _adam.pxi.

def vector_adam_update(param, grad, m, v, lr, beta1, beta2, eps, bias1, bias2, backend):
    """Twin of ``_kernels.vector_adam_update`` (engine/training/_adam.pxi), for
    ``claim4.update``: the float32 arrays widened to float64, each operation of the update
    rounded on its own in float64 in the kernel's order, each result rounded once to float32;
    ``backend`` (the kernel's vector unit) changes nothing here. Bit for bit the kernel's."""
    g = np.asarray(grad, np.float64)
    # a moment past float32's range rounds to inf, as the kernel's conversion does
    with np.errstate(over="ignore"):
        m[...] = (beta1 * np.asarray(m, np.float64) + (1.0 - beta1) * g).astype(np.float32)
        v[...] = (beta2 * np.asarray(v, np.float64) + (1.0 - beta2) * g * g).astype(np.float32)
        step = lr * (np.asarray(m, np.float64) / bias1) / (
            np.sqrt(np.asarray(v, np.float64) / bias2) + eps)
        param[...] = (np.asarray(param, np.float64) - step).astype(np.float32)


def column_sums(g, sums):
    """Twin of ``_kernels.column_sums`` (engine/training/_gemm.pxi), for the bias gradient of
    training's convolutions: each column of g summed in float64 over blocks of 256 rows, each
    block a running sum in row order, then the blocks' sums added in block order (the
    kernel's order, so the same bits)."""
    g = np.asarray(g, dtype=np.float64)
    rows = 256  # the kernel's _SUM_ROWS
    sums[...] = 0
    for start in range(0, g.shape[0], rows):
        sums += np.cumsum(g[start:start + rows], axis=0)[-1]
