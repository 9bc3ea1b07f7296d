"""Rounding-aware binary maps: which pixels of a claim-1 binary map rounding may decide, and the
rule by which a candidate's map that differs from refseg's only there passes.

A binary map is a decision on float64 arrays that an implementation may compute in another
order (a separable blur, another sum order) within the float64 tolerance of the manifest. Where
a decision lies within that tolerance of a tie or a threshold, rounding decides it: two
neighbours of equal true magnitude that refseg's rounding separates by one ulp, a LoG value of
exactly 0 that is 1e-14 elsewhere. The bundle marks those pixels per map (*rounding-level*:
:func:`rounding_masks`, stored as ``<map>@rounding``), and :func:`apply_rounding` lets a
candidate's map differ from refseg's there, provided it is the map the manifest's rule gives
on the candidate's own upstream arrays (so a rule left out, such as the one for an exact LoG
zero, still fails). Arrays downstream of such a map are then compared, within their own
tolerance, with the values the manifest's formulas give on the candidate's maps (the
candidate-consistent reference).

References: [0082]-[0119]; spec ``readings.md`` (R-binary, R-canny, R-log, R-final).
"""
from __future__ import annotations

import numpy as np
from scipy import ndimage

from refseg.backend import kernels
from refseg.claim1 import alternatives, operators as ops
from refseg.claim1.operators import OPERATORS
from refseg.golden.format import TOLERANCES

INFRASTRUCTURE = "golden files: rounding-aware binary maps"

#: The rule, for the manifest and the guide.
RULE = ("a pixel of a binary map is rounding-level when changing the arrays its decision "
        "reads by at most their float64 tolerance (rtol x the array's largest |value|) can "
        "flip it: Sobel and Prewitt, |magnitude - threshold| within the two tolerances; "
        "Canny, a magnitude within tolerance of a threshold or of a neighbour it is compared "
        "with, a gradient direction within tolerance of a sector boundary, or a pixel whose "
        "hysteresis chain passes through such a pixel; LoG, a response, a neighbour's "
        "response or a jump within tolerance of 0 or of the jump threshold; the feature map, "
        "|final_weight| within tolerance of 0. A candidate's map that differs from refseg's "
        "only at rounding-level pixels passes (reported as rounding-level) when it equals the "
        "map the manifest's rule gives on the candidate's own upstream arrays, which must pass; "
        "the arrays computed from such maps (mean_image ... final_weight) are then compared, "
        "within their tolerance, with the values the manifest's formulas give on the "
        "candidate's maps. An automatic threshold that equals the manifest's Otsu rule on the "
        "candidate's own response (which passes) passes as rounding-level (a value on a bin "
        "edge binned by rounding); a map below such a moved threshold may also differ at the "
        "pixels between the two thresholds and, for Canny, at every pixel of the chains those "
        "pixels join (8-connected through pixels that survive non-maximum suppression above "
        "the lower low threshold)")
#: The binary maps of an image and the arrays each is decided from.
MAPS = (*(f"edges/{op}" for op in OPERATORS), "feature_map")
#: The arrays computed from the four edge maps (and the weights), in pipeline order.
DOWNSTREAM = ("mean_image", "std", "mean", "cv", "intermediate_cv", "weights", "final_weight")


def _tol(array) -> float:
    a = np.abs(np.asarray(array, dtype=np.float64))
    return TOLERANCES["float64"]["rtol"] * (float(a.max()) if a.size else 0.0)


def _neighbours(a, fill):
    rows, cols = a.shape
    p = np.pad(a, 1, constant_values=fill)
    return {(dr, dc): p[1 + dr:1 + dr + rows, 1 + dc:1 + dc + cols]
            for dr in (-1, 0, 1) for dc in (-1, 0, 1) if dr or dc}


