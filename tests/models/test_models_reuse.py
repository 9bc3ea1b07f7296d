"""Layers that write over an input nobody else reads (batch norm in inference, ReLU, Add, the
convolutions' own activations), a batch norm run with the ReLU that alone reads it in one
pass, and, with no graph recorded, a convolution run with the batch norm (and ReLU) after it
in its own output pass, change no value: the network's prediction, its taps, a training step's
loss, every gradient and the moving statistics are the same to the bit as when every op writes
a fresh array and every layer runs alone, the caller's arrays are never written, and the reuse
and the fusion do happen (else the memory and time they save would be claimed for nothing)."""

import numpy as np
import pytest

from refseg import autograd as ag
from refseg.autograd import conv, elementwise, layers, norm
from refseg.models import ResMobileNet
from refseg.models.graph import INPUT, Graph

pytestmark = pytest.mark.claim("claim2.fusion", "claim4.propagation")

HW = (32, 64)


def fresh_buffer(x, reuse_input):
    return np.empty(x.shape, dtype=x.dtype)


@pytest.fixture
def no_reuse(monkeypatch):
    def apply():
        monkeypatch.setattr(elementwise, "output_buffer", fresh_buffer)
        monkeypatch.setattr(norm, "output_buffer", fresh_buffer)
    return apply


@pytest.fixture
def counting(monkeypatch):
    """output_buffer as it is, counting the calls that returned the input itself."""
    counter = type("Counter", (), {"reused": 0})()
    original = elementwise.output_buffer

    def wrapped(x, reuse_input):
        out = original(x, reuse_input)
        counter.reused += out is x
        return out
    monkeypatch.setattr(elementwise, "output_buffer", wrapped)
    monkeypatch.setattr(norm, "output_buffer", wrapped)
    return counter


@pytest.fixture
def no_fusion(monkeypatch):
    """Every batch norm, and every convolution layer's ReLU activation, runs as an op of its
    own."""
    def convolved_alone(self, op, x):
        return self._activate(op(x, self.kernel, self.bias, strides=self.strides,
                                 padding=self.padding))

    def apply():
        monkeypatch.setattr(Graph, "_fusable_relu", lambda self, *args: None)
        monkeypatch.setattr(Graph, "_fusable_batch_norm", lambda self, *args: None)
        monkeypatch.setattr(layers._ConvLayer, "_convolved", convolved_alone)
    return apply


@pytest.fixture
def counting_fusion(monkeypatch):
    """BatchNormalization.forward, the convolutions and Conv2D.forward_with_batch_norm as they
    are, counting the batch norms run with a ReLU in the same pass (``fused``), the
    convolutions with a ReLU of their own (``convs``), and the convolutions run with the batch
    norm after them (``folded``; ``folded_relu`` of them with its ReLU too)."""
    counter = type("Counter", (), {"fused": 0, "convs": 0, "folded": 0, "folded_relu": 0})()
    original, activated = layers.BatchNormalization.forward, conv._Window._activated
    with_batch_norm = layers.Conv2D.forward_with_batch_norm

    def wrapped(self, x, reusable=(False,), then=None):
        counter.fused += then is not None
        return original(self, x, reusable, then)

    def counted(self, ctx, out):
        counter.convs += self.relu
        return activated(self, ctx, out)

    def folded(self, x, batch_norm, then=None):
        counter.folded += 1
        counter.folded_relu += then is not None
        return with_batch_norm(self, x, batch_norm, then)
    monkeypatch.setattr(layers.BatchNormalization, "forward", wrapped)
    monkeypatch.setattr(conv._Window, "_activated", counted)
    monkeypatch.setattr(layers.Conv2D, "forward_with_batch_norm", folded)
    return counter


#: Convolutions that take in the batch norm after them when nothing is recorded: ResNet50V2's
#: first two of each of its 16 bottleneck blocks (with their ReLU), MobileNetV2's Conv1 and 16
#: expansions (with their ReLU6) and the projections of blocks 0-15 (no activation; block 16's
#: projection is a tap, taken before its batch norm, which the network then never runs).
FOLDED, FOLDED_RELU = 32 + 1 + 16 + 16, 32 + 1 + 16


def assert_fusion_counted(counter, fused, folded=True):
    """With fusion: the decoder's 17 convolutions with a ReLU (10 transposed, 7 not); the
    convolutions that fold the batch norm after them (``folded``) and the 83 batch norms
    read by a ReLU alone, less those folded with their convolution: ResNet50V2's 16
    preactivations and its post-activation, MobileNetV2's 17 depthwise batch norms, when
    folded. None otherwise; the counter is reset."""
    if not fused:
        expected = (0, 0, 0, 0)
    elif folded:
        expected = (83 - FOLDED_RELU, 17, FOLDED, FOLDED_RELU)
    else:
        expected = (83, 17, 0, 0)
    assert (counter.fused, counter.convs, counter.folded, counter.folded_relu) == expected
    counter.fused = counter.convs = counter.folded = counter.folded_relu = 0


def images(n=2, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (n, *HW, 3)).astype(np.float32)


