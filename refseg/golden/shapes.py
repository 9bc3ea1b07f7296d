"""The shape of a difference between a candidate array and refseg's: a name for the patterns an
engineer would otherwise decode by hand.

:func:`difference_shape` tries, in this order, a transpose, a flip (rows, columns or both),
reversed channels, a one-pixel shift, a difference confined to the border ring, a constant
ratio, a constant offset, rounding to integers (uint8 pixels), a complemented binary map, and
a binary map that only adds or only removes pixels; the geometric and arithmetic patterns are
tried on the whole array first, then inside the border ring (the ring reported as differing
as well). Two arrays agree under a pattern when every element is within ``allowed`` of it.

References: none (a reporting aid of ``golden check``; it claims nothing of the patent).
"""
from __future__ import annotations

import numpy as np

INFRASTRUCTURE = "golden files: the shape of a candidate's difference"

#: Widths of the border ring tried, narrowest first.
RING_WIDTHS = (1, 2, 3)
#: One-pixel shifts tried: (rows, columns) the candidate is moved by relative to refseg's.
SHIFTS = ((0, 1), (0, -1), (1, 0), (-1, 0), (1, 1), (1, -1), (-1, 1), (-1, -1))


def _close(a, b, allowed, mask=None) -> bool:
    if a.shape != b.shape:
        return False
    diff = np.abs(a - b)
    if mask is not None:
        diff = diff[mask]
    return bool(diff.size) and bool(np.all(diff <= allowed))


def _ring(shape, width):
    """True on the outer ``width`` rows and columns of the first two axes."""
    ring = np.zeros(shape[:2], dtype=bool)
    ring[:width], ring[-width:], ring[:, :width], ring[:, -width:] = True, True, True, True
    return ring.reshape(ring.shape + (1,) * (len(shape) - 2)) & np.ones(shape, dtype=bool)


def _shifted(g, dr, dc):
    """``g`` moved by (dr, dc) rows and columns, NaN where nothing moved in."""
    out = np.full(g.shape, np.nan)
    rows, cols = g.shape[:2]
    out[max(dr, 0):rows + min(dr, 0), max(dc, 0):cols + min(dc, 0)] = \
        g[max(-dr, 0):rows - max(dr, 0), max(-dc, 0):cols - max(dc, 0)]
    return out


def _geometric(g, c, allowed, mask):
    if g.ndim >= 2 and g.shape[0] == g.shape[1] and _close(c, np.swapaxes(g, 0, 1), allowed,
                                                           mask):
        return {"kind": "transpose", "text": "refseg's array transposed (rows and columns "
                                             "swapped)"}
    if g.ndim >= 2:
        for axes, what in (((0,), "upside down (rows reversed)"),
                           ((1,), "mirrored left to right (columns reversed)"),
                           ((0, 1), "rotated by 180 degrees (rows and columns reversed)")):
            if _close(c, np.flip(g, axes), allowed, mask):
                return {"kind": "flip", "axes": list(axes), "text": f"refseg's array {what}"}
    if g.ndim == 3 and g.shape[2] == 3 and _close(c, g[..., ::-1], allowed, mask):
        return {"kind": "channel order", "text": "refseg's array with its channels reversed "
                                                 "(RGB against BGR)"}
    if g.ndim >= 2 and min(g.shape[:2]) > 2:
        for dr, dc in SHIFTS:
            moved = _shifted(g, dr, dc)
            keep = ~np.isnan(moved) & (True if mask is None else mask)
            if keep.sum() * 2 > g.size and _close(c, np.nan_to_num(moved), allowed, keep):
                return {"kind": "shift", "by": [dr, dc],
                        "text": f"refseg's array moved by one pixel ({dr:+d} rows, "
                                f"{dc:+d} columns)"}
    return None


def _arithmetic(g, c, allowed, mask, integer):
    gm, cm = (g.ravel(), c.ravel()) if mask is None else (g[mask], c[mask])
    if gm.size < 2:
        return None
    if not integer:
        norm = float(np.dot(gm, gm))
        if norm > 0:
            ratio = float(np.dot(cm, gm)) / norm
            if abs(ratio - 1.0) * float(np.abs(gm).max()) > allowed and _close(
                    cm, ratio * gm, allowed):
                return {"kind": "ratio", "value": ratio,
                        "text": f"a constant ratio: candidate = {ratio:.6g} x refseg's "
                                f"(refseg's = {1 / ratio:.6g} x the candidate's)"
                                if ratio else "zero where refseg's is not"}
        offset = float(np.median(cm - gm))
        if abs(offset) > allowed and _close(cm, gm + offset, allowed):
            return {"kind": "offset", "value": offset,
                    "text": f"a constant offset: candidate = refseg's {offset:+.6g}"}
        for rule, rounded in (("to nearest, halves to even", np.round(gm)),
                              ("to nearest, halves up", np.floor(gm + 0.5)),
                              ("down (truncated)", np.floor(gm))):
            if _close(cm, np.clip(rounded, 0, 255) if gm.min() >= 0 else rounded, allowed):
                return {"kind": "rounding", "rule": rule,
                        "text": f"refseg's values rounded to integers ({rule}), as a uint8 "
                                "image would hold them"}
    elif set(np.unique(gm)) <= {0.0, 1.0} and _close(cm, 1.0 - gm, 0.0):
        return {"kind": "complement", "text": "refseg's binary map inverted (0 and 1 swapped)"}
    return None


