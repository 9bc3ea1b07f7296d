"""The engine's plan of the fusion network: what it folds and fuses, that it replays its
choices, its memory, and its values held to the reference's on every step (each fed the
reference's own inputs) and on the whole network, on the vectorised kernels and on the
portable fallback."""
import subprocess
import sys

import numpy as np
import pytest

from refseg import _kernels as _engine_kernels
from refseg import engine
from refseg.autograd import layers
from refseg.autograd.tensor import Tensor, no_grad
from refseg.engine.runtime import (BATCHED_WINOGRAD_MIN, LAYER_TOLERANCE,
                                   PROBABILITY_TOLERANCE, ConvStep, avx2_kernels,
                                   backend_name, engine_threads, portable_kernels, twin_kernels)
from refseg.models import ResMobileNet
from refseg.models.graph import INPUT

pytestmark = pytest.mark.claim("claim2.fusion")

HW = (64, 64)


def _randomised(model, seed=0):
    """He-scaled kernels (the decoder at half the variance, so that the softmax is not
    saturated), random biases and batch-norm statistics: activations in range, as with trained
    weights."""
    rng = np.random.default_rng(seed)
    for node in model.graph.nodes.values():
        layer = node.layer
        for short, tensor in layer.params.items():
            shape = tensor.data.shape
            if short == "kernel":
                if isinstance(layer, layers.DepthwiseConv2D):
                    fan_in = shape[0] * shape[1]
                elif isinstance(layer, layers.Conv2DTranspose):
                    fan_in = shape[0] * shape[1] * shape[3]
                else:
                    fan_in = shape[0] * shape[1] * shape[2]
                gain = 1.0 if node.part == "decoder" else 2.0
                tensor.data[...] = rng.normal(0, np.sqrt(gain / fan_in), shape)
            elif short == "gamma":
                tensor.data[...] = rng.uniform(0.5, 1.5, shape)
            else:
                tensor.data[...] = rng.normal(0, 0.1, shape)
        if "moving_mean" in layer.state:
            layer.state["moving_mean"][...] = rng.normal(0, 0.2, layer.state["moving_mean"].shape)
            layer.state["moving_variance"][...] = rng.uniform(
                0.5, 2.0, layer.state["moving_variance"].shape)
    return model


@pytest.fixture(scope="module")
def network():
    model = _randomised(ResMobileNet(HW, seed=0))
    x = np.random.default_rng(1).uniform(-1, 1, (2, *HW, 3)).astype(np.float32)
    names = model.graph.required([model.OUTPUT])
    with no_grad():
        reference = model.graph.run({INPUT: Tensor(x)}, names)
    values = {name: value.data for name, value in reference.items()}
    values[INPUT] = x
    return model, x, values, engine.plan(model, mode="estimate")


KERNELS = [pytest.param(False, id="native"), pytest.param(True, id="portable")]
if _engine_kernels.engine_cpu_backend() == 2:  # AVX-512: its AVX2 loops as well
    KERNELS.append(pytest.param("avx2", id="avx2"))


def _kernels(portable):
    if portable == "avx2":
        return avx2_kernels()
    return portable_kernels() if portable else engine_threads(2)


@pytest.mark.parametrize("portable", KERNELS)
def test_every_step_fed_the_reference_inputs_gives_the_reference_output(network, portable):
    model, x, reference, plan = network
    worst = 0.0
    with _kernels(portable):
        expected = {True: "portable", "avx2": "avx2"}.get(portable, backend_name())
        assert backend_name() == expected != "twin"
        for step in plan.steps:
            got = step.run({name: reference[name] for name in step.inputs})
            outputs = getattr(step, "outputs", (step.name,))
            for name, value in zip(outputs, got if len(outputs) > 1 else (got,)):
                want = reference[name]
                assert value.shape == want.shape and value.dtype == np.float32
                error = float(np.abs(value - want).max()) / float(np.abs(want).max())
                worst = max(worst, error)
                assert error <= LAYER_TOLERANCE, (name, error)
    assert worst > 0  # the engine does round differently: the comparison is not vacuous


