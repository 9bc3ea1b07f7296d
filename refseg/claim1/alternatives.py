"""The rejected and plausible alternatives to every reading of claim 1's missing formulas.

``spec/readings.md`` states, for each formula or parameter the patent lost, the reading refseg
implements and the alternatives it set aside. This module computes the feature-region image
under any one of those alternatives, built from the same steps as
:func:`refseg.claim1.features.extract` (the same kernels, in the same order), so that the
sensitivity audit (``refseg audit readings``, :mod:`refseg.audit`) can hold each alternative
against the chosen reading on the same images, and a training run can take an alternative's
feature image as its input (``TrainConfig.feature_reading``).

A :class:`~refseg.claim1.variants.Variant` holds one value for each choice; its defaults are
refseg's readings, and :func:`extract_variant` with the default variant gives exactly what
:func:`~refseg.claim1.features.extract` gives, bit for bit. The variants, the alternatives the
audit measures and the libraries' defaults are data, in :mod:`refseg.claim1.variants`; this
module computes them.

References: [0077]-[0119], [0203]-[0214]; spec ``readings.md``.
"""
from __future__ import annotations

import math

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

# the readings as data live in refseg.claim1.variants; imported here for the callers of this
# module's names
from refseg.claim1.variants import (  # noqa: F401
    GRAY_RULES, BINOMIAL_3X3, BORDERS, EDGE_KINDS, THRESHOLD_RULES, LAPLACE_8, LOG13_SIZE,
    LOG13_SIGMA, MATLAB_CANNY_QUANTILE, MATLAB_CANNY_LOW_RATIO, MATLAB_GRADIENT_SCALE,
    MATLAB_LOG_SCALE, EXAMPLE_WEIGHTS, Variant, Alternative, ALTERNATIVES, BY_NAME,
    LIBRARY_DEFAULTS, VariantResult, alternative)

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
    planes = list(ops._gradient(_padded(g, border), smooth, backend))
    for i, plane in enumerate(planes):  # each padded plane dropped once its inside is copied
        planes[i] = np.ascontiguousarray(plane[1:-1, 1:-1])
    del plane
    return tuple(planes)


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


def _normalised_own(response):
    """:func:`_normalised` of an array nothing else holds: divided in place, the same
    values without a second plane."""
    top = float(response.max())
    return np.divide(response, top, out=response) if top > 0 else np.zeros_like(response)


def _canny(gx, gy, m, v, backend):
    """(edge image, thresholds)."""
    if v.edge_kind != "binary":
        return _normalised_own(np.where(_nms(gx, gy, m, 0.0, 0.0, backend) > 0, m, 0.0)), {}
    if v.thresholds == "matlab":
        high = float(np.quantile(m, MATLAB_CANNY_QUANTILE))
        low = MATLAB_CANNY_LOW_RATIO * high
    else:
        otsu = _otsu(m, v, backend)
        low, high = ((otsu, v.canny_ratio * otsu) if v.canny_otsu == "low"
                     else (otsu / v.canny_ratio, otsu))
    thresholds = {"low": low, "high": high}
    if v.canny_library in ("opencv-l2", "opencv-l1"):
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


def _skimage_canny_edges(blurred, thresholds, v):
    """(edge image, thresholds) of ``skimage.feature.canny`` on the blurred image: its
    defaults, or given the variant's Otsu thresholds ("skimage-otsu"); the thresholds
    reported are the variant's own, as an engineer who passes them (or not) reports them."""
    if v.canny_library == "skimage-otsu":
        edges = libraries.skimage_canny(blurred, low=thresholds["low"], high=thresholds["high"])
    else:
        edges = libraries.skimage_canny(blurred)
    return edges, thresholds


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