def _binary_counts(g, c):
    extra = int(np.count_nonzero((c != 0) & (g == 0)))
    missing = int(np.count_nonzero((c == 0) & (g != 0)))
    return extra, missing


def difference_shape(reference, candidate, allowed: float = 0.0) -> dict | None:
    """The shape of the difference of ``candidate`` from ``reference``, or None.

    Parameters
    ----------
    reference, candidate : ndarray
        refseg's array and the candidate's; another shape is tried as a transpose only.
    allowed : float
        The largest absolute difference that counts as agreeing (the array's tolerance).

    Returns
    -------
    dict or None
        ``kind`` (``value`` for a single number, ``transpose``, ``flip``, ``channel order``, ``shift``, ``border ring``,
        ``ratio``, ``offset``, ``rounding``, ``complement``, ``superset``, ``subset``),
        ``text`` (a sentence), ``inside_only`` (the pattern holds inside a ring of width
        ``ring`` only, the ring differs too) and the pattern's values (``value`` of a ratio
        or offset, ``by`` of a shift, ``width`` of a ring, ``extra``/``missing`` pixels of a
        binary map); None when the arrays agree or no pattern fits.
    """
    g = np.asarray(reference)
    c = np.asarray(candidate)
    if g.dtype.kind not in "biuf" or c.dtype.kind not in "biuf":
        return None
    integer = g.dtype.kind in "biu"
    g, c = g.astype(np.float64), c.astype(np.float64)
    if g.shape != c.shape:
        if g.ndim >= 2 and c.shape == np.swapaxes(g, 0, 1).shape and _close(
                c, np.swapaxes(g, 0, 1), allowed):
            return {"kind": "transpose", "text": "refseg's array transposed (rows and "
                                                 "columns swapped)", "inside_only": False}
        return None
    bad = np.abs(c - g) > allowed
    if not bad.any():
        return None
    if g.ndim == 0:
        g0, c0 = float(g), float(c)
        return {"kind": "value", "value": c0 / g0 if g0 else None, "inside_only": False,
                "text": (f"candidate = {c0 / g0:.6g} x refseg's" if g0 else "refseg's is 0")
                + f" (off by {c0 - g0:+.6g})"}
    found = _geometric(g, c, allowed, None) or _arithmetic(g, c, allowed, None, integer)
    if found:
        return {**found, "inside_only": False}
    if g.ndim >= 2 and min(g.shape[:2]) > 2 * RING_WIDTHS[-1] + 1:
        for width in RING_WIDTHS:
            ring = _ring(g.shape, width)
            if not bad[~ring].any():
                return {"kind": "border ring", "width": width, "inside_only": False,
                        "count": int(bad.sum()),
                        "text": f"only the border ring differs ({int(bad.sum())} elements "
                                f"within {width} pixel{'s' * (width > 1)} of the edge; the "
                                "inside agrees): another border rule"}
        for width in RING_WIDTHS[:2]:
            inside = ~_ring(g.shape, width)
            found = (_geometric(g, c, allowed, inside)
                     or _arithmetic(g, c, allowed, inside, integer))
            if found:
                return {**found, "inside_only": True, "ring": width,
                        "text": found["text"] + f", inside the border ring of width {width}; "
                                "the ring differs as well (another border rule too)"}
    if integer and set(np.unique(g)) <= {0.0, 1.0} and set(np.unique(c)) <= {0.0, 1.0}:
        extra, missing = _binary_counts(g, c)
        if not missing:
            return {"kind": "superset", "extra": extra, "missing": 0, "inside_only": False,
                    "text": f"refseg's pixels and {extra} more (a lower threshold, or a "
                            "wider rule)"}
        if not extra:
            return {"kind": "subset", "extra": 0, "missing": missing, "inside_only": False,
                    "text": f"refseg's pixels less {missing} (a higher threshold, or a "
                            "narrower rule)"}
    return None