def training_step(train_backbones: bool):
    """Loss, every parameter gradient by name, and the moving statistics after one step."""
    model = ResMobileNet(HW, seed=3)
    if train_backbones:
        model.freeze(frozen=False)
        model.set_training(True)
    x = images()
    before = x.copy()
    labels = np.random.default_rng(1).integers(0, 3, x.shape[:3])
    loss = ag.categorical_crossentropy(model(x), labels)
    loss.backward()
    np.testing.assert_array_equal(x, before)
    grads = {p.name: p.grad for p in model.trainable_parameters()}
    assert all(g is not None for g in grads.values())
    state = {k: v.copy() for k, v in model.weights().items() if "moving" in k}
    return float(loss.data), grads, state


def assert_same_step(step, other):
    """Two training_step results equal: the loss, and every gradient and moving statistic to
    the bit."""
    (loss, grads, state), (loss_other, grads_other, state_other) = step, other
    assert loss == loss_other
    assert grads.keys() == grads_other.keys()
    for name in grads:
        np.testing.assert_array_equal(grads[name], grads_other[name], err_msg=name)
    for name in state:
        np.testing.assert_array_equal(state[name], state_other[name], err_msg=name)


def assert_same_values(values, other):
    assert values.keys() == other.keys()
    for name in values:
        np.testing.assert_array_equal(values[name], other[name], err_msg=name)


def prediction_and_taps():
    model = ResMobileNet(HW, seed=3)
    x = images(3, seed=4)
    before = x.copy()
    with ag.no_grad():
        values = model.graph.run({INPUT: ag.Tensor(x)}, [*model.tap_names, model.OUTPUT])
    np.testing.assert_array_equal(x, before)
    return {name: t.data.copy() for name, t in values.items()}


def test_prediction_and_taps_are_the_same_with_and_without_reuse(no_reuse, counting):
    reused = prediction_and_taps()
    assert counting.reused > 50  # batch norms, ReLUs and Adds of both backbones and the decoder
    no_reuse()
    assert_same_values(reused, prediction_and_taps())


@pytest.mark.parametrize("train_backbones", [False, True])
def test_training_step_is_the_same_with_and_without_reuse(no_reuse, counting, train_backbones):
    reused = training_step(train_backbones)
    # with a graph recorded throughout (trained backbones) the 33 Adds write over an input
    assert counting.reused > (30 if train_backbones else 10)
    no_reuse()
    assert_same_step(reused, training_step(train_backbones))


def test_a_value_asked_for_or_read_twice_is_never_overwritten(no_reuse):
    """bn_Conv1's output is read by Conv1_relu alone, so Conv1_relu may write over it, unless
    it is asked for; conv1_conv (a tap) is read by the decoder and by ResNet50V2."""
    asked = ["bn_Conv1", "Conv1_relu", "conv1_conv", "pool1_pad"]

    def run():
        model = ResMobileNet(HW, seed=3)
        with ag.no_grad():
            values = model.graph.run({INPUT: ag.Tensor(images(1, seed=5))}, asked)
        return {name: t.data.copy() for name, t in values.items()}

    reused = run()
    assert (reused["Conv1_relu"] >= 0).all() and (reused["bn_Conv1"] < 0).any()
    no_reuse()
    fresh = run()
    for name in asked:
        np.testing.assert_array_equal(reused[name], fresh[name], err_msg=name)


def test_a_layer_that_hands_on_its_input_array_is_refused():
    """The readers the graph counts are each value's own: a layer returning its input's array
    would let a later layer overwrite what another still reads, so the graph stops."""
    from refseg.autograd.layers import Layer, ReLU
    from refseg.models.graph import Graph

    class Identity(Layer):
        def forward(self, x):
            return x

    graph = Graph()
    graph.add(Identity("same"), INPUT, part="decoder", paragraphs="")
    graph.add(ReLU("relu"), "same", part="decoder", paragraphs="")
    with ag.no_grad(), pytest.raises(AssertionError, match="same returned the array of its input"):
        graph.run({INPUT: ag.Tensor(images(1))}, ["relu"])


def test_prediction_and_taps_are_the_same_with_and_without_fusion(no_fusion, counting_fusion):
    """Every batch norm of both backbones that its ReLU alone reads runs with it: ResNet50V2's
    16 preactivations, the post-activation and the first two of each of its 16 bottleneck
    blocks (49), and MobileNetV2's 34 ReLU6; those after a convolution without bias run in
    that convolution's pass (``FOLDED``); the taps (ReLU outputs) are still there."""
    fused = prediction_and_taps()
    assert_fusion_counted(counting_fusion, True)
    no_fusion()
    assert_same_values(fused, prediction_and_taps())
    assert_fusion_counted(counting_fusion, False)


@pytest.mark.parametrize("train_backbones", [False, True])
def test_training_step_is_the_same_with_and_without_fusion(no_fusion, counting_fusion,
                                                            train_backbones):
    """Frozen backbones (inference batch norm, nothing recorded) and trained ones (batch
    statistics, recorded: the fused op's backward masks the gradient as the ReLU's does); the
    decoder's convolutions with their ReLU against a ReLU op after each."""
    fused = training_step(train_backbones)
    # trained backbones record a graph: their convolutions and batch norms run apart
    assert_fusion_counted(counting_fusion, True, folded=not train_backbones)
    no_fusion()
    assert_same_step(fused, training_step(train_backbones))
    assert_fusion_counted(counting_fusion, False)