def _canny_mask(blurred, m, low, high):
    gx, gy, _ = ops._gradient(np.ascontiguousarray(blurred), ops.SOBEL_SMOOTH, "cython")
    tol = _tol(m)
    ax, ay = np.abs(gx), np.abs(gy)
    near = (np.abs(m - low) <= 2 * tol) | (np.abs(m - high) <= 2 * tol)
    near |= np.abs(ay - ops.TAN_22_5 * ax) <= 2 * tol * (1 + ops.TAN_22_5)
    near |= np.abs(ay - ops.TAN_67_5 * ax) <= 2 * tol * (1 + ops.TAN_67_5)
    for n in _neighbours(m, -np.inf).values():
        near |= (np.abs(m - n) <= 2 * tol) & (m > low - 2 * tol)
    # hysteresis: a chain that reaches a seed only through a rounding-level pixel is one too
    candidates = np.empty(m.shape, np.uint8)
    kernels("cython").non_maximum_suppression(gx, gy, m, low, high, ops.TAN_22_5,
                                              ops.TAN_67_5, candidates)
    eight = np.ones((3, 3), bool)

    def grow(cand, seeds):
        labels, _ = ndimage.label(cand, structure=eight)
        kept = np.unique(labels[seeds & cand])
        return np.isin(labels, kept[kept > 0])

    sure = (candidates > 0) & ~near
    lower = grow(sure, sure & (candidates == 2))
    upper = grow((candidates > 0) | near, (candidates == 2) | (near & (m > high - 2 * tol)))
    return near & (m > low - 2 * tol) | (upper & ~lower)


def _log_mask(response, slope):
    tol = _tol(response)
    near = np.abs(response) <= tol
    for n in (v for (dr, dc), v in _neighbours(response, np.nan).items() if not dr or not dc):
        with np.errstate(invalid="ignore"):
            near |= np.abs(n) <= tol
            near |= np.abs(np.abs(n - response) - slope) <= 2 * tol + _tol(slope)
    return near


def rounding_masks(result) -> dict[str, np.ndarray]:
    """{map step: (M, N) bool, True where rounding may decide the pixel} of one image's
    claim-1 result (:func:`refseg.claim1.features.extract`; see :data:`RULE`)."""
    r, t = result.responses, result.thresholds
    out = {"edges/canny": _canny_mask(result.blurred, r["canny"], t["canny"]["low"],
                                      t["canny"]["high"])}
    for op in ("sobel", "prewitt"):
        out[f"edges/{op}"] = (np.abs(r[op] - t[op]["magnitude"])
                              <= _tol(r[op]) + _tol(t[op]["magnitude"]))
    out["edges/log"] = _log_mask(r["log"], t["log"]["slope"])
    out["feature_map"] = np.abs(result.final_weight) <= _tol(result.final_weight)
    return out


# -- checking -------------------------------------------------------------------------------
def _given(values, name):
    v = values.get(name)
    return None if v is None or isinstance(v, Exception) else np.asarray(v)


def candidate_map(step: str, prefix: str, values: dict):
    """The map the manifest's rule gives on the candidate's own upstream arrays, or None when
    the candidate does not give them."""
    if step == "feature_map":
        final = _given(values, f"{prefix}/final_weight")
        return None if final is None else (final >= 0).astype(np.uint8)
    op = step.split("/", 1)[1]
    response = _given(values, f"{prefix}/response/{op}")
    if response is None or response.dtype != np.float64 or response.ndim != 2:
        return None
    response = np.ascontiguousarray(response)
    out = np.empty(response.shape, np.uint8)
    k = kernels("cython")
    if op in ("sobel", "prewitt"):
        t = _given(values, f"{prefix}/threshold/{op}/magnitude")
        if t is None:
            return None
        k.threshold_above(response, float(t), out)
    elif op == "log":
        t = _given(values, f"{prefix}/threshold/log/slope")
        if t is None:
            return None
        k.zero_crossings(response, float(t), out)
    else:
        blurred = _given(values, f"{prefix}/blurred")
        low, high = (_given(values, f"{prefix}/threshold/canny/{x}") for x in ("low", "high"))
        if blurred is None or low is None or high is None or blurred.shape != response.shape:
            return None
        gx, gy, _ = ops._gradient(np.ascontiguousarray(blurred, dtype=np.float64),
                                  ops.SOBEL_SMOOTH, "cython")
        out = ops._canny_from_gradient(gx, gy, response, float(low), float(high),
                                       "cython").edges
    return out


def consistent_downstream(prefix: str, values: dict) -> dict:
    """The arrays of :data:`DOWNSTREAM` that the manifest's formulas give on the candidate's
    four edge maps."""
    edges = {op: np.asarray(values[f"{prefix}/edges/{op}"]) for op in OPERATORS}
    weights, stats = alternatives._statistics(edges, alternatives.Variant(), "cython")
    final, _ = alternatives.vote(edges, weights)
    return {**stats, "weights": np.array([weights[op] for op in OPERATORS]),
            "final_weight": final}


