"""Adam ([0246]-[0255]), layers with named parameters and the trainable switch, and a tiny
end-to-end segmentation that the engine must learn."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from refseg import autograd as ag
from refseg.autograd import layers
from refseg.backend import BACKENDS
from refseg.errors import InputError
from refseg.autograd.optim import Adam


def adam_by_hand(theta, grads, lr=1e-3, b1=0.9, b2=0.999, eps=1e-7):
    """Kingma & Ba's algorithm written out, float64, for a sequence of gradients."""
    m = v = np.zeros_like(theta)
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        theta = theta - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    return theta


@pytest.mark.claim("claim4.update")
@pytest.mark.parametrize("backend", BACKENDS)
@given(start=st.lists(st.floats(-5, 5), min_size=1, max_size=6), steps=st.integers(1, 30),
       seed=st.integers(0, 2**16))
def test_adam_follows_the_published_algorithm(backend, start, steps, seed):
    """Known answer: the update equals Kingma & Ba's algorithm computed independently."""
    rng = np.random.default_rng(seed)
    grads = [rng.standard_normal(len(start)) for _ in range(steps)]
    p = ag.Tensor(np.array(start), requires_grad=True, name="p")
    opt = Adam([p], backend=backend)
    for g in grads:
        p.grad = g
        opt.step()
    np.testing.assert_allclose(p.data, adam_by_hand(np.array(start), grads), rtol=1e-13,
                               atol=1e-15)
    assert opt.iterations == steps


@pytest.mark.claim("claim4.update")
def test_adam_defaults_are_the_patents():
    opt = Adam([ag.Tensor(np.zeros(1), requires_grad=True)])
    assert (opt.learning_rate, opt.beta_1, opt.beta_2, opt.epsilon) == (0.001, 0.9, 0.999, 1e-7)


@pytest.mark.claim("claim4.update")
def test_adam_state_round_trip_continues_exactly(tmp_path):
    """50 steps, save, 50 more == 50 steps, load into a fresh optimiser, 50 more."""
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal(3).astype(np.float32) for _ in range(100)]

    def run(p, opt, gs):
        for g in gs:
            p.grad = g
            opt.step()

    p = ag.Tensor(np.ones(3, np.float32), requires_grad=True, name="w")
    opt = Adam([p])
    run(p, opt, grads[:50])
    opt.save(tmp_path / "adam.npz")
    saved_p = p.data.copy()
    run(p, opt, grads[50:])
    q = ag.Tensor(saved_p, requires_grad=True, name="w")
    fresh = Adam([q])
    fresh.load(tmp_path / "adam.npz")
    run(q, fresh, grads[50:])
    assert np.array_equal(p.data, q.data) and fresh.iterations == 100


@pytest.mark.claim("claim4.update")
def test_adam_skips_frozen_parameters_and_refuses_bad_state(tmp_path):
    frozen = ag.Tensor(np.ones(2), requires_grad=False, name="frozen")
    free = ag.Tensor(np.ones(2), requires_grad=True, name="free")
    frozen.grad = free.grad = np.ones(2)
    Adam([frozen, free]).step()
    assert frozen.data.tolist() == [1.0, 1.0] and free.data[0] < 1
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(InputError, match="bad.npz"):
        Adam([free]).load(bad)
    with pytest.raises(InputError, match="m/free"):
        Adam([free]).load_state_dict({"hyper": np.zeros(4), "iterations": np.array(1)})
    with pytest.raises(InputError, match="learning_rate"):
        Adam([free], learning_rate=0)
    with pytest.raises(InputError, match="names repeat"):
        Adam([free, free])


@pytest.mark.claim("claim4.update")
@pytest.mark.parametrize("bad", [np.nan, np.inf, "shape"])
def test_a_refused_step_moves_no_parameter(bad):
    """A non-finite or misshapen gradient on the last parameter is refused before any update:
    the first parameter, the moments and the step count stay as they were."""
    first = ag.Tensor(np.ones(3), requires_grad=True, name="first")
    last = ag.Tensor(np.ones(2), requires_grad=True, name="last")
    opt = Adam([first, last])
    first.grad, last.grad = np.ones(3), np.ones(2)
    opt.step()
    before = (first.data.copy(), opt.m["first"].copy(), opt.v["first"].copy())
    first.grad = np.ones(3)
    last.grad = np.ones(3) if bad == "shape" else np.array([1.0, bad])
    with pytest.raises(InputError, match="gradient of last"):
        opt.step()
    for a, b in zip(before, (first.data, opt.m["first"], opt.v["first"])):
        np.testing.assert_array_equal(a, b)
    assert opt.iterations == 1


