"""Slow, obvious NumPy twins of the compiled kernels in ``_kernels.pyx``.

Same names, same signatures (outputs written into ``out`` arrays), same arithmetic order: the
tests hold each pair equal bit for bit. Read these to audit what the compiled code does.
"""
import numpy as np
from scipy import ndimage


def _pad_reflect101(src):
    """Pad one pixel on every side, reflect-101 (a length-1 axis repeats its pixel)."""
    mode = [("reflect" if n > 1 else "edge") for n in src.shape]
    padded = src
    for axis, m in enumerate(mode):
        width = [(0, 0)] * src.ndim
        width[axis] = (1, 1)
        padded = np.pad(padded, width, mode=m)
    return padded


def _windows(src):
    """The nine shifted views of src, keyed by kernel position (i, j), row-major."""
    padded = _pad_reflect101(src)
    rows, cols = src.shape
    return {(i, j): padded[i:i + rows, j:j + cols] for i in range(3) for j in range(3)}


def rgb_to_gray(rgb, wr, wg, wb, scale, out):
    rgb = rgb.astype(np.float64)
    out[...] = ((wr * rgb[..., 0] + wg * rgb[..., 1]) + wb * rgb[..., 2]) / scale


def correlate3x3(src, kernel, out):
    acc = np.zeros(src.shape)
    for (i, j), view in _windows(np.asarray(src)).items():
        acc = acc + kernel[i, j] * view
    out[...] = acc


def gradient3x3(src, kx, ky, gx, gy, magnitude):
    correlate3x3(src, kx, gx)
    correlate3x3(src, ky, gy)
    magnitude[...] = np.sqrt(np.asarray(gx) * gx + np.asarray(gy) * gy)


def threshold_above(src, threshold, out):
    out[...] = np.asarray(src) > threshold


def non_maximum_suppression(gx, gy, magnitude, low, high, tan_lo, tan_hi, out):
    gx, gy, m = np.asarray(gx), np.asarray(gy), np.asarray(magnitude)
    z = np.pad(m, 1, mode="constant")  # magnitudes outside the image count as 0
    rows, cols = m.shape

    def at(dr, dc):
        return z[1 + dr:1 + dr + rows, 1 + dc:1 + dc + cols]

    ax, ay = np.abs(gx), np.abs(gy)
    horizontal = ay < tan_lo * ax
    vertical = ~horizontal & (ay > tan_hi * ax)
    diagonal = ~horizontal & ~vertical
    falling = diagonal & ((gx < 0) == (gy < 0))  # neighbours up-left and down-right
    rising = diagonal & ~falling                  # neighbours up-right and down-left
    keep = (
        (horizontal & (m > at(0, -1)) & (m >= at(0, 1)))
        | (vertical & (m > at(-1, 0)) & (m >= at(1, 0)))
        | (falling & (m > at(-1, -1)) & (m > at(1, 1)))
        | (rising & (m > at(-1, 1)) & (m > at(1, -1)))
    )
    keep &= m > low
    out[...] = np.where(keep, np.where(m > high, 2, 1), 0)


def hysteresis(candidates, out):
    candidates = np.asarray(candidates)
    labels, count = ndimage.label(candidates > 0, structure=np.ones((3, 3)))
    strong_labels = np.unique(labels[candidates == 2])
    out[...] = np.isin(labels, strong_labels[strong_labels > 0])


def zero_crossings(response, threshold, out):
    v = np.asarray(response)
    rows, cols = v.shape
    z = np.pad(v, 1, mode="constant", constant_values=np.nan)  # NaN: no neighbour there

    def at(dr, dc):
        return z[1 + dr:1 + dr + rows, 1 + dc:1 + dc + cols]

    hit = np.zeros(v.shape, dtype=bool)
    for dr, dc in ((0, -1), (0, 1), (-1, 0), (1, 0)):
        other = at(dr, dc)
        hit |= (v < 0) & (other > 0) & (other - v > threshold)
    for (ar, ac), (br, bc) in (((0, -1), (0, 1)), ((-1, 0), (1, 0))):
        a, b = at(ar, ac), at(br, bc)
        opposite = ((a < 0) & (b > 0)) | ((a > 0) & (b < 0))
        hit |= (v == 0) & opposite & (np.abs(a - b) > threshold)
    out[...] = hit


