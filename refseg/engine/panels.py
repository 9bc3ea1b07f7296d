"""The engine's panel layout of convolution weights, and Winograd's transform of them: a leaf
of the engine, which the runtime's steps and the planner's packing both read.

Layout of a packed convolution kernel: panels of 16 output channels,
``packed[panel, tap, c, j] = kernel[tap, c, 16 * panel + j]`` (zero for the channels past the
last), flat float32; the micro-kernel reads one panel's ``taps x cin x 16`` floats in order.
"""
from __future__ import annotations

import numpy as np

INFRASTRUCTURE = "the engine's weight layout"

#: Output channels per panel (engine_kernels.h, ENGINE_PANEL).
PANEL = 16


def pack_panels(taps_kernel: np.ndarray) -> np.ndarray:
    """Weights (taps, cin, cout) as panels of 16 output channels: flat float32 of
    ``panels * taps * cin * 16`` (see the module docstring)."""
    taps, cin, cout = taps_kernel.shape
    panels = -(-cout // PANEL)
    padded = np.zeros((taps, cin, panels * PANEL), np.float32)
    padded[:, :, :cout] = taps_kernel
    return np.ascontiguousarray(padded.reshape(taps, cin, panels, PANEL).transpose(2, 0, 1, 3)
                                ).reshape(-1)


#: Winograd F(2x2, 3x3)'s kernel transform (engine_kernels.c): U = G g G^T.
WINOGRAD_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64)
#: Winograd F(4x4, 3x3)'s (engine/training/winograd_f4x4.c).
WINOGRAD4_G = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                        [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]],
                       np.float64)


def winograd_weights(taps_kernel: np.ndarray, tile: int = 2) -> np.ndarray:
    """A 3x3 kernel (9, cin, cout) transformed for Winograd F(tile x tile, 3x3), tile 2 or 4,
    ``G g G^T`` for every channel pair (in float64, rounded once), packed as (tile + 2)**2
    panel sets: flat float32 of ``(tile + 2)**2 * panels * cin * 16``, set ``xi = (tile + 2)
    i + j`` first.

    Notes
    -----
    First ``t = g G^T``, then ``G t``, each element's three terms summed left to right: the
    order of ``engine_winograd_weights``, which makes the same weights for a call, to the
    bit."""
    taps, cin, cout = taps_kernel.shape
    if taps != 9:
        raise ValueError(f"Winograd F({tile}x{tile}, 3x3) takes 3x3 kernels, got {taps} taps")
    g_matrix = {2: WINOGRAD_G, 4: WINOGRAD4_G}[tile]
    side = tile + 2
    g = np.asarray(taps_kernel, np.float64).reshape(3, 3, cin, cout)
    # t[a, j] = g[a, :] . G[j, :] and u[i, j] = G[i, :] . t[:, j]
    column = g_matrix[None, :, :, None, None]
    t = (g[:, None, 0] * column[:, :, 0] + g[:, None, 1] * column[:, :, 1]) + \
        g[:, None, 2] * column[:, :, 2]
    row = g_matrix[:, None, :, None, None]
    u = (row[:, :, 0] * t[None, 0] + row[:, :, 1] * t[None, 1]) + row[:, :, 2] * t[None, 2]
    return pack_positions(u.reshape(side * side, cin, cout).astype(np.float32))


def pack_positions(u: np.ndarray) -> np.ndarray:
    """Winograd's transformed weights (P, cin, cout), one set per position of the tile, packed
    as P sets of panels: flat float32 of ``P * panels * cin * 16``, ``[xi][panel][cin][16]``
    (zero past the last channel). ``u`` may be a strided view."""
    positions, cin, cout = u.shape
    panels = -(-cout // PANEL)
    full = cout // PANEL
    packed = np.zeros((positions, panels, cin, PANEL), np.float32)
    packed[:, :full] = u[:, :, :full * PANEL].reshape(positions, cin, full, PANEL).transpose(
        0, 2, 1, 3)
    if full < panels:
        packed[:, full, :, :cout - full * PANEL] = u[:, :, full * PANEL:]
    return packed.reshape(-1)


def unpacked_panels(packed: np.ndarray, taps: int, cin: int, cout: int) -> np.ndarray:
    """The kernel (taps, cin, cout) float32 that ``pack_panels`` packed."""
    panels = -(-cout // PANEL)
    return packed.reshape(panels, taps, cin, PANEL).transpose(1, 2, 0, 3).reshape(
        taps, cin, panels * PANEL)[:, :, :cout]
