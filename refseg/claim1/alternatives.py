"""The rejected and plausible alternatives to every reading of claim 1's missing formulas.

``spec/readings.md`` states, for each formula or parameter the patent lost, the reading refseg
implements and the alternatives it set aside. This module computes the feature-region image
under any one of those alternatives, built from the same steps as
:func:`refseg.claim1.features.extract` (the same kernels, in the same order), so that the
sensitivity audit (``refseg audit readings``, :mod:`refseg.audit`) can hold each alternative
against the chosen reading on the same images, and a training run can take an alternative's
feature image as its input (``TrainConfig.feature_reading``).

A :class:`Variant` holds one value for each choice; its defaults are refseg's readings, and
:func:`extract_variant` with the default :class:`Variant` gives exactly what
:func:`~refseg.claim1.features.extract` gives, bit for bit. :data:`ALTERNATIVES` lists the
alternatives the audit measures, each one :class:`Variant` field away from the defaults.

References: [0077]-[0119], [0203]-[0214]; spec ``readings.md``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace

import numpy as np
from scipy import ndimage

from refseg.backend import kernels
from refseg.claim1 import libraries
from refseg.claim1 import operators as ops
from refseg.claim1 import preprocess
from refseg.claim1 import weighting
from refseg.claim1.operators import OPERATORS
from refseg.claim1.parameters import DEFAULT_SIGMA, KEEP
from refseg.vocabulary import MIN_SIZE
from refseg.errors import InputError, as_float_image

INFRASTRUCTURE = "alternatives to the claim-1 readings, for the sensitivity audit"

#: Grayscale rules (R-gray): name -> (weights of R, G, B, divisor) for the weighted ones.
GRAY_RULES = {"bt601": (*preprocess.GRAY_WEIGHTS_PER_MILLE, preprocess.GRAY_SCALE),
              "average": (1.0, 1.0, 1.0, 3.0),
              "bt709": (2126.0, 7152.0, 722.0, 10000.0),
              "maximum": None, "green": None, "rounded": None, "skimage": None}
#: The 3x3 binomial table [1, 2, 1]/4 x [1, 2, 1]/4 that OpenCV's ``getGaussianKernel(3, 0)``
#: returns (R-gauss).
BINOMIAL_3X3 = np.outer([0.25, 0.5, 0.25], [0.25, 0.5, 0.25])
#: Border rules (R-border) and their ``np.pad`` / ``scipy.ndimage`` modes.
BORDERS = {"reflect101": ("reflect", "mirror"), "zero": ("constant", "constant"),
           "replicate": ("edge", "nearest")}
#: What an operator's edge image is (R-binary): a binary map, or a continuous response in
#: [0, 1] voted on literally (X = 2 where > 0, [0106]) or graded (X = 1 + E).
EDGE_KINDS = ("binary", "continuous-literal", "continuous-graded")
#: Automatic threshold rules (R-binary): Otsu (refseg's) or MATLAB ``edge()``'s defaults.
THRESHOLD_RULES = ("otsu", "matlab")
#: The 8-neighbour Laplacian, an alternative to the 4-neighbour one (R-log).
LAPLACE_8 = np.array([[1.0, 1.0, 1.0], [1.0, -8.0, 1.0], [1.0, 1.0, 1.0]])
#: MATLAB's LoG of ``edge(I, 'log')``: 13x13, sigma 2 (R-log's rejected second Gaussian).
LOG13_SIZE, LOG13_SIGMA = 13, 2.0
#: MATLAB ``edge()`` defaults: Canny's high threshold is this quantile of the magnitude and
#: low = ratio * high; Sobel/Prewitt cut at sqrt(scale * mean(magnitude^2)); LoG's jump at
#: scale * mean(|LoG|).
MATLAB_CANNY_QUANTILE, MATLAB_CANNY_LOW_RATIO = 0.7, 0.4
MATLAB_GRADIENT_SCALE, MATLAB_LOG_SCALE = 4.0, 0.75
#: The weights of the worked example [0107]-[0115] (Canny 0.4, the others 0.2).
EXAMPLE_WEIGHTS = {"canny": 0.4, "sobel": 0.2, "prewitt": 0.2, "log": 0.2}


@dataclass(frozen=True)
class Variant:
    """One value for every choice a claim-1 reading makes; the defaults are refseg's.

    Attributes
    ----------
    gray : str
        A key of :data:`GRAY_RULES` (R-gray): "bt601" (0.299, 0.587, 0.114), "average",
        "bt709", "maximum" of the channels, the "green" component, or BT.601 "rounded" to
        integers.
    sigma : float or None
        Standard deviation of the 3x3 Gaussian (R-gauss); None: :data:`BINOMIAL_3X3`.
    border : str
        A key of :data:`BORDERS` (R-border) for the Gaussian, gradient and Laplacian filters.
    edge_kind : str
        One of :data:`EDGE_KINDS` (R-binary).
    thresholds : str
        One of :data:`THRESHOLD_RULES` (R-binary).
    thin_gradients : bool
        Sobel and Prewitt maps thinned by Canny's non-maximum suppression (R-binary).
    canny_ratio : float
        Canny's high : low threshold ratio (R-canny, R-binary).
    canny_otsu : str
        "low": Otsu's threshold is Canny's low one (high = ratio x low); "high": it is the high
        one (low = high / ratio).
    canny_connectivity : int
        8 or 4: the neighbours through which hysteresis grows a chain (R-canny).
    log_ratio : float
        LoG's jump threshold in units of Otsu(|LoG|) (R-log, R-binary).
    log_kernel : str
        "laplace4", "laplace8", or "log13" (MATLAB's 13x13 LoG of sigma 2 on the filtered
        image) (R-log).
    log_side : str
        "negative" or "positive": which side of a zero crossing is marked (R-log).
    map_scale : float
        The value of an edge pixel in the edge images (1, or 255 for 0/255 images) (R-mean).
    std_about : str
        "mean_image" (deviation from the gray-mean image) or "own_mean" (R-std).
    std_ddof : int
        Divisor M*N - std_ddof of the standard deviation (R-std).
    cv_mean : str
        "own": V_i = sigma_i / mu_i; "mean_image": V_i = sigma_i / mean(gray-mean image)
        (R-cv).
    empty : str
        "zero": an empty map has V = 0 (R-empty); "takes_all": the limit mu -> 0, the empty
        maps share all the weight.
    weights : str
        "share": w_i = V_i / sum V (R-weights); "inverse": w_i proportional to 1 / V_i;
        "equal": 1/4 each.
    offset : float
        F = sum w_i X_i - offset (R-final).
    blur : str
        "refseg" (the 3x3 template), or the whole Gaussian of "skimage"
        (``skimage.filters.gaussian``) or "scipy" (``scipy.ndimage.gaussian_filter``) with
        their default truncate and border (:func:`~refseg.claim1.libraries.gaussian`).
    gradient_scale : str
        "refseg", or "skimage": Sobel's and Prewitt's responses as ``skimage.filters.sobel``
        / ``prewitt`` give them (:func:`~refseg.claim1.libraries.skimage_magnitude`).
    otsu_binning : str
        "refseg" (the manifest's truncation rule), or "numpy": ``skimage.filters.
        threshold_otsu``'s ``np.histogram`` bins (:func:`~refseg.claim1.libraries.
        numpy_otsu`) for every automatic threshold.
    canny_library : str
        "refseg", or "opencv-l2" / "opencv-l1": ``cv2.Canny`` on the int16 gradients (x 32)
        with L2gradient True / False (:func:`~refseg.claim1.libraries.opencv_canny`).
    """

    gray: str = "bt601"
    sigma: float | None = DEFAULT_SIGMA
    border: str = "reflect101"
    edge_kind: str = "binary"
    thresholds: str = "otsu"
    thin_gradients: bool = False
    canny_ratio: float = ops.CANNY_HIGH_RATIO
    canny_otsu: str = "low"
    canny_connectivity: int = 8
    log_ratio: float = ops.LOG_JUMP_RATIO
    log_kernel: str = "laplace4"
    log_side: str = "negative"
    map_scale: float = 1.0
    std_about: str = "mean_image"
    std_ddof: int = weighting.STD_DDOF
    cv_mean: str = "own"
    empty: str = "zero"
    weights: str = "share"
    offset: float = weighting.VOTE_OFFSET
    blur: str = "refseg"
    gradient_scale: str = "refseg"
    otsu_binning: str = "refseg"
    canny_library: str = "refseg"

    def changes(self) -> dict:
        """The fields that differ from refseg's readings, {name: value}."""
        chosen = Variant()
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) != getattr(chosen, f.name)}

    def check(self) -> "Variant":
        """InputError naming the field when a value is not one this module computes."""
        allowed = {"gray": tuple(GRAY_RULES), "border": tuple(BORDERS),
                   "edge_kind": EDGE_KINDS, "thresholds": THRESHOLD_RULES,
                   "canny_otsu": ("low", "high"), "canny_connectivity": (4, 8),
                   "log_kernel": ("laplace4", "laplace8", "log13", "cv2-ksize3"),
                   "blur": ("refseg", "skimage", "scipy"),
                   "gradient_scale": ("refseg", "skimage"),
                   "otsu_binning": ("refseg", "numpy"),
                   "canny_library": ("refseg", "opencv-l2", "opencv-l1"),
                   "log_side": ("negative", "positive"), "std_about": ("mean_image", "own_mean"),
                   "std_ddof": (0, 1), "cv_mean": ("own", "mean_image"),
                   "empty": ("zero", "takes_all"), "weights": ("share", "inverse", "equal")}
        for name, values in allowed.items():
            if getattr(self, name) not in values:
                raise InputError(f"variant: {name} must be one of {values}, "
                                 f"got {getattr(self, name)!r}")
        for name in ("canny_ratio", "log_ratio", "map_scale", "offset"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise InputError(f"variant: {name} must be a finite number > 0, got {value!r}")
        if self.sigma is not None:
            preprocess.gaussian_kernel(self.sigma)  # its own range check
        return self


@dataclass(frozen=True)
class Alternative:
    """One alternative to one reading: a stable name, the reading it replaces, what it is,
    and the :class:`Variant` that computes it."""

    name: str
    reading: str
    text: str
    variant: Variant = field(default_factory=Variant)


def _alt(name, reading, text, **changes) -> Alternative:
    return Alternative(name, reading, text, replace(Variant(), **changes))


#: Every alternative the audit measures, in the order of ``readings.md``; each differs from
#: refseg's readings in one choice. The first group of each reading is what ``readings.md``
#: rejects; the others are plausible values of a parameter the text does not give.
ALTERNATIVES = tuple(_alt(*a[:3], **a[3]) for a in (
    ("border-zero", "R-border", "zero padding (constant 0)", {"border": "zero"}),
    ("border-replicate", "R-border", "replicate the edge pixel", {"border": "replicate"}),
    ("gray-average", "R-gray", "average (R + G + B) / 3", {"gray": "average"}),
    ("gray-maximum", "R-gray", "maximum of R, G, B", {"gray": "maximum"}),
    ("gray-green", "R-gray", "component method: the G channel", {"gray": "green"}),
    ("gray-bt709", "R-gray", "BT.709 weights 0.2126, 0.7152, 0.0722", {"gray": "bt709"}),
    ("gray-rounded", "R-gray", "BT.601 rounded to integers (uint8)", {"gray": "rounded"}),
    ("gauss-sigma-1", "R-gauss", "sigma = 1", {"sigma": 1.0}),
    ("gauss-binomial", "R-gauss", "OpenCV's fixed table [1, 2, 1]/4 (sigma 0)", {"sigma": None}),
    ("gauss-sigma-0.5", "R-gauss", "sigma = 0.5", {"sigma": 0.5}),
    ("gauss-sigma-1.5", "R-gauss", "sigma = 1.5", {"sigma": 1.5}),
    ("binary-matlab", "R-binary", "MATLAB edge() default thresholds", {"thresholds": "matlab"}),
    ("binary-thinned", "R-binary", "Sobel and Prewitt thinned (non-maximum suppression)",
     {"thin_gradients": True}),
    ("continuous-literal", "R-binary", "continuous responses, X = 2 where > 0 ([0106])",
     {"edge_kind": "continuous-literal"}),
    ("continuous-graded", "R-binary", "continuous responses in [0, 1], X = 1 + E",
     {"edge_kind": "continuous-graded"}),
    ("canny-ratio-1.5", "R-canny", "high = 1.5 x low", {"canny_ratio": 1.5}),
    ("canny-ratio-3", "R-canny", "high = 3 x low", {"canny_ratio": 3.0}),
    ("canny-otsu-high", "R-canny", "Otsu is the high threshold, low = Otsu / 2",
     {"canny_otsu": "high"}),
    ("canny-4-connected", "R-canny", "hysteresis through 4-neighbours",
     {"canny_connectivity": 4}),
    ("log-ratio-1", "R-log", "jump > 1 x Otsu(|LoG|)", {"log_ratio": 1.0}),
    ("log-ratio-3", "R-log", "jump > 3 x Otsu(|LoG|)", {"log_ratio": 3.0}),
    ("log-positive", "R-log", "the positive side of a crossing marked", {"log_side": "positive"}),
    ("log-laplace8", "R-log", "8-neighbour Laplacian", {"log_kernel": "laplace8"}),
    ("log-13x13", "R-log", "a second Gaussian: MATLAB's 13x13 LoG, sigma 2",
     {"log_kernel": "log13"}),
    ("mean-255", "R-mean", "edge images 0/255 instead of 0/1", {"map_scale": 255.0}),
    ("std-own-mean", "R-std", "deviation about each map's own mean", {"std_about": "own_mean"}),
    ("std-ddof-1", "R-std", "divisor M*N - 1", {"std_ddof": 1}),
    ("cv-mean-image", "R-cv", "V_i = sigma_i / mean of the gray-mean image",
     {"cv_mean": "mean_image"}),
    ("empty-takes-all", "R-empty", "an empty map takes all the weight (mu -> 0)",
     {"empty": "takes_all"}),
    ("weights-inverse", "R-weights", "w_i proportional to 1 / V_i", {"weights": "inverse"}),
    ("weights-equal", "R-weights", "equal weights 1/4", {"weights": "equal"}),
    ("offset-1.45", "R-final", "offset 1.45 (inside (1.4, 1.6])", {"offset": 1.45}),
    ("offset-1.55", "R-final", "offset 1.55 (inside (1.4, 1.6])", {"offset": 1.55}),
    ("offset-1.6", "R-final", "offset 1.6 (the interval's end)", {"offset": 1.6}),
    ("offset-1.4", "R-final", "offset 1.4 (just outside)", {"offset": 1.4}),
    ("offset-1.7", "R-final", "offset 1.7 (outside)", {"offset": 1.7}),
))
#: The alternatives by name.
BY_NAME = {a.name: a for a in ALTERNATIVES}
#: The libraries' own defaults, named after the call an engineer writes: flagged vectors of
#: the golden bundle (not alternatives the sensitivity audit measures). Where a call gives
#: one of :data:`ALTERNATIVES` exactly, that alternative names it instead (``golden.flagged.
#: LIBRARY_CALLS``).
LIBRARY_DEFAULTS = tuple(_alt(*a[:3], **a[3]) for a in (
    ("skimage.color.rgb2gray", "R-gray", "skimage.color.rgb2gray: 0.2125 R + 0.7154 G + "
     "0.0721 B on the [0, 1] scale", {"gray": "skimage"}),
    ("skimage.filters.gaussian", "R-gauss", "skimage.filters.gaussian(gray, 0.8): truncate=4 "
     "(7x7), mode 'nearest'", {"blur": "skimage"}),
    ("scipy.ndimage.gaussian_filter", "R-gauss", "scipy.ndimage.gaussian_filter(gray, 0.8): "
     "truncate=4 (7x7), mode 'reflect'", {"blur": "scipy"}),
    ("skimage.filters.sobel", "R-binary", "skimage.filters.sobel / prewitt: normalised "
     "kernels, magnitude / sqrt(2), mode 'reflect'", {"gradient_scale": "skimage"}),
    ("skimage.filters.threshold_otsu", "R-binary", "skimage.filters.threshold_otsu: "
     "np.histogram's bins for every Otsu threshold", {"otsu_binning": "numpy"}),
    ("cv2.Canny-L2", "R-canny", "cv2.Canny(dx, dy, L2gradient=True) on int16 gradients "
     "(x 32)", {"canny_library": "opencv-l2"}),
    ("cv2.Canny-L1", "R-canny", "cv2.Canny(dx, dy) on int16 gradients (x 32), its default "
     "L1 norm |dx| + |dy|", {"canny_library": "opencv-l1"}),
    ("cv2.Laplacian-ksize3", "R-log", "cv2.Laplacian(ksize=3): [[2, 0, 2], [0, -8, 0], "
     "[2, 0, 2]]", {"log_kernel": "cv2-ksize3"}),
))


@dataclass(frozen=True)
class VariantResult:
    """The intermediates of one image under one :class:`Variant` (M rows, N columns).

    Attributes
    ----------
    gray, blurred : ndarray of shape (M, N), float64
    edges : dict of str to ndarray of shape (M, N)
        uint8 0/1 maps (binary kinds), or float64 responses in [0, 1] (continuous kinds).
    weights : dict of str to float
    final_weight : ndarray of shape (M, N), float64
    feature_map : ndarray of shape (M, N), uint8
        1 where F >= 0.
    feature_image : ndarray of shape (M, N), float32 in [0, 1]
        What a network gets: the feature map, or for "continuous-graded" the weighted
        response sum_i w_i E_i (= F + offset - 1) before the decision.
    responses : dict of str to ndarray of shape (M, N), float64
        Each operator's raw response (gradient magnitude; the signed Laplacian), keys as
        :data:`OPERATORS`.
    thresholds : dict of str to dict of str to float
        The thresholds each binary map was cut at (as :func:`features.extract`'s); empty
        for the continuous kinds.
    statistics : dict of str to ndarray
        ``mean_image``, ``std``, ``mean``, ``cv`` and ``intermediate_cv`` of the edge images,
        as :func:`features.extract` gives them.

    Notes
    -----
    From ``extract_variant(..., keep="maps")`` ``gray``, ``blurred``, ``final_weight`` and
    ``feature_image`` are None, and ``responses``, ``thresholds`` and ``statistics`` empty.
    """

    gray: np.ndarray
    blurred: np.ndarray
    edges: dict
    weights: dict
    final_weight: np.ndarray
    feature_map: np.ndarray
    feature_image: np.ndarray
    responses: dict = field(default_factory=dict)
    thresholds: dict = field(default_factory=dict)
    statistics: dict = field(default_factory=dict)


# ------------------------------------------------------------------------- pre-processing
def _gray(rgb, rule, backend):
    if rule == "bt601":
        return preprocess.to_gray(rgb, backend=backend)
    a = np.asarray(rgb)
    if a.ndim == 2:  # already gray: every rule of a gray image is the image
        return as_float_image(a, "image")
    if rule == "rounded":
        return np.floor(preprocess.to_gray(rgb, backend=backend) + 0.5)
    preprocess.to_gray(a[:1, :1], backend="numpy")  # to_gray's shape and dtype checks
    if rule == "skimage":
        return (libraries.skimage_gray(a) if a.dtype == np.uint8
                else a.astype(np.float64) @ np.array(libraries.SKIMAGE_GRAY_WEIGHTS))
    if rule == "maximum":
        return a.max(axis=2).astype(np.float64)
    if rule == "green":
        return a[:, :, 1].astype(np.float64)
    *w, scale = GRAY_RULES[rule]
    out = np.empty(a.shape[:2], dtype=np.float64)
    source = np.ascontiguousarray(a) if a.dtype == np.uint8 else a.astype(np.float64)
    kernels(backend if a.dtype == np.uint8 else "numpy").rgb_to_gray(source, *w, scale, out)
    return out


def _padded(g, border):
    return np.ascontiguousarray(np.pad(g, 1, mode=BORDERS[border][0]))


def _correlate(g, kernel, border, backend):
    """3x3 correlation of a validated float64 image under a border rule: reflect-101 is the
    kernel's own; the others pad by one pixel, correlate, and keep the inside (whose windows
    never leave the padded image)."""
    source = g if border == "reflect101" else _padded(g, border)
    out = np.empty_like(source)
    kernels(backend).correlate3x3(source, kernel, out)
    return out if border == "reflect101" else np.ascontiguousarray(out[1:-1, 1:-1])


def _gradient(g, smooth, border, backend):
    if border == "reflect101":
        return ops._gradient(g, smooth, backend)
    gx, gy, m = ops._gradient(_padded(g, border), smooth, backend)
    return tuple(np.ascontiguousarray(a[1:-1, 1:-1]) for a in (gx, gy, m))


def log13_kernel() -> np.ndarray:
    """MATLAB's ``fspecial('log', 13, 2)``: the sampled Gaussian, normalised, times
    (x^2 + y^2 - 2 sigma^2) / sigma^4, shifted to sum to 0; shape (13, 13), float64."""
    half = LOG13_SIZE // 2
    x = np.arange(-half, half + 1, dtype=np.float64)
    xx, yy = np.meshgrid(x, x)
    s2 = LOG13_SIGMA ** 2
    g = np.exp(-(xx ** 2 + yy ** 2) / (2 * s2))
    g /= g.sum()
    h = g * (xx ** 2 + yy ** 2 - 2 * s2) / s2 ** 2
    return h - h.sum() / h.size


# ----------------------------------------------------------------------------- operators
def _otsu(values, v, backend, absolute=False):
    """Otsu's threshold under the variant's binning."""
    if v.otsu_binning == "numpy":
        return libraries.numpy_otsu(values, ops.OTSU_BINS, absolute)
    return ops._otsu(values, ops.OTSU_BINS, backend, absolute=absolute)


def _nms(gx, gy, m, low, high, backend):
    """Canny's non-maximum suppression: 0 suppressed, 1 above low, 2 above high."""
    out = np.empty(m.shape, dtype=np.uint8)
    kernels(backend).non_maximum_suppression(gx, gy, m, low, high, ops.TAN_22_5, ops.TAN_67_5,
                                             out)
    return out


def _normalised(response):
    top = float(response.max())
    return response / top if top > 0 else np.zeros_like(response)


def _canny(gx, gy, m, v, backend):
    """(edge image, thresholds)."""
    if v.edge_kind != "binary":
        return _normalised(np.where(_nms(gx, gy, m, 0.0, 0.0, backend) > 0, m, 0.0)), {}
    if v.thresholds == "matlab":
        high = float(np.quantile(m, MATLAB_CANNY_QUANTILE))
        low = MATLAB_CANNY_LOW_RATIO * high
    else:
        otsu = _otsu(m, v, backend)
        low, high = ((otsu, v.canny_ratio * otsu) if v.canny_otsu == "low"
                     else (otsu / v.canny_ratio, otsu))
    thresholds = {"low": low, "high": high}
    if v.canny_library != "refseg":
        scale = libraries.CV2_GRADIENT_SCALE
        dx, dy = libraries.int16_gradients(gx, gy, scale)
        return libraries.opencv_canny(dx, dy, low * scale, high * scale,
                                      v.canny_library == "opencv-l2"), thresholds
    if v.canny_connectivity == 8:
        return ops._canny_from_gradient(gx, gy, m, low, high, backend).edges, thresholds
    candidates = _nms(gx, gy, m, low, high, backend)
    labels, _ = ndimage.label(candidates > 0)  # SciPy's default structure: 4-neighbours
    strong = np.unique(labels[candidates == 2])
    return np.isin(labels, strong[strong > 0]).astype(np.uint8), thresholds


def _gradient_edges(name, gx, gy, m, v, backend):
    """(edge image, thresholds)."""
    if v.edge_kind != "binary":
        return _normalised(m), {}
    if v.thresholds == "matlab":
        t = math.sqrt(MATLAB_GRADIENT_SCALE * float(np.mean(m * m)))
    else:
        t = _otsu(m, v, backend)
    if v.thin_gradients:
        return (_nms(gx, gy, m, t, t, backend) > 0).astype(np.uint8), {"magnitude": t}
    return ops._threshold_magnitude(name, m, t, backend).edges, {"magnitude": t}


def _jump_strength(response):
    """The continuous counterpart of the zero crossings (R-log): at each pixel the kernel
    would mark for some threshold, the largest jump that makes it a crossing; 0 elsewhere."""
    v = response
    rows, cols = v.shape
    z = np.pad(v, 1, mode="constant", constant_values=np.nan)

    def at(dr, dc):
        return z[1 + dr:1 + dr + rows, 1 + dc:1 + dc + cols]

    # jump = where(mask, max(jump, difference), jump), written in place: the same values
    # without two whole-image temporaries per neighbour
    jump = np.zeros(v.shape)
    difference = np.empty(v.shape)
    with np.errstate(invalid="ignore"):
        for dr, dc in ((0, -1), (0, 1), (-1, 0), (1, 0)):
            other = at(dr, dc)
            np.subtract(other, v, out=difference)
            np.maximum(jump, difference, out=jump, where=(v < 0) & (other > 0))
        for (ar, ac), (br, bc) in (((0, -1), (0, 1)), ((-1, 0), (1, 0))):
            a, b = at(ar, ac), at(br, bc)
            opposite = ((a < 0) & (b > 0)) | ((a > 0) & (b < 0))
            np.abs(np.subtract(a, b, out=difference), out=difference)
            np.maximum(jump, difference, out=jump, where=(v == 0) & opposite)
    return jump


def _log_edges(blurred, v, backend):
    """(edge image, the signed response, thresholds)."""
    default_response = v.log_kernel == "laplace4" and v.border == "reflect101"
    if (default_response and v.edge_kind == "binary" and v.thresholds == "otsu"
            and v.log_ratio == ops.LOG_JUMP_RATIO and v.log_side == "negative"
            and v.otsu_binning == "refseg"):
        r = ops._log(blurred, None, backend)
        return r.edges, r.response, r.thresholds
    if v.log_kernel == "log13":
        response = ndimage.correlate(blurred, log13_kernel(), mode=BORDERS[v.border][1])
    else:
        kernel = {"laplace4": ops.LAPLACE_4, "laplace8": LAPLACE_8,
                  "cv2-ksize3": libraries.CV2_LAPLACIAN_KSIZE3}[v.log_kernel]
        response = _correlate(blurred, kernel, v.border, backend)
    signed = response
    response = np.ascontiguousarray(response if v.log_side == "negative" else -response)
    if v.edge_kind != "binary":
        return _normalised(_jump_strength(response)), signed, {}
    if v.thresholds == "matlab":
        t = MATLAB_LOG_SCALE * float(np.mean(np.abs(response)))
    else:
        t = v.log_ratio * _otsu(response, v, backend, absolute=True)
    edges = np.empty(response.shape, dtype=np.uint8)
    kernels(backend).zero_crossings(response, t, edges)
    return edges, signed, {"slope": t}


# ------------------------------------------------------------------------ weights, vote
def _statistics(edges, v, backend):
    """(weights, statistics) of the four maps under the variant's R-mean, R-std, R-cv,
    R-empty and R-weights choices; the chosen ones take :func:`features.extract`'s own path.
    ``statistics``: ``mean_image`` (M, N), ``std``, ``mean`` and ``cv`` (length 4, operator
    order) and ``intermediate_cv``, as the golden bundle names them."""
    stats_default = (v.map_scale == 1.0 and v.std_about == "mean_image" and v.std_ddof == 0
                     and v.cv_mean == "own" and v.edge_kind == "binary")
    if stats_default:
        mean_img, std, mean = weighting._binary_statistics(weighting.binary_stack(edges),
                                                           backend)
    else:
        maps = {k: _scaled(edges[k], v.map_scale) for k in OPERATORS}
        mean_img = weighting.mean_image(maps)
        if v.std_about == "own_mean":
            std = {k: float(np.std(maps[k])) for k in OPERATORS}
        else:
            std = weighting.standard_deviations(maps, mean_img)
        if v.std_ddof:
            n = mean_img.size
            std = {k: s * math.sqrt(n / (n - v.std_ddof)) for k, s in std.items()}
        mean = weighting.pixel_means(maps)
        if v.cv_mean == "mean_image":
            mean = dict.fromkeys(OPERATORS, float(np.mean(mean_img)))
    cv = weighting.coefficients_of_variation(std, mean)
    stats = {"mean_image": mean_img, "std": np.array([std[k] for k in OPERATORS]),
             "mean": np.array([mean[k] for k in OPERATORS]),
             "cv": np.array([cv[k] for k in OPERATORS]),
             "intermediate_cv": np.float64(weighting.intermediate_cv(cv))}
    empty = [k for k in OPERATORS if mean[k] == 0]
    if v.empty == "takes_all" and empty and len(empty) < len(OPERATORS):
        return {k: (1.0 / len(empty) if k in empty else 0.0) for k in OPERATORS}, stats
    if v.weights == "equal":
        return dict.fromkeys(OPERATORS, 1.0 / len(OPERATORS)), stats
    if v.weights == "inverse":
        cv = {k: (1.0 / c if c > 0 else 0.0) for k, c in cv.items()}
    return weighting.operator_weights(cv), stats


def _scaled(edges, scale):
    """A map as float64 times ``scale``; a float64 map itself when ``scale`` is 1 (x * 1.0 is
    x, so the copy would hold the same values: continuous maps are 8 bytes per pixel each)."""
    edges = np.asarray(edges, dtype=np.float64)
    return edges if scale == 1.0 else edges * scale


def vote(edges, weights, variant: Variant = Variant(), *, backend: str = "cython"):
    """The final weight parameter and the feature map of four edge images under a variant.

    Parameters
    ----------
    edges : mapping of str to ndarray of shape (M, N)
        Keys :data:`OPERATORS`; 0/1 maps, or responses in [0, 1] for the continuous kinds.
    weights : mapping of str to float
    variant : Variant
    backend : {"cython", "numpy"}

    Returns
    -------
    final : ndarray of shape (M, N), float64
    feature_map : ndarray of shape (M, N), uint8

    Notes
    -----
    Binary and "continuous-literal": X_i = 2 where E_i > 0, else 1 ([0106]), through the
    claim's kernel; "continuous-graded": X_i = 1 + E_i, summed in :data:`OPERATORS` order.
    Both: F = sum_i w_i X_i - offset and the feature map is F >= 0 ([0117]-[0118]).
    """
    w = {k: float(weights[k]) for k in OPERATORS}
    if variant.edge_kind == "continuous-graded":
        final = np.zeros(np.shape(edges[OPERATORS[0]]))
        for k in OPERATORS:
            final = final + w[k] * (1.0 + np.asarray(edges[k], dtype=np.float64))
        final = final - variant.offset
    else:
        final = weighting._vote(weighting.binary_stack(edges), w, backend, variant.offset)
    return final, weighting._decide(final)


def extract_variant(rgb, variant: Variant = Variant(), *, backend: str = "cython",
                    keep: str = "all") -> VariantResult:
    """Claim-1 feature extraction under one :class:`Variant` of the readings.

    Parameters
    ----------
    rgb : ndarray of shape (M, N, 3) or (M, N), M, N >= 3
        uint8 RGB (or gray) image, or a finite float array on the 0-255 scale.
    variant : Variant
        The readings to use; the default is refseg's, and then the result equals
        :func:`refseg.claim1.features.extract`'s bit for bit.
    backend : {"cython", "numpy"}
    keep : {"all", "maps"}
        "all": every field of the result; "maps": ``gray``, ``blurred``, ``final_weight``
        and ``feature_image`` are None, each float plane dropped once used, and a binary
        vote is decided a block of rows at a time (no whole F). The edge images, weights and
        feature map are the same, bit for bit.

    Returns
    -------
    VariantResult

    Notes
    -----
    The steps of :func:`~refseg.claim1.features.extract`, each under the variant's choice:
    gray (R-gray), 3x3 Gaussian (R-gauss, R-border), the four operators' edge images
    (R-binary, R-canny, R-log, R-border), their statistics and weights (R-mean, R-std, R-cv,
    R-empty, R-weights), the vote and the decision (R-final). The Sobel gradients are dropped
    before the Prewitt gradients are made, so that one operator's three gradient planes are
    held at a time.

    Examples
    --------
    The default variant is :func:`~refseg.claim1.features.extract`; an offset of 1.7 drops a
    pixel that operators of weight 0.59 together mark (F = 1 + 0.59 - 1.7 < 0):

    >>> import numpy as np
    >>> from refseg.claim1.alternatives import Variant, extract_variant
    >>> from refseg.claim1.features import extract
    >>> step = np.zeros((5, 6), np.uint8)
    >>> step[:, 3:] = 200
    >>> bool(np.array_equal(extract_variant(step).feature_map, extract(step).feature_map))
    True
    >>> extract_variant(step, Variant(offset=1.7)).feature_map[0]
    array([0, 0, 0, 0, 0, 0], dtype=uint8)
    >>> extract_variant(step, Variant(offset=1.7), keep="maps").final_weight is None
    True

    References
    ----------
    [0077]-[0119]; spec ``readings.md``.
    """
    v = variant.check()
    if keep not in KEEP:
        raise InputError(f"keep: expected one of {', '.join(KEEP)}, got {keep!r}")
    keep_all = keep == "all"
    gray = _gray(rgb, v.gray, backend)
    g = as_float_image(gray, "gray", min_size=MIN_SIZE)
    if v.blur == "refseg":
        kernel = BINOMIAL_3X3 if v.sigma is None else preprocess.gaussian_kernel(v.sigma)
        blurred = _correlate(g, kernel, v.border, backend)
    else:
        blurred = libraries.gaussian(g, v.sigma or DEFAULT_SIGMA, v.blur)
    del g
    if not keep_all:
        gray = None
    gx, gy, magnitude = _gradient(blurred, ops.SOBEL_SMOOTH, v.border, backend)
    sobel_m = magnitude
    if v.gradient_scale == "skimage":
        sobel_m = libraries.skimage_magnitude(blurred, "sobel")
    made = {"canny": _canny(gx, gy, magnitude, v, backend),
            "sobel": _gradient_edges("sobel", gx, gy, sobel_m, v, backend)}
    del gx, gy
    responses = {"canny": magnitude, "sobel": sobel_m} if keep_all else {}
    del magnitude, sobel_m
    px, py, prewitt = _gradient(blurred, ops.PREWITT_SMOOTH, v.border, backend)
    if v.gradient_scale == "skimage":
        prewitt = libraries.skimage_magnitude(blurred, "prewitt")
    made["prewitt"] = _gradient_edges("prewitt", px, py, prewitt, v, backend)
    del px, py
    if keep_all:
        responses["prewitt"] = prewitt
    del prewitt
    log_edges, log_response, log_thresholds = _log_edges(blurred, v, backend)
    edges = {k: e for k, (e, _) in made.items()}
    edges["log"] = log_edges
    if not keep_all:
        del log_response
        blurred = None
        if v.edge_kind != "continuous-graded":
            weights, _ = _statistics(edges, v, backend)
            stack = weighting.binary_stack(edges)
            feature_map = weighting._vote_decision(stack, weights, backend, v.offset)
            return VariantResult(None, None, edges, weights, None, feature_map, None)
    else:
        responses["log"] = log_response
    thresholds = {k: t for k, (_, t) in made.items() if t}
    if log_thresholds:
        thresholds["log"] = log_thresholds
    weights, statistics = _statistics(edges, v, backend)
    final, feature_map = vote(edges, weights, v, backend=backend)
    if not keep_all:
        return VariantResult(None, None, edges, weights, None, feature_map, None)
    if v.edge_kind == "continuous-graded":
        image = np.clip(final + (v.offset - 1.0), 0.0, 1.0).astype(np.float32)
    else:
        image = feature_map.astype(np.float32)
    return VariantResult(gray, blurred, edges, weights, final, feature_map, image, responses,
                         thresholds, statistics)


#: The :class:`Variant` fields read after the edge maps are made: a variant changing only
#: these has refseg's own edge maps (:func:`revote`).
VOTE_FIELDS = ("map_scale", "std_about", "std_ddof", "cv_mean", "empty", "weights", "offset")


def revote(edges, variant: Variant, *, backend: str = "cython") -> np.ndarray:
    """The feature map under a variant that changes only :data:`VOTE_FIELDS`, from refseg's
    own four binary edge maps (``features.extract(rgb).edges``): the same map as
    ``extract_variant(rgb, variant).feature_map``, bit for bit, without running the operators
    again. ValueError for a variant changing anything else.

    Examples
    --------
    >>> import numpy as np
    >>> from refseg.claim1.alternatives import Variant, extract_variant, revote
    >>> from refseg.claim1.features import extract
    >>> step = np.zeros((5, 6), np.uint8)
    >>> step[:, 3:] = 200
    >>> variant = Variant(weights="equal", offset=1.45)
    >>> bool(np.array_equal(revote(extract(step).edges, variant),
    ...                     extract_variant(step, variant).feature_map))
    True
    """
    v = variant.check()
    others = sorted(set(v.changes()) - set(VOTE_FIELDS))
    if others:
        raise ValueError(f"revote: the variant changes {', '.join(others)}, which the edge "
                         "maps depend on")
    weights, _ = _statistics(edges, v, backend)
    return weighting._vote_decision(weighting.binary_stack(edges), weights, backend, v.offset)


def feature_image(rgb, name: str | None = None) -> np.ndarray:
    """The feature image a network gets under the alternative ``name`` (None: refseg's
    readings): shape (M, N), float32 in [0, 1]."""
    if name is None:
        return extract_variant(rgb).feature_image
    return extract_variant(rgb, alternative(name).variant).feature_image


def alternative(name: str) -> Alternative:
    """The alternative of that name; InputError listing the names otherwise.

    Examples
    --------
    >>> from refseg.claim1.alternatives import alternative
    >>> chosen = alternative("log-ratio-3")
    >>> chosen.reading, chosen.variant.changes()
    ('R-log', {'log_ratio': 3.0})
    """
    if name not in BY_NAME:
        raise InputError(f"{name!r}: no such alternative reading; one of "
                         + ", ".join(BY_NAME))
    return BY_NAME[name]


def worked_example(variant: Variant = Variant(), *, backend: str = "cython") -> bool:
    """Whether the variant's vote reproduces the worked example [0107]-[0115].

    Weights 0.4 (Canny), 0.2, 0.2, 0.2; position 1 (all four have an edge) -> edge, position 2
    (none) -> not, position 8 (three of four, each operator missing in turn) -> edge,
    position 9 (Canny alone) -> not. The weights are the text's own, so only the vote's
    choices (X values, offset) can change the outcome.

    Examples
    --------
    F = 1 + (the weight of the operators with an edge) - offset, so the four positions need
    1.4 < offset <= 1.6:

    >>> from refseg.claim1.alternatives import Variant, worked_example
    >>> worked_example(), worked_example(Variant(offset=1.6)), worked_example(Variant(offset=1.4))
    (True, True, False)
    """
    for missing in OPERATORS:
        edges = {k: np.zeros((1, 4), np.uint8) for k in OPERATORS}
        for k in OPERATORS:
            edges[k][0, 0] = 1
            edges[k][0, 2] = k != missing
        edges["canny"][0, 3] = 1
        _, decided = vote(edges, EXAMPLE_WEIGHTS, variant, backend=backend)
        if tuple(int(d) for d in decided[0]) != (1, 0, 1, 0):
            return False
    return True
