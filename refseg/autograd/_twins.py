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
# Twin of _matmul.pxi.

def matmul_ordered(a, b, out):
    """Twin of ``_kernels.matmul_ordered`` (autograd/_matmul.pxi), for ``claim2.fusion`` and
    ``claim4.propagation`` (the convolutions' products on the reference route).

    out = a @ b, each element summed over k in order from 0: one NumPy multiply and one add
    per term, each rounded, as the kernel rounds them.
    """
    out[...] = 0
    for k in range(a.shape[1]):
        out += a[:, k:k + 1] * b[k]