@pytest.mark.parametrize("portable", KERNELS)
def test_the_network_probabilities_hold_the_reference_tolerance(network, portable):
    model, x, reference, plan = network
    with _kernels(portable):
        got = plan.predict(x, batch_size=1)
    want = reference[model.OUTPUT]
    assert got.shape == want.shape == (2, *HW, 3)
    # the probabilities are spread (not saturated 0/1, where differences would hide)
    assert 0.05 < float(want.min()) + 0.1 and float(want.max()) < 0.999
    assert float(np.abs(got - want).max()) <= PROBABILITY_TOLERANCE
    np.testing.assert_allclose(got.sum(axis=-1), 1.0, atol=1e-5)


def test_the_plan_folds_every_batch_norm_after_a_convolution_and_every_padding(network):
    model, _, _, plan = network
    step_of = {layer: step for step in plan.steps for layer in step.layers}
    graph = model.graph
    required = graph.required([model.OUTPUT])
    assert set(step_of) <= set(required)
    for name in required:
        layer, source = graph.nodes[name].layer, graph.nodes[name].inputs[0]
        if isinstance(layer, layers.ZeroPadding2D):
            assert name not in step_of  # read by its window op as padding
        elif isinstance(layer, layers.BatchNormalization):
            source_layer = graph.nodes[source].layer if source in graph.nodes else None
            if isinstance(source_layer, (layers.Conv2D, layers.DepthwiseConv2D)):
                assert step_of[name] is step_of[source]  # folded into its convolution
            elif step_of[name].kind == "affine":         # the pre-activation after max pool
                assert isinstance(source_layer, layers.MaxPooling2D)
            else:  # the other pre-activations, post_bn: the second output of their input's step
                step = step_of[name]
                assert step is step_of[source] and step.second is not None
                second = graph.nodes[step.outputs[1]]
                assert step.outputs[1] == name or tuple(second.inputs) == (name,)
        else:
            assert name in step_of
    # every residual Add after a convolution is that convolution's epilogue
    adds = [name for name in required if isinstance(graph.nodes[name].layer, layers.Add)]
    fused = [name for name in adds if isinstance(step_of[name], ConvStep)]
    assert len(fused) == len(adds) > 20
    # ResNet50V2's pre-activation batch norms: 16 of 17 written by the step before them
    seconds = [step for step in plan.steps if getattr(step, "second", None) is not None]
    assert len(seconds) == 16
    assert sum(step.kind == "affine" for step in plan.steps) == 1


def test_a_plan_replays_its_choices_and_refuses_choices_of_another_model(network):
    model, x, _, plan = network
    measured = engine.plan(model, mode="measure")
    assert set(measured.choices) == set(plan.choices)
    assert set(measured.choices.values()) <= {"pixels-outer", "panels-outer", "dot",
                                              "columns", "winograd", "winograd4"}
    assert engine.plan(model, choices=measured.choices).choices == measured.choices
    swap = {"pixels-outer": "panels-outer", "panels-outer": "pixels-outer", "dot": "dot",
            "columns": "columns", "winograd": "winograd", "winograd4": "winograd4"}
    flipped = {name: swap[order] for name, order in measured.choices.items()}
    replayed = engine.plan(model, choices=flipped)
    assert replayed.choices == flipped and replayed.mode == "replay"
    # the loop order changes no bit of the result
    assert np.array_equal(replayed.predict(x), measured.predict(x))
    with pytest.raises(Exception, match="choices do not fit"):
        engine.plan(model, choices={**flipped, "no_such_layer": "pixels-outer"})
    wide = next(name for name, order in flipped.items() if order != "dot")
    with pytest.raises(Exception, match="cannot run dot"):
        engine.plan(model, choices={**flipped, wide: "dot"})
    # the dot products and the panels hold the same tolerance: a plan on panels everywhere
    panels = {name: "pixels-outer" for name in flipped}
    on_panels = engine.plan(model, choices=panels).predict(x)
    assert float(np.abs(on_panels - measured.predict(x)).max()) <= PROBABILITY_TOLERANCE


