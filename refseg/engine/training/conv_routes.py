"""Which algorithm computes a convolution: the route policy.

A stride-1 convolution has four routes that give the same values to rounding:

- ``"im2col"``: the column matrix and one matrix product (``conv_im2col``); every strided
  convolution takes it too;
- ``"winograd"`` and ``"winograd4"``: Winograd F(2x2, 3x3) and F(4x4, 3x3) (``conv_winograd``),
  for float32 3x3 kernels with enough channels and output tiles;
- ``"direct"``: compiled direct kernels (``conv_direct``), for products too small for im2col.

``conv_route`` chooses for the forward pass and, on its own, for the gradients. A transposed
convolution on the im2col route also chooses the layout of its column matrix
(``transposed_columns``). The thresholds are where one route overtook the other on the
decoder's and the backbones' layers, on 2 cores; the measurements behind each are in
``docs/performance.md`` ("How the engine works and where its time goes").

``conv.forced_route`` makes every stride-1 convolution inside a ``with`` block take one route
(the engine's convolutions installed for the block, ``forcing`` the route), so that the routes
can be held to each other and to the reference.
"""
from __future__ import annotations

import contextlib
import contextvars
import math

import numpy as np

from refseg.errors import InputError

INFRASTRUCTURE = "the choice among equivalent convolution algorithms: speed only"

#: The routes of a stride-1 convolution.
ROUTES = ("direct", "im2col", "winograd", "winograd4")

#: Output tile side of each Winograd route: F(2x2, 3x3) and F(4x4, 3x3).
WINOGRAD_TILE = {"winograd": 2, "winograd4": 4}

#: Largest kh*kw*Cin*Cout (products per output pixel) of a stride-1 convolution that the
#: direct kernels compute: below it im2col + GEMM spends most of its time copying (K = kh*kw*Cin
#: and N = Cout are tiny). The 3 -> 3 prediction layer has 81; the next smallest decoder layers
#: (64 -> 3, 96 -> 3) are stride 2 and stay on im2col.
DIRECT_MAX_PRODUCTS = 256

#: Fewest input and output channels (each) of a stride-1 3x3 convolution that takes a Winograd
#: route: its products have K = Cin and N = Cout, and BLAS runs narrow products poorly.
WINOGRAD_MIN_CHANNELS = 16

#: Fewest 2x2 output tiles (N * ceil(Ho / 2) * ceil(Wo / 2)) that take the Winograd route,
#: unless each image has WINOGRAD_MIN_IMAGE_TILES: its 16 products have one row per tile, and a
#: product of a few dozen rows runs well below the BLAS's best, while im2col's one product has
#: 4 rows per tile. ResNet50V2's conv5 (7x7, 16 tiles per image) takes Winograd from batch 10.
WINOGRAD_MIN_TILES = 160

#: Fewest 2x2 output tiles per image that take the Winograd route whatever the batch size: the
#: 14x14 layers (49 tiles) at batch 1. Each of the 16 products is then a tile of its own on
#: refseg's thread pool, and the route multiplies 2.25 times less.
WINOGRAD_MIN_IMAGE_TILES = 49

#: WINOGRAD_MIN_TILES for the gradients (input and kernel), which are routed on their own,
#: whatever route the forward pass took. Lower, because im2col's kernel gradient is one product
#: whose inner dimension is N*Ho*Wo with a few dozen rows, which OpenBLAS does worse than the
#: sixteen Winograd products of the same depth.
WINOGRAD_GRADIENT_MIN_TILES = 32

#: Dtypes whose stride-1 3x3 convolutions take a Winograd route. float64 stays on im2col
#: although Winograd is as fast and as accurate there: float64 is refseg's reference (gradient
#: checks, the network that float32 tolerances are measured against), and direct summation
#: keeps it independent of the Winograd path it is used to check.
WINOGRAD_DTYPES = (np.dtype(np.float32),)

