"""Claim 1, step 2: coefficient-of-variation weights and the weighted per-pixel vote.

Maps are passed as dicts keyed by operator name in any order; results are dicts in the order
:data:`OPERATORS` (canny, sobel, prewitt, log). Every formula here was an image in the patent
and is missing from its text: spec ``readings.md`` gives the reading of each and its evidence.

References: [0085]-[0119]; claim 1.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from refseg.backend import kernels
from refseg.errors import InputError, as_float_image
from refseg.claim1.operators import OPERATORS
from refseg.cite import implements

#: X value of an operator that has an edge at the pixel (grey value > 0) ([0106]).
EDGE_VALUE = 2.0
#: X value of an operator without an edge there ([0106]; "< 0" in the text, read "<= 0").
NON_EDGE_VALUE = 1.0
#: F = sum_i w_i X_i - VOTE_OFFSET; a pixel is decided an edge where F >= 0 (R-final).
VOTE_OFFSET = 1.5
#: Divisor of the standard deviation: M*N - STD_DDOF (R-std; the weights do not depend on it).
STD_DDOF = 0


def _maps(edges: Mapping, name: str = "edges") -> dict[str, np.ndarray]:
    """Validate: exactly the four operators, same 2-D shape, finite and >= 0."""
    if not isinstance(edges, Mapping) or set(edges) != set(OPERATORS):
        keys = sorted(edges) if isinstance(edges, Mapping) else type(edges).__name__
        raise InputError(f"{name}: expected a mapping with keys {OPERATORS}, got {keys}")
    maps = {k: as_float_image(edges[k], f"{name}[{k!r}]") for k in OPERATORS}
    shapes = {m.shape for m in maps.values()}
    if len(shapes) != 1:
        raise InputError(f"{name}: the four maps differ in shape: "
                         + ", ".join(f"{k} {maps[k].shape}" for k in OPERATORS))
    for k, m in maps.items():
        if (m < 0).any():
            raise InputError(f"{name}[{k!r}]: edge images are grey values >= 0; found {m.min()}")
    return maps


def _per_operator(values: Mapping, name: str) -> dict[str, float]:
    if not isinstance(values, Mapping) or set(values) != set(OPERATORS):
        raise InputError(f"{name}: expected a mapping with keys {OPERATORS}")
    out = {k: float(values[k]) for k in OPERATORS}
    bad = [k for k, v in out.items() if not np.isfinite(v) or v < 0]
    if bad:
        raise InputError(f"{name}: values must be finite and >= 0; bad for {bad}")
    return out


@implements("claim1.step2.mean_image")
def mean_image(edges: Mapping) -> np.ndarray:
    """Gray-mean image of the four edge images.

    Parameters
    ----------
    edges : mapping of str to ndarray of shape (M, N)
        Edge images keyed "canny", "sobel", "prewitt", "log"; values >= 0.

    Returns
    -------
    mean_image : ndarray of shape (M, N), float64
        ``(E_C + E_S + E_P + E_L) / 4``, summed in that order.

    Examples
    --------
    >>> from refseg.claim1.weighting import mean_image
    >>> maps = {"canny": [[1, 1], [0, 0]], "sobel": [[1, 0], [0, 0]],
    ...         "prewitt": [[1, 0], [0, 0]], "log": [[1, 1], [1, 0]]}
    >>> mean_image(maps)
    array([[1.  , 0.5 ],
           [0.25, 0.  ]])

    References
    ----------
    [0085]-[0087]; spec ``R-mean``.
    """
    m = _maps(edges)
    return (((m["canny"] + m["sobel"]) + m["prewitt"]) + m["log"]) / 4.0


@implements("claim1.step2.std")
def standard_deviations(edges: Mapping, mean_img) -> dict[str, float]:
    """Standard deviation of each edge image about the gray-mean image.

    Parameters
    ----------
    edges : mapping of str to ndarray of shape (M, N)
    mean_img : ndarray of shape (M, N)
        The gray-mean image of :func:`mean_image`.

    Returns
    -------
    std : dict of str to float
        ``sigma_i = sqrt(sum_mn (E_i(m, n) - Ebar(m, n))^2 / (M*N))``.

    Examples
    --------
    Canny's map differs from the mean image by 0.5 at one pixel and 0.25 at another, so its
    sigma is sqrt((0.25 + 0.0625) / 4) = sqrt(5) / 8; LoG's by 0.5 and 0.75: sqrt(13) / 8.

    >>> import math
    >>> from refseg.claim1.weighting import mean_image, standard_deviations
    >>> maps = {"canny": [[1, 1], [0, 0]], "sobel": [[1, 0], [0, 0]],
    ...         "prewitt": [[1, 0], [0, 0]], "log": [[1, 1], [1, 0]]}
    >>> std = standard_deviations(maps, mean_image(maps))
    >>> std["canny"] == std["sobel"] == math.sqrt(5) / 8, std["log"] == math.sqrt(13) / 8
    (True, True)

    References
    ----------
    [0088]-[0091]; spec ``R-std``.
    """
    m = _maps(edges)
    bar = as_float_image(mean_img, "mean_img")
    if bar.shape != m["canny"].shape:
        raise InputError(f"mean_img: shape {bar.shape} differs from the edge images' "
                         f"{m['canny'].shape}")
    n = bar.size - STD_DDOF
    return {k: float(np.sqrt(np.sum((m[k] - bar) ** 2) / n)) for k in OPERATORS}


@implements("claim1.step2.cv")
def pixel_means(edges: Mapping) -> dict[str, float]:
    """Pixel mean ``mu_i`` of each edge image ([0094]).

    Parameters
    ----------
    edges : mapping of str to ndarray of shape (M, N)

    Returns
    -------
    mean : dict of str to float

    Examples
    --------
    >>> from refseg.claim1.weighting import pixel_means
    >>> maps = {"canny": [[1, 1], [0, 0]], "sobel": [[1, 0], [0, 0]],
    ...         "prewitt": [[1, 0], [0, 0]], "log": [[1, 1], [1, 0]]}
    >>> pixel_means(maps)
    {'canny': 0.5, 'sobel': 0.25, 'prewitt': 0.25, 'log': 0.75}

    References
    ----------
    [0092]-[0095].
    """
    m = _maps(edges)
    return {k: float(np.mean(m[k])) for k in OPERATORS}


@implements("claim1.step2.cv")
def coefficients_of_variation(std: Mapping, mean: Mapping) -> dict[str, float]:
    """Coefficient of variation ``V_i = sigma_i / mu_i`` of each edge image.

    Parameters
    ----------
    std, mean : mapping of str to float
        From :func:`standard_deviations` and :func:`pixel_means`.

    Returns
    -------
    cv : dict of str to float
        ``sigma_i / mu_i``; 0 for an operator with ``mu_i == 0`` (an empty edge image), which
        therefore gets weight 0 (spec ``R-empty``).

    Examples
    --------
    An empty map (mean 0) gets the coefficient 0:

    >>> from refseg.claim1.weighting import coefficients_of_variation
    >>> coefficients_of_variation({"canny": 0.5, "sobel": 0.25, "prewitt": 0.25, "log": 0.0},
    ...                           {"canny": 0.25, "sobel": 0.5, "prewitt": 0.5, "log": 0.0})
    {'canny': 2.0, 'sobel': 0.5, 'prewitt': 0.5, 'log': 0.0}

    References
    ----------
    [0092]-[0095]; spec ``R-cv``, ``R-empty``.
    """
    s, mu = _per_operator(std, "std"), _per_operator(mean, "mean")
    return {k: (s[k] / mu[k] if mu[k] > 0 else 0.0) for k in OPERATORS}


@implements("claim1.step2.intermediate_cv")
def intermediate_cv(cv: Mapping) -> float:
    """Intermediate coefficient of variation: ``V = V_C + V_S + V_P + V_L``.

    Parameters
    ----------
    cv : mapping of str to float

    Returns
    -------
    float
        The normaliser of :func:`operator_weights`.

    Examples
    --------
    >>> from refseg.claim1.weighting import intermediate_cv
    >>> intermediate_cv({"canny": 2.0, "sobel": 1.0, "prewitt": 1.0, "log": 1.0})
    5.0

    References
    ----------
    [0096]-[0099]; spec ``R-weights``.
    """
    v = _per_operator(cv, "cv")
    return ((v["canny"] + v["sobel"]) + v["prewitt"]) + v["log"]


@implements("claim1.step2.weights")
def operator_weights(cv: Mapping) -> dict[str, float]:
    """Normalised operator weights ``w_i = V_i / V``.

    Parameters
    ----------
    cv : mapping of str to float
        Coefficients of variation, >= 0.

    Returns
    -------
    weights : dict of str to float
        Non-negative, summing to 1 (to rounding). When every ``V_i`` is 0 (every edge image
        empty or constant) the weights are 1/4 each (spec ``R-empty``).

    Examples
    --------
    The weights of the worked example of [0107]:

    >>> from refseg.claim1.weighting import operator_weights
    >>> operator_weights({"canny": 2.0, "sobel": 1.0, "prewitt": 1.0, "log": 1.0})
    {'canny': 0.4, 'sobel': 0.2, 'prewitt': 0.2, 'log': 0.2}
    >>> operator_weights({"canny": 0.0, "sobel": 0.0, "prewitt": 0.0, "log": 0.0})
    {'canny': 0.25, 'sobel': 0.25, 'prewitt': 0.25, 'log': 0.25}

    References
    ----------
    [0100]-[0103], [0213]; spec ``R-weights``.
    """
    v = _per_operator(cv, "cv")
    total = intermediate_cv(v)
    if total == 0:
        return {k: 1.0 / len(OPERATORS) for k in OPERATORS}
    return {k: v[k] / total for k in OPERATORS}


@implements("claim1.step2.final_weight")
def final_weight(edges: Mapping, weights: Mapping, *, backend: str = "cython") -> np.ndarray:
    """Final weight parameter ``F(x, y) = w_C C + w_S S + w_P P + w_L L - 1.5`` per pixel.

    Parameters
    ----------
    edges : mapping of str to ndarray of shape (M, N)
        Edge images; an operator "has an edge" where its value is > 0.
    weights : mapping of str to float
    backend : {"cython", "numpy"}

    Returns
    -------
    final : ndarray of shape (M, N), float64

    Notes
    -----
    1. X_i(x, y) = 2 where edge image i is > 0 at (x, y), else 1 ([0106]).
    2. F = ((w_C X_C + w_S X_S) + w_P X_P) + w_L X_L - 1.5, in float64, in that order.
    With weights summing to 1 this is ``sum of the weights of the operators with an edge
    - 0.5``: a weighted majority vote (spec ``R-final``).

    Examples
    --------
    The worked example of [0107]-[0115]: weights 0.4, 0.2, 0.2, 0.2; a pixel where all four
    operators mark an edge, one where none does, one where all but LoG do, one where Canny
    alone does. F = 0.4 * 2 + 3 * 0.2 * 2 - 1.5 = 0.5 at the first:

    >>> import numpy as np
    >>> from refseg.claim1.weighting import decide, final_weight
    >>> maps = {k: np.zeros((1, 4), np.uint8) for k in ("canny", "sobel", "prewitt", "log")}
    >>> for name in maps:
    ...     maps[name][0, 0] = 1                    # all four operators
    ...     maps[name][0, 2] = name != "log"        # three of four
    >>> maps["canny"][0, 3] = 1                     # Canny alone
    >>> weights = {"canny": 0.4, "sobel": 0.2, "prewitt": 0.2, "log": 0.2}
    >>> final_weight(maps, weights)
    array([[ 0.5, -0.5,  0.3, -0.1]])

    References
    ----------
    [0104]-[0115]; spec ``R-final``.
    """
    m = _maps(edges)
    return _vote(binary_stack(m), _per_operator(weights, "weights"), backend)


@implements("claim1.step2.final_weight", "claim1.step2.mean_image")
def binary_stack(edges: Mapping) -> np.ndarray:
    """The four maps as one uint8 array of shape (4, M, N), 1 where a map is > 0, in
    :data:`OPERATORS` order (the layout the compiled kernels take)."""
    return np.ascontiguousarray(np.stack([np.asarray(edges[k]) > 0 for k in OPERATORS]),
                                dtype=np.uint8)


def _vote(stack, weights, backend, offset=VOTE_OFFSET):
    """F of a (4, M, N) binary stack; ``offset`` other than 1.5 only for the audit's
    alternatives (``refseg.claim1.alternatives``, R-final)."""
    out = np.empty(stack.shape[1:], dtype=np.float64)
    kernels(backend).weighted_vote(stack, np.array([weights[k] for k in OPERATORS]),
                                   offset, out)
    return out


#: Pixels per block of rows where a whole-image float temporary is avoided (8 MB of float64):
#: large enough that the kernels still split a block over the cores.
BLOCK_PIXELS = 2 ** 20


def _row_blocks(rows, cols):
    """Slices of consecutive rows, about :data:`BLOCK_PIXELS` pixels each, covering ``rows``."""
    step = max(1, BLOCK_PIXELS // max(cols, 1))
    return [slice(r, min(r + step, rows)) for r in range(0, rows, step)]


def _vote_decision(stack, weights, backend, offset=VOTE_OFFSET):
    """``_decide(_vote(stack, weights, backend, offset))`` a block of rows at a time: the same
    map (each pixel's F is formed alone), without the 8 bytes per pixel of a whole F."""
    rows, cols = stack.shape[1:]
    decision = np.empty((rows, cols), dtype=np.uint8)
    for block in _row_blocks(rows, cols):
        decision[block] = _decide(_vote(np.ascontiguousarray(stack[:, block]), weights,
                                        backend, offset))
    return decision


def _binary_statistics(stack, backend):
    """Mean image, std and pixel mean of binary maps in one pass; equal to
    :func:`mean_image`, :func:`standard_deviations` and :func:`pixel_means` (exact
    arithmetic for 0/1 maps; ``tests/claim1/test_weighting.py`` holds them equal)."""
    mean_img = np.empty(stack.shape[1:], dtype=np.float64)
    sums, squared = np.empty(4), np.empty(4)
    kernels(backend).edge_statistics(stack, mean_img, sums, squared)
    n = mean_img.size
    std = {k: float(np.sqrt(squared[i] / (n - STD_DDOF))) for i, k in enumerate(OPERATORS)}
    mean = {k: float(sums[i] / n) for i, k in enumerate(OPERATORS)}
    return mean_img, std, mean


def _checked_stack(stack) -> np.ndarray:
    """A (4, M, N) C-contiguous uint8 stack of 0/1 maps, or InputError."""
    if not (isinstance(stack, np.ndarray) and stack.dtype == np.uint8 and stack.ndim == 3
            and stack.shape[0] == len(OPERATORS) and stack.flags.c_contiguous):
        raise InputError(f"stack: expected a C-contiguous uint8 array of shape (4, M, N), got "
                         f"{getattr(stack, 'dtype', type(stack).__name__)} "
                         f"{getattr(stack, 'shape', '')}")
    if stack.size and stack.max() > 1:
        raise InputError("stack: the maps must hold 0 and 1 only (binary_stack makes them)")
    return stack


@implements("claim1.step2.mean_image", "claim1.step2.std", "claim1.step2.cv")
def edge_statistics(stack, *, backend: str = "cython"):
    """The gray-mean image, each map's standard deviation about it and its pixel mean, in one
    pass over the binary maps.

    Parameters
    ----------
    stack : ndarray of shape (4, M, N), uint8
        The four binary maps in :data:`OPERATORS` order (:func:`binary_stack`).
    backend : {"cython", "numpy"}

    Returns
    -------
    mean_img : ndarray of shape (M, N), float64
    std, mean : dict of str to float

    Notes
    -----
    Equal to :func:`mean_image`, :func:`standard_deviations` and :func:`pixel_means` of the
    maps (exact arithmetic for 0/1 maps), without their float copies of the maps.

    References
    ----------
    [0086]-[0094].
    """
    return _binary_statistics(_checked_stack(stack), backend)


@implements("claim1.step2.final_weight", "claim1.step2.decision", "claim1.step2.traverse")
def vote(stack, weights: Mapping, *, keep_final: bool = True, backend: str = "cython"):
    """The weighted vote over every pixel: the final weight F and the feature map.

    Parameters
    ----------
    stack : ndarray of shape (4, M, N), uint8
        The four binary maps in :data:`OPERATORS` order (:func:`binary_stack`).
    weights : mapping of str to float
        :func:`operator_weights`.
    keep_final : bool
        Return F; False: None instead, and the decision is taken a block of rows at a time
        without a whole float plane (the same map).
    backend : {"cython", "numpy"}

    Returns
    -------
    final : ndarray of shape (M, N), float64, or None
        :func:`final_weight` of the maps.
    feature_map : ndarray of shape (M, N), uint8
        :func:`decide` of F.

    References
    ----------
    [0104]-[0119]; spec ``R-final``.
    """
    stack, weights = _checked_stack(stack), _per_operator(weights, "weights")
    if not keep_final:
        return None, _vote_decision(stack, weights, backend)
    final = _vote(stack, weights, backend)
    return final, _decide(final)


@implements("claim1.step2.decision", "claim1.step2.traverse")
def decide(final) -> np.ndarray:
    """Per-pixel decision: 1 where ``F >= 0``, 0 where ``F < 0``.

    Parameters
    ----------
    final : ndarray of shape (M, N)
        Final weight parameter from :func:`final_weight`.

    Returns
    -------
    feature_map : ndarray of shape (M, N), uint8
        The feature-region image, at the input's resolution: every pixel is decided ([0119]).

    Examples
    --------
    The final weights of the worked example of :func:`final_weight`: the pixels marked by all
    four operators and by three of them are kept, Canny's alone is not; F = 0 is kept too:

    >>> import numpy as np
    >>> from refseg.claim1.weighting import decide
    >>> decide(np.array([[0.5, -0.5, 0.3, -0.1, 0.0]]))
    array([[1, 0, 1, 0, 1]], dtype=uint8)

    References
    ----------
    [0116]-[0119].
    """
    return _decide(as_float_image(final, "final"))


def _decide(final):
    return (final >= 0.0).astype(np.uint8)
