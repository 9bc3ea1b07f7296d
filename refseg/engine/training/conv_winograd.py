"""Stride-1 3x3 convolutions by Winograd F(2x2, 3x3) and F(4x4, 3x3) (routes "winograd" and
"winograd4").

Each output tile of tile x tile pixels is computed from its (tile + 2)^2 input window as
A^T [(G g G^T) * (B^T d B)] A: the products of a tile become P = (tile + 2)^2 element-wise
products in the transformed domain, which over all tiles and channel pairs are P matrix
products (``products.matmul_stack``) between the compiled transforms
(``engine/training/_winograd.pxi``). F(2x2, 3x3) multiplies 2.25 times less than direct summation,
F(4x4, 3x3) 4 times less. The forward, the input gradient (the adjoint convolution, through the
same transformed kernel, or for F(4x4, 3x3) the transformed flipped kernel) and the stride-1
transposed convolution take these routes; kernel gradients take F(2x2, 3x3)'s adjoint
transforms on both.

Where the CPU's float32 products run on the engine's AVX-512 kernels, an F(4x4, 3x3) whose
transformed tiles fit ENGINE_MIN_CHUNK to a chunk of the inference engine's Winograd kernel
runs on that kernel instead (``engine_winograd`` in ``engine/engine_kernels.c``: the same
transforms, the products on the same micro-kernels, each thread taking whole chunks through
the three passes): with at most 256 input channels each output is the same float32 sum as on
the products' route, bit for bit (one block of the inner dimension there). Zen 5, 2 threads,
batch 8: 32x112 96 -> 96 10.0 -> 5.1 ms, 16x56 144 -> 144 4.4 -> 2.7; no faster where
the tiles are wide (144 -> 256: 8.1 and 7.8 ms; the chunks are then short and each reads
all the transformed weights).

References: claims 2 and 4; [0129]-[0132] (backward). A. Lavin and S. Gray, "Fast Algorithms
for Convolutional Neural Networks", CVPR 2016, arXiv:1509.09308.
"""
from __future__ import annotations

import numpy as np

from refseg.autograd.elementwise import UNCLAMPED
from refseg.autograd.geometry import flipped_kernel
from refseg.engine.training.products import matmul_stack
from refseg.engine.training.workspace import workspace
from refseg.engine.training.backend import engine_kernels as kernels
from refseg.cite import implements

#: Fewest tiles in a chunk of the inference engine's F(4x4, 3x3) kernel (its 4 MiB of scratch
#: over 36 x (Cin + Cout in whole panels) floats per tile) for training's F(4x4, 3x3) to run
#: on it: 48 per thread on two threads, where each thread takes whole chunks of its own.
ENGINE_MIN_CHUNK = 96

#: Bytes of the transformed tiles held at a time, input (P x tiles x Cin) and products
#: (P x tiles x Cout) together: fewer, longer matrix products against data that stays in the
#: caches (2 MB of L2 per core and a large shared L3 where it was tuned).
WINOGRAD_BLOCK_BYTES = 24 << 20

#: Entry k = 4*xi + nu of the transform of the kernel flipped in space is entry
#: 4*pi(xi) + pi(nu) of the kernel's own transform, pi swapping 0 and 3: reversing the columns
#: of G reverses the order of its rows 0 and 3 and leaves rows 1 and 2 as they are.
_FLIPPED_ENTRY = [4 * i + j for i in (3, 1, 2, 0) for j in (3, 1, 2, 0)]

#: Distance in bytes, modulo 4096, between consecutive planes of the Winograd arrays. The
#: transforms read or write all planes of an array at once: planes a multiple of 4096 bytes
#: apart would all fall into the same sets of the L1 cache (whose sets repeat every 4096
#: bytes) and evict each other; 256 bytes apart, the 16 streams cover all of them.
_PLANE_SKEW = 256


