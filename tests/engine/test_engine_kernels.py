"""The engine's compiled kernels against their float64 NumPy twins (refseg/engine/_twins.py),
on the vectorised backend this CPU runs and on the portable C loops, within the float32
summation bound of refseg.engine.runtime; and their results do not depend on the thread count
or the loop order."""
import numpy as np
import pytest

from refseg import _kernels
from refseg.engine import _twins, packing, panels
from refseg.engine.runtime import UNIT_ROUNDOFF

pytestmark = pytest.mark.infrastructure

#: The backends this machine runs: portable C (0), AVX2 + FMA (1) and AVX-512F (2) up to the
#: CPU's best (every AVX-512 CPU the kernels meet has AVX2 and FMA too).
BACKENDS = list(range(_kernels.engine_cpu_backend() + 1))


def _bound(x, in_off, pixels, taps, cin, w, bias, cout, r, batch, x_image, y_image):
    """(K + 3) u (sum |x w| + |b| + |r|) per output, from the twin run on the absolute values."""
    magnitude = np.zeros(batch * y_image, np.float32)
    _twins.engine_conv(np.abs(x), x_image, in_off, pixels, taps, cin, np.abs(w),
                       np.abs(bias), cout, magnitude, y_image, None,
                       None if r is None else np.abs(r), y_image, None, -np.inf, np.inf,
                       batch, 0, 1, 0)
    return (taps * cin + 3) * UNIT_ROUNDOFF * magnitude.astype(np.float64) * 1.01


CASES = [  # (h, w, cin, cout, kernel, stride, pads, residual, clamp)
    (5, 7, 8, 16, 1, 1, (0, 0), False, (-np.inf, np.inf)),        # dense 1x1
    (6, 5, 19, 40, 1, 1, (0, 0), True, (-np.inf, np.inf)),        # 3 panels, residual
    (9, 8, 5, 33, 3, 1, (1, 1), True, (0.0, np.inf)),             # 3x3 same, ReLU
    (9, 9, 3, 64, 7, 2, (3, 3), False, (0.0, 6.0)),               # the 7x7 stem, ReLU6
    (8, 8, 24, 3, 3, 2, (0, 1), False, (-np.inf, np.inf)),        # few outputs, asymmetric
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES)
def test_engine_conv_matches_its_twin_within_the_summation_bound(backend, case):
    h, w, cin, cout, k, stride, pads, residual, (lo, hi) = case
    rng = np.random.default_rng(hash(case) % 2**32)
    batch = 2
    ho = (h + 2 * pads[0] - k) // stride + 1
    wo = (w + 2 * pads[1] - k) // stride + 1
    x = rng.normal(0, 1, (batch, h, w, cin)).astype(np.float32)
    kernel = rng.normal(0, 1, (k * k, cin, cout)).astype(np.float32)
    packed = panels.pack_panels(kernel)
    bias = packing.padded_bias(rng.normal(0, 1, cout).astype(np.float32))
    in_off = packing.conv_offsets((h, w), cin, (k, k), stride, pads, (ho, wo))
    if in_off is not None:
        in_off = in_off.reshape(-1)
    r = rng.normal(0, 1, batch * ho * wo * cout).astype(np.float32) if residual else None
    args = (x.reshape(-1), h * w * cin, in_off, ho * wo, k * k, cin, packed, bias, cout)
    got = np.full(batch * ho * wo * cout, np.nan, np.float32)
    want = np.full_like(got, np.nan)
    _kernels.engine_conv(*args, got, ho * wo * cout, None, r, ho * wo * cout, None, lo, hi,
                         batch, backend, 2, 0)
    _twins.engine_conv(*args, want, ho * wo * cout, None, r, ho * wo * cout, None, lo, hi,
                       batch, backend, 2, 0)
    assert not np.isnan(got).any()
    bound = _bound(x.reshape(-1), in_off, ho * wo, k * k, cin, packed, bias, cout, r, batch,
                   h * w * cin, ho * wo * cout)
    assert (np.abs(got.astype(np.float64) - want) <= bound + 1e-30).all()
    # every output computed by one thread in one order: the thread count and the tile order
    # change no bit
    for threads, order in ((1, 0), (2, 1), (1, 1)):
        again = np.full_like(got, np.nan)
        _kernels.engine_conv(*args, again, ho * wo * cout, None, r, ho * wo * cout, None, lo,
                             hi, batch, backend, threads, order)
        assert np.array_equal(again, got)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cout", [16, 40, 64])
