"""Slow, obvious NumPy twins of the engine's kernels (``engine/_engine.pxi``): same names, same
signatures, outputs written into ``y``. They sum in float64 and round once, so the compiled
kernels are held to them within the float32 summation bound stated in
:mod:`refseg.engine.runtime` (the compiled kernels' order of summation and fused multiply-adds
differ from the twins', so the two are not equal to the bit). ``backend``, ``threads`` and
``order`` change nothing here: they only steer the compiled loops.
"""
from __future__ import annotations

import numpy as np

from refseg.engine.panels import unpacked_panels, winograd_weights

PANEL = 16


def engine_conv(x, x_image, in_off, pixels, taps, cin, w, bias, cout, y, y_image, out_off, r,
                r_image, res_off, lo, hi, batch, backend, threads, order, y2=None, scale2=None,
                shift2=None, lo2=-np.inf, hi2=np.inf):
    """Indirect convolution with packed weights (flat arrays; see engine_kernels.c); with
    ``y2`` also ``clamp(y * scale2 + shift2, lo2, hi2)`` there, from the float32 ``y``."""
    panels = -(-cout // PANEL)
    weights = np.asarray(w, np.float64).reshape(panels, taps, cin, PANEL)
    weights = weights.transpose(1, 2, 0, 3).reshape(taps * cin, panels * PANEL)[:, :cout]
    x = np.asarray(x)
    for n in range(batch):
        image = np.append(np.asarray(x[n * x_image:(n + 1) * x_image], np.float64),
                          np.zeros(cin))
        if in_off is None:
            starts = (np.arange(pixels) * cin)[:, None]
        else:
            # offset -1 reads the row of zeros appended at the end
            starts = np.where(np.asarray(in_off).reshape(pixels, taps) < 0, x_image,
                              np.asarray(in_off).reshape(pixels, taps))
        rows = image[starts[:, :, None] + np.arange(cin)].reshape(pixels, taps * cin)
        sums = rows @ weights + np.asarray(bias, np.float64)[:cout]
        values = np.clip(sums, lo, hi)
        outputs = np.arange(pixels) * cout if out_off is None else np.asarray(out_off)
        where = n * y_image + outputs[:, None] + np.arange(cout)
        if r is not None:
            reads = outputs if res_off is None else np.asarray(res_off)
            values = values + np.asarray(r)[n * r_image + reads[:, None] + np.arange(cout)]
        y[where] = values.astype(np.float32)
        if y2 is not None:
            second = y[where].astype(np.float64) * np.asarray(scale2, np.float64)[:cout] + \
                np.asarray(shift2, np.float64)[:cout]
            y2[where] = np.clip(second, lo2, hi2).astype(np.float32)


def engine_dot(x, x_image, in_off, pixels, taps, cin, w, bias, cout, y, y_image, out_off, r,
               r_image, res_off, lo, hi, batch, backend, threads, softmax):
    """engine_conv with weights (taps, cout, cin) flat, for few output channels; with
    ``softmax`` the softmax over each pixel's outputs last (in float64)."""
    weights = np.asarray(w, np.float32).reshape(taps, cout, cin).transpose(0, 2, 1)
    engine_conv(x, x_image, in_off, pixels, taps, cin, _one_panel(weights),
                np.pad(np.asarray(bias, np.float32), (0, PANEL - cout)), cout, y, y_image,
                out_off, r, r_image, res_off, lo, hi, batch, backend, threads, 0)
    if softmax:
        outputs = np.arange(pixels) * cout if out_off is None else np.asarray(out_off)
        for n in range(batch):
            where = n * y_image + outputs[:, None] + np.arange(cout)
            values = y[where].astype(np.float64)
            values = np.exp(values - values.max(axis=1, keepdims=True))
            y[where] = (values / values.sum(axis=1, keepdims=True)).astype(np.float32)


def engine_gather(cols, cols_image, g_off, pixels, taps, bias, cout, y, y_image, out_off, r,
                  r_image, res_off, lo, hi, batch, threads, softmax):
    """Each output the sum (float64) of its taps' columns, ``g_off`` (pixels, taps) offsets
    into one image's columns (-1: none), + bias, clamped, + the residual; with ``softmax``
    the softmax over each pixel's outputs (in float64)."""
    offsets = np.asarray(g_off).reshape(pixels, taps)
    cols = np.asarray(cols)
    outputs = np.arange(pixels) * cout if out_off is None else np.asarray(out_off)
    for n in range(batch):
        image = np.append(np.asarray(cols[n * cols_image:(n + 1) * cols_image], np.float64),
                          np.zeros(cout))
        starts = np.where(offsets < 0, cols_image, offsets)   # -1 reads the zeros appended
        sums = image[starts[:, :, None] + np.arange(cout)].sum(axis=1)
        values = np.clip(sums + np.asarray(bias, np.float64)[:cout], lo, hi)
        where = n * y_image + outputs[:, None] + np.arange(cout)
        if r is not None:
            reads = outputs if res_off is None else np.asarray(res_off)
            values = values + np.asarray(r)[n * r_image + reads[:, None] + np.arange(cout)]
        y[where] = values.astype(np.float32)
        if softmax:
            values = y[where].astype(np.float64)
            values = np.exp(values - values.max(axis=1, keepdims=True))
            y[where] = (values / values.sum(axis=1, keepdims=True)).astype(np.float32)


def _one_panel(weights):
    """Weights (taps, cin, cout <= 16) as one panel of 16 output channels, flat."""
    taps, cin, cout = weights.shape
    out = np.zeros((taps, cin, PANEL), np.float32)
    out[:, :, :cout] = weights
    return out.reshape(-1)


def engine_depthwise(x, k, bias, stride, pad_top, pad_left, lo, hi, y, backend, threads):
    """Depthwise convolution x (N, H, W, C) * k (kh, kw, C) + bias, clamped, into y."""
    x = np.asarray(x, np.float64)
    kh, kw, _ = k.shape
    n, ho, wo, c = y.shape
    h, w = x.shape[1:3]
    pb = max((ho - 1) * stride + kh - h - pad_top, 0)
    pr = max((wo - 1) * stride + kw - w - pad_left, 0)
    padded = np.pad(x, ((0, 0), (pad_top, pb), (pad_left, pr), (0, 0)))
    sums = np.zeros((n, ho, wo, c))
    for a in range(kh):
        for b in range(kw):
            window = padded[:, a:a + stride * (ho - 1) + 1:stride,
                            b:b + stride * (wo - 1) + 1:stride]
            sums += window * np.asarray(k[a, b], np.float64)
    y[...] = np.clip(sums + np.asarray(bias, np.float64), lo, hi).astype(np.float32)


def engine_affine(x, scale, shift, lo, hi, y, threads):
    """y[p, c] = clamp(x[p, c] * scale[c] + shift[c], lo, hi) for x, y (P, C)."""
    values = np.asarray(x, np.float64) * np.asarray(scale, np.float64) + \
        np.asarray(shift, np.float64)
    y[...] = np.clip(values, lo, hi).astype(np.float32)


#: Winograd F(2x2, 3x3): inputs B^T d B, outputs A^T M A (the kernels come transformed,
#: refseg.engine.panels.winograd_weights).
WINOGRAD_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
WINOGRAD_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)
#: Winograd F(4x4, 3x3), points 0, 1, -1, 2, -2 and infinity (engine/training/winograd_f4x4.c).
WINOGRAD4_BT = np.array([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                         [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
                        np.float64)
WINOGRAD4_AT = np.array([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
                         [0, 1, -1, 8, -8, 1]], np.float64)
#: tile -> (B^T, A^T)
_WINOGRAD_TRANSFORMS = {2: (WINOGRAD_BT, WINOGRAD_AT), 4: (WINOGRAD4_BT, WINOGRAD4_AT)}


def _winograd_sums(x, pad_top, pad_left, u, cout, out_hw, absolute=False, tile=2):
    """The sums of a Winograd F(tile x tile, 3x3) convolution in float64, (N, Ho, Wo, Cout),
    from x (N, H, W, Cin) and packed transformed weights ``u`` ((tile + 2)**2 x panels x Cin x
    16); with ``absolute`` every transform matrix, input and weight taken by its absolute value
    (the magnitude that bounds the rounding errors of the float32 kernel)."""
    x = np.asarray(x, np.float64)
    n, h, w, cin = x.shape
    ho, wo = out_hw
    side = tile + 2
    th, tw = -(-ho // tile), -(-wo // tile)
    panels = -(-cout // PANEL)
    weights = np.asarray(u, np.float64).reshape(side, side, panels, cin, PANEL)
    weights = weights.transpose(0, 1, 3, 2, 4).reshape(side, side, cin, panels * PANEL)
    weights = weights[..., :cout]
    bt, at = _WINOGRAD_TRANSFORMS[tile]
    if absolute:
        x, weights, bt, at = np.abs(x), np.abs(weights), np.abs(bt), np.abs(at)
    padded = np.zeros((n, tile * th + 2, tile * tw + 2, cin))
    rows, cols = min(h, tile * th + 2 - pad_top), min(w, tile * tw + 2 - pad_left)
    padded[:, pad_top:pad_top + rows, pad_left:pad_left + cols] = x[:, :rows, :cols]
    patches = np.stack([np.stack([padded[:, a:a + tile * th:tile, b:b + tile * tw:tile]
                                  for b in range(side)], axis=3) for a in range(side)], axis=3)
    v = np.einsum("ia,ntsabc,jb->ntsijc", bt, patches, bt)        # (n, th, tw, side, side, cin)
    m = np.einsum("ntsijc,ijco->ntsijo", v, weights)
    tiles = np.einsum("ia,ntsabo,jb->ntsijo", at, m, at)         # (n, th, tw, tile, tile, cout)
    return tiles.transpose(0, 1, 3, 2, 4, 5).reshape(n, tile * th, tile * tw, cout)[:, :ho, :wo]


def engine_winograd(x, pad_top, pad_left, u, bias, y, r, lo, hi, scratch, backend, threads,
                    tile=2):
    """Stride-1 3x3 convolution by Winograd F(tile x tile, 3x3), its bias, clamp and residual,
    into y (N, Ho, Wo, Cout) (see engine_kernels.c); ``scratch`` is unused here."""
    cout = y.shape[3]
    sums = _winograd_sums(x, pad_top, pad_left, u, cout, y.shape[1:3], tile=tile)
    values = np.clip(sums + np.asarray(bias, np.float64)[:cout], lo, hi)
    if r is not None:
        values = values + np.asarray(r, np.float64)
    y[...] = values.astype(np.float32)


def engine_winograd_weights(packed, cin, first, count, tile, u, backend, threads):
    """Winograd F(tile x tile, 3x3)'s weights of panels [first, first + count) of a packed
    3x3 kernel into ``u`` (``panels.winograd_weights`` of those output channels)."""
    slab = np.asarray(packed)[first * 9 * cin * PANEL:(first + count) * 9 * cin * PANEL]
    u[...] = winograd_weights(unpacked_panels(slab, 9, cin, count * PANEL), tile)


def engine_max_pool(x, pool, stride, pad_top, pad_left, y, backend, threads):
    """Max pooling of x (N, H, W, C) over pool x pool windows into y (N, Ho, Wo, C), reads
    outside x being 0 (a folded zero padding)."""
    x = np.asarray(x)
    n, ho, wo, c = y.shape
    h, w = x.shape[1:3]
    pb = max((ho - 1) * stride + pool - h - pad_top, 0)
    pr = max((wo - 1) * stride + pool - w - pad_left, 0)
    padded = np.pad(x, ((0, 0), (pad_top, pb), (pad_left, pr), (0, 0)))
    windows = [padded[:, a:a + stride * (ho - 1) + 1:stride, b:b + stride * (wo - 1) + 1:stride]
               for a in range(pool) for b in range(pool)]
    y[...] = np.max(np.stack(windows), axis=0)
