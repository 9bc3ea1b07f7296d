"""NumPy twins of the claim-1 kernels in ``claim1/_kernels.pxi``, compiled into
``refseg._kernels``.

Same names, same signatures (outputs written into ``out`` arrays), same arithmetic order: the
tests hold each pair equal bit for bit. Read these to audit what the compiled code does; they
are reached as ``refseg._twins``, the module of backend ``"numpy"``.
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
    """Twin of ``_kernels.rgb_to_gray`` (claim1/_kernels.pxi), for ``claim1.step2.gray``.

    out = ((wr * R + wg * G) + wb * B) / scale in float64: the three products, the two sums left
    to right, then the division, each rounded as in the kernel.
    """
    rgb = rgb.astype(np.float64)
    out[...] = ((wr * rgb[..., 0] + wg * rgb[..., 1]) + wb * rgb[..., 2]) / scale


def correlate3x3(src, kernel, out):
    """Twin of ``_kernels.correlate3x3`` (claim1/_kernels.pxi), for ``claim1.step2.gauss`` (the
    Gaussian filter) and ``claim1.step2.edges.log`` (the Laplacian response).

    3x3 correlation with reflect-101 border (spec ``R-border``), the nine products grouped as
    the kernel's ``_sum9`` groups them: the corners along the two diagonals, the side neighbours
    across the centre, corners plus sides, then the centre. A kernel with the square's
    symmetries (the Gaussian, the Laplacian) thus commutes exactly with the eight flips and
    transposes of the image.
    """
    w = _windows(np.asarray(src))
    k = np.asarray(kernel)
    corners = (k[0, 0] * w[0, 0] + k[2, 2] * w[2, 2]) + (k[0, 2] * w[0, 2] + k[2, 0] * w[2, 0])
    sides = (k[0, 1] * w[0, 1] + k[2, 1] * w[2, 1]) + (k[1, 0] * w[1, 0] + k[1, 2] * w[1, 2])
    out[...] = (corners + sides) + k[1, 1] * w[1, 1]


def _difference3(smooth, first_minus, first_plus, middle_minus, middle_plus, last_minus,
                 last_plus):
    """s0 (first_plus - first_minus) + s2 (last_plus - last_minus), then + s1 (middle_plus -
    middle_minus), as the kernel's ``_difference3``."""
    s0, s1, s2 = smooth
    return ((s0 * (first_plus - first_minus) + s2 * (last_plus - last_minus))
            + s1 * (middle_plus - middle_minus))


def gradient3x3(src, smooth, gx, gy, magnitude):
    """Twin of ``_kernels.gradient3x3`` (claim1/_kernels.pxi), for ``claim1.step2.edges.sobel``,
    ``claim1.step2.edges.prewitt`` and ``claim1.step2.edges.canny`` (its Sobel gradient).

    gx, gy: the correlations (reflect-101) with outer(smooth, [-1, 0, 1]) and its transpose,
    each formed as differences across the centre (so equal values cancel exactly) weighted by
    ``smooth``, the outer pair added before the middle; gy is gx's expression on the transposed
    neighbourhood. magnitude = sqrt(gx*gx + gy*gy).
    """
    w = _windows(np.asarray(src))
    s = np.asarray(smooth)
    gx[...] = _difference3(s, w[0, 0], w[0, 2], w[1, 0], w[1, 2], w[2, 0], w[2, 2])
    gy[...] = _difference3(s, w[0, 0], w[2, 0], w[0, 1], w[2, 1], w[0, 2], w[2, 2])
    magnitude[...] = np.sqrt(np.asarray(gx) * gx + np.asarray(gy) * gy)


def gradient_magnitude3x3(src, smooth, magnitude):
    """Twin of ``_kernels.gradient_magnitude3x3`` (claim1/_kernels.pxi), for
    ``claim1.step2.edges.prewitt``: the magnitude of :func:`gradient3x3`, gx and gy dropped."""
    gx, gy = np.empty_like(magnitude), np.empty_like(magnitude)
    gradient3x3(src, smooth, gx, gy, magnitude)


def threshold_above(src, threshold, out):
    """Twin of ``_kernels.threshold_above`` (claim1/_kernels.pxi), for
    ``claim1.step2.edges.sobel`` and ``claim1.step2.edges.prewitt`` (magnitude to edge map).

    out = 1 where src > threshold, else 0.
    """
    out[...] = np.asarray(src) > threshold


def non_maximum_suppression(gx, gy, magnitude, low, high, tan_lo, tan_hi, out):
    """Twin of ``_kernels.non_maximum_suppression`` (claim1/_kernels.pxi), for
    ``claim1.step2.edges.canny``.

    Candidates 0 suppressed, 1 weak (> low), 2 strong (> high): the gradient direction quantised
    by tan_lo and tan_hi into horizontal, vertical and the two diagonals; ``>`` on the first
    neighbour and ``>=`` on the second along the axes, ``>`` on both diagonals; magnitudes
    outside the image count as 0 (spec ``R-canny``).
    """
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


