"""NumPy twins of the autograd kernels in ``autograd/_*.pxi``, compiled into
``refseg._kernels``: one section per ``.pxi`` (those of the training kernels, ``_norm.pxi``
and ``_optim.pxi``, in ``_twins_training.py``).

Same names, same signatures (outputs written into ``out`` arrays), same arithmetic order: the
tests hold each pair equal bit for bit, except the float64 reductions whose docstrings say
otherwise. Arrays are NHWC, with the window geometry of ``_kernels.pyx``. Read these to audit
what the compiled code does; they are reached as ``refseg._twins``, the module of backend
``"numpy"``.
"""
import numpy as np


# ------------------------------------------------------------------------------------------
# Twins of _im2col.pxi; _window_view serves the window ops of the sections below too.

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
    """Twin of ``_kernels.im2col`` (autograd/_im2col.pxi), for ``claim2.fusion`` and
    ``claim4.propagation`` (convolutions as column matrix times kernel, and their kernel
    gradients).

    cols[(r - row_start)*wo + j, (a*kw + b)*C + c] = x[n, i*sh - pt + a, j*sw - pl + b, c] (0
    outside x) for the output rows r = n*ho + i from row_start on: copies, no arithmetic.
    """
    x = np.asarray(x)
    taps = _window_view(x, kh, kw, sh, sw, pt, pl, ho, wo)
    stacked = np.stack([taps[a, b] for a in range(kh) for b in range(kw)], axis=3)
    full = stacked.reshape(x.shape[0] * ho * wo, -1)
    cols[...] = full[row_start * wo:row_start * wo + cols.shape[0]]


def col2im(cols, kh, kw, sh, sw, pt, pl, ho, wo, out):
    """Twin of ``_kernels.col2im`` (autograd/_im2col.pxi), for ``claim2.fusion`` and
    ``claim4.propagation`` (input gradients of convolutions, transposed convolutions).

    The adjoint of :func:`im2col`: each pixel is the sum over taps (a, b) in row-major order of
    the cols entries that im2col copied from it, added to 0 one tap at a time as in the kernel.
    """
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
    """Twin of ``_kernels.col2im_transposed`` (autograd/_im2col.pxi), for ``claim2.fusion`` and
    ``claim4.propagation`` (transposed convolutions, column matrix transposed).

    :func:`col2im` of cols_t transposed; the kernel gives col2im's result bit for bit, since a
    tap lands on a pixel from one window at most, so every pixel receives the same terms in the
    same order.
    """
    col2im(np.asarray(cols_t).T, kh, kw, sh, sw, pt, pl, ho, wo, out)


# ------------------------------------------------------------------------------------------
# Twins of _window.pxi.

def depthwise_forward(x, w, kh, kw, sh, sw, pt, pl, out):
    """Twin of ``_kernels.depthwise_forward`` (autograd/_window.pxi), for ``claim2.backbones``
    (MobileNetV2) and ``claim4.propagation``.

    out[n, i, j, c] = sum over taps (a, b) row-major of x[n, i*sh-pt+a, j*sw-pl+b, c] *
    w[a*kw+b, c], from 0 in that order (taps in the padding add 0 * w terms, which leave every
    sum unchanged; the kernel skips them).
    """
    x, w, out = np.asarray(x), np.asarray(w), np.asarray(out)
    taps = _window_view(x, kh, kw, sh, sw, pt, pl, out.shape[1], out.shape[2])
    acc = np.zeros(out.shape, dtype=out.dtype)
    for a in range(kh):
        for b in range(kw):
            acc = acc + taps[a, b] * w[a * kw + b]
    out[...] = acc