#: Fewest 4x4 output tiles (N * ceil(Ho / 4) * ceil(Wo / 4)) that take F(4x4, 3x3) instead of
#: F(2x2, 3x3). It multiplies 2.25 times per output instead of 4, but in 36 products with one
#: row per tile (a quarter of F(2x2, 3x3)'s rows) and with a kernel transform 2.25 times as
#: large, which only large images repay.
WINOGRAD4_MIN_TILES = 160

#: Most input pixels (N*H*W) of a transposed convolution whose column matrix is computed
#: kernel-first, as kernel x input^T (kh*kw*Cout rows, one column per input pixel), and
#: scattered by col2im_transposed; above it input-first, input x kernel^T, and col2im. OpenBLAS
#: does a product with a few dozen rows faster with them as the right operand.
TRANSPOSED_COLUMNS_MAX_ROWS = 64

#: Fewest input pixels per image (H*W) of a float32 transposed convolution with a stride above
#: 1 that takes the "panels" route (``transposed_route``). The engine's tiles hold the pixels of
#: one image and one output parity, so on small maps its panels of weights are read again for
#: every image and tile: the decoder's 2048 -> 720 layer at 2x7 took 58 ms there and 9 ms on
#: im2col (batch 8, Zen 5, 2 threads), its 4x14 layers 1.1-1.2 times im2col's time, the
#: 8x28 and 16x56 layers 0.55-0.72.
PANELS_MIN_INPUT_PIXELS = 128

#: Fewest output channels of a transposed convolution on the "panels" route: the engine's
#: panels hold 16, and the decoder's 3-class layers (64 -> 3, 96 -> 3 at 32x112) took 3.0 ms
#: there against 2.5 on im2col.
PANELS_MIN_OUTPUT_CHANNELS = 16

_FORCED: contextvars.ContextVar[str | None] = contextvars.ContextVar("refseg_forced_route",
                                                                     default=None)


@contextlib.contextmanager
def forcing(route: str | None):
    """Inside the block ``conv_route`` answers ``route`` for every stride-1 convolution of this
    thread (``conv.forced_route`` also installs the engine's convolutions, which ask it).

    Parameters
    ----------
    route : {"direct", "im2col", "winograd", "winograd4"} or None
        A forced Winograd route applies to 3x3 kernels, the only size it computes; other
        kernels take "im2col". None: ``conv_route`` chooses, as outside any block.

    Examples
    --------
    >>> with forcing("im2col"):
    ...     conv_route((3, 3, 3, 3), (1, 1))
    'im2col'
    >>> conv_route((3, 3, 3, 3), (1, 1))
    'direct'
    """
    if route is not None and route not in ROUTES:
        raise InputError(f"forced_route: route must be one of {ROUTES} or None, got {route!r}")
    token = _FORCED.set(route)
    try:
        yield
    finally:
        _FORCED.reset(token)