def test_the_columns_and_the_dot_products_hold_the_tolerances_within_the_memory_limit(network):
    """The decoder's 3-class transposed convolutions run as the columns of their taps (the
    estimate's choice) or as dot products: each step within the layer tolerance, the network
    within the probability tolerance, either way."""
    model, x, reference, plan = network
    few = {step.name: step for step in plan.steps
           if isinstance(step, ConvStep) and "columns" in step.algorithms}
    assert set(few) == {"x11", "x23", "prediction"}
    assert {name: plan.choices[name] for name in few} == \
        {"x11": "columns", "x23": "columns", "prediction": "columns"}
    for choice in ("columns", "dot"):
        other = engine.plan(model, choices={**plan.choices, **{name: choice for name in few}})
        assert other.memory()["plan"] <= 1.3 * other.memory()["model_weights"]
        for portable in KERNELS:
            with _kernels(portable.values[0]):
                for step in other.steps:
                    if step.name in few:
                        assert step.order == choice
                        got = step.run({name: reference[name] for name in step.inputs})
                        want = reference[step.name]
                        error = float(np.abs(got - want).max()) / float(np.abs(want).max())
                        assert error <= LAYER_TOLERANCE, (step.name, choice, error)
                got = other.predict(x, batch_size=2)
            assert float(np.abs(got - reference[model.OUTPUT]).max()) <= PROBABILITY_TOLERANCE


def _winograd_everywhere(model, estimated, algorithm="winograd"):
    """Choices taking Winograd (``algorithm``) on every convolution that can run it."""
    steps = {step.name: step for step in estimated.steps if isinstance(step, ConvStep)}
    return {name: algorithm if algorithm in steps[name].algorithms else order
            for name, order in estimated.choices.items()}


def test_winograd_runs_every_stride_1_3x3_convolution_within_the_tolerances(network):
    model, x, reference, plan = network
    convs = [step for step in plan.steps if isinstance(step, ConvStep)]
    eligible = {step.name for step in convs if "winograd" in step.algorithms}
    graph = model.graph
    assert eligible == {step.name for step in convs if step.kind == "conv" and
                        graph.nodes[step.layers[0]].layer.kernel.data.shape[:2] == (3, 3) and
                        graph.nodes[step.layers[0]].layer.strides == (1, 1)}
    assert len(eligible) == 20  # 13 in ResNet50V2, 7 in the decoder
    # the estimate: F(2x2) on the maps of 14-27 pixels a side, F(4x4) from 28
    sides = {step.name: min(step.out_shape[:2]) for step in convs if step.name in eligible}
    assert {name for name, order in plan.choices.items() if order == "winograd"} == \
        {name for name, side in sides.items() if 14 <= side < 28}
    assert {name for name, order in plan.choices.items() if order == "winograd4"} == \
        {name for name, side in sides.items() if side >= 28} == {"x10", "x21"}
    everywhere = engine.plan(model, choices=_winograd_everywhere(model, plan))
    assert everywhere.memory()["plan"] <= 1.3 * everywhere.memory()["model_weights"]
    ran = [step for step in everywhere.steps if step.name in eligible]
    assert all(step.order == "winograd" and step.winograd_tile == 2 for step in ran)
    _hold_the_tolerances(everywhere, ran, x, reference, model.OUTPUT)


def _hold_the_tolerances(plan, steps, x, reference, output):
    """On every kernel backend: each of ``steps`` (its direct kernel dropped) fed the
    reference's inputs within the layer tolerance, ``plan``'s probabilities within theirs."""
    for portable in KERNELS:
        with _kernels(portable.values[0]):
            for step in steps:
                assert step.phases[0].packed is None
                got = step.run({name: reference[name] for name in step.inputs})
                want = reference[step.name]
                error = float(np.abs(got - want).max()) / float(np.abs(want).max())
                assert error <= LAYER_TOLERANCE, (step.name, error)
            got = plan.predict(x, batch_size=2)
        assert float(np.abs(got - reference[output]).max()) <= PROBABILITY_TOLERANCE


def test_winograd4_runs_every_stride_1_3x3_convolution_within_the_tolerances(network):
    """F(4x4, 3x3) on all 20 (its weights 4x the direct kernel's: this plan is past the memory
    limit, which the planner's own choices keep): each layer and the probabilities within the
    same tolerances as every other algorithm, on every kernel backend."""
    model, x, reference, plan = network
    everywhere = engine.plan(model, choices=_winograd_everywhere(model, plan, "winograd4"))
    ran = [step for step in everywhere.steps if step.order == "winograd4"]
    assert len(ran) == 20 and all(step.winograd_tile == 4 for step in ran)
    _hold_the_tolerances(everywhere, ran, x, reference, model.OUTPUT)