def own_threshold(name: str, values: dict):
    """The automatic threshold ``claim1/<image>/threshold/<op>/<key>`` that the manifest's
    rule gives on the candidate's own response, or None."""
    prefix, (_, op, key) = "/".join(name.split("/")[:2]), name.split("/")[2:]
    response = _given(values, f"{prefix}/response/{op}")
    if response is None or response.dtype != np.float64 or response.ndim != 2:
        return None
    response = np.ascontiguousarray(response)
    otsu = ops._otsu(response, ops.OTSU_BINS, "cython", absolute=op == "log")
    return {"low": otsu, "high": ops.CANNY_HIGH_RATIO * otsu, "magnitude": otsu,
            "slope": ops.LOG_JUMP_RATIO * otsu}[key]


def _rounding_thresholds(rows, status, entries, values) -> dict:
    """Failing automatic thresholds whose response passes and that equal (within their
    tolerance) the manifest's rule on the candidate's own response: a value of the response
    on an Otsu bin edge, binned by rounding. They pass (``rounding`` -2); returns {image
    prefix: {op: (refseg's threshold, the candidate's) per key}}."""
    moved: dict = {}
    for r in rows:
        parts = r.name.split("/")
        if r.status != "fail" or len(parts) != 5 or parts[2] != "threshold":
            continue
        source = status.get(f"{'/'.join(parts[:2])}/response/{parts[3]}")
        value = _given(values, r.name)
        if source is None or source.status != "pass" or value is None or value.ndim:
            continue
        own = own_threshold(r.name, values)
        if own is None or abs(float(value) - own) > _tol(own):
            continue
        r.status, r.reason, r.rounding = "pass", "", -2
        moved.setdefault("/".join(parts[:2]), {}).setdefault(parts[3], []).append(
            float(value))
    return moved


def _moved_mask(op, reference_response, reference_thresholds, moved):
    """Pixels whose decision lies between refseg's threshold and the candidate's moved one."""
    m = np.abs(reference_response) if op == "log" else reference_response
    if op == "log":
        # a jump is a difference of neighbours: any pixel next to a value in the band
        lo, hi = sorted((reference_thresholds[0], moved[0]))
        band = (m >= lo / 2 - _tol(m)) & (m <= hi + _tol(m))
        return ndimage.binary_dilation(band, structure=ndimage.generate_binary_structure(2, 1))
    mask = np.zeros(m.shape, bool)
    for ref, new in zip(reference_thresholds, moved):
        lo, hi = sorted((ref, new))
        mask |= (m >= lo - _tol(m)) & (m <= hi + _tol(m))
    return mask


def _moved_canny_chains(blurred, m, band, lows):
    """The pixels a moved Canny threshold may add or cut with its band: every pixel connected
    (8 neighbours, through pixels that survive non-maximum suppression above the lower of the
    low thresholds) to a pixel of the band. A band pixel that becomes a candidate joins its
    chain to a seed, or a seed in the band lights its whole chain, so the chain moves with
    it."""
    gx, gy, _ = ops._gradient(np.ascontiguousarray(blurred, dtype=np.float64),
                              ops.SOBEL_SMOOTH, "cython")
    low = min(lows) - 2 * _tol(m)
    candidates = np.empty(m.shape, np.uint8)
    kernels("cython").non_maximum_suppression(gx, gy, np.ascontiguousarray(m), low, low,
                                              ops.TAN_22_5, ops.TAN_67_5, candidates)
    labels, _ = ndimage.label((candidates > 0) | band, structure=np.ones((3, 3), bool))
    reached = np.unique(labels[band])
    return np.isin(labels, reached[reached > 0])


