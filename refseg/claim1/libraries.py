"""What the libraries people use do by default, written from their documented behaviour with
NumPy and SciPy only: the steps of claim 1 as scikit-image, SciPy and OpenCV compute them when
an engineer calls them with their defaults.

Each function reproduces one call (named in its docstring); ``tests/claim1/
test_libraries.py`` holds each against the real call. :mod:`refseg.claim1.alternatives`
builds the library-default alternatives (:data:`~refseg.claim1.alternatives.LIBRARY_DEFAULTS`)
from them, and the golden bundle ships their arrays as flagged vectors, so that ``golden
check`` names the call a candidate's difference comes from.

References: none of the patent's; scikit-image 0.26, SciPy 1.17 and OpenCV's documentation.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import ndimage

INFRASTRUCTURE = "library defaults, for the flagged alternatives of the golden bundle"

#: ``skimage.color.rgb2gray``'s weights (ITU-R BT.709 as scikit-image rounds them), applied
#: after ``img_as_float`` scales uint8 to [0, 1].
SKIMAGE_GRAY_WEIGHTS = (0.2125, 0.7154, 0.0721)
#: ``skimage.filters.gaussian`` and ``scipy.ndimage.gaussian_filter``: the kernel reaches
#: ``truncate`` standard deviations (radius int(truncate * sigma + 0.5): 3, a 7x7 kernel, at
#: sigma 0.8).
GAUSSIAN_TRUNCATE = 4.0
#: The border modes of those calls: skimage's ``gaussian`` defaults to 'nearest', SciPy's
#: ``gaussian_filter`` to 'reflect' (d c b a | a b c d).
GAUSSIAN_MODES = {"skimage": "nearest", "scipy": "reflect"}
#: ``skimage.filters.sobel`` / ``prewitt``: smoothing weights normalised to sum 1, the
#: magnitude divided by sqrt(2) (the number of axes), border 'reflect'.
SKIMAGE_SMOOTH = {"sobel": np.array([1.0, 2.0, 1.0]) / 4.0,
                  "prewitt": np.array([1.0, 1.0, 1.0]) / 3.0}
SKIMAGE_EDGE_MODE = "reflect"
#: ``cv2.Laplacian(src, ddepth, ksize=3)``: the 3x3 aperture (ksize=1, the default, is the
#: 4-neighbour Laplacian refseg uses).
CV2_LAPLACIAN_KSIZE3 = np.array([[2.0, 0.0, 2.0], [0.0, -8.0, 0.0], [2.0, 0.0, 2.0]])
#: ``cv2.Canny``'s direction test: tan(22.5 degrees) in 15-bit fixed point.
CANNY_SHIFT = 15
CANNY_TG22 = int(math.tan(math.radians(22.5)) * (1 << CANNY_SHIFT) + 0.5)
#: ``skimage.feature.canny``'s defaults: its own Gaussian (sigma 1, truncate 4, mode
#: 'constant' divided by the Gaussian of the image's support), and the hysteresis thresholds
#: 0.1 and 0.2 taken as absolute gradient magnitudes for a float image (dtype_limits' maximum
#: of a float image is 1, so they are not rescaled).
SKIMAGE_CANNY_SIGMA = 1.0
SKIMAGE_CANNY_THRESHOLDS = (0.1, 0.2)
#: The lowest low threshold skimage's suppression accepts: a low threshold of 0 is raised to
#: it, so that a zero magnitude is never an edge.
SKIMAGE_CANNY_ZERO_LOW = 1e-14
#: ``scipy.ndimage.gaussian_laplace``'s defaults: truncate 4, mode 'reflect'.
SCIPY_LOG_MODE = "reflect"
#: The factor the int16 gradients of ``cv2.Canny(dx, dy, ...)`` are scaled by before
#: rounding (the largest Sobel component of a 0-255 image, 1020, times 32 fits int16), and
#: the thresholds with them.
CV2_GRADIENT_SCALE = 32.0


def skimage_gray(rgb) -> np.ndarray:
    """``skimage.color.rgb2gray(rgb)`` of a uint8 image: (0.2125 R + 0.7154 G + 0.0721 B) on
    the [0, 1] scale, float64 (M, N)."""
    f = np.asarray(rgb, dtype=np.float64) / 255.0
    return f @ np.array(SKIMAGE_GRAY_WEIGHTS)


def gaussian(gray, sigma: float, library: str) -> np.ndarray:
    """``skimage.filters.gaussian(gray, sigma)`` (library "skimage") or
    ``scipy.ndimage.gaussian_filter(gray, sigma)`` ("scipy") with their default truncate and
    border mode, float64 (M, N)."""
    return ndimage.gaussian_filter(np.asarray(gray, dtype=np.float64), sigma,
                                   mode=GAUSSIAN_MODES[library], truncate=GAUSSIAN_TRUNCATE)


def skimage_magnitude(blurred, operator: str) -> np.ndarray:
    """``skimage.filters.sobel(blurred)`` or ``prewitt(blurred)``: sqrt((gx^2 + gy^2) / 2) of
    the normalised kernels, border 'reflect'; 1 / (4 sqrt 2) (Sobel) or 1 / (3 sqrt 2)
    (Prewitt) of refseg's magnitude inside the border ring."""
    b = np.asarray(blurred, dtype=np.float64)
    smooth, diff = SKIMAGE_SMOOTH[operator], np.array([1.0, 0.0, -1.0])
    # the same operations in place, into two planes reused for both axes: three planes at
    # most, not five
    total, across, along = np.zeros_like(b), np.empty_like(b), np.empty_like(b)
    for axis in (0, 1):
        ndimage.correlate1d(b, diff, axis=axis, output=across, mode=SKIMAGE_EDGE_MODE)
        ndimage.correlate1d(across, smooth, axis=1 - axis, output=along,
                            mode=SKIMAGE_EDGE_MODE)
        total += np.multiply(along, along, out=along)
    del across, along
    return np.sqrt(np.divide(total, 2.0, out=total), out=total)