def depthwise_backward_input(g, w, kh, kw, sh, sw, pt, pl, dx):
    """Twin of ``_kernels.depthwise_backward_input`` (autograd/_window.pxi), for
    ``claim4.propagation`` (the input gradient of the depthwise convolutions of
    ``claim2.backbones``).

    dx[n, y, x, c] = sum over taps (a, b) row-major of g[n, i, j, c] * w[a*kw+b, c] with y =
    i*sh - pt + a and x = j*sw - pl + b: the products per tap, summed by :func:`col2im` in the
    kernel's order.
    """
    g, w = np.asarray(g), np.asarray(w)
    n, ho, wo, c = g.shape
    pieces = np.zeros((n, ho, wo, kh, kw, c), dtype=g.dtype)
    for a in range(kh):
        for b in range(kw):
            pieces[:, :, :, a, b] = g * w[a * kw + b]
    col2im(pieces.reshape(n * ho * wo, -1), kh, kw, sh, sw, pt, pl, ho, wo, dx)


def depthwise_backward_weight(x, g, kh, kw, sh, sw, pt, pl, dw):
    """Twin of ``_kernels.depthwise_backward_weight`` (autograd/_window.pxi), for
    ``claim4.propagation`` (the kernel gradient of the depthwise convolutions of
    ``claim2.backbones``).

    Summed in float64 by NumPy (pairwise), not in the kernel's sequential order: equal to
    the kernel to float64 rounding, not bit for bit.
    """
    x, g = np.asarray(x, dtype=np.float64), np.asarray(g, dtype=np.float64)
    taps = _window_view(x, kh, kw, sh, sw, pt, pl, g.shape[1], g.shape[2])
    for a in range(kh):
        for b in range(kw):
            dw[a * kw + b] = (taps[a, b] * g).sum(axis=(0, 1, 2))


def window_maximum(x, kh, kw, sh, sw, pt, pl, out):
    """Twin of ``_kernels.window_maximum`` (autograd/_window.pxi), for ``claim2.backbones``
    (ResNet50V2's poolings at inference).

    x padded with -inf, then the kh*kw strided views of it folded in row-major order by
    np.maximum's rule, written out: the value so far stays when it is >= the next or NaN.
    """
    x = np.asarray(x)[:, max(-pt, 0):, max(-pl, 0):]  # a negative pad: windows start inside
    pt, pl = max(pt, 0), max(pl, 0)
    ho, wo = out.shape[1], out.shape[2]
    bottom = max((ho - 1) * sh + kh - pt - x.shape[1], 0)
    right = max((wo - 1) * sw + kw - pl - x.shape[2], 0)
    padded = np.pad(x, ((0, 0), (pt, bottom), (pl, right), (0, 0)), constant_values=-np.inf)
    best = None
    for a in range(kh):
        for b in range(kw):
            view = padded[:, a:a + (ho - 1) * sh + 1:sh, b:b + (wo - 1) * sw + 1:sw]
            best = view.copy() if best is None else np.where(
                (best >= view) | np.isnan(best), best, view)
    out[...] = best


def max_pool_forward(x, kh, kw, sh, sw, pt, pl, out, argmax):
    """Twin of ``_kernels.max_pool_forward`` (autograd/_window.pxi), for ``claim2.backbones``
    (ResNet50's first pooling) and ``claim4.propagation``.

    Window maximum over the positions inside the input, the first maximum in row-major window
    order winning a tie; argmax holds its flat index into x (-1, and out 0, for a window
    entirely in the padding).
    """
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
    """Twin of ``_kernels.max_pool_backward`` (autograd/_window.pxi), for
    ``claim4.propagation``.

    dx_flat[argmax] += g over the windows that have an argmax, one at a time in window order
    (np.add.at), as the kernel's serial loop adds them where windows overlap.
    """
    g, argmax = np.asarray(g), np.asarray(argmax)
    acc = np.zeros(dx_flat.shape, dtype=g.dtype)
    keep = argmax >= 0
    np.add.at(acc, argmax[keep], g[keep])
    dx_flat[...] = acc


# ------------------------------------------------------------------------------------------
# Twins of _elementwise.pxi.

