"""Each kernel of training's engine (the ``.pxi`` files of ``refseg/engine/training/``: the
direct convolution, the Winograd transforms) against its NumPy twin: equal bit for bit on drawn
inputs, and the transforms computing the convolution.

Equality is exact (``np.array_equal``), not approximate: both sides add the same terms in the
same order, and the build disables floating-point contraction (setup.py), so any difference is
a bug in one of them.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from twins import assert_same, both, engine_twin, fast


def _geometry(h, w, kh, kw, sh, sw, pt, pl):
    ho = max(1, (h + 2 * max(pt, 0) - kh) // sh + 1)
    wo = max(1, (w + 2 * max(pl, 0) - kw) // sw + 1)
    return ho, wo

@pytest.fixture(params=[True, False], ids=["avx512", "plain"])
def avx512(request):
    """Both row loops of the direct kernels: AVX-512 (where the CPU has it) and plain."""
    previous = fast.use_avx512(request.param)
    yield
    fast.use_avx512(previous)


@pytest.mark.claim("claim4.propagation", "claim2.fusion")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(x=hnp.arrays(np.float64, st.tuples(st.integers(1, 2), st.integers(1, 7), st.integers(1, 70),
                                          st.integers(1, 3)), elements=st.floats(-10, 10)),
       kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       pads=st.tuples(st.integers(-1, 3), st.integers(-1, 3)), cout=st.integers(1, 3))
def test_conv_small_kernels(avx512, dtype, x, kernel, pads, cout):
    """Direct stride-1 convolution, both row loops (the fixture is the same for every drawn
    input). Forward: fixed-order sums, bit for bit (widths up to 70 cover whole and partial
    blocks of 16 and 64 pixels). Kernel and bias gradients: the kernel sums each
    row in the input's precision, the twin everything in float64: equal to that rounding."""
    _check_conv_small(x.astype(dtype), kernel, pads, cout)


def _check_conv_small(x, kernel, pads, cout):
    dtype = x.dtype
    (kh, kw), (pt, pl) = kernel, pads
    ho, wo = _geometry(x.shape[1], x.shape[2], kh, kw, 1, 1, pt, pl)
    rng = np.random.default_rng(3)
    w = rng.standard_normal((kh * kw * x.shape[3], cout)).astype(dtype)
    g = rng.standard_normal((x.shape[0], ho, wo, cout)).astype(dtype)
    bias = rng.standard_normal(cout).astype(dtype)
    assert_same(both("conv_small_forward", x, w, bias, kh, kw, pt, pl,
                     outputs=[(g.shape, dtype)]))
    fast, slow = both("conv_small_weight", x, g, kh, kw, pt, pl,
                      outputs=[(w.shape, np.float64), (cout, np.float64)])
    # bound on the rounding: each sum's terms in absolute value, times the precision, plus
    # the smallest normal number (products of subnormal inputs lose their relative precision)
    bounds = [np.zeros((kh * kw * x.shape[3], cout)), np.zeros(cout)]
    engine_twin.conv_small_weight(np.abs(x), np.abs(g), kh, kw, pt, pl, *bounds)
    eps = 1e-6 if dtype == np.float32 else 1e-13
    for a, b, bound in zip(fast, slow, bounds):
        assert np.all(np.abs(a - b) <= eps * bound + np.finfo(dtype).tiny)


@pytest.mark.claim("claim4.propagation", "claim2.fusion")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, kernel, pads", [
    ((1, 1, 1, 3), (3, 3), (1, 1)),        # a 1x1 image: one band, one partial block
    ((3, 8, 64, 3), (3, 3), (1, 1)),       # exactly one band, one whole block of 64
    ((2, 19, 70, 3), (3, 3), (1, 1)),      # bands of 8, 8, 3 per image; 64 + 6 columns
    ((2, 17, 97, 2), (3, 2), (2, 0)),      # 64 + 33 columns: a last block over half a block
    ((1, 25, 31, 3), (2, 3), (-1, 2)),     # rows above and below the input in the bands
    ((2, 100, 130, 3), (3, 3), (1, 1)),    # enough pixels for every thread
], ids=["1x1", "one-band", "bands", "wide-tail", "offset", "threads"])
def test_conv_small_kernels_in_bands(avx512, dtype, shape, kernel, pads):
    """The direct kernels work on bands of SMALL_BAND output rows, each copied by its thread:
    heights that are not a multiple of the band, bands reaching past the input's rows, batch
    above 1, widths around the blocks of 64 pixels, and the two-thread split."""
    x = np.random.default_rng(5).uniform(-10, 10, shape)
    _check_conv_small(x.astype(dtype), kernel, pads, 3)