def numpy_otsu(values, bins: int = 256, absolute: bool = False) -> float:
    """``skimage.filters.threshold_otsu(values)`` of a float array: ``np.histogram``'s bins
    over [min, max] (a value on an inner edge goes to the upper bin, the maximum to the last),
    bin centres (e_k + e_k+1) / 2, the between-class variance maximised over the centres.
    refseg's rule truncates (v - min) * (bins / (max - min)) instead, which puts values that
    sit on a bin edge (few grey levels) in other bins."""
    v = np.abs(values) if absolute else np.asarray(values, dtype=np.float64)
    v = v.ravel()
    if np.all(v == v[0]):
        return float(v[0])
    counts, edges = np.histogram(v, bins=bins, range=(float(v.min()), float(v.max())))
    centres = (edges[:-1] + edges[1:]) / 2.0
    weight1 = np.cumsum(counts)
    weight2 = np.cumsum(counts[::-1])[::-1]
    mean1 = np.cumsum(counts * centres) / weight1
    mean2 = (np.cumsum((counts * centres)[::-1]) / weight2[::-1])[::-1]
    variance = weight1[:-1] * weight2[1:] * (mean1[:-1] - mean2[1:]) ** 2
    return float(centres[int(np.argmax(variance))])


#: Pixels per block of rows of :func:`int16_gradients` and :func:`opencv_canny`: their
#: float and int64 temporaries are a block's, not a whole image's.
BLOCK_PIXELS = 1 << 16