@pytest.mark.claim("claim4.propagation")
def test_layers_name_their_weights_as_keras_does():
    conv = layers.Conv2D("x2", 4, 3)
    convt = layers.Conv2DTranspose("x1", 5, 7, strides=2)
    dw = layers.DepthwiseConv2D("block_1_depthwise", 6, strides=2, padding="valid")
    bn = layers.BatchNormalization("conv1_bn", 6)
    assert {k: v.shape for k, v in conv.weights().items()} == {"x2/kernel": (3, 3, 4, 3),
                                                               "x2/bias": (3,)}
    assert convt.weights()["x1/kernel"].shape == (3, 3, 7, 5)
    assert list(dw.weights()) == ["block_1_depthwise/kernel"]
    assert set(bn.weights()) == {"conv1_bn/gamma", "conv1_bn/beta", "conv1_bn/moving_mean",
                                 "conv1_bn/moving_variance"}


@pytest.mark.claim("claim4.propagation")
@given(shape=st.tuples(st.integers(1, 5), st.integers(1, 5), st.integers(1, 64),
                       st.integers(1, 64)), seed=st.integers(0, 1000))
def test_glorot_uniform_bounds_and_seed(shape, seed):
    fan_in, fan_out = shape[0] * shape[1] * shape[2], shape[0] * shape[1] * shape[3]
    limit = np.sqrt(6 / (fan_in + fan_out))
    a = layers.glorot_uniform(shape, np.random.default_rng(seed))
    b = layers.glorot_uniform(shape, np.random.default_rng(seed))
    assert a.dtype == np.float32 and np.abs(a).max() <= limit and np.array_equal(a, b)


@pytest.mark.claim("claim4.propagation")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_glorot_uniform_drawn_in_blocks_is_one_draw_of_the_whole_shape(dtype):
    """A kernel of more than two blocks (GLOROT_BLOCK values) holds the values of one
    ``uniform`` draw of its whole shape, rounded to its dtype, and leaves the generator where
    that draw leaves it."""
    shape = (3, 3, 512, 2 * layers.GLOROT_BLOCK // 4608 + 7)
    limit = np.sqrt(6 / (9 * 512 + 9 * shape[3]))
    rng, expected_rng = np.random.default_rng(11), np.random.default_rng(11)
    got = layers.glorot_uniform(shape, rng, dtype)
    expected = expected_rng.uniform(-limit, limit, size=shape).astype(dtype)
    assert got.size > 2 * layers.GLOROT_BLOCK and got.dtype == dtype
    np.testing.assert_array_equal(got, expected)
    assert rng.random() == expected_rng.random()


@pytest.mark.claim("claim4.propagation")
def test_frozen_layers_get_no_gradient_and_frozen_bn_uses_moving_statistics():
    """[0143], [0230], [0241]: frozen backbone weights receive no gradient and do not change."""
    rng = np.random.default_rng(0)
    frozen = layers.Conv2D("frozen", 2, 2)
    bn = layers.BatchNormalization("bn", 2)
    head = layers.Conv2D("head", 2, 2)
    frozen.trainable = False
    bn.trainable = False
    bn.training = True  # asked to train, but frozen: inference mode, moving stats untouched
    x = ag.Tensor(rng.standard_normal((1, 4, 4, 2)).astype(np.float32))
    loss = ag.mean_squared_error(head(bn(frozen(x))), np.zeros((1, 4, 4, 2), np.float32))
    loss.backward()
    assert frozen.kernel.grad is None and bn.gamma.grad is None
    assert head.kernel.grad is not None
    assert bn.state["moving_mean"].tolist() == [0, 0]
    before = frozen.kernel.data.copy()
    Adam([*frozen.params.values(), *bn.params.values(), *head.params.values()]).step()
    assert np.array_equal(frozen.kernel.data, before)


@pytest.mark.claim("claim4.propagation", "claim4.update")
def test_a_tiny_network_learns_a_toy_segmentation():
    """Conv (stride 2) -> transposed conv (stride 2) -> softmax, trained with Adam on images
    whose label is 'bright square' vs background: the loss must fall well below where it
    starts and pixel accuracy must pass 90 %."""
    rng = np.random.default_rng(0)
    images, labels = [], []
    for _ in range(16):
        img = rng.normal(0, 0.1, (12, 12, 1))
        lab = np.zeros((12, 12), np.int64)
        r, c = rng.integers(0, 6, 2)
        img[r:r + 6, c:c + 6] += 1.0
        lab[r:r + 6, c:c + 6] = 1
        images.append(img)
        labels.append(lab)
    x = np.array(images, np.float32)
    y = np.array(labels)
    enc = layers.Conv2D("enc", 1, 8, strides=2, activation="relu", seed=1)
    dec = layers.Conv2DTranspose("dec", 8, 8, strides=2, activation="relu", seed=2)
    out = layers.Conv2D("out", 8, 2, activation="softmax", seed=3)
    params = [p for layer in (enc, dec, out) for p in layer.params.values()]
    opt = Adam(params, learning_rate=0.01)
    losses = []
    for _ in range(60):
        opt.zero_grad()
        p = out(dec(enc(ag.Tensor(x))))
        loss = ag.categorical_crossentropy(p, y)
        loss.backward()
        opt.step()
        losses.append(float(loss.data))
    accuracy = float((p.data.argmax(-1) == y).mean())
    assert losses[-1] < 0.3 * losses[0] and accuracy > 0.9, (losses[0], losses[-1], accuracy)