def test_a_batch_runs_the_3x3_layers_on_loop_orders_by_winograd4_made_per_call(network):
    """From BATCHED_WINOGRAD_MIN images, a stride-1 3x3 step settled on a loop order runs
    F(4x4, 3x3) on weights made for the call, slab by slab of output channels (16 slabs of 32
    on ResNet50V2's 512-channel layers, 96 + 32 on 128 channels; residuals in the decoder's):
    the bits of the same plan on stored F(4x4) weights, on every kernel backend, and the
    probabilities within the tolerance on the twins too. Below it, the loop orders (either
    one: the same bits)."""
    model, x, reference, plan = network
    stored = engine.plan(model, choices=_winograd_everywhere(model, plan, "winograd4"))
    direct = engine.plan(model, choices={
        name: "pixels-outer" if order == "winograd4" else order
        for name, order in stored.choices.items()})
    eligible = [step for step in direct.steps if isinstance(step, ConvStep)
                and step.winograd_pads is not None]
    assert len(eligible) == 20 and all(step.winograd is None for step in eligible)
    assert {step.phases[0].cin for step in eligible} >= {128, 512}
    assert sum(step.residual is not None for step in eligible) >= 4
    batch = np.concatenate([x, x[::-1]])
    assert batch.shape[0] == BATCHED_WINOGRAD_MIN
    want = np.concatenate([reference[model.OUTPUT], reference[model.OUTPUT][::-1]])
    for portable in KERNELS:
        with _kernels(portable.values[0]):
            got = direct.predict(batch, batch_size=BATCHED_WINOGRAD_MIN)
            assert np.array_equal(got, stored.predict(batch, batch_size=BATCHED_WINOGRAD_MIN))
            small = direct.predict(batch, batch_size=BATCHED_WINOGRAD_MIN - 1)
            assert not np.array_equal(small, got)
            assert np.array_equal(small[:3], direct.predict(batch[:3], batch_size=1))
        assert float(np.abs(got - want).max()) <= PROBABILITY_TOLERANCE
        assert float(np.abs(small - want).max()) <= PROBABILITY_TOLERANCE
    with twin_kernels():
        twin = direct.predict(batch, batch_size=BATCHED_WINOGRAD_MIN)
    assert float(np.abs(twin - want).max()) <= PROBABILITY_TOLERANCE
    # the weights made per call are not kept
    assert all(step.winograd is None for step in eligible)


def test_the_estimate_takes_winograd4_on_large_maps_and_steps_down_to_fit(network,
                                                                         monkeypatch):
    """With F(4x4) from 16 pixels a side (the estimate's own threshold is 28, which only the
    two 32x32 layers of the 64x64 test network reach) the estimate takes it on the 16x16 and
    32x32 layers and F(2x2) on none left; where the memory limit is one byte short of that
    plan, the step that loses least per byte freed steps down to F(2x2), not to a direct
    order."""
    from refseg.engine import planner

    model, _, _, plan = network
    monkeypatch.setattr(planner, "WINOGRAD4_MIN_MAP", 16)
    wide = engine.plan(model, mode="estimate")
    sides = {step.name: min(step.out_shape[:2]) for step in wide.steps
             if isinstance(step, ConvStep) and step.winograd_pads is not None}
    assert {n for n, o in wide.choices.items() if o == "winograd4"} == \
        {n for n, side in sides.items() if side >= 16}
    assert not [n for n, o in wide.choices.items() if o == "winograd"]
    monkeypatch.setattr(planner, "MEMORY_LIMIT", (wide.memory()["plan"] - 1) /
                        wide.memory()["model_weights"])
    tight = engine.plan(model, mode="estimate")
    changed = {n: (wide.choices[n], o) for n, o in tight.choices.items() if o != wide.choices[n]}
    assert len(changed) == 1 and list(changed.values()) == [("winograd4", "winograd")]
    assert tight.memory()["plan"] <= planner.MEMORY_LIMIT * tight.memory()["model_weights"]


class _Sized(ConvStep):
    """A convolution step that is only its bytes per algorithm (for the memory rule)."""

    def __init__(self, name, sizes):
        self.name, self.sizes = name, sizes

    def nbytes_for(self, algorithm):
        return self.sizes[algorithm]

    def scratch_bytes(self, batch=1, algorithm=None):
        return 0


