"""Claim 1, step 2 end to end: from an RGB image to the binary feature-region image.

``extract`` is the composition of the public steps of ``preprocess`` (to_gray, gaussian_blur),
``operators`` (sobel, canny, prewitt, laplacian_of_gaussian) and ``weighting``
(edge_statistics, coefficients_of_variation, operator_weights, vote), and keeps every
intermediate, with the parameters and thresholds used, so that each step can be shown,
audited and compared against another implementation.

References: [0075]-[0119], [0203]-[0214]; claim 1.

Examples
--------
A vertical step from 0 to 200: Canny and LoG mark one column each, Sobel and Prewitt two.
The one-column maps vary more about the mean image (coefficients of variation sqrt(15) / 2
against sqrt(3) / 4, by hand) and get the larger weights, ``sqrt(5) / (2 sqrt(5) + 1)`` each;
the vote keeps both columns, each marked by three operators of weight 0.59 together:

>>> import numpy as np
>>> from refseg.claim1.features import extract
>>> step = np.zeros((5, 6), np.uint8)
>>> step[:, 3:] = 200
>>> result = extract(step)
>>> {name: int(edges[0].argmax()) for name, edges in result.edges.items()}
{'canny': 2, 'sobel': 2, 'prewitt': 2, 'log': 3}
>>> {name: round(weight, 4) for name, weight in result.weights.items()}
{'canny': 0.4086, 'sobel': 0.0914, 'prewitt': 0.0914, 'log': 0.4086}
>>> result.feature_map
array([[0, 0, 1, 1, 0, 0],
       [0, 0, 1, 1, 0, 0],
       [0, 0, 1, 1, 0, 0],
       [0, 0, 1, 1, 0, 0],
       [0, 0, 1, 1, 0, 0]], dtype=uint8)

With ``keep="maps"`` the float planes are dropped and the rest is the same:

>>> light = extract(step, keep="maps")
>>> light.gray is None, bool(np.array_equal(light.feature_map, result.feature_map))
(True, True)
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from refseg.claim1 import operators as ops
from refseg.claim1 import preprocess
from refseg.claim1 import weighting
from refseg.errors import InputError
from refseg.claim1.operators import OPERATORS
from refseg.claim1.parameters import DEFAULT_SIGMA, KEEP
from refseg.cite import implements

#: The claim element each intermediate of :class:`FeatureResult` implements.
STEP_CLAIMS = {
    "gray": "claim1.step2.gray",
    "blurred": "claim1.step2.gauss",
    "canny": "claim1.step2.edges.canny",
    "sobel": "claim1.step2.edges.sobel",
    "prewitt": "claim1.step2.edges.prewitt",
    "log": "claim1.step2.edges.log",
    "mean_image": "claim1.step2.mean_image",
    "std": "claim1.step2.std",
    "cv": "claim1.step2.cv",
    "intermediate_cv": "claim1.step2.intermediate_cv",
    "weights": "claim1.step2.weights",
    "final_weight": "claim1.step2.final_weight",
    "feature_map": "claim1.step2.decision",
}


@dataclass(frozen=True)
class FeatureResult:
    """Every intermediate of claim-1 feature extraction for one image (M rows, N columns).

    Attributes
    ----------
    gray, blurred : ndarray of shape (M, N), float64
    responses : dict of str to ndarray of shape (M, N), float64
        Raw operator responses (gradient magnitude; LoG value), keys as :data:`OPERATORS`.
    edges : dict of str to ndarray of shape (M, N), uint8
        Binary edge maps (0/1).
    thresholds : dict of str to dict of str to float
    mean_image : ndarray of shape (M, N), float64
    std, mean, cv, weights : dict of str to float
    intermediate_cv : float
    final_weight : ndarray of shape (M, N), float64
    feature_map : ndarray of shape (M, N), uint8
        The feature-region image, 1 on a decided edge.
    params : dict
        Every parameter and constant used (sigma, border, threshold rules, vote offset, ...).

    Notes
    -----
    From ``extract(..., keep="maps")`` the float planes ``gray``, ``blurred``,
    ``responses`` and ``final_weight`` are None: only the binary maps, the mean image and the
    numbers are kept.
    """

    gray: np.ndarray
    blurred: np.ndarray
    responses: dict
    edges: dict
    thresholds: dict
    mean_image: np.ndarray
    std: dict
    mean: dict
    cv: dict
    intermediate_cv: float
    weights: dict
    final_weight: np.ndarray
    feature_map: np.ndarray
    params: dict

    def vector(self, name: str) -> np.ndarray:
        """``cv``, ``weights``, ``std`` or ``mean`` as a length-4 array in :data:`OPERATORS`
        order."""
        return np.array([getattr(self, name)[k] for k in OPERATORS], dtype=np.float64)

    @property
    def warnings(self) -> list[str]:
        """The automatic thresholds that degenerated on this image (marking more than half
        of the pixels, or none), one sentence each; [] when none did
        (:mod:`refseg.claim1.degenerate` states the rule)."""
        from refseg.claim1.degenerate import degenerate_thresholds

        return [found.text for found in degenerate_thresholds(self)]

    def _repr_html_(self) -> str:
        """Jupyter's view of the result: the step panel and the operators' table."""
        from refseg.claim1.panel import notebook_html

        return notebook_html(self)


def _check_keep(keep):
    if keep not in KEEP:
        raise InputError(f"keep: expected one of {', '.join(KEEP)}, got {keep!r}")


def _check_pair(pair, name):
    if pair is None:
        return None, None
    try:
        low, high = pair
    except (TypeError, ValueError):
        raise InputError(f"{name}: expected (low, high) or None, got {pair!r}") from None
    return low, high


@implements("claim1.step2.extract")
def extract(rgb, *, sigma: float = DEFAULT_SIGMA,
            canny_thresholds: tuple[float, float] | None = None,
            sobel_threshold: float | None = None, prewitt_threshold: float | None = None,
            log_threshold: float | None = None, backend: str = "cython",
            keep: str = "all") -> FeatureResult:
    """Claim-1 feature extraction: RGB image to feature-region image, keeping every step.

    Parameters
    ----------
    rgb : ndarray of shape (M, N, 3) or (M, N), M, N >= 3
        uint8 RGB (or gray) image, or a finite float array on the 0-255 scale.
    sigma : float
        Standard deviation of the 3x3 Gaussian template (default 0.8, spec ``R-gauss``).
    canny_thresholds : (low, high) or None
        Canny hysteresis thresholds on the gradient magnitude; None: automatic.
    sobel_threshold, prewitt_threshold, log_threshold : float or None
        None: automatic (spec ``R-binary``).
    backend : {"cython", "numpy"}
    keep : {"all", "maps"}
        "all": every intermediate (about 61 bytes per pixel); "maps": the float planes
        ``gray``, ``blurred``, ``responses`` and ``final_weight`` are dropped as soon as
        they are used and returned as None (13 bytes per pixel kept, about 21 at the peak).
        The maps, mean image, thresholds and weights are the same, bit for bit.

    Returns
    -------
    FeatureResult

    Notes
    -----
    1. Grayscale, weighted average ([0079]).
    2. 3x3 Gaussian filter ([0081]).
    3. Canny, Sobel, Prewitt and LoG on the filtered image, each a binary edge map ([0082]).
    4. Gray-mean image of the four maps ([0086]).
    5. Standard deviation of each map about it, pixel mean, coefficient of variation ([0089],
       [0092]).
    6. Intermediate CV and normalised weights ([0098], [0101]).
    7. Final weight parameter per pixel ([0104]) and decision F >= 0 -> 1 ([0117]-[0118]),
       over every pixel ([0119]).

    Examples
    --------
    >>> import numpy as np
    >>> from refseg.claim1.features import extract
    >>> step = np.zeros((5, 6), np.uint8)
    >>> step[:, 3:] = 200
    >>> extract(step).feature_map[0]  # the module's docstring works this step out by hand
    array([0, 0, 1, 1, 0, 0], dtype=uint8)

    References
    ----------
    [0075]-[0119], [0203]-[0214].
    """
    _check_keep(keep)
    keep_all = keep == "all"
    low, high = _check_pair(canny_thresholds, "canny_thresholds")
    gray = preprocess.to_gray(rgb, backend=backend)
    blurred = preprocess.gaussian_blur(gray, sigma, backend=backend)
    if not keep_all:
        gray = None  # each float plane is dropped as soon as it has been used
    # each operator writes its map into one plane of the stack the vote reads
    stack = np.empty((len(OPERATORS),) + blurred.shape, dtype=np.uint8)
    plane = dict(zip(OPERATORS, stack))
    sobel = ops.sobel(blurred, sobel_threshold, backend=backend, out=plane["sobel"])
    # Canny's gradient and automatic low threshold are Sobel's
    canny = ops.canny(blurred, low, high, backend=backend, sobel_result=sobel,
                      out=plane["canny"])
    results = {"canny": _kept(canny, keep_all), "sobel": _kept(sobel, keep_all)}
    del canny, sobel
    results["prewitt"] = _kept(ops.prewitt(blurred, prewitt_threshold, backend=backend,
                                           out=plane["prewitt"]), keep_all)
    results["log"] = _kept(ops.laplacian_of_gaussian(blurred, log_threshold, backend=backend,
                                                     out=plane["log"]), keep_all)
    if not keep_all:
        blurred = None
    mean_img, std, mean = weighting.edge_statistics(stack, backend=backend)
    cv = weighting.coefficients_of_variation(std, mean)
    weights = weighting.operator_weights(cv)
    final, feature_map = weighting.vote(stack, weights, keep_final=keep_all, backend=backend)
    return FeatureResult(
        gray=gray, blurred=blurred,
        responses={k: results[k].response for k in OPERATORS} if keep_all else None,
        edges={k: results[k].edges for k in OPERATORS},
        thresholds={k: results[k].thresholds for k in OPERATORS},
        mean_image=mean_img, std=std, mean=mean, cv=cv,
        intermediate_cv=weighting.intermediate_cv(cv), weights=weights,
        final_weight=final, feature_map=feature_map,
        params=_parameters(sigma, results, backend),
    )


def _kept(result, keep_response):
    """An operator's result, its response dropped unless ``keep_response``."""
    return result if keep_response else replace(result, response=None)