def _log_edges(blurred, v, backend, gray=None):
    """(edge image, the signed response, thresholds); ``gray`` is the input of the
    "scipy-gaussian-laplace" kernel, which replaces the blur as well."""
    default_response = v.log_kernel == "laplace4" and v.border == "reflect101"
    if (default_response and v.edge_kind == "binary" and v.thresholds == "otsu"
            and v.log_ratio == ops.LOG_JUMP_RATIO and v.log_side == "negative"
            and v.otsu_binning == "refseg"):
        r = ops._log(blurred, None, backend)
        return r.edges, r.response, r.thresholds
    if v.log_kernel == "log13":
        response = ndimage.correlate(blurred, log13_kernel(), mode=BORDERS[v.border][1])
    elif v.log_kernel == "scipy-gaussian-laplace":
        response = libraries.gaussian_laplace(gray, v.sigma or DEFAULT_SIGMA)
    else:
        kernel = {"laplace4": ops.LAPLACE_4, "laplace8": LAPLACE_8,
                  "cv2-ksize3": libraries.CV2_LAPLACIAN_KSIZE3}[v.log_kernel]
        response = _correlate(blurred, kernel, v.border, backend)
    signed = response
    response = np.ascontiguousarray(response if v.log_side == "negative" else -response)
    if v.edge_kind != "binary":
        return _normalised_own(_jump_strength(response)), signed, {}
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
    log_source = g if v.log_kernel == "scipy-gaussian-laplace" else None
    del g
    if not keep_all:
        gray = None
    gx, gy, magnitude = _gradient(blurred, ops.SOBEL_SMOOTH, v.border, backend)
    sobel_m = magnitude
    if v.gradient_scale in ("skimage", "skimage-canny"):
        sobel_m = libraries.skimage_magnitude(blurred, "sobel")
    if v.gradient_scale == "skimage-canny":
        magnitude = sobel_m
    made = {"canny": _canny(gx, gy, magnitude, v, backend),
            "sobel": _gradient_edges("sobel", gx, gy, sobel_m, v, backend)}
    del gx, gy
    if v.canny_library in ("skimage", "skimage-otsu"):
        made["canny"] = _skimage_canny_edges(blurred, made["canny"][1], v)
    responses = {"canny": magnitude, "sobel": sobel_m} if keep_all else {}
    del magnitude, sobel_m
    px, py, prewitt = _gradient(blurred, ops.PREWITT_SMOOTH, v.border, backend)
    if v.gradient_scale in ("skimage", "skimage-canny"):
        prewitt = libraries.skimage_magnitude(blurred, "prewitt")
    made["prewitt"] = _gradient_edges("prewitt", px, py, prewitt, v, backend)
    del px, py
    if keep_all:
        responses["prewitt"] = prewitt
    del prewitt
    log_edges, log_response, log_thresholds = _log_edges(blurred, v, backend, log_source)
    del log_source
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