def test_engine_conv_second_output_is_the_affine_map_of_its_first(backend, cout):
    """The second output (a batch norm and ReLU reading the step's output) is computed from
    the float32 output as engine_affine would: one product and one sum, each rounded once."""
    rng = np.random.default_rng(cout)
    h, w, cin, batch = 5, 6, 24, 2
    x = rng.normal(0, 1, (batch, h, w, cin)).astype(np.float32)
    packed = panels.pack_panels(rng.normal(0, 1, (1, cin, cout)).astype(np.float32))
    bias = packing.padded_bias(rng.normal(0, 1, cout).astype(np.float32))
    scale = packing.padded_bias(rng.uniform(0.5, 2, cout).astype(np.float32))
    shift = packing.padded_bias(rng.normal(0, 1, cout).astype(np.float32))
    r = rng.normal(0, 1, batch * h * w * cout).astype(np.float32)
    size = h * w * cout
    args = (x.reshape(-1), h * w * cin, None, h * w, 1, cin, packed, bias, cout)
    first, second = np.full(batch * size, np.nan, np.float32), np.full(batch * size, np.nan,
                                                                      np.float32)
    _kernels.engine_conv(*args, first, size, None, r, size, None, -np.inf, np.inf, batch,
                         backend, 2, 0, second, scale, shift, 0.0, np.inf)
    alone = np.full_like(first, np.nan)
    _kernels.engine_conv(*args, alone, size, None, r, size, None, -np.inf, np.inf, batch,
                         backend, 2, 0)
    assert np.array_equal(first, alone)  # the first output does not change
    want = np.empty_like(first)
    _twins.engine_affine(first.reshape(-1, cout), scale[:cout], shift[:cout], 0.0, np.inf,
                         want.reshape(-1, cout), 1)
    np.testing.assert_allclose(second, want, rtol=4 * UNIT_ROUNDOFF, atol=1e-7)
    twin_first, twin_second = np.empty_like(first), np.empty_like(first)
    _twins.engine_conv(*args, twin_first, size, None, r, size, None, -np.inf, np.inf, batch,
                       backend, 2, 0, twin_second, scale, shift, 0.0, np.inf)
    # the twin likewise, from its own first output
    _twins.engine_affine(twin_first.reshape(-1, cout), scale[:cout], shift[:cout], 0.0,
                         np.inf, want.reshape(-1, cout), 1)
    np.testing.assert_allclose(twin_second, want, rtol=4 * UNIT_ROUNDOFF, atol=1e-7)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("cin,cout,k,residual", [(3, 3, 3, False), (96, 3, 1, True),
                                                 (20, 8, 3, True), (17, 1, 3, False),
                                                 (64, 5, 3, False)])