def weighted_vote(edges, weights, offset, final_weight):
    edges = np.asarray(edges)
    f = np.zeros(edges.shape[1:])
    for k in range(4):
        f = f + weights[k] * np.where(edges[k] != 0, 2.0, 1.0)
    final_weight[...] = f - offset


def histogram(values, low, high, counts):
    nbins = counts.shape[0]
    with np.errstate(invalid="ignore", over="ignore"):
        x = (np.asarray(values) - low) * (nbins / (high - low))
        x = np.where(x >= 0, np.minimum(x, nbins - 1), 0.0)  # NaN (0 * inf) goes to bin 0
    counts[...] = np.bincount(x.astype(np.intp).ravel(), minlength=nbins)


def edge_statistics(edges, mean_image, sums, squared_deviations):
    e = (np.asarray(edges) != 0).astype(np.float64)
    m = (((e[0] + e[1]) + e[2]) + e[3]) / 4.0
    mean_image[...] = m
    sums[...] = e.sum(axis=(1, 2))
    squared_deviations[...] = ((e - m) ** 2).sum(axis=(1, 2))


# ------------------------------------------------------------------------------------------
# Autograd twins (NHWC). The window geometry is that of _kernels.pyx.

def _window_view(x, kh, kw, sh, sw, pt, pl, ho, wo):
    """Zero-padded x and, for each tap (a, b), the (N, ho, wo, C) slice it reads."""
    n, h, w, c = x.shape
    bottom = max(0, (ho - 1) * sh - pt + kh - h)
    right = max(0, (wo - 1) * sw - pl + kw - w)
    top, left = max(pt, 0), max(pl, 0)
    padded = np.zeros((n, h + top + bottom, w + left + right, c), dtype=x.dtype)
    padded[:, top:top + h, left:left + w] = x
    oy, ox = top - pt, left - pl  # where tap (0, 0) of output (0, 0) reads
    taps = {}
    for a in range(kh):
        for b in range(kw):
            ys, xs = oy + a, ox + b
            taps[a, b] = padded[:, ys:ys + (ho - 1) * sh + 1:sh, xs:xs + (wo - 1) * sw + 1:sw]
    return taps


def im2col(x, kh, kw, sh, sw, pt, pl, ho, wo, row_start, cols):
    x = np.asarray(x)
    taps = _window_view(x, kh, kw, sh, sw, pt, pl, ho, wo)
    stacked = np.stack([taps[a, b] for a in range(kh) for b in range(kw)], axis=3)
    full = stacked.reshape(x.shape[0] * ho * wo, -1)
    cols[...] = full[row_start * wo:row_start * wo + cols.shape[0]]


def col2im(cols, kh, kw, sh, sw, pt, pl, ho, wo, out):
    out = np.asarray(out)
    n, h, w, c = out.shape
    pieces = np.asarray(cols).reshape(n, ho, wo, kh, kw, c)
    acc = np.zeros(out.shape, dtype=out.dtype)
    for a in range(kh):
        for b in range(kw):
            # the output pixels that tap (a, b) of each window lands on, clipped to the image
            ys = np.arange(ho) * sh - pt + a
            xs = np.arange(wo) * sw - pl + b
            iy, ix = (ys >= 0) & (ys < h), (xs >= 0) & (xs < w)
            block = np.zeros(out.shape, dtype=out.dtype)
            block[:, ys[iy][:, None], xs[ix][None, :]] = pieces[:, iy][:, :, ix][:, :, :, a, b]
            acc = acc + block
    out[...] = acc


def col2im_transposed(cols_t, kh, kw, sh, sw, pt, pl, ho, wo, out):
    col2im(np.asarray(cols_t).T, kh, kw, sh, sw, pt, pl, ho, wo, out)


def depthwise_forward(x, w, kh, kw, sh, sw, pt, pl, out):
    x, w, out = np.asarray(x), np.asarray(w), np.asarray(out)
    taps = _window_view(x, kh, kw, sh, sw, pt, pl, out.shape[1], out.shape[2])
    acc = np.zeros(out.shape, dtype=out.dtype)
    for a in range(kh):
        for b in range(kw):
            acc = acc + taps[a, b] * w[a * kw + b]
    out[...] = acc


def depthwise_backward_input(g, w, kh, kw, sh, sw, pt, pl, dx):
    g, w = np.asarray(g), np.asarray(w)
    n, ho, wo, c = g.shape
    pieces = np.zeros((n, ho, wo, kh, kw, c), dtype=g.dtype)
    for a in range(kh):
        for b in range(kw):
            pieces[:, :, :, a, b] = g * w[a * kw + b]
    col2im(pieces.reshape(n * ho * wo, -1), kh, kw, sh, sw, pt, pl, ho, wo, dx)


