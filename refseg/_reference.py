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
