"""Synthetic weld-seam images with exact labels, deterministic by seed.

The patent's example images are 550x156 RGB photographs of a weld seam taken by an industrial
camera during welding ([0201]-[0202]), "taken in a non-ideal environment: uneven gray levels and
many noise points" ([0264]); they are not published. This generator draws images of that kind so
that claim 1 can be exercised and a segmentation model has something to generalise over: the
seam's position, width, angle and curvature change with the seed, its two boundaries are wavy and
irregular, the bead carries ripples and a highlight, the metal around it is brushed, scratched,
stained and heat-tinted, and the camera adds uneven lighting, arc glow, spatter, glare, defocus
and sensor noise. Now and then one side of the seam fades into the background, where [0213]-[0214]
say that edge operators lose it. Labels use the colours of [0263].
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy import ndimage

from refseg import publish
from refseg._version import __version__
from refseg.data import dataset
from refseg.data.labels import CONTOUR, INSIDE, LABEL_COLOURS, OUTSIDE, class_table, colour_table
from refseg.errors import InputError
from refseg.workers import checked_jobs, map_in_workers
from refseg.data.synthetic_options import MIN_SIDE, check_synthetic_options
from refseg.cite import implements
from refseg.data.synthetic_options import WELD_SHAPE

#: The manifest :func:`write_synthetic_dataset` writes beside ``images/`` and ``labels/``.
SYNTH_MANIFEST = "synth.json"
#: Half-width in pixels of the contour class band drawn along each seam boundary: a pixel is
#: contour when its centre lies within CONTOUR_HALF_WIDTH + 0.5 of the boundary curve.
CONTOUR_HALF_WIDTH = 1
#: Chance that one side of the seam fades (over part of its length) to a contrast that the
#: claim-1 operators lose in the noise.
FAINT_SIDE_PROBABILITY = 0.3
#: Chance of the welding arc's glow at one end of the seam ("during welding", [0201]).
ARC_PROBABILITY = 0.35


@dataclass(frozen=True)
class WeldSample:
    """One synthetic weld image.

    Attributes
    ----------
    rgb : ndarray of shape (M, N, 3), uint8
    classes : ndarray of shape (M, N), uint8
        0 contour, 1 inside the seam, 2 outside.
    seed : int
    params : dict
        The parameters drawn for this image (seam geometry, contrasts, which side is faint, ...),
        JSON-ready; for inspection and data-set manifests.
    """

    rgb: np.ndarray
    classes: np.ndarray
    seed: int
    params: dict = field(default_factory=dict, compare=False)

    @property
    def label_rgb(self) -> np.ndarray:
        """Label image in the colours of [0263], shape (M, N, 3), uint8."""
        return LABEL_COLOURS[self.classes]


def _wave(rng, n, amplitude, periods, noise_sigma=6.0):
    """A wavy 1-D profile of length n with max |value| = amplitude: random sinusoids of the
    given periods (pixels) plus smoothed noise, so no two seams have the same outline."""
    x = np.arange(n, dtype=np.float64)
    y = np.zeros(n)
    for period in periods:
        y += rng.uniform(0.3, 1.0) * np.sin(2 * np.pi * x / period + rng.uniform(0, 2 * np.pi))
    y += ndimage.gaussian_filter1d(rng.normal(0, 1.5, n), noise_sigma)
    return amplitude * y / max(np.abs(y).max(), 1e-9)


def _bumps(rng, n, amplitude, count):
    """Local bulges and notches of a boundary (overlap, undercut): Gaussian bumps of either sign."""
    x = np.arange(n, dtype=np.float64)
    y = np.zeros(n)
    for _ in range(count):
        centre, width = rng.uniform(0, n), rng.uniform(4, 25)
        y += rng.choice([-1, 1]) * amplitude * rng.uniform(0.4, 1.0) \
            * np.exp(-((x - centre) ** 2) / (2 * width ** 2))
    return y


def _add_blob(image, y, x, sigma_y, sigma_x, amplitude):
    """Add an axis-aligned Gaussian spot in place, touching only a window of +-4 sigma (spatter
    and glare are many small spots; full-image exponentials would dominate the run time)."""
    rows, cols = image.shape
    r0, r1 = max(int(y - 4 * sigma_y), 0), min(int(y + 4 * sigma_y) + 2, rows)
    c0, c1 = max(int(x - 4 * sigma_x), 0), min(int(x + 4 * sigma_x) + 2, cols)
    if r0 >= r1 or c0 >= c1:
        return
    rr = np.arange(r0, r1, dtype=np.float64)[:, None]
    cc = np.arange(c0, c1, dtype=np.float64)[None, :]
    image[r0:r1, c0:c1] += amplitude * np.exp(-((rr - y) ** 2) / (2 * sigma_y ** 2)
                                              - ((cc - x) ** 2) / (2 * sigma_x ** 2))


def _add_segment(image, y0, x0, y1, x1, width, amplitude):
    """Add a thin bright or dark line segment (a spark trail or a scratch) in place, with a
    Gaussian cross-section of the given width, touching only its bounding box."""
    rows, cols = image.shape
    pad = 3 * width + 1
    r0, r1 = max(int(min(y0, y1) - pad), 0), min(int(max(y0, y1) + pad) + 1, rows)
    c0, c1 = max(int(min(x0, x1) - pad), 0), min(int(max(x0, x1) + pad) + 1, cols)
    if r0 >= r1 or c0 >= c1:
        return
    rr = np.arange(r0, r1, dtype=np.float64)[:, None]
    cc = np.arange(c0, c1, dtype=np.float64)[None, :]
    dy, dx = y1 - y0, x1 - x0
    length2 = max(dy * dy + dx * dx, 1e-9)
    t = np.clip(((rr - y0) * dy + (cc - x0) * dx) / length2, 0, 1)
    d2 = (rr - y0 - t * dy) ** 2 + (cc - x0 - t * dx) ** 2
    image[r0:r1, c0:c1] += amplitude * np.exp(-d2 / (2 * width ** 2))


def _near_curve(edge, rows, limit):
    """Mask of the pixels whose centre lies within ``limit`` (Euclidean, pixels) of the curve
    r = edge(c), the polyline through (c, edge[c]) for c = 0 .. cols - 1, continued straight
    beyond both ends (the seam goes on outside the picture).

    The vertical distance |r - edge(c)| alone would thin the band on steep stretches of a wavy
    boundary, where the curve passes close to a pixel from a neighbouring column. So the
    polyline is sampled every <= 1/16 pixel of its length and every pixel within ``limit`` of
    a sample is marked: exact to 1/32 pixel."""
    cols = edge.shape[0]
    reach = int(np.ceil(limit + 0.5))  # a sample rounds to a pixel at most 0.5 away
    x = np.arange(-reach, cols + reach, dtype=np.float64)
    slope_start = edge[1] - edge[0] if cols > 1 else 0.0
    slope_end = edge[-1] - edge[-2] if cols > 1 else 0.0
    y = np.concatenate([edge[0] + slope_start * x[:reach],
                        edge, edge[-1] + slope_end * (x[-reach:] - (cols - 1))])
    steps = np.maximum(np.ceil(np.hypot(1.0, np.diff(y)) * 16), 1).astype(np.int64)
    seg = np.repeat(np.arange(len(steps)), steps)
    t = (np.arange(seg.size) - np.repeat(np.cumsum(steps) - steps, steps)) / steps[seg]
    px = np.append(x[seg] + t, x[-1])
    py = np.append(y[seg] + t * (y[seg + 1] - y[seg]), y[-1])
    mask = np.zeros((rows, cols), dtype=bool)
    base_r, base_c = np.round(py).astype(np.int64), np.round(px).astype(np.int64)
    for dr in range(-reach, reach + 1):
        for dc in range(-reach, reach + 1):
            rr, cc = base_r + dr, base_c + dc
            keep = (rr >= 0) & (rr < rows) & (cc >= 0) & (cc < cols) \
                & ((rr - py) ** 2 + (cc - px) ** 2 <= limit ** 2)
            mask[rr[keep], cc[keep]] = True
    return mask


def _geometry(rng, rows, cols):
    """The seam's two boundaries, top(c) < bottom(c), as float row coordinates per column,
    drawn so that the whole band stays inside the image with a margin of outside above and
    below in every column (the label then always reads outside, contour, inside, contour,
    outside down each column)."""
    c = np.arange(cols, dtype=np.float64)
    u = (c - (cols - 1) / 2) / max((cols - 1) / 2, 1)          # -1 .. 1 along the seam
    half = rows * rng.uniform(0.08, 0.22)
    half_width = half * (1 + rng.uniform(-0.25, 0.25) * u) \
        + _wave(rng, cols, rows * rng.uniform(0.005, 0.03), (cols / 2, cols / 5))
    roughness = rng.uniform(0.2, 1.0)  # from a smooth, machine-like bead to a ragged manual one
    sides = []
    for _ in range(2):
        amp = rows * rng.uniform(0.006, 0.03) * roughness
        sides.append(_wave(rng, cols, amp, (rng.uniform(15, 45), rng.uniform(40, 120)),
                           noise_sigma=rng.uniform(2, 6))
                     + _bumps(rng, cols, rows * 0.03 * roughness, rng.integers(0, 5)))
    slope = np.tan(np.radians(rng.uniform(-7, 7)))
    bend = rows * rng.uniform(-0.12, 0.12)
    centre = slope * (c - (cols - 1) / 2) + bend * u ** 2 \
        + _wave(rng, cols, rows * rng.uniform(0.0, 0.06), (cols, cols / 2))
    top_off, bottom_off = -half_width + sides[0], half_width + sides[1]
    # keep at least a 1-pixel inside core between the contour bands
    bottom_off = np.maximum(bottom_off, top_off + 2 * CONTOUR_HALF_WIDTH + 4)
    margin = max(CONTOUR_HALF_WIDTH + 3.0, 0.03 * rows)
    room = rows - 1 - 2 * margin
    for _ in range(60):  # shrink the centre line's excursion until the band fits
        lo, hi = (centre + top_off).min(), (centre + bottom_off).max()
        if hi - lo <= room:
            break
        centre = centre - centre.mean()
        centre *= 0.85
    else:
        centre = np.zeros(cols)
        lo, hi = top_off.min(), bottom_off.max()
    if hi - lo > room:  # too wide even when straight: scale the band itself
        scale = room / (hi - lo)
        top_off, bottom_off = top_off * scale, bottom_off * scale
        lo, hi = (centre + top_off).min(), (centre + bottom_off).max()
    offset = rng.uniform(margin - lo, rows - 1 - margin - hi)
    top, bottom = centre + offset + top_off, centre + offset + bottom_off
    params = {"angle_deg": float(np.degrees(np.arctan(slope))), "bend_px": float(bend),
              "mean_width_px": float((bottom - top).mean()), "roughness": float(roughness),
              "centre_row": float(((top + bottom) / 2).mean())}
    return top, bottom, params


@implements("claim1.step1.acquire", "claim5.acquisition_module")
def weld_image(seed: int, shape: tuple[int, int] = WELD_SHAPE) -> WeldSample:
    """Draw one synthetic weld-seam image and its label.

    Parameters
    ----------
    seed : int
        Seed of ``numpy.random.default_rng`` (>= 0); equal seeds give equal images.
    shape : (rows, cols)
        Image size, at least 32x32; default 156x550 as [0202].

    Returns
    -------
    WeldSample
        ``rgb`` (rows, cols, 3) uint8, ``classes`` (rows, cols) uint8, ``label_rgb``, ``seed``
        and the drawn ``params``.

    Notes
    -----
    1. Geometry: a seam band across the image between two boundaries; its centre line has a
       random angle (+-7 degrees), bend and waviness, its width a taper and slow variation,
       each boundary its own roughness, bulges and notches. The band stays inside the image.
    2. Background: brushed metal (streaks at a small random angle), scratches, stains, a
       heat-tinted zone along the seam.
    3. Bead: a convex brightness profile with a highlight ridge, chevron ripples whose pitch
       drifts along the seam, fine texture; a dark groove (the toe) along each boundary. The
       contrast fades towards one end; with probability :data:`FAINT_SIDE_PROBABILITY` one
       side fades almost to nothing over part of the seam.
    4. Camera: a lighting gradient in a random direction with vignette, the arc's glow at one
       end (probability :data:`ARC_PROBABILITY`), spatter dots and spark trails, glare spots,
       slight defocus, signal-dependent and read noise, row noise, a colour cast; then
       quantised to uint8.
    5. Label: pixels between the boundaries are inside, the rest outside; pixels whose centre is
       within :data:`CONTOUR_HALF_WIDTH` + 0.5 of a boundary curve (Euclidean) are contour.

    References
    ----------
    [0201]-[0202], [0213]-[0214], [0261]-[0264].
    """
    rows, cols = (int(s) for s in shape)
    if rows < MIN_SIDE or cols < MIN_SIDE:
        raise InputError(f"shape: at least {MIN_SIDE}x{MIN_SIDE} is needed, got {rows}x{cols}")
    if int(seed) < 0:
        raise InputError(f"seed: expected an integer >= 0, got {seed}")
    # one generator drawn from in a fixed order, stage by stage: the same seed, the same image
    rng = np.random.default_rng(int(seed))
    top, bottom, params = _geometry(rng, rows, cols)
    seam = _Seam(rows, cols, top, bottom, _faint_side(rng, cols, params))
    image, heat = _background(rng, seam)
    image, contrast = _bead(rng, seam, image)
    image, arc = _camera(rng, seam, image, params)
    rgb = _colour(rng, image, heat, arc)
    classes = np.where(seam.inside, INSIDE, OUTSIDE).astype(np.uint8)
    limit = CONTOUR_HALF_WIDTH + 0.5
    for edge in (top, bottom):
        classes[_near_curve(edge, rows, limit)] = CONTOUR
    params.update({"rows": rows, "cols": cols, "contrast": float(contrast),
                   "faint_side": params.get("faint_side"), "arc_end": params.get("arc_end")})
    return WeldSample(rgb=rgb, classes=classes, seed=int(seed), params=params)


class _Seam:
    """Pixel coordinates and where each pixel lies relative to the seam band."""

    def __init__(self, rows: int, cols: int, top: np.ndarray, bottom: np.ndarray,
                 strength: np.ndarray):
        self.rows, self.cols, self.top, self.bottom = rows, cols, top, bottom
        # per side (top, bottom), per column: the edge's contrast factor (:func:`_faint_side`)
        self.strength = strength
        self.r = np.arange(rows, dtype=np.float64)[:, None]
        self.c = np.arange(cols, dtype=np.float64)[None, :]
        self.width = np.maximum(bottom - top, 1.0)[None, :]
        self.depth = (self.r - top[None, :]) / self.width  # 0 at top, 1 at bottom
        self.inside = (self.depth >= 0) & (self.depth <= 1)
        # outside: vertical distance to the band, for the heat tint
        self.gap = np.where(self.depth < 0, top[None, :] - self.r,
                            np.where(self.depth > 1, self.r - bottom[None, :], 0.0))


def _faint_side(rng, cols: int, params: dict) -> np.ndarray:
    """A faint side: along part of the seam one boundary loses (almost) all its contrast, the
    groove and the heat tint with it, so that no edge operator finds it there."""
    strength = np.ones((2, cols))
    if rng.random() < FAINT_SIDE_PROBABILITY:
        faint = int(rng.integers(0, 2))
        start, length = rng.uniform(-0.3, 0.7) * cols, rng.uniform(0.3, 1.0) * cols
        x = np.arange(cols)
        ramp = 1 / (1 + np.exp(-(x - start) / 15)) / (1 + np.exp((x - start - length) / 15))
        strength[faint] = 1 - (1 - rng.uniform(0.0, 0.12)) * ramp
        params["faint_side"] = ("top", "bottom")[faint]
        params["faint_columns"] = [int(max(start, 0)), int(min(start + length, cols))]
    return strength


def _background(rng, seam: _Seam) -> tuple[np.ndarray, np.ndarray]:
    """Brushed metal with stains and scratches, darkened by the heat tint along the seam;
    returns the gray image and the tint."""
    rows, cols = seam.rows, seam.cols
    level = rng.uniform(65, 115)
    tilt = np.tan(np.radians(rng.uniform(-2, 2)))
    extra = int(np.ceil(abs(tilt) * cols)) + 2
    # truncated at 2 sigma: the streaks only need to look long, and this filter dominated
    streak_src = ndimage.gaussian_filter(rng.normal(0, 1, (rows + extra, cols)),
                                         (0.7, rng.uniform(12, 30)), truncate=2.0)
    # shear the streaks: each column of the taller noise field moves by its own fractional
    # row offset (linear interpolation), so the streaks run at the tilt
    shift = extra / 2 + tilt * (seam.c[0] - cols / 2)
    base, frac = np.floor(shift).astype(np.int64), shift - np.floor(shift)
    src = np.arange(rows)[:, None] + base[None, :]
    cc = np.arange(cols)[None, :]
    streaks = (1 - frac) * streak_src[src, cc] + frac * streak_src[src + 1, cc]
    # stains are smooth: draw them at a quarter of the resolution and enlarge
    coarse = ndimage.gaussian_filter(rng.normal(0, 1, (rows // 4 + 2, cols // 4 + 2)),
                                     rng.uniform(2.5, 6))
    stains = ndimage.zoom(coarse, 4, order=1)[:rows, :cols]
    image = level + rng.uniform(1.8, 4.2) * streaks / max(streaks.std(), 1e-9) \
        + rng.uniform(1, 6) * stains / max(stains.std(), 1e-9)
    for _ in range(rng.integers(0, 5)):
        y0, x0 = rng.uniform(0, rows), rng.uniform(0, cols)
        angle, length = rng.uniform(-0.5, 0.5) + rng.choice([0, np.pi / 2]), rng.uniform(30, 200)
        _add_segment(image, y0, x0, y0 + length * np.sin(angle), x0 + length * np.cos(angle),
                     rng.uniform(0.5, 0.9), rng.choice([-1, 1]) * rng.uniform(4, 10))
    haz_reach = rng.uniform(4, 16)
    strength = seam.strength
    heat = np.exp(-seam.gap / haz_reach) * np.where(seam.depth < 0, strength[0], strength[1]) \
        * ~seam.inside
    image -= rng.uniform(0, 18) * heat
    return image, heat


def _bead(rng, seam: _Seam, image: np.ndarray) -> tuple[np.ndarray, float]:
    """The weld bead inside the band (profile, highlight ridge, chevron ripples, texture) and a
    dark groove along each boundary; returns the image and the bead's contrast."""
    rows, cols, depth, strength, r = seam.rows, seam.cols, seam.depth, seam.strength, seam.r
    fade = np.linspace(1.0, rng.uniform(0.3, 0.55), cols)[None, :]
    if rng.random() < 0.5:
        fade = fade[:, ::-1]
    # side factor: each side's strength near it, blending to full contrast in the middle
    near_top = np.clip(1 - depth / 0.35, 0, 1) ** 2
    near_bottom = np.clip(1 - (1 - depth) / 0.35, 0, 1) ** 2
    side = 1 - near_top * (1 - strength[0][None, :]) - near_bottom * (1 - strength[1][None, :])
    side = np.clip(side, 0, 1)

    contrast = rng.uniform(45, 75) * (1 if rng.random() < 0.85 else -0.6)
    profile = np.sin(np.pi * np.clip(depth, 0, 1)) ** rng.uniform(0.5, 0.9)
    ridge_at, ridge_w = rng.uniform(0.3, 0.7), rng.uniform(0.06, 0.15)
    highlight = rng.uniform(0, 0.5) * np.exp(-((depth - ridge_at) ** 2) / (2 * ridge_w ** 2))
    pitch = rng.uniform(6, 13) * (1 + _wave(rng, cols, 0.2, (cols / 2,)))[None, :]
    phase = np.cumsum(1 / pitch, axis=1)  # ripple count along the seam; pitch drifts
    chevron = rng.choice([-1, 1]) * rng.uniform(0.3, 1.2) * seam.width / 2 / pitch
    ripples = np.sin(2 * np.pi * (phase + chevron * (2 * depth - 1) ** 2))
    texture = ndimage.gaussian_filter(rng.normal(0, 1, (rows, cols)), 0.8)
    bead = contrast * fade * side * (profile + highlight + rng.uniform(0.055, 0.125) * ripples) \
        + rng.uniform(2.6, 6.5) * texture / max(texture.std(), 1e-9) * side
    image = np.where(seam.inside, image + bead, image)
    groove_depth = rng.uniform(10, 22)
    for k, edge in enumerate((seam.top, seam.bottom)):
        groove = np.exp(-((r - edge[None, :]) ** 2) / (2 * rng.uniform(1.2, 1.8) ** 2))
        image -= fade * strength[k][None, :] * groove_depth * groove
    return image, contrast


