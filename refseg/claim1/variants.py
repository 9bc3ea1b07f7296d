"""The readings of claim 1's missing formulas as data: one :class:`Variant` holds a value for
every choice (its defaults are refseg's readings), :data:`ALTERNATIVES` the alternatives
``spec/readings.md`` sets aside, :data:`LIBRARY_DEFAULTS` what common libraries' calls do by
default, each one or a few :class:`Variant` fields away from refseg's; :class:`VariantResult`
what :func:`refseg.claim1.alternatives.extract_variant` returns.

References: [0077]-[0119], [0203]-[0214]; spec ``readings.md``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace

import numpy as np

from refseg.claim1 import operators as ops
from refseg.claim1 import preprocess
from refseg.claim1 import weighting
from refseg.claim1.parameters import DEFAULT_SIGMA
from refseg.errors import InputError

INFRASTRUCTURE = "the readings of claim 1 as data: variants and their named alternatives"

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
        image) (R-log); "cv2-ksize3" (``cv2.Laplacian(ksize=3)``); "scipy-gaussian-laplace":
        ``scipy.ndimage.gaussian_laplace(gray, sigma)`` of the gray image, in place of the
        blur and the Laplacian (:func:`~refseg.claim1.libraries.gaussian_laplace`).
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
        / ``prewitt`` give them (:func:`~refseg.claim1.libraries.skimage_magnitude`);
        "skimage-canny": Canny's magnitude too (its thresholds and suppression then work on
        ``skimage.filters.sobel``'s magnitude, the directions still from the gradients).
    otsu_binning : str
        "refseg" (the manifest's truncation rule), or "numpy": ``skimage.filters.
        threshold_otsu``'s ``np.histogram`` bins (:func:`~refseg.claim1.libraries.
        numpy_otsu`) for every automatic threshold.
    canny_library : str
        "refseg", or "opencv-l2" / "opencv-l1": ``cv2.Canny`` on the int16 gradients (x 32)
        with L2gradient True / False (:func:`~refseg.claim1.libraries.opencv_canny`);
        "skimage": ``skimage.feature.canny(blurred)`` with its defaults (its own Gaussian of
        sigma 1, interpolating suppression, thresholds 0.1 and 0.2); "skimage-otsu": the same
        call given the Otsu thresholds (:func:`~refseg.claim1.libraries.skimage_canny`).
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
                   "log_kernel": ("laplace4", "laplace8", "log13", "cv2-ksize3",
                                  "scipy-gaussian-laplace"),
                   "blur": ("refseg", "skimage", "scipy"),
                   "gradient_scale": ("refseg", "skimage", "skimage-canny"),
                   "otsu_binning": ("refseg", "numpy"),
                   "canny_library": ("refseg", "opencv-l2", "opencv-l1", "skimage",
                                     "skimage-otsu"),
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
    ("skimage.filters.sobel-canny", "R-binary", "skimage.filters.sobel / prewitt for the "
     "Sobel, Prewitt and Canny magnitudes: Canny's Otsu thresholds, suppression and "
     "hysteresis on skimage's normalised magnitude", {"gradient_scale": "skimage-canny"}),
    ("skimage.filters.threshold_otsu", "R-binary", "skimage.filters.threshold_otsu: "
     "np.histogram's bins for every Otsu threshold", {"otsu_binning": "numpy"}),
    ("cv2.Canny-L2", "R-canny", "cv2.Canny(dx, dy, L2gradient=True) on int16 gradients "
     "(x 32)", {"canny_library": "opencv-l2"}),
    ("cv2.Canny-L1", "R-canny", "cv2.Canny(dx, dy) on int16 gradients (x 32), its default "
     "L1 norm |dx| + |dy|", {"canny_library": "opencv-l1"}),
    ("cv2.Laplacian-ksize3", "R-log", "cv2.Laplacian(ksize=3): [[2, 0, 2], [0, -8, 0], "
     "[2, 0, 2]]", {"log_kernel": "cv2-ksize3"}),
    ("skimage.feature.canny", "R-canny", "skimage.feature.canny(blurred) with its defaults: "
     "a second Gaussian (sigma 1, mode 'constant'), interpolating suppression, the border "
     "ring dropped, thresholds 0.1 and 0.2", {"canny_library": "skimage"}),
    ("skimage.feature.canny-otsu", "R-canny", "skimage.feature.canny(blurred, low_threshold="
     "low, high_threshold=high) given the Otsu thresholds: its second Gaussian (sigma 1), "
     "interpolating suppression, the border ring dropped", {"canny_library": "skimage-otsu"}),
    ("scipy.ndimage.gaussian_laplace", "R-log", "scipy.ndimage.gaussian_laplace(gray, 0.8) "
     "for the LoG response: a 7x7 Laplacian of Gaussian (truncate 4), mode 'reflect'",
     {"log_kernel": "scipy-gaussian-laplace"}),
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
