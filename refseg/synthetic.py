"""Synthetic weld-seam images with exact labels, deterministic by seed.

The patent's example images are 550x156 RGB photographs of a weld seam taken by an industrial
camera during welding ([0201]-[0202]); they are not published. This generator draws images of the
same kind: a seam band with wavy, irregular boundaries crossing brushed metal, bead ripples,
uneven lighting, sensor noise, spatter and glare, with the seam fainter on one side, where
[0213]-[0214] say that Sobel and Prewitt lose it. Labels use the colours of [0263].
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from refseg.errors import InputError
from refseg.trace import implements

#: Weld image size (rows, cols) of [0202]: "550*156" (width x height).
WELD_SHAPE = (156, 550)
#: Label colours of [0263], indexed by class: 0 contour (red), 1 inside (green), 2 outside (blue).
LABEL_COLOURS = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255]], dtype=np.uint8)
CONTOUR, INSIDE, OUTSIDE = 0, 1, 2
#: Half-width in pixels of the contour class band drawn along each seam boundary.
CONTOUR_HALF_WIDTH = 1


@dataclass(frozen=True)
class WeldSample:
    """One synthetic weld image.

    Attributes
    ----------
    rgb : ndarray of shape (M, N, 3), uint8
    classes : ndarray of shape (M, N), uint8
        0 contour, 1 inside the seam, 2 outside.
    seed : int
    """

    rgb: np.ndarray
    classes: np.ndarray
    seed: int

    @property
    def label_rgb(self) -> np.ndarray:
        """Label image in the colours of [0263], shape (M, N, 3), uint8."""
        return LABEL_COLOURS[self.classes]


def _smooth_curve(rng, n, amplitude, scales):
    """A wavy 1-D profile: a sum of random sinusoids plus smoothed noise."""
    x = np.arange(n, dtype=np.float64)
    y = np.zeros(n)
    for scale in scales:
        y += rng.uniform(0.3, 1.0) * np.sin(2 * np.pi * x / scale + rng.uniform(0, 2 * np.pi))
    y += ndimage.gaussian_filter1d(rng.normal(0, 1.5, n), 6)
    return amplitude * y / max(np.abs(y).max(), 1e-9)


@implements("claim1.step1.acquire")
def weld_image(seed: int, shape: tuple[int, int] = WELD_SHAPE) -> WeldSample:
    """Draw one synthetic weld-seam image and its label.

    Parameters
    ----------
    seed : int
        Seed of ``numpy.random.default_rng``; equal seeds give equal images.
    shape : (rows, cols)
        Image size, at least 32x32; default 156x550 as [0202].

    Returns
    -------
    WeldSample

    Notes
    -----
    1. Background: brushed metal (streaks along the seam), a lighting gradient and vignette.
    2. Seam: a band across the image between two wavy boundaries; inside, a bead with ripples
       (arcs across the band) and a contrast that fades towards one end.
    3. Dark fusion lines just inside each boundary, spatter dots, one glare spot, Gaussian
       sensor noise, a slight colour cast; then quantised to uint8.
    4. Label: pixels within :data:`CONTOUR_HALF_WIDTH` of a boundary are contour, those between
       the boundaries inside, the rest outside.

    References
    ----------
    [0201]-[0202], [0213]-[0214], [0261]-[0263].
    """
    rows, cols = (int(s) for s in shape)
    if rows < 32 or cols < 32:
        raise InputError(f"shape: at least 32x32 is needed, got {rows}x{cols}")
    rng = np.random.default_rng(seed)
    r = np.arange(rows, dtype=np.float64)[:, None]
    c = np.arange(cols, dtype=np.float64)[None, :]

    centre = rows * rng.uniform(0.4, 0.6) + _smooth_curve(rng, cols, rows * 0.08, (cols, cols / 2))
    half = rows * rng.uniform(0.12, 0.2) + _smooth_curve(rng, cols, rows * 0.03, (cols / 3, 37))
    top, bottom = centre - half, centre + half

    streaks = ndimage.gaussian_filter1d(rng.normal(0, 1, (rows, cols)), 25, axis=1)
    base = 85 + 4 * streaks / streaks.std()
    light = 1.0 + 0.35 * (c / cols - 0.5) * rng.choice([-1, 1]) \
        - 0.25 * ((r / rows - 0.5) ** 2 + (c / cols - 0.5) ** 2)
    image = base * light

    inside = (r >= top[None, :]) & (r <= bottom[None, :])
    depth = np.clip((r - top[None, :]) / np.maximum(bottom - top, 1)[None, :], 0, 1)
    bead_profile = np.sin(np.pi * depth) ** 0.7
    ripple_period = rng.uniform(7, 12)
    ripples = np.sin(2 * np.pi * (c + 25 * (depth - 0.5) ** 2 * rows / 20) / ripple_period)
    fade = np.linspace(1.0, rng.uniform(0.25, 0.45), cols)[None, :]
    if rng.random() < 0.5:
        fade = fade[:, ::-1]
    contrast = rng.uniform(45, 70)
    image = np.where(inside, image + fade * contrast * (bead_profile + 0.25 * ripples), image)
    for edge in (top, bottom):
        groove = np.exp(-((r - edge[None, :]) ** 2) / (2 * 1.5 ** 2))
        image -= fade * rng.uniform(10, 20) * groove

    for _ in range(rng.integers(8, 25)):
        y, x = rng.uniform(0, rows), rng.uniform(0, cols)
        image += rng.uniform(30, 90) * np.exp(-((r - y) ** 2 + (c - x) ** 2) / (2 * rng.uniform(0.5, 1.5) ** 2))
    gy, gx = rng.uniform(0, rows), rng.uniform(0, cols)
    image += rng.uniform(20, 60) * np.exp(-((r - gy) ** 2 + (c - gx) ** 2) / (2 * rng.uniform(6, 15) ** 2))
    image += rng.normal(0, rng.uniform(2, 4), image.shape)

    cast = np.array([1.0, rng.uniform(0.92, 1.0), rng.uniform(0.8, 0.95)])
    rgb = np.clip(image[..., None] * cast[None, None, :], 0, 255).round().astype(np.uint8)

    classes = np.where(inside, INSIDE, OUTSIDE).astype(np.uint8)
    near = np.zeros((rows, cols), dtype=bool)
    for edge in (top, bottom):
        near |= np.abs(r - edge[None, :]) <= CONTOUR_HALF_WIDTH + 0.5
    classes[near] = CONTOUR
    return WeldSample(rgb=rgb, classes=classes, seed=int(seed))
