"""Claim 1, step 2: the four edge operators, each giving a raw response and a binary edge map.

Every operator reads the Gaussian-filtered gray image ([0082]: "对预处理操作后的所述待训练图像").
The binary maps feed the vote of ``weighting.py``, which asks whether an operator "has an edge"
at a pixel ([0108]-[0115]); spec reading ``R-binary`` explains why each map is binary and how
its automatic threshold is chosen.

References: [0082]-[0084], [0212]-[0214].
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from refseg.backend import kernels
from refseg.errors import InputError, as_float_image, check_threshold
from refseg.claim1.parameters import MIN_SIZE
from refseg.cite import implements

#: 1-D smoothing and derivative parts of the 3x3 kernels, combined by outer products. The
#: kernels are given their smoothing part (the derivative is always CENTRAL_DIFFERENCE), and
#: form each gradient as differences across the centre weighted by it (:func:`sobel_gradient`).
SOBEL_SMOOTH = np.array([1.0, 2.0, 1.0])
PREWITT_SMOOTH = np.array([1.0, 1.0, 1.0])
CENTRAL_DIFFERENCE = np.array([-1.0, 0.0, 1.0])
#: x-derivative kernels (positive where intensity rises to the right); y = transpose (down).
SOBEL_X = np.outer(SOBEL_SMOOTH, CENTRAL_DIFFERENCE)
SOBEL_Y = SOBEL_X.T.copy()
PREWITT_X = np.outer(PREWITT_SMOOTH, CENTRAL_DIFFERENCE)
PREWITT_Y = PREWITT_X.T.copy()
#: 4-neighbour Laplacian, applied to the Gaussian-filtered image to give the LoG (R-log).
LAPLACE_4 = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])

#: Bins of the histogram behind Otsu's threshold (scikit-image's default too) (R-binary).
OTSU_BINS = 256
#: Canny: low threshold = Otsu(Sobel magnitude), high = CANNY_HIGH_RATIO * low (Canny's 2:1).
CANNY_HIGH_RATIO = 2.0
#: LoG: a zero crossing counts when its jump exceeds LOG_JUMP_RATIO * Otsu(|response|): both
#: sides of the crossing in the edge class.
LOG_JUMP_RATIO = 2.0
#: Direction sectors of Canny's non-maximum suppression: tan(22.5 deg), tan(67.5 deg).
TAN_22_5 = math.sqrt(2.0) - 1.0
TAN_67_5 = math.sqrt(2.0) + 1.0

OPERATORS = ("canny", "sobel", "prewitt", "log")
#: Display names of the operators in figures and reports.
OPERATOR_NAMES = {"canny": "Canny", "sobel": "Sobel", "prewitt": "Prewitt", "log": "LoG"}


@dataclass(frozen=True)
class EdgeResult:
    """One operator's output.

    Attributes
    ----------
    name : str
        "canny", "sobel", "prewitt" or "log".
    response : ndarray of shape (M, N), float64
        Raw response: gradient magnitude (Canny, Sobel, Prewitt) or the LoG value (LoG).
    edges : ndarray of shape (M, N), uint8
        Binary edge map, 1 on an edge, 0 elsewhere.
    thresholds : dict of str to float
        The thresholds applied, after automatic selection.
    automatic : bool
        True when the thresholds came from the automatic rule of spec ``R-binary``.
    """

    name: str
    response: np.ndarray
    edges: np.ndarray
    thresholds: dict = field(default_factory=dict)
    automatic: bool = True


def _gradient(g, smooth, backend):
    """gx, gy, magnitude of a validated float64 image (the kernel trusts its inputs)."""
    gx, gy, magnitude = np.empty_like(g), np.empty_like(g), np.empty_like(g)
    kernels(backend).gradient3x3(g, smooth, gx, gy, magnitude)
    return gx, gy, magnitude


def _magnitude(g, smooth, backend):
    """The gradient magnitude alone, where gx and gy are not needed (Sobel, Prewitt)."""
    magnitude = np.empty_like(g)
    kernels(backend).gradient_magnitude3x3(g, smooth, magnitude)
    return magnitude


def _blurred(blurred):
    return as_float_image(blurred, "blurred", min_size=MIN_SIZE)


@implements("claim1.step2.edges.sobel", "claim1.step2.edges.prewitt",
            "claim1.step2.edges.canny", "claim1.step2.edges.log")
def otsu_threshold(values, *, bins: int = OTSU_BINS, backend: str = "cython") -> float:
    """Otsu's threshold: the split of a value histogram that maximises between-class variance.

    Parameters
    ----------
    values : ndarray of shape (M, N)
        Finite values (a gradient magnitude, or |LoG|).
    bins : int
        Number of equal-width bins spanning [min, max].
    backend : {"cython", "numpy"}

    Returns
    -------
    float
        The centre of the last bin of the lower class; ``min`` when all values are equal
        (so that ``values > threshold`` is empty).

    Notes
    -----
    1. Bin k holds the values v with ``min(int((v - min) * bins / (max - min)), bins - 1) == k``.
    2. For each split after bin k, between-class variance ``w0 w1 (m0 - m1)^2`` with class
       weights (counts) and means computed from bin centres.
    3. The first k of largest variance wins; its bin centre is the threshold (the convention
       of ``skimage.filters.threshold_otsu``).

    Examples
    --------
    Two values, 0 and 10: the lower class is the first of 256 bins, 10 / 256 wide, and the
    threshold its centre:

    >>> import numpy as np
    >>> from refseg.claim1.operators import otsu_threshold
    >>> otsu_threshold(np.array([[0.0, 0.0, 0.0], [10.0, 10.0, 10.0]]))
    0.01953125

    References
    ----------
    N. Otsu, IEEE Trans. SMC 9(1), 1979; spec ``R-binary``.
    """
    v = as_float_image(values, "values")
    if int(bins) < 2:
        raise InputError(f"bins: expected an integer >= 2, got {bins!r}")
    return _otsu(v, int(bins), backend)


def _otsu(v, bins, backend, absolute=False):
    """Otsu's threshold of ``v``, or of ``|v|`` when ``absolute`` (the LoG's rule), without
    making the array of magnitudes."""
    k = kernels(backend)
    value_range = np.empty(2)
    k.value_range(v, absolute, value_range)
    low, high = float(value_range[0]), float(value_range[1])
    if low == high:
        return low
    counts = np.empty(bins, dtype=np.int_)
    k.histogram(v, low, high, absolute, counts)
    centres = low + (np.arange(counts.size) + 0.5) * ((high - low) / counts.size)
    mass = counts * centres
    w0, w1 = np.cumsum(counts), np.cumsum(counts[::-1])[::-1]
    m0 = np.cumsum(mass)[:-1] / w0[:-1]
    m1 = np.cumsum(mass[::-1])[::-1][1:] / w1[1:]
    between = w0[:-1] * w1[1:] * (m0 - m1) ** 2
    return float(centres[int(np.argmax(between))])


def _binary_gradient(name, blurred, smooth, threshold, backend):
    magnitude = _magnitude(_blurred(blurred), smooth, backend)
    return _threshold_magnitude(name, magnitude, threshold, backend)


def _edge_map(shape, out):
    """``out`` (a plane of the caller's edge stack) or a new uint8 map."""
    return np.empty(shape, dtype=np.uint8) if out is None else out


def _threshold_magnitude(name, magnitude, threshold, backend, otsu=None, out=None):
    """``otsu``: the magnitude's Otsu threshold where the caller has it already (extract
    shares the Sobel magnitude's between Sobel and Canny); ``out``: where to write the map."""
    automatic = threshold is None
    if automatic:
        t = _otsu(magnitude, OTSU_BINS, backend) if otsu is None else otsu
    else:
        t = check_threshold(threshold, f"{name}_threshold")
    edges = _edge_map(magnitude.shape, out)
    kernels(backend).threshold_above(magnitude, t, edges)
    return EdgeResult(name, magnitude, edges, {"magnitude": t}, automatic)


def _directional(blurred, smooth, backend):
    gx, gy, _ = _gradient(_blurred(blurred), smooth, backend)
    return gx, gy


@implements("claim1.step2.edges.sobel")
def sobel_gradient(blurred, *, backend: str = "cython") -> tuple[np.ndarray, np.ndarray]:
    """The directional Sobel gradients gx and gy, whose magnitude :func:`sobel` thresholds.

    Parameters
    ----------
    blurred : ndarray of shape (M, N), M, N >= 3
        Gaussian-filtered gray image.
    backend : {"cython", "numpy"}

    Returns
    -------
    gx : ndarray of shape (M, N), float64
        3x3 correlation with :data:`SOBEL_X` = [[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]]:
        positive where intensity rises towards higher column index (rightwards).
    gy : ndarray of shape (M, N), float64
        3x3 correlation with :data:`SOBEL_Y` (the transpose): positive where intensity rises
        towards higher row index (downwards).

    Notes
    -----
    1. Outside the image the neighbourhood is reflected without repeating the edge pixel
       (reflect-101, spec ``R-border``); these are ``cv2.Sobel(blurred, cv2.CV_64F, 1, 0)``
       and ``(0, 1)`` with ``borderType=cv2.BORDER_REFLECT_101``, to rounding.
    2. gx = (1 (a+ - a-) + 1 (d+ - d-)) + 2 (b+ - b-), where a, b, d are the rows above, at
       and below the pixel and - and + the columns left and right of it; gy is the same
       expression with rows and columns exchanged. The differences come first, so equal
       neighbours cancel exactly (a constant image gives 0.0), and the expression is symmetric,
       so flipping or transposing the image flips, negates or swaps gx and gy exactly.

    Examples
    --------
    >>> import numpy as np
    >>> from refseg.claim1.operators import sobel_gradient
    >>> step = np.zeros((5, 6))
    >>> step[:, 3:] = 10.0  # a vertical step of 10 between columns 2 and 3
    >>> gx, gy = sobel_gradient(step)
    >>> gx[0]  # (1 + 2 + 1) * (10 - 0) on both sides of the step
    array([ 0.,  0., 40., 40.,  0.,  0.])
    >>> bool((gy == 0).all())
    True

    References
    ----------
    [0082]-[0083], [0212]; spec ``R-border``.
    """
    return _directional(blurred, SOBEL_SMOOTH, backend)


@implements("claim1.step2.edges.prewitt")
def prewitt_gradient(blurred, *, backend: str = "cython") -> tuple[np.ndarray, np.ndarray]:
    """The directional Prewitt gradients gx and gy, whose magnitude :func:`prewitt` thresholds.

    Parameters
    ----------
    blurred : ndarray of shape (M, N), M, N >= 3
        Gaussian-filtered gray image, as for :func:`prewitt`.
    backend : {"cython", "numpy"}

    Returns
    -------
    gx, gy : ndarray of shape (M, N), float64
        3x3 correlations with :data:`PREWITT_X` = [[-1, 0, 1], [-1, 0, 1], [-1, 0, 1]] and
        its transpose :data:`PREWITT_Y`; signs as in :func:`sobel_gradient`.

    Notes
    -----
    As :func:`sobel_gradient` with smoothing weights 1, 1, 1 (:data:`PREWITT_SMOOTH`): equal
    to ``cv2.filter2D(blurred, cv2.CV_64F, PREWITT_X, borderType=cv2.BORDER_REFLECT_101)``
    to rounding, exactly 0.0 on a constant image, exact under flips and transposes.

    Examples
    --------
    >>> import numpy as np
    >>> from refseg.claim1.operators import prewitt_gradient
    >>> step = np.zeros((5, 6))
    >>> step[:, 3:] = 10.0  # a vertical step of 10 between columns 2 and 3
    >>> gx, gy = prewitt_gradient(step)
    >>> gx[0]  # (1 + 1 + 1) * (10 - 0)
    array([ 0.,  0., 30., 30.,  0.,  0.])

    References
    ----------
    [0082]-[0083], [0212]; spec ``R-border``.
    """
    return _directional(blurred, PREWITT_SMOOTH, backend)


@implements("claim1.step2.edges.sobel")
def sobel(blurred, threshold: float | None = None, *, backend: str = "cython") -> EdgeResult:
    """Sobel operator: gradient magnitude and its thresholded edge map.

    Parameters
    ----------
    blurred : ndarray of shape (M, N), M, N >= 3
        Gaussian-filtered gray image.
    threshold : float or None
        Magnitude threshold; None selects Otsu's threshold of the magnitude (:func:`otsu_threshold`).
    backend : {"cython", "numpy"}

    Returns
    -------
    EdgeResult
        ``response`` = sqrt(gx^2 + gy^2); ``edges`` = response > threshold.

    Notes
    -----
    1. gx, gy: 3x3 correlation with :data:`SOBEL_X` = [[-1, 0, 1], [-2, 0, 2], [-1, 0, 1]]
       and its transpose :data:`SOBEL_Y`, reflect-101 border (:func:`sobel_gradient`).
    2. magnitude = sqrt(gx^2 + gy^2).
    3. edge where magnitude > threshold (strict: a constant image has magnitude 0.0, so no
       edge at any threshold >= 0).

    Examples
    --------
    >>> import numpy as np
    >>> from refseg.claim1.operators import sobel
    >>> step = np.zeros((5, 6))
    >>> step[:, 3:] = 10.0  # a vertical step of 10 between columns 2 and 3
    >>> result = sobel(step)
    >>> result.edges[0]
    array([0, 0, 1, 1, 0, 0], dtype=uint8)

    The magnitude is 0 or 40, so Otsu's threshold is the centre of the first of 256 bins:

    >>> result.thresholds == {"magnitude": 40 / 256 / 2}
    True

    References
    ----------
    [0082]-[0083], [0212]; spec ``R-binary``.
    """
    return _binary_gradient("sobel", blurred, SOBEL_SMOOTH, threshold, backend)


@implements("claim1.step2.edges.prewitt")
def prewitt(blurred, threshold: float | None = None, *, backend: str = "cython") -> EdgeResult:
    """Prewitt operator: gradient magnitude and its thresholded edge map.

    Parameters
    ----------
    blurred : ndarray of shape (M, N), M, N >= 3
        Gaussian-filtered gray image.
    threshold : float or None
        Magnitude threshold; None selects Otsu's threshold of the magnitude (:func:`otsu_threshold`).
    backend : {"cython", "numpy"}

    Returns
    -------
    EdgeResult

    Notes
    -----
    As :func:`sobel`, with :data:`PREWITT_X` = [[-1, 0, 1], [-1, 0, 1], [-1, 0, 1]] and its
    transpose (:func:`prewitt_gradient`).

    Examples
    --------
    >>> import numpy as np
    >>> from refseg.claim1.operators import prewitt
    >>> step = np.zeros((5, 6))
    >>> step[:, 3:] = 10.0  # a vertical step of 10 between columns 2 and 3
    >>> result = prewitt(step)
    >>> result.edges[0], result.thresholds == {"magnitude": 30 / 256 / 2}
    (array([0, 0, 1, 1, 0, 0], dtype=uint8), True)

    References
    ----------
    [0082]-[0083], [0212]; spec ``R-binary``.
    """
    return _binary_gradient("prewitt", blurred, PREWITT_SMOOTH, threshold, backend)


@implements("claim1.step2.edges.log")
def laplacian_of_gaussian(blurred, threshold: float | None = None, *,
                          backend: str = "cython") -> EdgeResult:
    """LoG operator: Laplacian of the Gaussian-filtered image and its zero crossings.

    Parameters
    ----------
    blurred : ndarray of shape (M, N), M, N >= 3
        Gaussian-filtered gray image (the "G" of LoG is the 3x3 filter of [0081]).
    threshold : float or None
        Minimum jump across a zero crossing; None selects 2 * Otsu(|response|).
    backend : {"cython", "numpy"}

    Returns
    -------
    EdgeResult
        ``response`` = LoG value (signed); ``edges`` = zero crossings.

    Notes
    -----
    1. response = 3x3 correlation with :data:`LAPLACE_4` (reflect-101), summed as
       ((up + down) + (left + right)) - 4 centre (the corner products are 0): exactly 0.0 on a
       constant image, and exactly flipped or transposed with the image.
    2. A pixel with response < 0 is an edge when a 4-neighbour inside the image has
       response > 0 and the difference exceeds the threshold (the negative side of the
       crossing is marked).
    3. A pixel with response exactly 0 is an edge when its left/right or up/down neighbours
       have opposite signs and differ by more than the threshold.

    Examples
    --------
    >>> import numpy as np
    >>> from refseg.claim1.operators import laplacian_of_gaussian
    >>> step = np.zeros((5, 6))
    >>> step[:, 3:] = 10.0  # a vertical step of 10 between columns 2 and 3
    >>> result = laplacian_of_gaussian(step)
    >>> result.response[0]  # the 4-neighbour Laplacian: +10 below the step, -10 above it
    array([  0.,   0.,  10., -10.,   0.,   0.])
    >>> result.edges[0]  # one zero crossing, marked on one side
    array([0, 0, 0, 1, 0, 0], dtype=uint8)
    >>> result.thresholds == {"slope": 2 * (10 / 256 / 2)}  # 2 * Otsu(|LoG|)
    True

    References
    ----------
    [0082]-[0083], [0212]; spec ``R-log``, ``R-binary``.
    """
    return _log(_blurred(blurred), threshold, backend)


def _log(g, threshold, backend, out=None):
    k = kernels(backend)
    response = np.empty_like(g)
    k.correlate3x3(g, LAPLACE_4, response)
    automatic = threshold is None
    t = (LOG_JUMP_RATIO * _otsu(response, OTSU_BINS, backend, absolute=True) if automatic
         else check_threshold(threshold, "log_threshold"))
    edges = _edge_map(g.shape, out)
    k.zero_crossings(response, t, edges)
    return EdgeResult("log", response, edges, {"slope": t}, automatic)


@implements("claim1.step2.edges.canny")
def canny_thresholds(magnitude, *, backend: str = "cython") -> tuple[float, float]:
    """Automatic (low, high): low = Otsu threshold of the Sobel magnitude, high = 2 * low.

    Parameters
    ----------
    magnitude : ndarray of shape (M, N)
        Sobel gradient magnitude of the Gaussian-filtered image.
    backend : {"cython", "numpy"}

    Returns
    -------
    (float, float)

    Notes
    -----
    Canny's candidates are then exactly the pixels of the Sobel edge map that survive
    non-maximum suppression, and a chain is kept when it reaches twice that threshold
    (Canny 1986 recommends a 2:1 to 3:1 high:low ratio). Spec ``R-binary``.

    Examples
    --------
    A magnitude of 0 or 40: low is the centre of the first of 256 bins, 40 / 256 wide:

    >>> import numpy as np
    >>> from refseg.claim1.operators import canny_thresholds
    >>> canny_thresholds(np.array([[0.0, 40.0], [40.0, 0.0]]))
    (0.078125, 0.15625)
    """
    return _canny_thresholds(as_float_image(magnitude, "magnitude"), backend)


def _canny_thresholds(magnitude, backend):
    low = _otsu(magnitude, OTSU_BINS, backend)
    return low, CANNY_HIGH_RATIO * low


def _checked_canny_thresholds(low, high, magnitude, backend, otsu):
    """(low, high, automatic): the automatic pair (from ``otsu``, the magnitude's Otsu
    threshold, where the caller has it already), or the given pair checked."""
    automatic = low is None and high is None
    if automatic:
        low, high = (_canny_thresholds(magnitude, backend) if otsu is None
                     else (otsu, CANNY_HIGH_RATIO * otsu))
    elif low is None or high is None:
        raise InputError("canny thresholds: give both low and high, or neither")
    else:
        low = check_threshold(low, "canny low threshold")
        high = check_threshold(high, "canny high threshold")
        if low > high:
            raise InputError(f"canny thresholds: low {low} is above high {high}")
    return low, high, automatic


def _hysteresis_result(candidates, magnitude, low, high, automatic, backend, out):
    edges = _edge_map(magnitude.shape, out)
    kernels(backend).hysteresis(candidates, edges)
    return EdgeResult("canny", magnitude, edges, {"low": low, "high": high}, automatic)


def _canny_from_gradient(gx, gy, magnitude, low, high, backend, otsu=None,
                         out=None) -> EdgeResult:
    """``otsu``: the magnitude's Otsu threshold where the caller has it already; ``out``:
    where to write the map."""
    low, high, automatic = _checked_canny_thresholds(low, high, magnitude, backend, otsu)
    candidates = np.empty(magnitude.shape, dtype=np.uint8)
    kernels(backend).non_maximum_suppression(gx, gy, magnitude, low, high, TAN_22_5, TAN_67_5,
                                             candidates)
    return _hysteresis_result(candidates, magnitude, low, high, automatic, backend, out)


def _canny_from_blurred(blurred, magnitude, low, high, backend, otsu=None,
                        out=None) -> EdgeResult:
    """:func:`_canny_from_gradient` with gx and gy formed from ``blurred`` a row at a time
    (the same values), so that the two whole gradient images are never held."""
    low, high, automatic = _checked_canny_thresholds(low, high, magnitude, backend, otsu)
    candidates = np.empty(magnitude.shape, dtype=np.uint8)
    kernels(backend).non_maximum_suppression3x3(blurred, SOBEL_SMOOTH, magnitude, low, high,
                                                TAN_22_5, TAN_67_5, candidates)
    return _hysteresis_result(candidates, magnitude, low, high, automatic, backend, out)


@implements("claim1.step2.edges.canny")
def canny(blurred, low: float | None = None, high: float | None = None, *,
          backend: str = "cython") -> EdgeResult:
    """Canny operator on the Gaussian-filtered image.

    Parameters
    ----------
    blurred : ndarray of shape (M, N), M, N >= 3
        Gaussian-filtered gray image; Canny adds no smoothing of its own (the 3x3 filter of
        [0081] is its smoothing step).
    low, high : float or None
        Hysteresis thresholds on the gradient magnitude; both None selects the automatic
        pair of :func:`canny_thresholds`.
    backend : {"cython", "numpy"}

    Returns
    -------
    EdgeResult
        ``response`` = Sobel gradient magnitude; ``edges`` = Canny edge map.

    Notes
    -----
    1. gx, gy, magnitude with the Sobel kernels (as :func:`sobel`).
    2. Non-maximum suppression: the gradient direction is quantised to 0, 45, 90 or 135
       degrees (sector bounds tan 22.5 and tan 67.5); a pixel is kept when its magnitude is
       > low and exceeds both neighbours along that direction (``>`` before, ``>=`` after on
       the axis directions, ``>`` on both diagonals; magnitude 0 outside the image).
    3. Hysteresis: kept pixels with magnitude > high are edges, and so is every kept pixel
       8-connected to them through kept pixels.

    Examples
    --------
    >>> import numpy as np
    >>> from refseg.claim1.operators import canny
    >>> step = np.zeros((5, 6))
    >>> step[:, 3:] = 10.0  # a vertical step of 10 between columns 2 and 3
    >>> result = canny(step)
    >>> result.edges[0]  # Sobel's two-pixel ridge, thinned to one
    array([0, 0, 1, 0, 0, 0], dtype=uint8)
    >>> result.thresholds == {"low": 40 / 256 / 2, "high": 40 / 256}  # high = 2 * low
    True

    References
    ----------
    [0082]-[0083], [0212]-[0214]; spec ``R-canny``, ``R-binary``.
    """
    g = _blurred(blurred)
    return _canny_from_blurred(g, _magnitude(g, SOBEL_SMOOTH, backend), low, high, backend)