def variant_steps(rgb, variant: Variant = Variant(), *, backend: str = "cython"):
    """The claim-1 arrays of :func:`extract_variant` (``keep="all"``) one step at a time.

    Yields ``(step, array)`` in pipeline order under the golden bundle's step names:
    ``gray``, ``blurred``, per operator ``response/<op>``, ``threshold/<op>/<key>`` (0-d
    float64; none for the continuous edge kinds) and ``edges/<op>``, then ``mean_image``,
    ``std``, ``mean``, ``cv``, ``intermediate_cv``, ``weights`` (length 4), ``final_weight``
    and ``feature_map``: the same arrays, bit for bit, as the fields of ``extract_variant(rgb,
    variant)``. Each plane is dropped as soon as no later step needs it (the gray image once
    blurred, the gradients once Canny's edges are made, the blurred image after the LoG),
    so that a caller comparing two variants step by step holds a few planes of
    each, not every array of both.
    """
    v = variant.check()
    gray = _gray(rgb, v.gray, backend)
    g = as_float_image(gray, "gray", min_size=MIN_SIZE)
    yield "gray", gray
    if v.blur == "refseg":
        kernel = BINOMIAL_3X3 if v.sigma is None else preprocess.gaussian_kernel(v.sigma)
        blurred = _correlate(g, kernel, v.border, backend)
    else:
        blurred = libraries.gaussian(g, v.sigma or DEFAULT_SIGMA, v.blur)
    log_source = g if v.log_kernel == "scipy-gaussian-laplace" else None
    del g, gray
    yield "blurred", blurred
    edges = {}

    def operator(op, made):
        edge_map, thresholds = made
        edges[op] = edge_map
        for key, value in thresholds.items():
            yield f"threshold/{op}/{key}", np.float64(value)
        yield f"edges/{op}", np.asarray(edge_map)

    # the gradients are dropped as soon as what needs them is made (Canny's edges; thinned
    # gradient edges), before the response is yielded, and the other edge maps are made after
    # it: a caller running two variants side by side holds one's gradients while the other
    # holds its responses and maps only
    def magnitude_of(name, refseg_magnitude):
        # under "skimage-canny" Canny's magnitude already is skimage's Sobel
        if v.gradient_scale == "skimage" or (v.gradient_scale == "skimage-canny"
                                              and name == "prewitt"):
            return libraries.skimage_magnitude(blurred, name)
        return refseg_magnitude

    gx, gy, magnitude = _gradient(blurred, ops.SOBEL_SMOOTH, v.border, backend)
    if v.gradient_scale == "skimage-canny":
        magnitude = libraries.skimage_magnitude(blurred, "sobel")
    canny = _canny(gx, gy, magnitude, v, backend)
    if v.canny_library in ("skimage", "skimage-otsu"):
        canny = _skimage_canny_edges(blurred, canny[1], v)
    sobel_m = sobel = None
    if v.thin_gradients:
        sobel_m = magnitude_of("sobel", magnitude)
        sobel = _gradient_edges("sobel", gx, gy, sobel_m, v, backend)
    del gx, gy
    yield "response/canny", magnitude
    yield from operator("canny", canny)
    del canny
    if sobel_m is None:
        sobel_m = magnitude_of("sobel", magnitude)
    del magnitude
    yield "response/sobel", sobel_m
    if sobel is None:
        sobel = _gradient_edges("sobel", None, None, sobel_m, v, backend)
    del sobel_m
    yield from operator("sobel", sobel)
    del sobel
    px, py, prewitt = _gradient(blurred, ops.PREWITT_SMOOTH, v.border, backend)
    if not v.thin_gradients:
        px = py = None
    prewitt = magnitude_of("prewitt", prewitt)
    made = _gradient_edges("prewitt", px, py, prewitt, v, backend) if v.thin_gradients else None
    del px, py
    yield "response/prewitt", prewitt
    if made is None:
        made = _gradient_edges("prewitt", None, None, prewitt, v, backend)
    del prewitt
    yield from operator("prewitt", made)
    del made
    log_edges, log_response, log_thresholds = _log_edges(blurred, v, backend, log_source)
    del blurred, log_source
    yield "response/log", log_response
    del log_response
    yield from operator("log", (log_edges, log_thresholds))
    del log_edges
    yield from vote_steps(edges, v, backend=backend)


def vote_steps(edges, variant: Variant = Variant(), *, backend: str = "cython"):
    """The steps of :func:`variant_steps` after the edge maps, from the four maps ``edges``
    (keys :data:`OPERATORS`): ``mean_image``, ``std``, ``mean``, ``cv``, ``intermediate_cv``,
    ``weights``, ``final_weight`` and ``feature_map``, one at a time. With refseg's own maps
    and a variant that changes only :data:`VOTE_FIELDS`, they are the variant's own, bit for
    bit (:func:`revote`)."""
    v = variant.check()
    weights, statistics = _statistics(edges, v, backend)
    yield from statistics.items()
    del statistics
    yield "weights", np.array([weights[op] for op in OPERATORS], dtype=np.float64)
    final, feature_map = vote(edges, weights, v, backend=backend)
    del edges
    yield "final_weight", final
    del final
    yield "feature_map", feature_map


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