def _camera(rng, seam: _Seam, image: np.ndarray, params: dict):
    """What the camera adds: lighting and vignette, the arc's glow, spatter, spark trails,
    glare, defocus and noise; returns the image and the arc's glow (or None)."""
    rows, cols, r, c = seam.rows, seam.cols, seam.r, seam.c
    direction = rng.uniform(0, 2 * np.pi)
    ramp = ((c / cols - 0.5) * np.cos(direction) + (r / rows - 0.5) * np.sin(direction))
    light = 1.0 + rng.uniform(0.15, 0.45) * ramp \
        - rng.uniform(0.1, 0.35) * ((r / rows - 0.5) ** 2 + (c / cols - 0.5) ** 2)
    image = image * light
    arc = None
    if rng.random() < ARC_PROBABILITY:
        end = int(rng.integers(0, 2))
        ax = (rng.uniform(-0.12, 0.02) if end == 0 else rng.uniform(0.98, 1.12)) * cols
        col = int(np.clip(ax, 0, cols - 1))
        ay = (seam.top[col] + seam.bottom[col]) / 2
        arc = rng.uniform(40, 110) * np.exp(-((r - ay) ** 2 + (c - ax) ** 2)
                                            / (2 * rng.uniform(25, 60) ** 2))
        image = image + arc
        params["arc_end"] = ("left", "right")[end]
    for _ in range(rng.integers(5, 35)):
        sigma = rng.uniform(0.5, 1.4)
        _add_blob(image, rng.uniform(0, rows), rng.uniform(0, cols), sigma, sigma,
                  rng.uniform(30, 100))
    for _ in range(rng.integers(0, 4)):
        y0, x0 = rng.uniform(0, rows), rng.uniform(0, cols)
        angle, length = rng.uniform(0, 2 * np.pi), rng.uniform(5, 25)
        _add_segment(image, y0, x0, y0 + length * np.sin(angle), x0 + length * np.cos(angle),
                     rng.uniform(0.5, 0.8), rng.uniform(25, 70))
    for _ in range(rng.integers(1, 3)):
        s = rng.uniform(5, 14)
        _add_blob(image, rng.uniform(0, rows), rng.uniform(0, cols), s, s * rng.uniform(1, 2.5),
                  rng.uniform(20, 55))
    defocus = rng.uniform(0.0, 0.7)
    if defocus > 0.3:
        image = ndimage.gaussian_filter(image, defocus)
    image = image + rng.normal(0, 1, image.shape) * np.sqrt(np.clip(image, 0, None)) \
        * rng.uniform(0.1, 0.3)
    # The read noise (2.85-6.8) and the ripple and texture strengths above are tuned together,
    # measured on seeds 0-299: with them the claim-1 weights rank Canny and LoG above Sobel and
    # Prewitt on every seed, Sobel and Prewitt at 0.088-0.132 (patent [0213]: 0.13); less noise
    # or stronger ripples leave LoG's map so sparse that its weight crowds Sobel's below 0.08,
    # and stronger ripples also make refseg's and scikit-image's Canny disagree more
    # (tests/claim1/test_crosscheck.py) on the many marginal, curved ripple edges.
    image = image + rng.normal(0, rng.uniform(2.85, 6.8), image.shape) \
        + rng.normal(0, rng.uniform(0, 1.2), (rows, 1))
    return image, arc


