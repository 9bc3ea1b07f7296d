"""Training's transposed convolutions on the inference engine's kernels (route "panels",
``refseg.engine.training.conv_panels``): within float32's summation bound of the exact
(float64) transposed convolution, the same bits on one thread and on two, gradients that
match the im2col route's, and the policy that sends a layer there."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refseg import autograd as ag
from refseg import _kernels
from refseg.autograd.geometry import transpose_output
from refseg.engine.training import training_engine
from refseg.engine.training.conv import forced_route
from refseg.engine.training.conv_panels import panels_transposed_conv
from refseg.engine.training.conv_routes import PANELS_MIN_INPUT_PIXELS, transposed_route
from refseg.engine.training.products import product_kernels
from refseg.engine.training.threads import limit_threads

pytestmark = pytest.mark.claim("claim2.fusion")

#: The route a qualifying layer takes on this CPU: the engine's kernels on AVX-512 only.
PANELS = "panels" if _kernels.engine_cpu_backend() == 2 else "im2col"

EPS = np.finfo(np.float32).eps  # 2 u


def _reference(x, w, b, stride, padding, bounds=(-np.inf, np.inf)):
    """The reference route's transposed convolution of the arrays as given (float64 in,
    float64 out) and of their magnitudes (the summation bound's scale)."""
    with ag.no_grad():
        exact = ag.conv2d_transpose(x, w, b, strides=stride, padding=padding).data
        scale = ag.conv2d_transpose(np.abs(x), np.abs(w), None if b is None else np.abs(b),
                                    strides=stride, padding=padding).data
    return np.clip(exact, *bounds), scale


CASES = st.tuples(st.integers(1, 2), st.integers(8, 13), st.integers(16, 21),
                  st.integers(1, 40), st.integers(1, 40), st.integers(1, 4), st.integers(2, 3),
                  st.sampled_from(["same", "valid"]), st.booleans(),
                  st.sampled_from([(-np.inf, np.inf), (0.0, np.inf), (0.0, 6.0)]),
                  st.integers(0, 2**16))


@settings(max_examples=40, deadline=None)
@given(case=CASES)
def test_panels_transposed_conv_is_within_the_float32_summation_bound(case):
    """|y - exact| <= (K + 2) eps (sum |x w| + |b|), K the most terms of an output (the
    taps that reach it times Cin), clamped outputs included; 1 and 2 threads the same bits."""
    n, h, w_, cin, cout, k, stride, padding, bias, bounds, seed = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, h, w_, cin)).astype(np.float32)
    w = rng.standard_normal((k, k, cout, cin)).astype(np.float32)
    b = rng.standard_normal(cout).astype(np.float32) if bias else None
    (ho, pt), (wo, pl) = (transpose_output(size, k, stride, padding, "t")
                          for size in (h, w_))
    exact, scale = _reference(x.astype(np.float64), w.astype(np.float64),
                              None if b is None else b.astype(np.float64), stride, padding,
                              bounds)
    results = []
    for threads in (1, 2):
        with limit_threads(threads):
            results.append(panels_transposed_conv(x, w, b, (stride, stride), (pt, pl),
                                                  (ho, wo), bounds))
    assert np.array_equal(results[0], results[1])
    terms = (-(-k // stride)) ** 2 * cin
    assert np.all(np.abs(results[0] - exact) <= (terms + 2) * EPS * scale + 1e-30)


def test_training_takes_the_route_and_its_gradients_match_im2col():
    """A decoder-like layer (16x28 input, 24 -> 16 channels, stride 2, ReLU): the engine's
    forward takes "panels" (on AVX-512 CPUs); output and gradients within 1e-5 of the largest
    magnitude of the im2col route's (float32 rounding; the gradients differ only through the
    output's ReLU mask and the rounding of the products they share)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 16, 28, 24)).astype(np.float32)
    w = (rng.standard_normal((3, 3, 16, 24)) * 0.2).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    g = rng.standard_normal((2, 32, 56, 16)).astype(np.float32)
    assert transposed_route(w.shape, (2, 2), np.float32, x.shape) == PANELS
    results = []
    for route in (None, "im2col"):
        with training_engine(), forced_route(route):
            tensors = [ag.Tensor(a.copy(), requires_grad=True) for a in (x, w, b)]
            y = ag.conv2d_transpose(*tensors, strides=2, padding="same", relu=True)
            y.backward(g)
            results.append([y.data] + [t.grad for t in tensors])
    for panels, im2col in zip(*results):
        assert np.abs(panels - im2col).max() <= 1e-5 * np.abs(im2col).max()


def test_the_route_policy():
    big = (8, 16, 56, 256)
    assert transposed_route((3, 3, 96, 256), (2, 2), np.float32, big) == PANELS
    assert transposed_route((3, 3, 96, 256), (2, 2), np.float64, big) == "im2col"
    assert transposed_route((3, 3, 96, 256), (2, 2), np.float32, big, "numpy") == "im2col"
    assert transposed_route((3, 3, 96, 256), (1, 1), np.float32, big) == "im2col"
    assert transposed_route((3, 3, 96, 256), (2, 1), np.float32, big) == "im2col"
    # the 2048 -> 720 layer at 2x7: its weights would be read once per image and tile
    assert transposed_route((3, 3, 720, 2048), (2, 2), np.float32, (8, 2, 7, 2048)) == "im2col"
    small_side = PANELS_MIN_INPUT_PIXELS // 8
    assert transposed_route((3, 3, 96, 256), (2, 2), np.float32,
                            (8, 8, small_side - 1, 256)) == "im2col"
    assert transposed_route((3, 3, 96, 256), (2, 2), np.float32,
                            (8, 8, small_side, 256)) == PANELS
    # the 3-class layers: panels of 16 would compute 13 zero channels
    assert transposed_route((3, 3, 3, 64), (2, 2), np.float32, (8, 32, 112, 64)) == "im2col"
    with forced_route("im2col"):
        assert transposed_route((3, 3, 96, 256), (2, 2), np.float32, big) == "im2col"
    with product_kernels("blas"):
        assert transposed_route((3, 3, 96, 256), (2, 2), np.float32, big) == "im2col"