def depthwise_backward_weight(x, g, kh, kw, sh, sw, pt, pl, dw):
    """Summed in float64 by NumPy (pairwise), not in the kernel's sequential order: equal to
    the kernel to float64 rounding, not bit for bit."""
    x, g = np.asarray(x, dtype=np.float64), np.asarray(g, dtype=np.float64)
    taps = _window_view(x, kh, kw, sh, sw, pt, pl, g.shape[1], g.shape[2])
    for a in range(kh):
        for b in range(kw):
            dw[a * kw + b] = (taps[a, b] * g).sum(axis=(0, 1, 2))


def max_pool_forward(x, kh, kw, sh, sw, pt, pl, out, argmax):
    x = np.asarray(x)
    n, h, w, c = x.shape
    ho, wo = out.shape[1], out.shape[2]
    index = np.arange(x.size).reshape(x.shape)
    values = _window_view(x, kh, kw, sh, sw, pt, pl, ho, wo)
    inside = _window_view(np.ones(x.shape, dtype=bool), kh, kw, sh, sw, pt, pl, ho, wo)
    where = _window_view(index, kh, kw, sh, sw, pt, pl, ho, wo)
    best = np.zeros((n, ho, wo, c), dtype=x.dtype)
    arg = np.full((n, ho, wo, c), -1, dtype=np.int_)
    for a in range(kh):
        for b in range(kw):
            take = inside[a, b] & ((arg < 0) | (values[a, b] > best))
            best = np.where(take, values[a, b], best)
            arg = np.where(take, where[a, b], arg)
    out[...] = np.where(arg < 0, 0, best)
    argmax[...] = arg


def max_pool_backward(g, argmax, dx_flat):
    g, argmax = np.asarray(g), np.asarray(argmax)
    acc = np.zeros(dx_flat.shape, dtype=g.dtype)
    keep = argmax >= 0
    np.add.at(acc, argmax[keep], g[keep])
    dx_flat[...] = acc


def channel_moments(x, mean, variance):
    x = np.asarray(x, dtype=np.float64)
    mean[...] = x.mean(axis=0)
    variance[...] = ((x - mean) ** 2).mean(axis=0)


def channel_sums(g, xhat, sum_g, sum_g_xhat):
    g = np.asarray(g, dtype=np.float64)
    sum_g[...] = g.sum(axis=0)
    sum_g_xhat[...] = (g * np.asarray(xhat, dtype=np.float64)).sum(axis=0)


def batch_norm_forward(x, mean, inv_std, gamma, beta, xhat, out):
    xhat[...] = (x - mean) * inv_std
    out[...] = xhat * gamma + beta


def batch_norm_backward(g, xhat, coef, sum_g, sum_g_xhat, count, dx):
    dx[...] = coef * ((count * g - sum_g) - xhat * sum_g_xhat)


def adam_update(param, grad, m, v, lr, beta1, beta2, eps, bias1, bias2):
    dtype = np.asarray(param).dtype
    g = np.asarray(grad, dtype=np.float64)
    mk = (beta1 * np.asarray(m, dtype=np.float64) + (1.0 - beta1) * g).astype(dtype)
    vk = (beta2 * np.asarray(v, dtype=np.float64) + (1.0 - beta2) * g * g).astype(dtype)
    m[...] = mk
    v[...] = vk
    step = lr * (mk.astype(np.float64) / bias1) / (np.sqrt(vk.astype(np.float64) / bias2) + eps)
    param[...] = (np.asarray(param, dtype=np.float64) - step).astype(dtype)


def channel_affine(x, scale, shift, out):
    out[...] = x * scale
    out += shift


def clamp(x, low, high, out):
    out[...] = np.minimum(np.maximum(x, np.asarray(low, dtype=x.dtype)),
                          np.asarray(high, dtype=x.dtype))


def add_arrays(x, y, out):
    np.add(x, y, out=out)