def _colour(rng, image: np.ndarray, heat: np.ndarray, arc) -> np.ndarray:
    """RGB uint8: a colour cast per image, a warm/blue temper tint beside the seam, a bluish
    arc."""
    cast = np.array([1.0, rng.uniform(0.92, 1.0), rng.uniform(0.8, 0.97)])
    tint = rng.uniform(0, 0.12)
    temper = np.array([1 + tint, 1.0, 1 - 1.5 * tint])
    rgb = image[..., None] * cast * (1 + heat[..., None] * (temper - 1))
    if arc is not None:
        rgb = rgb + arc[..., None] * (np.array([0.9, 0.95, 1.1]) - cast) * 0.5
    return np.clip(rgb, 0, 255).round().astype(np.uint8)


@implements("claim5.acquisition_module", "claim1.step2.dataset")
def write_synthetic_dataset(out, count, seed=0, size=WELD_SHAPE, *, stem: str = "weld",
                            jobs: int | None = None) -> Path:
    """Write a synthetic weld data set in the folder layout of :mod:`refseg.data.dataset`.

    Parameters
    ----------
    out : Path or None
        The data set folder; ``images/``, ``labels/`` and ``synth.json`` are written inside.
    count : int or str
        Number of image/label pairs, >= 1.
    seed : int or str
        Seed of the first image (>= 0); image i (``weld_<i>``) uses ``seed + i``.
    size : str or (rows, cols)
        ``"HxW"``, rows x cols, each side 32-8192; default 156x550 ([0202]).
    stem : str
        The files' names before ``_<i>``: letters, digits, ``_`` and ``-`` (the demo names
        its test welds ``test_weld_<i>``, apart from its training welds).
    jobs : int or None
        Worker processes that draw and write the images (default: one per core this process
        may use; 1 draws them in this process). The files are the same for any number.

    Returns
    -------
    Path
        ``out``.

    Raises
    ------
    InputError
        Bad arguments, or ``out`` holds files that refseg did not write (a hand-labelled data
        set is never overwritten).

    Notes
    -----
    This is ``refseg synth``. Images are RGB PNGs (:func:`weld_image`), labels RGB PNGs in the
    colours of [0263]; ``synth.json`` holds the seeds, the size, each image's drawn parameters
    and the refseg version. All three are staged beside ``out`` and swapped into place in one
    step when every file is written (replacing those of an earlier run): a killed run leaves
    the earlier set whole. The same arguments give byte-identical files.

    References
    ----------
    [0201]-[0203], [0261]-[0263], [0266]-[0267].
    """
    count, seed, (rows, cols) = check_synthetic_options(out, count, seed, size)
    if not (isinstance(stem, str) and stem and all(c.isalnum() or c in "_-" for c in stem)):
        raise InputError(f"stem: letters, digits, _ and - only, got {stem!r}")
    jobs = checked_jobs(jobs)
    out = publish.check_output_folder(out)
    publish.check_replaceable(out, [dataset.IMAGES_DIR, dataset.LABELS_DIR], _drawn(out),
                              "refseg synth")
    digits = max(5, len(str(count - 1)))
    with publish.staged_folders(out) as staging:
        images = staging.folder(dataset.IMAGES_DIR)
        labels = staging.folder(dataset.LABELS_DIR)
        work = [(seed + i, (rows, cols), f"{stem}_{i:0{digits}d}", images, labels)
                for i in range(count)]
        records = map_in_workers(_draw_and_write, work, jobs)
        # inside the staged folder: images, labels and their description appear together
        publish.write_json(staging.root / SYNTH_MANIFEST, {
            "generator": "refseg.data.synthetic.weld_image", "refseg_version": __version__,
            "count": count, "seed": seed, "size": {"rows": rows, "cols": cols},
            "classes": class_table(), "label_colours": colour_table(),
            "contour_half_width": CONTOUR_HALF_WIDTH, "samples": records})
    return out


def _draw_and_write(item) -> dict:
    """Draw one weld and write its image and label (one worker's task); its manifest record."""
    seed, shape, name, images, labels = item
    sample = weld_image(seed, shape)
    publish.write_png(images / f"{name}.png", sample.rgb)
    dataset.write_label(labels / f"{name}.png", sample.classes)
    return {"stem": name, "seed": seed, "params": sample.params}


def _drawn(out: Path) -> set:
    """The file names an earlier ``refseg synth`` drew into ``out`` (from its synth.json):
    only those may be replaced; any other file in images/ or labels/ is the user's."""
    try:
        samples = json.loads((Path(out) / SYNTH_MANIFEST).read_text(encoding="utf-8"))["samples"]
        return {f"{record['stem']}.png" for record in samples
                if isinstance(record.get("stem"), str)}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return set()
