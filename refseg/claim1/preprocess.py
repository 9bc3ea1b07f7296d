"""Claim 1, step 2, pre-processing: grayscale transform and 3x3 Gaussian filter.

References: patent CN114419081B [0077]-[0081], [0204]-[0211]; spec readings ``R-gray``,
``R-gauss``, ``R-border``.
"""
from __future__ import annotations

import math

import numpy as np

from refseg.backend import kernels
from refseg.claim1.parameters import DEFAULT_SIGMA
from refseg.vocabulary import MIN_SIZE
from refseg.errors import InputError, as_float_image
from refseg.cite import implements

#: Weighted-average grayscale weights for (R, G, B) in thousandths: ITU-R BT.601 luma
#: 0.299, 0.587, 0.114 ([0079], [0206]). Gray = (299 R + 587 G + 114 B) / 1000: for uint8 input
#: the sum is an exact integer and the one division is correctly rounded (R-gray).
GRAY_WEIGHTS_PER_MILLE = (299.0, 587.0, 114.0)
GRAY_SCALE = 1000.0
GRAY_WEIGHTS = tuple(w / GRAY_SCALE for w in GRAY_WEIGHTS_PER_MILLE)
#: Side of the Gaussian template ([0081], [0209]: "3*3").
GAUSSIAN_SIZE = 3
#: The sigmas accepted: below 0.01 the 3x3 kernel is the identity and above 1000 flat to within
#: 1e-6, so nothing outside changes a result; far outside, 2 sigma^2 overflows or underflows
#: and the kernel would be NaN.
SIGMA_RANGE = (0.01, 1000.0)
#: Border rule of every 3x3 neighbourhood operation (R-border).
BORDER = "reflect101"


@implements("claim1.step2.gray")
def to_gray(image, *, backend: str = "cython") -> np.ndarray:
    """Grayscale transform by the weighted-average method.

    Parameters
    ----------
    image : ndarray of shape (M, N, 3) or (M, N)
        RGB image, uint8 (0-255) or a finite float array on the same 0-255 scale. A 2-D array
        is already gray and is returned as float64 unchanged.
    backend : {"cython", "numpy"}
        Kernel backend for uint8 RGB input; float input always uses the NumPy formula, which
        is the same expression.

    Returns
    -------
    gray : ndarray of shape (M, N), float64
        ``((299 R + 587 G) + 114 B) / 1000`` per pixel, not rounded to an integer.

    Notes
    -----
    1. Each pixel's three channel values are multiplied by the weights 0.299, 0.587, 0.114
       and summed, top to bottom, left to right ([0079], [0205]); computed as an integer sum
       over 1000 so that uint8 results are exact to the last bit and a gray image (R = G = B)
       is returned unchanged.
    2. No rounding: Pillow's ``convert("L")`` and OpenCV's ``cvtColor`` round to uint8 with
       fixed-point weights, so they differ from this by at most 0.503 (Pillow) and 0.509
       (OpenCV 5) (spec ``R-gray``).

    Examples
    --------
    Pure red, green and blue give their weights times 255; a gray pixel keeps its value:

    >>> import numpy as np
    >>> from refseg.claim1.preprocess import to_gray
    >>> rgb = np.array([[[255, 0, 0], [0, 255, 0], [0, 0, 255], [100, 100, 100]]], np.uint8)
    >>> to_gray(rgb)
    array([[ 76.245, 149.685,  29.07 , 100.   ]])

    References
    ----------
    [0077]-[0079], [0205]-[0207]; claim 1 "灰度变换".
    """
    a = np.asarray(image)
    if a.ndim == 2:
        return as_float_image(a, "image")
    if a.ndim != 3 or a.shape[2] != 3:
        raise InputError(f"image: expected shape (rows, cols, 3) or (rows, cols), got {a.shape}")
    if min(a.shape[:2]) < 1:
        raise InputError(f"image: image is {a.shape[0]}x{a.shape[1]} pixels")
    out = np.empty(a.shape[:2], dtype=np.float64)
    if a.dtype == np.uint8:
        kernels(backend).rgb_to_gray(np.ascontiguousarray(a), *GRAY_WEIGHTS_PER_MILLE, GRAY_SCALE,
                                     out)
        return out
    if a.dtype.kind not in "biuf":
        raise InputError(f"image: expected a numeric array, got dtype {a.dtype}")
    rgb = a.astype(np.float64)
    if not np.isfinite(rgb).all():
        raise InputError("image: contains NaN or infinite values")
    kernels("numpy").rgb_to_gray(rgb, *GRAY_WEIGHTS_PER_MILLE, GRAY_SCALE, out)
    return out