def _winograd_layouts(shape, dtype):
    """Two empty (planes, rows, cols) arrays: C-contiguous, and with planes skewed apart as
    ``conv_winograd._planes`` lays them out (the kernels must read the plane distance, not
    assume it)."""
    from refseg.engine.training import conv_winograd

    planes, rows, cols = shape
    scratch = np.zeros(conv_winograd._planes_size(rows, cols, dtype, planes), dtype=dtype)
    return [np.zeros(shape, dtype=dtype), conv_winograd._planes(scratch, rows, cols, planes)]


#: The transforms of each Winograd variant by output tile side: F(2x2, 3x3) and F(4x4, 3x3).
WINOGRAD_TRANSFORMS = {2: ("winograd_input", "winograd_output", "winograd_kernel"),
                       4: ("winograd4_input", "winograd4_output", "winograd4_kernel")}


@pytest.mark.claim("claim4.propagation", "claim2.fusion")
@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@given(x=hnp.arrays(np.float64, st.tuples(st.integers(1, 2), st.integers(1, 9), st.integers(1, 9),
                                          st.sampled_from([1, 2, 3, 33])),
                    elements=st.floats(-10, 10)),
       pads=st.tuples(st.integers(-1, 3), st.integers(-1, 3)),
       cout=st.sampled_from([1, 2, 3, 70]), same_size=st.booleans())