def conv_route(w_shape, strides, dtype=np.float32, out_shape=None, gradient=False) -> str:
    """How a convolution with kernel ``w_shape`` (kh, kw, Cin, Cout) is computed.

    Parameters
    ----------
    w_shape : tuple of int
        (kh, kw, Cin, Cout).
    strides : (int, int)
    dtype : numpy dtype
        The input's.
    out_shape : (int, int, int) or None
        (N, Ho, Wo) of the output; None: not considered.
    gradient : bool
        The route of the gradients rather than of the forward pass: the same, but with
        WINOGRAD_GRADIENT_MIN_TILES for WINOGRAD_MIN_TILES.

    Returns
    -------
    {"direct", "winograd4", "winograd", "im2col"}
        Stride 1 only, else "im2col". "direct" for kh*kw*Cin*Cout <= DIRECT_MAX_PRODUCTS;
        for a 3x3 kernel with Cin and Cout >= WINOGRAD_MIN_CHANNELS and a dtype in
        WINOGRAD_DTYPES, "winograd4" (F(4x4, 3x3)) with at least WINOGRAD4_MIN_TILES 4x4
        output tiles, else "winograd" (F(2x2, 3x3)) with at least WINOGRAD_MIN_TILES 2x2 tiles
        or WINOGRAD_MIN_IMAGE_TILES per image (or when out_shape is None); "im2col"
        otherwise. An enclosing ``forcing`` block overrides the choice.
    """
    kh, kw, cin, cout = w_shape
    if strides != (1, 1):
        return "im2col"
    forced = _FORCED.get()
    if forced in WINOGRAD_TILE:
        return forced if (kh, kw) == (3, 3) else "im2col"
    if forced is not None:
        return forced
    if math.prod(w_shape) <= DIRECT_MAX_PRODUCTS:
        return "direct"
    if not ((kh, kw) == (3, 3) and min(cin, cout) >= WINOGRAD_MIN_CHANNELS
            and np.dtype(dtype) in WINOGRAD_DTYPES):
        return "im2col"
    if out_shape is None:
        return "winograd"
    n, ho, wo = out_shape
    if n * -(-ho // 4) * -(-wo // 4) >= WINOGRAD4_MIN_TILES:
        return "winograd4"
    min_tiles = WINOGRAD_GRADIENT_MIN_TILES if gradient else WINOGRAD_MIN_TILES
    image_tiles = -(-ho // 2) * -(-wo // 2)
    if n * image_tiles >= min_tiles or image_tiles >= WINOGRAD_MIN_IMAGE_TILES:
        return "winograd"
    return "im2col"


def transposed_route(w_shape, strides, dtype, in_shape, backend="cython") -> str:
    """How the forward pass of a transposed convolution with a stride above 1 is computed.

    Parameters
    ----------
    w_shape : tuple of int
        (kh, kw, Cout, Cin), Keras' Conv2DTranspose layout.
    strides : (int, int)
    dtype : numpy dtype
        The input's.
    in_shape : (int, int, int, int)
        (N, H, W, Cin) of the input.
    backend : {"cython", "numpy"}

    Returns
    -------
    {"panels", "im2col"}
        "panels" (the inference engine's indirect convolution, one per output parity, on its
        packed panels: ``conv_panels``) for float32 on the compiled backend, a CPU whose
        float32 products run on the engine's kernels (``products.product_kernel``), equal
        strides, at least PANELS_MIN_INPUT_PIXELS input pixels per image and
        PANELS_MIN_OUTPUT_CHANNELS output channels; "im2col" otherwise, and for any
        route a ``forcing`` block forces (which holds the routes to the reference). Its
        gradients take the im2col route's products either way.
    """
    from refseg.engine.training.products import (ENGINE_MIN_COLUMNS, ENGINE_MIN_ROWS,
                                                 product_kernel)

    if strides == (1, 1) or strides[0] != strides[1] or _FORCED.get() is not None or \
            backend != "cython" or np.dtype(dtype) != np.float32:
        return "im2col"
    _, h, w, _ = in_shape
    if h * w < PANELS_MIN_INPUT_PIXELS or w_shape[2] < PANELS_MIN_OUTPUT_CHANNELS:
        return "im2col"
    # where a large float32 product would run on the engine's AVX-512 kernels (the CPU, the
    # product_kernels knob, the row loops' switch), so does this convolution
    if product_kernel(dtype, ENGINE_MIN_ROWS, ENGINE_MIN_COLUMNS) != 2:
        return "im2col"
    return "panels"


def transposed_columns(input_pixels: int) -> str:
    """The layout of a transposed convolution's column matrix on the im2col route.

    Parameters
    ----------
    input_pixels : int
        N*H*W of its input.

    Returns
    -------
    {"kernel-first", "input-first"}
        "kernel-first" (kernel x input^T, scattered by col2im_transposed) up to
        TRANSPOSED_COLUMNS_MAX_ROWS input pixels, "input-first" (input x kernel^T, scattered
        by col2im) above.
    """
    return "kernel-first" if input_pixels <= TRANSPOSED_COLUMNS_MAX_ROWS else "input-first"