def _plane_stride(rows, cols, dtype) -> int:
    """Elements between the planes of a (planes, rows, cols) Winograd array: rows*cols rounded
    up to whole 4096-byte pages, plus _PLANE_SKEW bytes."""
    itemsize = np.dtype(dtype).itemsize
    pages = -(-rows * cols * itemsize // 4096)
    return (pages * 4096 + _PLANE_SKEW) // itemsize


def _planes_size(rows, cols, dtype, planes=16) -> int:
    """Elements of scratch that _planes needs for a (planes, rows, cols) array."""
    return (planes - 1) * _plane_stride(rows, cols, dtype) + rows * cols


def _planes(scratch, rows, cols, planes=16) -> np.ndarray:
    """A (planes, rows, cols) view of the vector ``scratch``: each plane C-contiguous, planes
    _plane_stride elements apart (16 for F(2x2, 3x3), 36 for F(4x4, 3x3))."""
    itemsize = scratch.dtype.itemsize
    return np.lib.stride_tricks.as_strided(
        scratch, (planes, rows, cols),
        (_plane_stride(rows, cols, scratch.dtype) * itemsize, cols * itemsize, itemsize))


def _tile_blocks(tiles, c, cout, dtype, planes=16):
    """(first tile, V planes (planes, count, c), M planes (planes, count, cout)) for each
    block of ``tiles`` whose transformed data fit in WINOGRAD_BLOCK_BYTES; both in the
    workspace, valid until the next block."""
    per_block = max(1, WINOGRAD_BLOCK_BYTES // (planes * (c + cout) * np.dtype(dtype).itemsize))
    for start in range(0, tiles, per_block):
        count = min(per_block, tiles - start)
        v_size = _planes_size(count, c, dtype, planes)
        scratch = workspace(v_size + _planes_size(count, cout, dtype, planes), dtype)
        yield (start, _planes(scratch[:v_size], count, c, planes),
               _planes(scratch[v_size:], count, cout, planes))


def _transforms(k, tile):
    """The kernel, input and output transforms of F(tile x tile, 3x3) in kernel module k."""
    if tile == 2:
        return k.winograd_kernel, k.winograd_input, k.winograd_output
    return k.winograd4_kernel, k.winograd4_input, k.winograd4_output


@implements("claim2.fusion", "claim4.propagation")
def winograd_conv(x, w, adjoint, bias, pads, out_hw, backend, tile=2,
                  bounds=UNCLAMPED) -> np.ndarray:
    """Stride-1 3x3 convolution (+ bias) by Winograd F(2x2, 3x3) or F(4x4, 3x3), a block of
    tiles at a time.

    Parameters
    ----------
    x : ndarray of shape (N, H, W, C), C-contiguous
    w : ndarray of shape (3, 3, A, B)
    adjoint : bool
        False: convolve with w (C = A, B output channels). True: with w flipped in space and
        its channel axes exchanged, the kernel of the adjoint convolution (C = B, A output
        channels) - the input gradient of a convolution, the forward of a transposed one.
    bias : ndarray of shape (output channels,) or None
    pads : (int, int)
        Rows and columns of zeros before the input (negative: skipped input).
    out_hw : (int, int)
    backend : {"cython", "numpy"}
    tile : {2, 4}
        Output tile size: F(2x2, 3x3) (16 products per tile) or F(4x4, 3x3) (36).
    bounds : (float, float)
        The output clamped to [low, high] in the output transform (a ReLU after the
        convolution); UNCLAMPED: not clamped.

    Returns
    -------
    ndarray of shape (N, Ho, Wo, output channels), a new array (never workspace).

    Notes
    -----
    With a = tile + 2 (the input window's side) and P = a*a products per tile:

    1. U = G g G^T of each input/output channel pair: (P, A, B), in the workspace slot
       "winograd kernel".
    2. For each block of tiles (tile x tile output pixels each, WINOGRAD_BLOCK_BYTES of
       transformed data): V = B^T d B of each tile's a x a input window, (P, tiles, C); the P
       products M[k] = V[k] @ U[k] (``products.matmul_stack``); out = A^T M A + bias, clamped to ``bounds``,
       cropped at the bottom and right edges.

    For F(2x2, 3x3) the adjoint needs no transformed copy of the flipped kernel: its entry k
    is U[j].T for j = _FLIPPED_ENTRY[k], a transposed view that the products read as it is. F(4x4,
    3x3)'s points (0, +-1, +-2, infinity) are not closed under p -> 1/p, which is what
    flipping does to them: it transforms the flipped kernel itself.
    """
    n, _, _, c = x.shape
    ho, wo = out_hw
    cout = w.shape[2] if adjoint else w.shape[3]
    planes = (tile + 2) ** 2
    transform_kernel, transform_input, transform_output = _transforms(kernels(backend), tile)
    if tile == 4 and adjoint:
        w, adjoint = flipped_kernel(w), False
    if tile == 4 and _on_the_engine(x, c, cout, out_hw, backend):
        return _engine_winograd4(x, w, bias, pads, out_hw, bounds)
    u = _planes(workspace(_planes_size(*w.shape[2:], x.dtype, planes), x.dtype,
                          "winograd kernel"), *w.shape[2:], planes)
    transform_kernel(np.ascontiguousarray(w, dtype=x.dtype), u)
    bias = np.zeros(cout, dtype=x.dtype) if bias is None else np.ascontiguousarray(bias)
    th, tw = -(-ho // tile), -(-wo // tile)
    out = np.empty((n, ho, wo, cout), dtype=x.dtype)
    for start, v, m in _tile_blocks(n * th * tw, c, cout, x.dtype, planes):
        transform_input(x, *pads, th, tw, start, v)
        if adjoint:
            matmul_stack(v, u.transpose(0, 2, 1), m, b_plane=_FLIPPED_ENTRY, backend=backend)
        else:
            matmul_stack(v, u, m, backend=backend)
        transform_output(m, bias, *bounds, th, tw, start, out)
    return out


def _on_the_engine(x, c, cout, out_hw, backend) -> bool:
    """Whether an F(4x4, 3x3) of x runs on the inference engine's kernel (module docstring)."""
    from refseg import _kernels
    from refseg.engine.training.products import (ENGINE_MIN_COLUMNS, ENGINE_MIN_ROWS,
                                                 product_kernel)

    return (backend == "cython" and x.dtype == np.float32
            and product_kernel(x.dtype, ENGINE_MIN_ROWS, ENGINE_MIN_COLUMNS) == 2
            and _kernels.engine_winograd_chunk(x.shape[0], *out_hw, c, cout, 4)
            >= ENGINE_MIN_CHUNK)


def _engine_winograd4(x, w, bias, pads, out_hw, bounds) -> np.ndarray:
    """F(4x4, 3x3) of x (N, H, W, Cin) float32 by the kernel w (3, 3, Cin, Cout), + bias
    (Cout,) or None, clamped to ``bounds``, on the inference engine's Winograd kernel: the
    weights transformed by training's transform (the products' route's very weights) and
    packed in panels for it. Returns (N, Ho, Wo, Cout) float32, a new array."""
    from refseg import _kernels
    from refseg.engine.packing import padded_bias
    from refseg.engine.panels import PANEL, pack_positions
    from refseg.engine.runtime import PARALLEL_MIN_MACS, backend_code, threads_for

    n, _, _, cin = x.shape
    cout = w.shape[3]
    u = _planes(workspace(_planes_size(cin, cout, x.dtype, 36), x.dtype, "winograd kernel"),
                cin, cout, 36)
    _kernels.winograd4_kernel(np.ascontiguousarray(w), u)
    chunk = _kernels.engine_winograd_chunk(n, *out_hw, cin, cout, 4)
    # the products' route's buffer for its blocks of tiles: no memory of its own
    scratch = workspace(36 * chunk * (cin + -(-cout // PANEL) * PANEL), np.float32)
    out = np.empty((n, *out_hw, cout), np.float32)
    shift = padded_bias(np.zeros(cout, np.float32) if bias is None else
                        np.asarray(bias, np.float32))
    _kernels.engine_winograd(np.ascontiguousarray(x), *pads, pack_positions(u), shift, out,
                             None, *bounds, scratch, backend_code(),
                             threads_for(n * out_hw[0] * out_hw[1] * cin * cout * 9,
                                         PARALLEL_MIN_MACS), 4)
    return out


@implements("claim4.propagation")
def winograd_weight_grad(x, g, pads, backend) -> np.ndarray:
    """Kernel gradient of a stride-1 3x3 convolution by the adjoint of Winograd F(2x2, 3x3).

    Parameters
    ----------
    x : ndarray of shape (N, H, W, C), C-contiguous
        The convolution's input.
    g : ndarray of shape (N, Ho, Wo, Cout), C-contiguous
        The gradient of its output.
    pads : (int, int)
        As for winograd_conv.
    backend : {"cython", "numpy"}

    Returns
    -------
    ndarray of shape (3, 3, C, Cout), a new array.

    Notes
    -----
    The forward is out = A^T M A per tile with M[k] = V[k] @ U[k] and U = G w G^T, so the
    gradient of M is A dy A^T per tile (dy the tile's 2x2 block of g, 0 past the edges), that
    of U is dU[k] = sum over tiles of V[k]^T dM[k], and that of w is G^T dU G. Block by block
    (WINOGRAD_BLOCK_BYTES), dU summed over the blocks in order in x's dtype, as the blocked
    im2col kernel gradient sums its blocks.
    """
    k = kernels(backend)
    n, _, _, c = x.shape
    _, ho, wo, cout = g.shape
    th, tw = (ho + 1) // 2, (wo + 1) // 2
    du = _planes(workspace(_planes_size(c, cout, x.dtype), x.dtype, "winograd kernel"), c,
                 cout)
    for start, v, m in _tile_blocks(n * th * tw, c, cout, x.dtype):
        k.winograd_input(x, *pads, th, tw, start, v)
        k.winograd_output_adjoint(g, th, tw, start, m)
        matmul_stack(v.transpose(0, 2, 1), m, du, accumulate=start > 0, backend=backend)
    dw = np.empty((3, 3, c, cout), dtype=x.dtype)
    k.winograd_kernel_adjoint(du, dw)
    return dw