def test_winograd_kernels(tile, dtype, x, pads, cout, same_size):
    """Winograd transforms: the same adds, subtractions and multiplications by constants in a
    fixed order, bit for bit, in both plane layouts; for all tiles and for a block from the
    middle to the end. Output sizes: the input's ("same" for pads of 1) or the "valid"
    geometry of the pads (partial tiles at sizes that are not multiples of the tile); 33 input
    and 70 output channels cover more than one stack block of channels (F(2x2): 64 output
    channels of a partial tile; F(4x4): 32 channels)."""
    x = x.astype(dtype)
    n, h, w, c = x.shape
    pt, pl = pads
    planes = (tile + 2) ** 2
    transform_input, transform_output, transform_kernel = (
        [getattr(module, name) for module in (fast, engine_twin)] for name in WINOGRAD_TRANSFORMS[tile])
    ho, wo = (h, w) if same_size else _geometry(h, w, 3, 3, 1, 1, pt, pl)
    th, tw = -(-ho // tile), -(-wo // tile)
    tiles = n * th * tw
    rng = np.random.default_rng(4)
    kernel = rng.standard_normal((3, 3, c, cout)).astype(dtype)
    m = rng.standard_normal((planes, tiles, cout)).astype(dtype)
    bias = rng.standard_normal(cout).astype(dtype)
    for start in (0, tiles // 2):
        count = tiles - start
        for v_fast, v_twin in zip(_winograd_layouts((planes, count, c), dtype),
                                  _winograd_layouts((planes, count, c), dtype)):
            transform_input[0](x, pt, pl, th, tw, start, v_fast)
            transform_input[1](x, pt, pl, th, tw, start, v_twin)
            assert np.array_equal(v_fast, v_twin)
        outs = [np.full((n, ho, wo, cout), np.nan, dtype=dtype) for _ in range(2)]
        for transform, out in zip(transform_output, outs):
            for layout in _winograd_layouts((planes, count, cout), dtype):
                layout[...] = m[:, start:]
                transform(layout, bias, -np.inf, np.inf, th, tw, start, out)
        assert np.array_equal(outs[0], outs[1], equal_nan=True)
        # with a ReLU6 in the same pass: the clamp of the unclamped output, on both backends
        for transform in transform_output:
            clamped = np.full((n, ho, wo, cout), np.nan, dtype=dtype)
            transform(np.ascontiguousarray(m[:, start:]), bias, 0.0, 6.0, th, tw, start,
                      clamped)
            written = ~np.isnan(outs[0])
            assert np.array_equal(clamped[written], np.clip(outs[0][written], 0, 6))
            assert not np.signbit(clamped[written]).any()
        # exactly the pixels of the block's tiles are written (all channels)
        expected = np.zeros((n, ho, wo, cout), dtype=bool)
        for t in range(start, tiles):
            i, j = t % (th * tw) // tw, t % tw
            expected[t // (th * tw), tile * i:tile * (i + 1), tile * j:tile * (j + 1)] = True
        assert np.array_equal(~np.isnan(outs[0]), expected)
    for u_fast, u_twin in zip(_winograd_layouts((planes, c, cout), dtype),
                              _winograd_layouts((planes, c, cout), dtype)):
        transform_kernel[0](kernel, u_fast)
        transform_kernel[1](kernel, u_twin)
        assert np.array_equal(u_fast, u_twin)


@pytest.mark.claim("claim4.propagation", "claim2.fusion")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@given(x=hnp.arrays(np.float64, st.tuples(st.integers(1, 2), st.integers(1, 10),
                                          st.integers(1, 10), st.integers(1, 3)),
                    elements=st.floats(-10, 10)),
       pads=st.tuples(st.integers(-1, 3), st.integers(-1, 3)), cout=st.integers(1, 3))
def test_winograd4_computes_the_convolution(dtype, x, pads, cout):
    """F(4x4, 3x3)'s three transforms with the 36 products between them give the correlation
    of x (zero outside) with the kernel: to 1e-12 of the output's scale in float64, 2e-5 in
    float32 (its constants 4, 5 and 8 scale rounding errors up; Barabasz et al. 2020 measure
    F(4x4, 3x3) at about 10 times direct summation's error)."""
    x = x.astype(dtype)
    n, h, w, c = x.shape
    pt, pl = pads
    ho, wo = _geometry(h, w, 3, 3, 1, 1, pt, pl)
    assume(ho > 0 and wo > 0)
    th, tw = -(-ho // 4), -(-wo // 4)
    rng = np.random.default_rng(6)
    kernel = rng.standard_normal((3, 3, c, cout)).astype(dtype)
    v = np.zeros((36, n * th * tw, c), dtype)
    u = np.zeros((36, c, cout), dtype)
    fast.winograd4_input(x, pt, pl, th, tw, 0, v)
    fast.winograd4_kernel(kernel, u)
    out = np.zeros((n, ho, wo, cout), dtype)
    fast.winograd4_output(np.matmul(v, u), np.zeros(cout, dtype), -np.inf, np.inf, th, tw, 0,
                          out)
    padded = np.zeros((n, ho + 2, wo + 2, c))
    rows = slice(max(pt, 0), min(pt + h, ho + 2))
    cols = slice(max(pl, 0), min(pl + w, wo + 2))
    padded[:, rows, cols] = x[:, rows.start - pt:rows.stop - pt, cols.start - pl:cols.stop - pl]
    expected = sum(padded[:, a:a + ho, b:b + wo] @ kernel[a, b].astype(np.float64)
                   for a in range(3) for b in range(3))
    scale = np.abs(padded).max() * np.abs(kernel).sum(axis=(0, 1, 2)).max() + 1e-300
    bound = 1e-12 if dtype == np.float64 else 2e-5
    # below the normal range rounding is absolute: a subnormal x (1.4e-45 in float32) is
    # carried with a relative error far above bound; 64 of the smallest steps cover the
    # transforms' terms
    floor = 64 * np.finfo(dtype).smallest_subnormal
    assert np.abs(out - expected).max() <= bound * scale + floor


@pytest.mark.claim("claim4.propagation")
def test_winograd_kernels_refuse_planes_they_cannot_index():
    """The kernels index each plane from its first element: a plane that is not C-contiguous
    or a wrong number of planes raises instead of being read wrongly."""
    x = np.zeros((1, 4, 4, 2), dtype=np.float32)
    planes = np.zeros((16, 4, 4), np.float32)
    for bad in (planes[:, :, :2], planes[:, :2, ::2], np.zeros((15, 4, 2), np.float32)):
        with pytest.raises(ValueError, match="16 C-contiguous planes"):
            fast.winograd_input(x, 1, 1, 2, 2, 0, bad)
    for bad in (np.zeros((16, 1, 2), np.float32), np.zeros((36, 4, 4), np.float32)[:, :1, ::2]):
        with pytest.raises(ValueError, match="36 C-contiguous planes"):
            fast.winograd4_input(x, 1, 1, 1, 1, 0, bad)


@pytest.mark.claim("claim4.propagation", "claim2.fusion")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("channels", [(256, 256), (300, 150)])
def test_winograd_kernel_transform_on_both_threads(dtype, channels):
    """Kernels large enough for the F(2x2, 3x3) kernel transform to split into blocks of
    entries across both threads (65536 and 45000 entries per tap, blocks of 16384, the last one
    partial): bit for bit the twin's, in both plane layouts."""
    from refseg.engine.training.threads import limit_threads

    cin, cout = channels
    w = np.random.default_rng(cin).uniform(-10, 10, (3, 3, cin, cout)).astype(dtype)
    with limit_threads(2):
        for layout_fast, layout_twin in zip(*(_winograd_layouts((16, cin, cout), dtype)
                                              for _ in range(2))):
            fast.winograd_kernel(w, layout_fast)
            engine_twin.winograd_kernel(w, layout_twin)
            assert np.array_equal(layout_fast, layout_twin)


@pytest.mark.claim("claim4.propagation", "claim2.fusion")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@given(g=hnp.arrays(np.float64, st.tuples(st.integers(1, 2), st.integers(1, 9), st.integers(1, 9),
                                          st.sampled_from([1, 2, 3, 20])),
                    elements=st.floats(-10, 10)), cin=st.integers(1, 3))
def test_winograd_adjoint_kernels(dtype, g, cin):
    """The kernel-gradient transforms: bit for bit against their twins (all tiles and a block
    from the middle; both plane layouts), and in float64 the adjoints of the forward
    transforms: <winograd_output(M), g> = <M, winograd_output_adjoint(g)> and
    <winograd_kernel(w), U> = <w, winograd_kernel_adjoint(U)>, to float64 rounding of sums
    of a few hundred terms (1e-12 relative)."""
    g = g.astype(dtype)
    n, ho, wo, cout = g.shape
    th, tw = (ho + 1) // 2, (wo + 1) // 2
    tiles = n * th * tw
    for start in (0, tiles // 2):
        m = [_winograd_layouts((16, tiles - start, cout), dtype) for _ in range(2)]
        for module, layouts in zip((fast, engine_twin), m):
            for layout in layouts:
                module.winograd_output_adjoint(g, th, tw, start, layout)
        for a, b in zip(*m):
            assert np.array_equal(a, b)
    rng = np.random.default_rng(8)
    u = rng.standard_normal((16, cin, cout)).astype(dtype)
    w = [np.zeros((3, 3, cin, cout), dtype=dtype) for _ in range(2)]
    for module, out in zip((fast, engine_twin), w):
        for layout in _winograd_layouts((16, cin, cout), dtype):
            layout[...] = u
            module.winograd_kernel_adjoint(layout, out)
    assert np.array_equal(*w)
    if dtype == np.float64:
        mm = rng.standard_normal((16, tiles, cout))
        y = np.zeros(g.shape)
        fast.winograd_output(mm, np.zeros(cout), -np.inf, np.inf, th, tw, 0, y)
        adjoint = np.zeros((16, tiles, cout))
        fast.winograd_output_adjoint(g, th, tw, 0, adjoint)
        assert (y * g).sum() == pytest.approx((mm * adjoint).sum(), rel=1e-12, abs=1e-12)
        kernel = rng.standard_normal((3, 3, cin, cout))
        transformed = np.zeros((16, cin, cout))
        fast.winograd_kernel(kernel, transformed)
        assert (transformed * u).sum() == pytest.approx((kernel * w[0]).sum(), rel=1e-12,
                                                        abs=1e-12)


@pytest.mark.claim("claim2.fusion")
@pytest.mark.parametrize("shape", [(2, 30, 52, 20, 24), (1, 40, 64, 96, 64),
                                   (2, 37, 30, 40, 17)])
@pytest.mark.parametrize("adjoint", [False, True])
def test_training_winograd4_on_the_engine_kernel_is_the_products_route_bit_for_bit(
        monkeypatch, shape, adjoint):
    """Training's F(4x4, 3x3) on the inference engine's Winograd kernel (where its chunks are
    long enough and the products run on the engine's AVX-512 kernels) gives the products'
    route's float32 bits: the same transforms, each output the same sum over at most 256 input
    channels on the same micro-kernels; with a bias, a ReLU, odd sizes (partial tiles) and
    the adjoint (flipped kernel)."""
    from refseg.engine.training import conv_winograd
    from refseg.engine.training.products import (ENGINE_MIN_COLUMNS, ENGINE_MIN_ROWS,
                                                 product_kernel)

    if product_kernel(np.float32, ENGINE_MIN_ROWS, ENGINE_MIN_COLUMNS) != 2:
        pytest.fail("this check needs a CPU with AVX-512 (the CI's has)")
    n, h, w, cin, cout = shape
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal((n, h, w, cin)).astype(np.float32)
    kernel = (rng.standard_normal((3, 3, cout, cin) if adjoint else (3, 3, cin, cout)) /
              np.sqrt(9 * cin)).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32)
    assert conv_winograd._on_the_engine(x, cin, cout, (h, w), "cython")
    engine = conv_winograd.winograd_conv(x, kernel, adjoint, bias, (1, 1), (h, w), "cython", 4,
                                         (0.0, np.inf))
    monkeypatch.setattr(conv_winograd, "ENGINE_MIN_CHUNK", 1 << 40)
    assert not conv_winograd._on_the_engine(x, cin, cout, (h, w), "cython")
    products = conv_winograd.winograd_conv(x, kernel, adjoint, bias, (1, 1), (h, w), "cython",
                                           4, (0.0, np.inf))
    assert (engine > 0).any() and (engine == 0).any()  # the ReLU cut some, kept others
    np.testing.assert_array_equal(engine, products)


@pytest.mark.claim("claim4.propagation", "claim2.fusion")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@given(g=hnp.arrays(np.float64, st.tuples(st.integers(1, 700), st.integers(1, 40)),
                    elements=st.floats(-1e4, 1e4, width=32)))
def test_column_sums_kernel(dtype, g):
    """The bias gradient's column sums (blocks of 256 rows, then the blocks in order, float64):
    bit for bit the twin's, on partial and several blocks, one column to a few dozen, for
    float32 and float64 gradients."""
    assert_same(both("column_sums", g.astype(dtype), outputs=[(g.shape[1], np.float64)]))


@pytest.mark.claim("claim4.propagation", "claim2.fusion")
@pytest.mark.parametrize("shape", [(114688, 3), (28672 + 5, 96), (300, 2048)])
def test_column_sums_on_one_and_two_threads(shape):
    """Sizes of a --train-backbone step's bias gradients (the 3-class layers' 114688 rows,
    a partial last block, few rows and many columns), large enough to run on both threads: the
    same bits on 1 and 2 threads and as the twin's, and within float64's rounding of the exact
    sum (math.fsum), far inside the float32 result's."""
    import math

    from refseg.engine.training.threads import limit_threads

    g = np.random.default_rng(shape[1]).standard_normal(shape).astype(np.float32)
    results = []
    for threads in (1, 2):
        sums = np.empty(shape[1])
        with limit_threads(threads):
            fast.column_sums(g, sums)
        results.append(sums)
    twin = np.empty(shape[1])
    engine_twin.column_sums(g, twin)
    assert np.array_equal(results[0], results[1]) and np.array_equal(results[0], twin)
    exact = np.array([math.fsum(column) for column in g.T.astype(np.float64)])
    bound = shape[0] * np.finfo(np.float64).eps * np.abs(g).astype(np.float64).sum(axis=0)
    assert np.all(np.abs(results[0] - exact) <= bound)