def apply_rounding(rows, entries: dict, stored: dict, values: dict, check_array) -> None:
    """Turn the failing automatic thresholds and binary maps whose differences are all
    rounding-level (and that follow the manifest's rule on the candidate's own arrays) into
    passes with ``rounding`` set (the pixels of a map that differ; -2 for a threshold); then
    compare the failing downstream arrays of such an image with the candidate-consistent
    reference (passing with ``rounding`` -1 where they agree).

    ``check_array`` is :func:`refseg.golden.check.check_array`, passed in: the check imports
    this module, not the other way round.
    """
    status = {r.name: r for r in rows}
    moved = _rounding_thresholds(rows, status, entries, values)
    touched = set(moved)
    for r in rows:
        entry = entries[r.name]
        mask_key = (entry.get("rounding") or {}).get("member")
        value = _given(values, r.name)
        if (r.status != "fail" or not mask_key or value is None
                or value.shape != tuple(entry["shape"]) or value.dtype != np.uint8):
            continue
        prefix, step = "/".join(r.name.split("/")[:2]), "/".join(r.name.split("/")[2:])
        sources = [status.get(s) for s in entry["computed_from"]]  # thresholds included
        if any(s is not None and s.status == "fail" for s in sources):
            continue
        mask, reference_map = stored.get(mask_key), stored.get(r.name)
        # a map stored as a summary (over the whole-array limit) cannot be held pixel by
        # pixel against the mask: its differences stay failures
        if not (isinstance(mask, np.ndarray) and isinstance(reference_map, np.ndarray)
                and mask.shape == value.shape == reference_map.shape):
            continue
        differ = value != reference_map
        allowed = mask.astype(bool)
        op = step.split("/", 1)[-1]
        response = stored.get(f"{prefix}/response/{op}")
        if op in moved.get(prefix, {}) and isinstance(response, np.ndarray):
            keys = {"canny": ("low", "high"), "log": ("slope",)}.get(op, ("magnitude",))
            references = [float(stored[f"{prefix}/threshold/{op}/{k}"]) for k in keys]
            candidates = [float(values[f"{prefix}/threshold/{op}/{k}"]) for k in keys]
            band = _moved_mask(op, response, references, candidates)
            allowed = allowed | band
            blurred = stored.get(f"{prefix}/blurred")
            if (op == "canny" and isinstance(blurred, np.ndarray)
                    and blurred.shape == response.shape):
                allowed |= _moved_canny_chains(blurred, response, band,
                                               (references[0], candidates[0]))
        if np.any(differ & ~allowed):
            r.reason += f"; {int((differ & allowed).sum())} of them rounding-level"
            continue
        own = candidate_map(step, prefix, values)
        if own is None or not np.array_equal(own, value):
            r.reason += ("; all rounding-level, but not the map the manifest's rule gives on "
                         "the candidate's own arrays" if own is not None else
                         "; all rounding-level, but the candidate lacks the arrays they are "
                         "decided from")
            continue
        r.status, r.reason, r.rounding = "pass", "", int(differ.sum())
        touched.add(prefix)
    for prefix in touched:
        if not all(f"{prefix}/edges/{op}" in status and status[f"{prefix}/edges/{op}"].status
                   == "pass" for op in OPERATORS):
            continue
        reference = consistent_downstream(prefix, values)
        for step in DOWNSTREAM:
            row = status.get(f"{prefix}/{step}")
            if row is None or row.status != "fail" or _given(values, row.name) is None:
                continue
            name = row.name
            again = check_array(name, entries[name], {name: np.asarray(reference[step])},
                                values[name])
            if again.status == "pass":
                row.status, row.reason, row.rounding = "pass", "", -1
                row.max_abs, row.max_rel = again.max_abs, again.max_rel
        _consistent_decision(status.get(f"{prefix}/feature_map"),
                             status.get(f"{prefix}/final_weight"), reference, values)


def _consistent_decision(row, final_row, reference, values):
    """The feature map of an image whose final weights passed against the
    candidate-consistent reference: F >= 0 of that reference, rounding-level where |F| is
    within tolerance of 0, and the candidate's own F >= 0."""
    if (row is None or row.status != "fail" or final_row is None or final_row.rounding != -1
            or _given(values, row.name) is None):
        return
    value = np.asarray(values[row.name])
    final = reference["final_weight"]
    expected = (final >= 0).astype(np.uint8)
    if value.shape != expected.shape or value.dtype != np.uint8:
        return
    differ = value != expected
    own = (np.asarray(values[final_row.name]) >= 0).astype(np.uint8)
    if not np.any(differ & (np.abs(final) > _tol(final))) and np.array_equal(own, value):
        row.status, row.reason, row.rounding = "pass", "", int(differ.sum()) or -1