def conv_small_forward(x, w, bias, kh, kw, pt, pl, out):
    """Stride-1 convolution plus bias, each output a sum from 0 over (a, b, c) row-major, as
    the kernel adds them (zero padding included as 0 * w terms, which leave every sum
    unchanged), then + bias."""
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
    """Summed in float64 by NumPy, not in the kernel's order (the kernel sums each row in the
    input's precision): equal to the kernel to that rounding, not bit for bit."""
    x, g = np.asarray(x, dtype=np.float64), np.asarray(g, dtype=np.float64)
    c = x.shape[3]
    taps = _window_view(x, kh, kw, 1, 1, pt, pl, g.shape[1], g.shape[2])
    for a in range(kh):
        for b in range(kw):
            k = (a * kw + b) * c
            dw[k:k + c] = np.einsum("nijc,nijo->co", taps[a, b], g)
    dbias[...] = g.sum(axis=(0, 1, 2))


# ------------------------------------------------------------------------------------------
# Winograd F(2x2, 3x3) transforms (F(4x4, 3x3) below, sharing the drivers): the same
# combinations, in the same order, as _kernels.pyx.

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
    _input_transform(x, pt, pl, th, tw, tile_start, v, 2, _bt_combine)


def _at_combine(m0, m1, m2, m3):
    """A^T applied to four values (arrays): ((m0 + m1) + m2, (m1 - m2) - m3)."""
    return (m0 + m1) + m2, (m1 - m2) - m3


def _output_transform(m, bias, th, tw, tile_start, out, tile, combine):
    """out = (A^T M A)[u, v] + bias per tile, A^T applied by ``combine`` down each column, then
    along each row; pixels past the bottom or right edge of out are not written."""
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
            out[n[inside], y[inside], x[inside]] = row[v][inside] + np.asarray(bias)


def winograd_output(m, bias, th, tw, tile_start, out):
    _output_transform(m, bias, th, tw, tile_start, out, 2, _at_combine)


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
    _kernel_transform(w, u, 4, _g_combine)


def _a_combine(d0, d1):
    """A (4 x 2) applied to two values (arrays): (d0, d0 + d1, d0 - d1, -d1)."""
    return d0, d0 + d1, d0 - d1, -d1


def winograd_output_adjoint(g, th, tw, tile_start, m):
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
    u = np.asarray(u)
    columns = [_gt_combine(*(u[4 * xi + nu] for xi in range(4))) for nu in range(4)]  # [nu][a]
    for a in range(3):
        row = _gt_combine(*(columns[nu][a] for nu in range(4)))
        for b in range(3):
            w[a, b] = row[b]


# ------------------------------------------------------------------------------------------
# Winograd F(4x4, 3x3) transforms: the same combinations, in the same order, as _kernels.pyx.

def _bt4_combine(d0, d1, d2, d3, d4, d5):
    """B^T (6 x 6) applied to six values (arrays)."""
    four, five, two = (d0.dtype.type(c) for c in (4, 5, 2))
    return (((d0 * four - d2 * five) + d4), ((d3 + d4) - (d1 + d2) * four),
            ((d4 - d3) + (d1 - d2) * four), ((d4 - d2) + (d3 - d1) * two),
            ((d4 - d2) - (d3 - d1) * two), ((d1 * four - d3 * five) + d5))


def winograd4_input(x, pt, pl, th, tw, tile_start, v):
    _input_transform(x, pt, pl, th, tw, tile_start, v, 4, _bt4_combine)


def _at4_combine(m0, m1, m2, m3, m4, m5):
    """A^T (4 x 6) applied to six values (arrays)."""
    two, four, eight = (m0.dtype.type(c) for c in (2, 4, 8))
    return (((m0 + (m1 + m2)) + (m3 + m4)), ((m1 - m2) + (m3 - m4) * two),
            ((m1 + m2) + (m3 + m4) * four), (((m1 - m2) + (m3 - m4) * eight) + m5))


def winograd4_output(m, bias, th, tw, tile_start, out):
    _output_transform(m, bias, th, tw, tile_start, out, 4, _at4_combine)


def _g4_combine(g0, g1, g2):
    """G (6 x 3) applied to three values (arrays); the fractions rounded to g0's dtype."""
    kind = g0.dtype.type
    quarter, sixth, twelfth, twentyfourth = kind(0.25), kind(1 / 6), kind(1 / 12), kind(1 / 24)
    return (g0 * quarter, ((g0 + g1) + g2) * -sixth, ((g0 - g1) + g2) * -sixth,
            (g0 * twentyfourth + g1 * twelfth) + g2 * sixth,
            (g0 * twentyfourth - g1 * twelfth) + g2 * sixth, g2)


def winograd4_kernel(w, u):
    _kernel_transform(w, u, 6, _g4_combine)