def _masked(g, passes):
    """g * passes (the ReLU's mask as a number of g's type, as NumPy multiplies by a bool
    array), or g when passes is None."""
    g = np.asarray(g)
    if passes is None:
        return g
    # an infinite g where the mask is 0 gives NaN, as the kernel's product does: intended
    with np.errstate(invalid="ignore"):
        return g * np.asarray(passes).astype(g.dtype)


def channel_affine(x, scale, shift, low, high, out):
    """Twin of ``_kernels.channel_affine`` (autograd/_elementwise.pxi), for ``claim2.backbones``
    and ``claim4.propagation`` (batch norm at inference, folded to one multiply-add, and the
    ReLU that follows it).

    out = x * scale + shift, rounded after the product and after the sum (two NumPy steps),
    then ``clamp(out, low, high)``.
    """
    out[...] = x * scale
    out += shift
    clamp(out, low, high, out)


def clamp(x, low, high, out):
    """Twin of ``_kernels.clamp`` (autograd/_elementwise.pxi), for ``claim2.fusion`` (ReLU),
    ``claim2.backbones`` (ReLU6) and ``claim4.propagation``.

    out = min(max(x, low), high) in x's dtype, NaN kept; values equal to low become low itself,
    so -0.0 gives +0.0 as np.maximum does.
    """
    out[...] = np.minimum(np.maximum(x, np.asarray(low, dtype=x.dtype)),
                          np.asarray(high, dtype=x.dtype))


def channel_add(x, shift, low, high, out):
    """Twin of ``_kernels.channel_add`` (autograd/_elementwise.pxi), for ``claim2.fusion`` (the
    convolutions' bias, and their ReLU).

    out = x + shift per column, then ``clamp(out, low, high)``.
    """
    np.add(x, shift, out=out)
    clamp(out, low, high, out)


def zero_pad(x, top, left, out):
    """Twin of ``_kernels.zero_pad`` (autograd/_elementwise.pxi), for ``claim2.backbones``
    (ZeroPadding2D, [0137]).

    out = zeros with x at (top, left).
    """
    out[...] = 0
    out[:, top:top + x.shape[1], left:left + x.shape[2]] = x


def subtract_row_max(x, out):
    """Twin of ``_kernels.subtract_row_max`` (autograd/_elementwise.pxi), for
    ``claim2.fusion`` (the prediction layer's softmax, [0194]-[0195]).

    out = x - max over each row, the maximum taken left to right: a NaN stays, and of equal
    values (-0.0, 0.0) the later wins. (np.max breaks that tie either way depending on the
    row's length and dtype; after softmax's exp the sign of a zero no longer shows.)
    """
    top = x[:, 0].copy()
    for c in range(1, x.shape[1]):
        take = ~np.isnan(top) & ~(x[:, c] < top)
        top[take] = x[take, c]
    # a row of infinities gives inf - inf = NaN, as the kernel's difference does: intended
    with np.errstate(invalid="ignore"):
        np.subtract(x, top[:, None], out=out)


def divide_by_row_sum(e, out):
    """Twin of ``_kernels.divide_by_row_sum`` (autograd/_elementwise.pxi), for
    ``claim2.fusion`` (the softmax's normalisation).

    out = e / the sum over each row.
    """
    # inf / inf (an infinite value in a row) is NaN, as the kernel's quotient is: intended
    with np.errstate(invalid="ignore"):
        np.divide(e, e.sum(axis=-1, keepdims=True), out=out)


def relu_mask(x, low, high, passes):
    """Twin of ``_kernels.relu_mask`` (autograd/_elementwise.pxi), for ``claim4.propagation``
    (the ReLU's gradient).

    passes = low < x, and x < high unless high is inf (NaN: 0), as 0 and 1.
    """
    x = np.asarray(x)
    mask = x > x.dtype.type(low)
    if high < np.inf:
        mask &= x < x.dtype.type(high)
    passes[...] = mask