def test_the_memory_rule_steps_down_the_cheapest_per_byte_then_undoes_what_it_did_not_need(
        monkeypatch):
    """Three steps holding 40 + 60 + 30 bytes against a limit of 100: per byte freed, a's
    F(4x4) -> F(2x2) costs least (0.05), then c's (0.08), then b's F(2x2) -> direct (0.15),
    which alone frees 40 bytes; undone, dearest first, wherever the plan still fits: c's and
    a's moves, so b alone steps down (90 bytes)."""
    from types import SimpleNamespace

    from refseg.engine import planner

    monkeypatch.setattr(planner, "_workspace", lambda model, steps, scratch: 0)
    monkeypatch.setattr(planner, "MEMORY_LIMIT", 1.0)
    model = SimpleNamespace(weights=lambda: {"w": np.zeros(100, np.uint8)})
    steps = [_Sized("a", {"winograd4": 40, "winograd": 30, "panels-outer": 20}),
             _Sized("b", {"winograd": 60, "panels-outer": 20}),
             _Sized("c", {"winograd4": 30, "winograd": 25})]
    costs = {"a": {"winograd4": 1.0, "winograd": 1.5, "panels-outer": 3.5},
             "b": {"winograd": 1.0, "panels-outer": 7.0},
             "c": {"winograd4": 1.0, "winograd": 1.4}}
    chosen = {"a": "winograd4", "b": "winograd", "c": "winograd4"}
    assert planner._within_memory(model, steps, chosen, costs) == \
        {"a": "winograd4", "b": "panels-outer", "c": "winograd4"}
    # with room for every choice nothing moves; with room for none, all step down
    monkeypatch.setattr(planner, "MEMORY_LIMIT", 1.3)
    assert planner._within_memory(model, steps, chosen, costs) == chosen
    monkeypatch.setattr(planner, "MEMORY_LIMIT", 0.5)
    assert planner._within_memory(model, steps, chosen, costs) == \
        {"a": "panels-outer", "b": "panels-outer", "c": "winograd"}


def test_winograd_gives_way_where_the_plan_would_outgrow_its_memory(network, monkeypatch):
    from refseg.engine import planner

    model, _, _, plan = network
    monkeypatch.setattr(planner, "MEMORY_LIMIT", plan.memory()["plan"] / plan.memory()[
        "model_weights"] - 0.01)
    tight = engine.plan(model, mode="estimate")
    wanted = [name for name, order in plan.choices.items() if order == "winograd"]
    kept = [name for name, order in tight.choices.items() if order == "winograd"]
    assert len(kept) < len(wanted)
    assert tight.memory()["plan"] <= planner.MEMORY_LIMIT * tight.memory()["model_weights"]


def test_results_do_not_depend_on_the_thread_count(network):
    _, x, _, plan = network
    with engine_threads(1):
        one = plan.predict(x)
    with engine_threads(2):
        two = plan.predict(x)
    assert np.array_equal(one, two)


def test_a_plan_holds_at_most_1_3_times_the_model_weights(network):
    model, _, _, plan = network
    memory = plan.memory()
    assert memory["plan"] == memory["packed"] + memory["workspace"]
    assert memory["plan"] <= 1.3 * memory["model_weights"]
    assert memory["packed"] >= 0.9 * memory["model_weights"]  # counts every packed kernel


def test_bad_inputs_get_the_model_errors(network):
    model, x, _, plan = network
    with pytest.raises(Exception, match="multiples of 32|built for"):
        plan.predict(x[:, :32])
    bad = x.copy()
    bad[0, 0, 0, 0] = np.nan
    with pytest.raises(Exception, match="NaN"):
        plan.predict(bad)


def test_the_reference_never_imports_the_inference_engine():
    code = ("import sys, refseg.models, refseg.autograd, refseg.claim1.features, "
            "refseg.golden, refseg.run.training; "
            "print(sorted(m for m in sys.modules if m in ('refseg.engine.planner', "
            "'refseg.engine.runtime', 'refseg.engine.packing', 'refseg.engine._twins')))")
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_the_predictor_of_each_route(network):
    from refseg.engine import MEASURED_FROM, predictor
    from refseg.errors import InputError

    model = network[0]
    assert predictor(model, "reference") is model
    assert predictor(model, "engine", images=1).mode == "estimate"
    assert predictor(model, "engine", images=MEASURED_FROM).mode == "measure"
    with pytest.raises(InputError, match="route must be one of"):
        predictor(model, "fast")