@implements("claim1.step2.gauss")
def gaussian_kernel(sigma: float = DEFAULT_SIGMA) -> np.ndarray:
    """The normalised 3x3 Gaussian template.

    Parameters
    ----------
    sigma : float
        Standard deviation of the 2-D normal density, > 0.

    Returns
    -------
    kernel : ndarray of shape (3, 3), float64
        Symmetric, entries > 0, sums to 1.

    Notes
    -----
    1. Give the template's cells coordinates (x, y) in {-1, 0, 1}^2 with the centre as origin.
    2. Evaluate G(x, y) = exp(-(x^2 + y^2) / (2 sigma^2)) / (2 pi sigma^2) at each ([0210]).
    3. Divide by the sum ([0081]); the 1/(2 pi sigma^2) factor cancels here, and the result is
       the outer product of the normalised 1-D kernel with itself (what
       ``cv2.getGaussianKernel(3, sigma)`` gives for an explicit sigma).

    Examples
    --------
    >>> import numpy as np
    >>> from refseg.claim1.preprocess import gaussian_kernel
    >>> np.round(gaussian_kernel(0.8), 4)
    array([[0.0571, 0.1248, 0.0571],
           [0.1248, 0.2725, 0.1248],
           [0.0571, 0.1248, 0.0571]])

    It is the outer product of the normalised 1-D kernel ``[e, 1, e] / (1 + 2e)``,
    ``e = exp(-1 / (2 sigma^2))``:

    >>> e = np.exp(-1 / (2 * 0.8 ** 2))
    >>> one_d = np.array([e, 1.0, e]) / (1 + 2 * e)
    >>> bool(np.allclose(gaussian_kernel(0.8), np.outer(one_d, one_d), rtol=0, atol=1e-16))
    True

    References
    ----------
    [0081], [0208]-[0211].
    """
    try:
        s = float(sigma)
    except (TypeError, ValueError):
        raise InputError(f"sigma: expected a number, got {sigma!r}") from None
    low, high = SIGMA_RANGE
    if not math.isfinite(s) or not low <= s <= high:
        raise InputError(f"sigma: expected a number from {low:g} to {high:g}, got {sigma!r}")
    x = np.arange(GAUSSIAN_SIZE, dtype=np.float64) - GAUSSIAN_SIZE // 2
    xx, yy = np.meshgrid(x, x, indexing="xy")
    density = np.exp(-(xx ** 2 + yy ** 2) / (2.0 * s * s)) / (2.0 * math.pi * s * s)
    return density / density.sum()


@implements("claim1.step2.gauss")
def gaussian_blur(gray, sigma: float = DEFAULT_SIGMA, *, backend: str = "cython") -> np.ndarray:
    """Filter a gray image with the 3x3 Gaussian template.

    Parameters
    ----------
    gray : ndarray of shape (M, N), M, N >= 3
        Gray image (any real dtype; used as float64).
    sigma : float
        Standard deviation of the template, see :func:`gaussian_kernel`.
    backend : {"cython", "numpy"}

    Returns
    -------
    blurred : ndarray of shape (M, N), float64

    Notes
    -----
    1. Build the template with :func:`gaussian_kernel`.
    2. For each pixel, multiply the template by the 3x3 neighbourhood it covers and sum
       ([0081], [0208]); the template is symmetric, so correlation equals convolution. The
       products are added in pairs the square's symmetries map onto each other (the corners
       along the diagonals, the side neighbours across the centre), then the centre's: the
       result is exactly flipped or transposed with the image, and a constant image gives
       one value everywhere.
    3. Outside the image the neighbourhood is reflected without repeating the edge pixel
       (reflect-101, :data:`BORDER`).

    Examples
    --------
    A single bright pixel spreads into the template; the border rows and columns, whose
    reflected neighbourhoods do not reach it, stay 0:

    >>> import numpy as np
    >>> from refseg.claim1.preprocess import gaussian_blur, gaussian_kernel
    >>> impulse = np.zeros((5, 5))
    >>> impulse[2, 2] = 1.0
    >>> np.round(gaussian_blur(impulse, 0.8), 4)
    array([[0.    , 0.    , 0.    , 0.    , 0.    ],
           [0.    , 0.0571, 0.1248, 0.0571, 0.    ],
           [0.    , 0.1248, 0.2725, 0.1248, 0.    ],
           [0.    , 0.0571, 0.1248, 0.0571, 0.    ],
           [0.    , 0.    , 0.    , 0.    , 0.    ]])
    >>> bool(np.array_equal(gaussian_blur(impulse, 0.8)[1:4, 1:4], gaussian_kernel(0.8)))
    True

    A constant image gives one value everywhere:

    >>> np.unique(gaussian_blur(np.full((4, 6), 7.0))).size
    1

    References
    ----------
    [0080]-[0081], [0208]-[0211].
    """
    g = as_float_image(gray, "gray", min_size=MIN_SIZE)
    out = np.empty_like(g)
    kernels(backend).correlate3x3(g, gaussian_kernel(sigma), out)
    return out