def masked_gradient(g, passes, out):
    """Twin of ``_kernels.masked_gradient`` (autograd/_elementwise.pxi), for
    ``claim4.propagation`` (the ReLU's backward).

    out = g * passes, the mask as g's dtype.
    """
    out[...] = _masked(g, passes)


def add_arrays(x, y, out):
    """Twin of ``_kernels.add_arrays`` (autograd/_elementwise.pxi), for ``claim2.fusion`` (the
    sums of the skip connections) and ``claim4.propagation``.

    out = x + y elementwise.
    """
    np.add(x, y, out=out)


# ------------------------------------------------------------------------------------------
# Twins of _direct_conv.pxi.

def conv_small_forward(x, w, bias, kh, kw, pt, pl, out):
    """Twin of ``_kernels.conv_small_forward`` (autograd/_direct_conv.pxi), for
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
    """Twin of ``_kernels.conv_small_weight`` (autograd/_direct_conv.pxi), for
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
    """Twin of ``_kernels.winograd_input`` (autograd/_winograd.pxi), for ``claim2.fusion`` and
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
    """Twin of ``_kernels.winograd_output`` (autograd/_winograd.pxi), for ``claim2.fusion`` and
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
    """Twin of ``_kernels.winograd_kernel`` (autograd/_winograd.pxi), for ``claim2.fusion`` and
    ``claim4.propagation``.

    u[k] = (G g G^T)[k // 4, k % 4] of each 3x3 kernel g: G down each column, then along each
    row, in :func:`_g_combine`'s order (its halvings are exact).
    """
    _kernel_transform(w, u, 4, _g_combine)


def _a_combine(d0, d1):
    """A (4 x 2) applied to two values (arrays): (d0, d0 + d1, d0 - d1, -d1)."""
    return d0, d0 + d1, d0 - d1, -d1


def winograd_output_adjoint(g, th, tw, tile_start, m):
    """Twin of ``_kernels.winograd_output_adjoint`` (autograd/_winograd.pxi), for
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
    """Twin of ``_kernels.winograd_kernel_adjoint`` (autograd/_winograd.pxi), for
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
    """Twin of ``_kernels.winograd4_input`` (autograd/_winograd.pxi), for ``claim2.fusion`` and
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
    """Twin of ``_kernels.winograd4_output`` (autograd/_winograd.pxi), for ``claim2.fusion`` and
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
    """Twin of ``_kernels.winograd4_kernel`` (autograd/_winograd.pxi), for ``claim2.fusion`` and
    ``claim4.propagation``.

    u[k] = (G g G^T)[k // 6, k % 6] of each 3x3 kernel g: G down each column, then along each
    row, in :func:`_g4_combine`'s order, the fractions rounded to g's dtype.
    """
    _kernel_transform(w, u, 6, _g4_combine)


# ------------------------------------------------------------------------------------------
# Twin of _gemm.pxi.

def gemm_stack(a, b, b_plane, out, accumulate, tile_rows, tile_cols, parallel, scale, shift,
               low, high, epilogue):
    """Twin of ``_kernels.gemm_stack`` (autograd/_gemm.pxi), for ``claim2.fusion`` and
    ``claim4.propagation`` (the matrix products of the convolutions and their gradients).

    out[p] = a[p] @ b[b_plane[p]] (+ out[p] if accumulate), tile by tile (tile_rows x
    tile_cols outputs), in order (``parallel`` is the kernel's thread switch); with
    ``epilogue``, then each plane through ``channel_affine`` (scale not empty),
    ``channel_add`` (shift alone) or ``clamp``, elementwise, so the tiling cannot change
    them. Each tile is
    the call the kernel makes, through SciPy's wrapper of the same BLAS: Fortran BLAS sees a
    row-major matrix as its transpose, so the tile is computed as c^T = b^T a^T, with a plane
    stored as a transposed view passed as it lies and marked transposed (the orientation and
    the transposition flags choose OpenBLAS's loops, and so the rounding).
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