def _parameters(sigma, results, backend) -> dict:
    """Every parameter and constant of an extraction, for its report."""
    return {
        "sigma": float(sigma),
        "gaussian_kernel": preprocess.gaussian_kernel(sigma).tolist(),
        "gray_weights": list(preprocess.GRAY_WEIGHTS),
        "border": preprocess.BORDER,
        "threshold_rules": {
            "canny": {"automatic": results["canny"].automatic, "gradient": "sobel",
                      "low": "otsu(magnitude)", "high_ratio": ops.CANNY_HIGH_RATIO,
                      "nms_sector_tangents": [ops.TAN_22_5, ops.TAN_67_5]},
            "sobel": {"automatic": results["sobel"].automatic, "rule": "otsu(magnitude)"},
            "prewitt": {"automatic": results["prewitt"].automatic, "rule": "otsu(magnitude)"},
            "log": {"automatic": results["log"].automatic, "rule": "jump > ratio * otsu(|LoG|)",
                    "jump_ratio": ops.LOG_JUMP_RATIO},
            "otsu_bins": ops.OTSU_BINS,
        },
        "edge_value": weighting.EDGE_VALUE,
        "non_edge_value": weighting.NON_EDGE_VALUE,
        "vote_offset": weighting.VOTE_OFFSET,
        "std_ddof": weighting.STD_DDOF,
        "operator_order": list(OPERATORS),
        "backend": backend,
    }