def _row_blocks(rows: int, cols: int):
    """Slices of at most :data:`BLOCK_PIXELS` pixels (at least one row) covering ``rows``."""
    step = max(1, BLOCK_PIXELS // max(cols, 1))
    return [slice(start, start + step) for start in range(0, rows, step)]


def int16_gradients(gx, gy, scale: float = CV2_GRADIENT_SCALE):
    """The gradients as ``cv2.Canny(dx, dy, ...)`` takes them: ``np.round(scale * g)`` as
    int16."""
    out = []
    for g in (np.asarray(gx), np.asarray(gy)):
        rounded = np.empty(g.shape, dtype=np.int16)
        for rows in _row_blocks(g.shape[0], g.shape[1] if g.ndim > 1 else 1):
            rounded[rows] = np.round(g[rows] * scale).astype(np.int16)
        out.append(rounded)
    return tuple(out)


def opencv_canny(dx, dy, low: float, high: float, l2gradient: bool) -> np.ndarray:
    """``cv2.Canny(dx, dy, low, high, L2gradient=l2gradient) > 0`` as uint8 0/1 (M, N).

    Notes
    -----
    1. Magnitude in integers: dx^2 + dy^2 with the thresholds squared (L2), or |dx| + |dy|
       (L1, OpenCV's default); thresholds floored to integers.
    2. Direction from |dy| * 2^15 against |dx| * tan(22.5) * 2^15 (fixed point); the
       neighbours outside the image have magnitude 0.
    3. Non-maximum suppression with OpenCV's asymmetric comparisons: along a row or a column,
       greater than the neighbour before and at least the one after; diagonally, greater than
       both.
    4. Candidates above low, seeds above high, hysteresis through 8 neighbours.
    """
    dx, dy = np.asarray(dx), np.asarray(dy)
    if l2gradient:
        low, high = min(32767.0, low), min(32767.0, high)
        low, high = (low * low if low > 0 else low), (high * high if high > 0 else high)
    low_i, high_i = math.floor(low), math.floor(high)
    rows, cols = dx.shape
    blocks = _row_blocks(rows, cols)
    # the magnitude with a ring of zeros, the neighbours outside the image; the rest a block
    # of rows at a time
    m = np.zeros((rows + 2, cols + 2), dtype=np.int64)
    mag = m[1:-1, 1:-1]
    for block in blocks:
        bx, by = dx[block].astype(np.int64), dy[block].astype(np.int64)
        mag[block] = bx * bx + by * by if l2gradient else np.abs(bx) + np.abs(by)
    candidates = np.empty((rows, cols), dtype=bool)
    seeds = np.empty((rows, cols), dtype=bool)
    for block in blocks:
        top, count = block.start, len(range(rows)[block])
        bx, by = dx[block].astype(np.int64), dy[block].astype(np.int64)
        here = mag[block]

        def at(dr, dc):
            return m[1 + top + dr:1 + top + dr + count, 1 + dc:1 + dc + cols]

        x, y = np.abs(bx), np.abs(by) << CANNY_SHIFT
        tg22x = x * CANNY_TG22
        tg67x = tg22x + (x << (CANNY_SHIFT + 1))
        horizontal = y < tg22x
        vertical = ~horizontal & (y > tg67x)
        diagonal = ~horizontal & ~vertical
        s = np.where((bx ^ by) < 0, -1, 1)
        keep_h = (here > at(0, -1)) & (here >= at(0, 1))
        keep_v = (here > at(-1, 0)) & (here >= at(1, 0))
        keep_d = np.where(s < 0, (here > at(-1, 1)) & (here > at(1, -1)),
                          (here > at(-1, -1)) & (here > at(1, 1)))
        maximum = (horizontal & keep_h) | (vertical & keep_v) | (diagonal & keep_d)
        candidates[block] = (here > low_i) & maximum
        seeds[block] = candidates[block] & (here > high_i)
    del m, mag
    labels, _ = ndimage.label(candidates, structure=np.ones((3, 3)))
    del candidates
    strong = np.unique(labels[seeds])
    return np.isin(labels, strong[strong > 0]).astype(np.uint8)


def skimage_canny(image, sigma: float = SKIMAGE_CANNY_SIGMA, low: float | None = None,
                  high: float | None = None) -> np.ndarray:
    """``skimage.feature.canny(image, sigma, low, high)`` of a float image as uint8 0/1
    (M, N): what a scikit-image user gets when the claim's blurred image goes to its Canny.

    Notes
    -----
    1. Its own smoothing: ``gaussian_filter`` (truncate 4) in mode 'constant' (zero outside),
       divided by the same filter of an image of ones plus machine epsilon, so that the border
       is not darkened.
    2. Gradients: ``scipy.ndimage.sobel`` along each axis (mode 'reflect'), unnormalised;
       magnitude sqrt(gi^2 + gj^2).
    3. Non-maximum suppression with bilinear interpolation between the two neighbours that
       bracket the gradient direction, on each side: kept when neither interpolated
       magnitude exceeds m. The outermost ring of pixels is never an edge. The low threshold
       is held as a C float (float32) and compared with >=; a low threshold of 0 becomes
       1e-14.
    4. Hysteresis: the kept pixels 8-connected to one with m >= high. Default thresholds 0.1
       and 0.2 (absolute for a float image: the scale of the image decides what they mean).
    """
    img = np.asarray(image, dtype=np.float64)
    low = SKIMAGE_CANNY_THRESHOLDS[0] if low is None else float(low)
    high = SKIMAGE_CANNY_THRESHOLDS[1] if high is None else float(high)
    if low == 0:
        low = SKIMAGE_CANNY_ZERO_LOW
    low = float(np.float32(low))
    # computed in place and, past the gradients, a block of rows at a time: the golden
    # comparison runs this on photographs beside refseg's own arrays
    smoothed = ndimage.gaussian_filter(img, sigma, mode="constant", truncate=GAUSSIAN_TRUNCATE)
    support = ndimage.gaussian_filter(np.ones_like(img), sigma, mode="constant",
                                      truncate=GAUSSIAN_TRUNCATE)
    support += np.finfo(np.float64).eps
    smoothed /= support
    del support
    gi = ndimage.sobel(smoothed, axis=0)
    gj = ndimage.sobel(smoothed, axis=1)
    del smoothed
    rows, cols = gi.shape
    mag = np.empty_like(gi)
    for block in _row_blocks(rows, cols):
        square = gj[block] * gj[block]
        np.multiply(gi[block], gi[block], out=mag[block])
        mag[block] += square
        np.sqrt(mag[block], out=mag[block])
    kept = np.zeros(mag.shape, dtype=bool)
    if rows > 2 and cols > 2:
        for block in _row_blocks(rows - 2, cols):
            r0, r1 = block.start + 1, min(block.stop, rows - 2) + 1
            kept[r0:r1, 1:-1] = _skimage_nms(gi, gj, mag, r0, r1) & (mag[r0:r1, 1:-1] >= low)
    del gi, gj
    strong = kept & (mag >= high)
    del mag
    labels, count = ndimage.label(kept, structure=np.ones((3, 3), dtype=bool))
    if count == 0:
        return kept.astype(np.uint8)
    seeded = np.zeros(count + 1, dtype=bool)
    seeded[labels[strong]] = True
    seeded[0] = False
    return seeded[labels].astype(np.uint8)


#: For each (same sign of the two gradients, rows the major axis): the two neighbours
#: bracketing the gradient direction on each side of a pixel, (nearest, diagonal).
SKIMAGE_NMS_NEIGHBOURS = {(True, True): (((1, 0), (1, 1)), ((-1, 0), (-1, -1))),
                          (True, False): (((0, 1), (1, 1)), ((0, -1), (-1, -1))),
                          (False, False): (((0, 1), (-1, 1)), ((0, -1), (1, -1))),
                          (False, True): (((-1, 0), (-1, 1)), ((1, 0), (1, -1)))}


def _skimage_nms(gi, gj, mag, r0: int, r1: int) -> np.ndarray:
    """skimage's suppression of rows ``r0:r1`` of the inner pixels (columns 1 to N-2):
    True where neither neighbour interpolated along the gradient exceeds the magnitude."""
    cols = mag.shape[1]

    def at(dr, dc):
        return mag[r0 + dr:r1 + dr, 1 + dc:cols - 1 + dc]

    i, j, m = gi[r0:r1, 1:-1], gj[r0:r1, 1:-1], mag[r0:r1, 1:-1]
    ai, aj = np.abs(i), np.abs(j)
    # same sign (zero counting as negative): the direction lies in the 1st/3rd quadrant
    same = (i > 0) == (j > 0)
    rows_major = np.where(same, ai > aj, ai >= aj)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(rows_major, aj / ai, ai / aj)
    keep = np.zeros(m.shape, dtype=bool)
    for (same_sign, major), sides in SKIMAGE_NMS_NEIGHBOURS.items():
        ok = (same == same_sign) & (rows_major == major)
        for near, diagonal in sides:
            ok &= (at(*diagonal) * w + at(*near) * (1.0 - w)) <= m
        keep |= ok
    return keep


def gaussian_laplace(gray, sigma: float) -> np.ndarray:
    """``scipy.ndimage.gaussian_laplace(gray, sigma)`` with its defaults (truncate 4, mode
    'reflect'): a Laplacian of a whole Gaussian of the gray image, float64 (M, N)."""
    return ndimage.gaussian_laplace(np.asarray(gray, dtype=np.float64), sigma,
                                    mode=SCIPY_LOG_MODE, truncate=GAUSSIAN_TRUNCATE)