def non_maximum_suppression3x3(src, smooth, magnitude, low, high, tan_lo, tan_hi, out):
    """Twin of ``_kernels.non_maximum_suppression3x3`` (claim1/_kernels.pxi), for
    ``claim1.step2.edges.canny``.

    :func:`non_maximum_suppression` on the gx and gy of :func:`gradient3x3` (``src``,
    ``smooth``); the kernel forms them a row at a time instead of as whole images.
    """
    gx, gy, unused = (np.empty(np.shape(src)) for _ in range(3))
    gradient3x3(src, smooth, gx, gy, unused)
    non_maximum_suppression(gx, gy, magnitude, low, high, tan_lo, tan_hi, out)


def hysteresis(candidates, out):
    """Twin of ``_kernels.hysteresis`` (claim1/_kernels.pxi), for ``claim1.step2.edges.canny``.

    out = 1 on every candidate 8-connected (through candidates) to a strong one: the 8-connected
    components of the candidates that hold a 2 (the kernel grows them from their strong pixels
    with a stack; the set of pixels reached does not depend on the order).
    """
    candidates = np.asarray(candidates)
    labels, count = ndimage.label(candidates > 0, structure=np.ones((3, 3)))
    strong_labels = np.unique(labels[candidates == 2])
    out[...] = np.isin(labels, strong_labels[strong_labels > 0])


def zero_crossings(response, threshold, out):
    """Twin of ``_kernels.zero_crossings`` (claim1/_kernels.pxi), for
    ``claim1.step2.edges.log``.

    The negative side of each sign change between 4-neighbours whose jump exceeds threshold, and
    exact zeros lying between opposite signs (left/right or up/down); neighbours outside the
    image (NaN in the padding here) are not consulted (spec ``R-log``).
    """
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
    """Twin of ``_kernels.weighted_vote`` (claim1/_kernels.pxi), for
    ``claim1.step2.final_weight``.

    F = ((w0*X0 + w1*X1) + w2*X2) + w3*X3 - offset, X = 2 where edges[k] is nonzero, 1
    elsewhere: the products added to 0.0 in operator order, then the offset subtracted, as in
    the kernel.
    """
    edges = np.asarray(edges)
    f = np.zeros(edges.shape[1:])
    for k in range(4):
        f = f + weights[k] * np.where(edges[k] != 0, 2.0, 1.0)
    final_weight[...] = f - offset


def value_range(values, absolute, out):
    """Twin of ``_kernels.value_range`` (claim1/_kernels.pxi), for the automatic (Otsu)
    thresholds: out = (min, max) of the values, or of their magnitudes when ``absolute``."""
    v = np.abs(values) if absolute else np.asarray(values)
    out[0], out[1] = v.min(), v.max()


def histogram(values, low, high, absolute, counts):
    """Twin of ``_kernels.histogram`` (claim1/_kernels.pxi), for the automatic (Otsu) thresholds
    of ``claim1.step2.edges.sobel``, ``claim1.step2.edges.prewitt``,
    ``claim1.step2.edges.canny`` and ``claim1.step2.edges.log`` (of |LoG|: ``absolute``).

    counts[k] = number of values whose bin x = (v - low) * (nbins / (high - low)) truncates to
    k, x clamped to [0, nbins - 1] and a NaN x (0 * inf when high - low is subnormal) put in bin
    0: the scale rounded once, then one product per value, as in the kernel.
    """
    nbins = counts.shape[0]
    v = np.abs(values) if absolute else np.asarray(values)
    with np.errstate(invalid="ignore", over="ignore"):
        x = (v - low) * (nbins / (high - low))
        x = np.where(x >= 0, np.minimum(x, nbins - 1), 0.0)  # NaN (0 * inf) goes to bin 0
    counts[...] = np.bincount(x.astype(np.intp).ravel(), minlength=nbins)


def edge_statistics(edges, mean_image, sums, squared_deviations):
    """Twin of ``_kernels.edge_statistics`` (claim1/_kernels.pxi), for
    ``claim1.step2.mean_image``, ``claim1.step2.std`` and ``claim1.step2.cv`` (the pixel means,
    from the sums).

    For binary maps (nonzero is 1) of shape (4, rows, cols): the mean image ((e0 + e1) + e2 +
    e3) / 4, each map's sum and each map's sum of (e_k - mean)^2. Every term is a multiple of
    1/16, so NumPy's pairwise sums are exact and equal the kernel's row-by-row ones.
    """
    e = (np.asarray(edges) != 0).astype(np.float64)
    m = (((e[0] + e[1]) + e[2]) + e[3]) / 4.0
    mean_image[...] = m
    sums[...] = e.sum(axis=(1, 2))
    squared_deviations[...] = ((e - m) ** 2).sum(axis=(1, 2))