def test_engine_dot_matches_its_twin_within_the_summation_bound(backend, cin, cout, k,
                                                                residual):
    rng = np.random.default_rng(cin * 7 + cout)
    h = w = 6
    x = rng.normal(0, 1, (2, h, w, cin)).astype(np.float32)
    taps_kernel = rng.normal(0, 1, (k * k, cin, cout)).astype(np.float32)
    bias = packing.padded_bias(rng.normal(0, 1, cout).astype(np.float32))
    in_off = packing.conv_offsets((h, w), cin, (k, k), 1, (k // 2, k // 2), (h, w))
    in_off = None if in_off is None else in_off.reshape(-1)
    size = h * w * cout
    r = rng.normal(0, 1, 2 * size).astype(np.float32) if residual else None
    args = (x.reshape(-1), h * w * cin, in_off, h * w, k * k, cin,
            packing.dot_weights(taps_kernel), bias, cout)
    got = np.full(2 * size, np.nan, np.float32)
    want = got.copy()
    _kernels.engine_dot(*args, got, size, None, r, size, None, 0.0, np.inf, 2, backend, 2,
                        False)
    _twins.engine_dot(*args, want, size, None, r, size, None, 0.0, np.inf, 2, backend, 2,
                      False)
    bound = _bound(x.reshape(-1), in_off, h * w, k * k, cin,
                   panels.pack_panels(taps_kernel), bias, cout, r, 2, h * w * cin, size)
    assert not np.isnan(got).any()
    assert (np.abs(got.astype(np.float64) - want) <= bound + 1e-30).all()
    # the softmax epilogue: probabilities within a few float32 roundings of the twin's
    _kernels.engine_dot(*args, got, size, None, r, size, None, -np.inf, np.inf, 2, backend, 2,
                        True)
    _twins.engine_dot(*args, want, size, None, r, size, None, -np.inf, np.inf, 2, backend, 2,
                      True)
    np.testing.assert_allclose(got.reshape(-1, cout).sum(axis=1), 1.0, atol=1e-6)
    scale = bound.reshape(-1, cout).max(axis=1, keepdims=True)
    assert (np.abs(got - want).reshape(-1, cout) <= 2 * scale + 8 * UNIT_ROUNDOFF).all()


@pytest.mark.parametrize("cout,taps,residual,softmax", [(3, 4, False, False), (3, 9, True, True),
                                                      (8, 2, True, False), (1, 1, False, True)])
def test_engine_gather_matches_its_twin_within_the_summation_bound(cout, taps, residual,
                                                                    softmax):
    """Each output a float32 sum of its taps' columns from 0 (some taps absent, -1), + bias,
    clamped, + residual: within (taps + 3) u (sum |terms| + |b| + |r|) of the float64 twin;
    the softmax within a few roundings of it; 1 and 2 threads the same bits."""
    rng = np.random.default_rng(taps * 10 + cout)
    pixels, count, batch = 300, 9 * cout, 2
    cols = rng.normal(0, 1, batch * 150 * count).astype(np.float32)
    g_off = (rng.integers(0, 150, (pixels, taps)) * count
             + rng.integers(0, 9, (pixels, taps)) * cout).astype(np.int32)
    g_off[rng.random((pixels, taps)) < 0.2] = -1
    out_off = (rng.permutation(pixels) * cout).astype(np.int32)
    bias = packing.padded_bias(rng.normal(0, 1, cout).astype(np.float32))
    size = pixels * cout
    r = rng.normal(0, 1, batch * size).astype(np.float32) if residual else None
    lo, hi = (-np.inf, np.inf) if softmax else (0.0, 2.0)
    args = (cols, 150 * count, g_off.reshape(-1), pixels, taps, bias, cout)
    results = []
    for threads in (1, 2):
        got = np.full(batch * size, np.nan, np.float32)
        _kernels.engine_gather(*args, got, size, out_off, r, size, out_off, lo, hi, batch,
                               threads, softmax)
        results.append(got)
    assert np.array_equal(results[0], results[1]) and not np.isnan(results[0]).any()
    want = np.full(batch * size, np.nan, np.float32)
    _twins.engine_gather(*args, want, size, out_off, r, size, out_off, lo, hi, batch, 2,
                         softmax)
    magnitude = np.zeros_like(want)
    _twins.engine_gather(np.abs(cols), *args[1:5], np.abs(bias), cout, magnitude, size,
                         out_off, None if r is None else np.abs(r), size, out_off, -np.inf,
                         np.inf, batch, 1, False)
    bound = (taps + 3) * UNIT_ROUNDOFF * magnitude.astype(np.float64) * 1.01
    if softmax:
        np.testing.assert_allclose(results[0].reshape(-1, cout).sum(axis=1), 1.0, atol=1e-6)
        scale = bound.reshape(-1, cout).max(axis=1, keepdims=True)
        assert (np.abs(results[0] - want).reshape(-1, cout) <= 2 * scale
                + 8 * UNIT_ROUNDOFF).all()
    else:
        assert (np.abs(results[0].astype(np.float64) - want) <= bound + 1e-30).all()


def test_engine_gather_refuses_what_does_not_fit():
    y = np.zeros(9, np.float32)
    with pytest.raises(ValueError, match="do not fit"):
        _kernels.engine_gather(y, 9, np.zeros(2, np.int32), 3, 1, np.zeros(16, np.float32), 9,
                               y, 9, None, None, 9, None, -np.inf, np.inf, 1, 1, False)
    with pytest.raises(ValueError, match="do not fit"):
        _kernels.engine_gather(y, 9, np.zeros(2, np.int32), 3, 1, np.zeros(16, np.float32), 3,
                               y, 9, None, None, 9, None, -np.inf, np.inf, 1, 1, False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_engine_conv_writes_through_output_offsets_only_where_told(backend):
    """A transposed convolution's phases write their own pixels: the others keep their
    values, and the residual is read at the output's offsets."""
    rng = np.random.default_rng(3)
    kernel = rng.normal(0, 1, (3, 3, 20, 6)).astype(np.float32)   # (kh, kw, cout, cin)
    x = rng.normal(0, 1, (1, 4, 5, 6)).astype(np.float32)
    phases = packing.transpose_phases(kernel, (4, 5), 2, (0, 0), (8, 10))
    assert sorted(np.concatenate([p.out_off for p in phases]).tolist()) == \
        list(range(0, 8 * 10 * 20, 20))
    r = rng.normal(0, 1, 8 * 10 * 20).astype(np.float32)
    bias = packing.padded_bias(np.zeros(20, np.float32))
    for phase in phases:
        got = np.full(8 * 10 * 20, 7.0, np.float32)
        want = got.copy()
        args = (x.reshape(-1), x.size, phase.in_off, phase.pixels, phase.taps, 6,
                phase.packed, bias, 20)
        _kernels.engine_conv(*args, got, got.size, phase.out_off, r, r.size, None, -np.inf,
                             np.inf, 1, backend, 2, 0)
        _twins.engine_conv(*args, want, want.size, phase.out_off, r, r.size, None, -np.inf,
                           np.inf, 1, backend, 2, 0)
        untouched = np.ones(got.size, bool)
        untouched[phase.out_off[:, None] + np.arange(20)] = False
        assert (got[untouched] == 7.0).all()
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("stride,pads,c", [(1, (1, 1), 40), (2, (0, 0), 16), (2, (1, 0), 7)])
def test_engine_depthwise_matches_its_twin(backend, stride, pads, c):
    rng = np.random.default_rng(stride * 100 + c)
    x = rng.normal(0, 1, (2, 9, 8, c)).astype(np.float32)
    k = rng.normal(0, 1, (3, 3, c)).astype(np.float32)
    bias = rng.normal(0, 1, c).astype(np.float32)
    ho, wo = (9 + 2 * pads[0] - 3) // stride + 1, (8 + 2 * pads[1] - 3) // stride + 1
    got = np.full((2, ho, wo, c), np.nan, np.float32)
    want = got.copy()
    _kernels.engine_depthwise(x, k, bias, stride, *pads, 0.0, 6.0, got, backend, 2)
    _twins.engine_depthwise(x, k, bias, stride, *pads, 0.0, 6.0, want, backend, 2)
    # 9 products and the bias: (9 + 3) u (sum |x k| + |b|) <= 12 u (9 * 5 * 4 + 4)
    np.testing.assert_allclose(got, want, rtol=0, atol=12 * UNIT_ROUNDOFF * 200)


WINOGRAD_CASES = [  # (h, w, cin, cout, pads, residual, clamp)
    (9, 8, 5, 33, (1, 1), True, (0.0, np.inf)),     # odd map: the last tiles half outside
    (14, 14, 40, 64, (1, 1), False, (-np.inf, np.inf)),
    (7, 7, 19, 20, (1, 1), True, (0.0, 6.0)),       # channels past a vector and a panel
    (6, 5, 3, 16, (0, 0), False, (0.0, np.inf)),    # "valid": no padding
    # more than two chunks per thread of its own on 2 and 3 threads: the barrier-free schedule
    # (BARRIER_FREE), for F(2x2) its last chunk short of a whole micro-kernel row
    (73, 70, 5, 33, (1, 1), True, (0.0, np.inf)),
    (93, 90, 5, 33, (1, 1), False, (0.0, np.inf)),
]
#: (h, w) of the cases meant for the barrier-free schedule -> the tiles on which they take it
BARRIER_FREE = {(73, 70): (2,), (93, 90): (2, 4)}
#: engine_kernels.h, ENGINE_WINOGRAD_OWN_MIN
WINOGRAD_OWN_MIN = 48


#: roundings along the deepest chain of a Winograd output beyond the cin of its products, by
#: tile: F(2x2) 2 in the input transform, 4 in the output transform, bias, clamp, residual;
#: F(4x4) up to 6 and 6 (engine/training/winograd_f4x4.c), with room to spare
WINOGRAD_EXTRA_ROUNDINGS = {2: 10, 4: 20}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", WINOGRAD_CASES)
@pytest.mark.parametrize("tile", [2, 4])
def test_engine_winograd_matches_its_twin_within_its_rounding_bound(backend, case, tile):
    """Forward error of F(2x2, 3x3) and F(4x4, 3x3) in float32: every value the kernel rounds
    is a sum of terms whose absolute values the same algorithm on |x|, |U| and the
    transforms' absolute values bounds (``_twins._winograd_sums(absolute=True)``); along the
    deepest chain there are at most cin + WINOGRAD_EXTRA_ROUNDINGS roundings, so
    ``|y - y64| <= (cin + extra) u (magnitude + |b| + |r|)`` elementwise."""
    h, w, cin, cout, pads, residual, (lo, hi) = case
    rng = np.random.default_rng(hash(case) % 2**32)
    ho, wo = h + 2 * pads[0] - 2, w + 2 * pads[1] - 2
    positions = (tile + 2) ** 2
    x = rng.normal(0, 1, (2, h, w, cin)).astype(np.float32)
    u = panels.winograd_weights(rng.normal(0, 1, (9, cin, cout)).astype(np.float32), tile)
    bias = packing.padded_bias(rng.normal(0, 1, cout).astype(np.float32))
    r = rng.normal(0, 1, (2, ho, wo, cout)).astype(np.float32) if residual else None
    chunk = _kernels.engine_winograd_chunk(2, ho, wo, cin, cout, tile)
    if tile in BARRIER_FREE.get((h, w), ()):  # it takes that schedule on 2 and 3 threads
        tiles = 2 * -(-ho // tile) * -(-wo // tile)
        for threads in (2, 3):
            own = chunk // threads // 12 * 12
            assert own >= WINOGRAD_OWN_MIN and tiles >= 2 * threads * own and tiles % own
            assert tile == 4 or tiles % own % 12
    scratch = np.empty(positions * chunk * (cin + -(-cout // 16) * 16), np.float32)
    want = np.full((2, ho, wo, cout), np.nan, np.float32)
    _twins.engine_winograd(x, *pads, u, bias, want, r, lo, hi, scratch, backend, 2, tile)
    magnitude = _twins._winograd_sums(x, *pads, u, cout, (ho, wo), absolute=True,
                                      tile=tile) + \
        np.abs(bias[:cout]) + (0.0 if r is None else np.abs(r))
    bound = (cin + WINOGRAD_EXTRA_ROUNDINGS[tile]) * UNIT_ROUNDOFF * magnitude
    got = np.full_like(want, np.nan)
    _kernels.engine_winograd(x, *pads, u, bias, got, r, lo, hi, scratch, backend, 2, tile)
    assert not np.isnan(got).any()
    assert (np.abs(got.astype(np.float64) - want) <= bound + 1e-30).all()
    for threads in (1, 3):  # each value computed by one thread in one order, either schedule
        again = np.full_like(got, np.nan)
        _kernels.engine_winograd(x, *pads, u, bias, again, r, lo, hi, scratch, backend,
                                 threads, tile)
        assert np.array_equal(again, got)


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("cin, cout, first, count", [(5, 40, 0, 3), (37, 64, 1, 2),
                                                     (3, 40, 2, 1), (130, 96, 2, 4)])
def test_engine_winograd_weights_are_the_stored_weights_to_the_bit(tile, cin, cout, first,
                                                                  count):
    """The Winograd weights a call makes from a packed direct kernel, a slab of panels at a
    time, are those ``panels.winograd_weights`` gives a plan to store for those output
    channels (zero past the last), to the bit, on 1 and 2 threads; the twin's too."""
    rng = np.random.default_rng(cin + cout)
    kernel = (rng.normal(0, 1, (9, cin, cout)) * 10.0 ** rng.integers(-3, 4, cout)).astype(
        np.float32)
    packed = panels.pack_panels(kernel)
    count = min(count, -(-cout // 16) - first)
    want = panels.winograd_weights(kernel[:, :, first * 16:(first + count) * 16], tile)
    if want.size != (tile + 2) ** 2 * count * cin * 16:  # a last panel past the channels
        want = panels.winograd_weights(np.pad(
            kernel, ((0, 0), (0, 0), (0, 16 * (first + count) - cout)))[
                :, :, first * 16:(first + count) * 16], tile)
    assert np.abs(want).max() > 0
    for backend in BACKENDS:
        for threads in (1, 2):
            got = np.full((tile + 2) ** 2 * count * cin * 16, np.nan, np.float32)
            _kernels.engine_winograd_weights(packed, cin, first, count, tile, got, backend,
                                             threads)
            assert np.array_equal(got, want), (backend, threads)
    twin = np.full_like(want, np.nan)
    _twins.engine_winograd_weights(packed, cin, first, count, tile, twin, 0, 2)
    assert np.array_equal(twin, want)
    past = -(-cout // 16) - first + 1  # one panel past the kernel's last
    with pytest.raises(ValueError, match="do not fit"):
        _kernels.engine_winograd_weights(packed, cin, first, past, tile,
                                         np.empty((tile + 2) ** 2 * past * cin * 16,
                                                  np.float32), 0, 2)
    with pytest.raises(ValueError, match="do not fit"):
        _kernels.engine_winograd_weights(packed, cin, first, count, tile, got[:-16], 0, 2)
    with pytest.raises(ValueError, match="tile 2 or 4"):
        _kernels.engine_winograd_weights(packed, cin, first, count, 3, got, 0, 2)


@pytest.mark.parametrize("pads", [(1, 1), (0, 0), (2, 0)])
def test_the_winograd_twin_is_the_direct_convolution(pads):
    """F(2x2, 3x3) is exact in exact arithmetic: in float64 the twin gives the direct
    convolution of the kernel that ``winograd_weights`` transformed, to float64 rounding."""
    rng = np.random.default_rng(11)
    h, w, cin, cout = 7, 6, 4, 18
    ho, wo = h + 2 * pads[0] - 2, w + 2 * pads[1] - 2
    x = rng.normal(0, 1, (2, h, w, cin))
    kernel = rng.normal(0, 1, (9, cin, cout)).astype(np.float32)
    # the transform of a kernel of small integers is exact in float32
    kernel = np.round(kernel * 4) / 4
    got = _twins._winograd_sums(x, *pads, panels.winograd_weights(kernel), cout, (ho, wo))
    padded = np.pad(x, ((0, 0), (pads[0], ho + 2 - h - pads[0]),
                        (pads[1], wo + 2 - w - pads[1]), (0, 0)))
    want = sum(padded[:, a:a + ho, b:b + wo] @ kernel[3 * a + b].astype(np.float64)
               for a in range(3) for b in range(3))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * np.abs(want).max())


@pytest.mark.parametrize("pads", [(1, 1), (0, 0), (2, 0)])
def test_the_winograd4_twin_is_the_direct_convolution_to_its_weights_rounding(pads):
    """F(4x4, 3x3) is exact in exact arithmetic too; its transformed weights (1/6, 1/24 in G)
    are rounded once to float32, each by at most u of itself, so in float64 the twin is the
    direct convolution within u times the magnitude of the same sums on absolute values (2 u
    allowed for the float64 roundings)."""
    rng = np.random.default_rng(12)
    h, w, cin, cout = 9, 7, 4, 18
    ho, wo = h + 2 * pads[0] - 2, w + 2 * pads[1] - 2
    x = rng.normal(0, 1, (2, h, w, cin))
    kernel = rng.normal(0, 1, (9, cin, cout)).astype(np.float32)
    u = panels.winograd_weights(kernel, 4)
    got = _twins._winograd_sums(x, *pads, u, cout, (ho, wo), tile=4)
    magnitude = _twins._winograd_sums(x, *pads, u, cout, (ho, wo), absolute=True, tile=4)
    padded = np.pad(x, ((0, 0), (pads[0], ho + 2 - h - pads[0]),
                        (pads[1], wo + 2 - w - pads[1]), (0, 0)))
    want = sum(padded[:, a:a + ho, b:b + wo] @ kernel[3 * a + b].astype(np.float64)
               for a in range(3) for b in range(3))
    assert (np.abs(got - want) <= 2 * UNIT_ROUNDOFF * magnitude).all()
    # and not exactly: the rounding of the weights shows
    assert np.abs(got - want).max() > 0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("pool,stride,pads,c", [(3, 2, ((1, 1), (1, 1)), 64),   # the stem's
                                                (1, 2, ((0, 0), (0, 0)), 40),   # shortcuts
                                                (2, 2, ((0, 1), (1, 0)), 7),
                                                (3, 1, ((2, 0), (0, 2)), 17)])
def test_engine_max_pool_equals_its_twin(backend, pool, stride, pads, c):
    """A maximum is exact: the kernel and its twin agree to the bit, the padding reading 0
    (negative inputs show it)."""
    rng = np.random.default_rng(pool * 10 + c)
    x = rng.normal(-0.5, 1, (2, 9, 8, c)).astype(np.float32)
    ho = (9 + sum(pads[0]) - pool) // stride + 1
    wo = (8 + sum(pads[1]) - pool) // stride + 1
    got = np.full((2, ho, wo, c), np.nan, np.float32)
    want = got.copy()
    _kernels.engine_max_pool(x, pool, stride, pads[0][0], pads[1][0], got, backend, 2)
    _twins.engine_max_pool(x, pool, stride, pads[0][0], pads[1][0], want, backend, 2)
    assert np.array_equal(got, want)
    padded = np.pad(x, ((0, 0), *pads, (0, 0)))
    assert got[0, 0, 0, 0] == padded[0, :pool, :pool, 0].max()


def test_engine_affine_matches_its_twin():
    rng = np.random.default_rng(5)
    x = rng.normal(0, 3, (50, 13)).astype(np.float32)
    scale, shift = rng.normal(0, 1, 13).astype(np.float32), rng.normal(0, 1, 13).astype(
        np.float32)
    got, want = np.empty_like(x), np.empty_like(x)
    _kernels.engine_affine(x, scale, shift, 0.0, 6.0, got, 2)
    _twins.engine_affine(x, scale, shift, 0.0, 6.0, want, 2)
    # one product and one sum, each rounded once in float32
    np.testing.assert_allclose(got, want, rtol=4 * UNIT_ROUNDOFF, atol=1e-7)


def test_every_engine_kernel_has_a_twin_of_its_name():
    import inspect

    kernels = {name for name, value in vars(_kernels).items()
               if name.startswith("engine_") and callable(value)} - {
        "engine_cpu_backend", "engine_max_threads", "engine_winograd_chunk"}
    twins = {name for name, value in vars(_twins).items()
             if not name.startswith("_") and inspect.isfunction(value)
             and value.__module__ == _twins.__name__}
    assert kernels == twins == {"engine_conv", "engine_dot", "engine_depthwise", "engine_affine",
                                "engine_winograd", "engine_winograd_weights", "engine_max_pool",
                                "engine_gather"}
