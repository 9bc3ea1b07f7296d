"""The network part of a golden bundle (``net/...``): the seeded fusion network on the synthetic
welds, its input and labels, the ten taps, every decoder layer, the prediction, the loss, the
decoder's gradients and Adam's steps, and the description of the network (its layers and
conventions) an implementation builds from the weights.

References: claims 2-4; [0122]-[0197], [0242]-[0255].
"""
from __future__ import annotations

import numpy as np

from refseg import autograd as ag
from refseg.autograd import Tensor, no_grad
from refseg.autograd.optim import Adam
from refseg.claim1 import features
from refseg.data import inputs
from refseg.golden.descriptions import (ADAM_RULE, CONVENTIONS, LABELS_RESIZE, LOSS_RULE,
                                        NETWORK_NOTES, RESIZE_RULE, network_flow)
from refseg.golden.format import WEIGHTS, BundleBuilder, tolerance, weights_sha256
from refseg.models import ResMobileNet
from refseg.models.parts import DECODER

INFRASTRUCTURE = "golden files: producing a bundle"

#: The network part: input size, weight seed, Adam steps recorded.
NET_HW = (32, 64)
NET_SEED = 0
ADAM_STEPS = (1, 3)

#: The functions each kind of network array is computed by (each resolves to an object).
NETWORK_INPUT = "refseg.data.inputs.network_input"
RESIZE_LABELS = "refseg.data.inputs.resize_labels"
TAPS = "refseg.models.ResMobileNet.taps"
DECODE = "refseg.models.ResMobileNet.decode"
LOSS = "refseg.autograd.categorical_crossentropy"
BACKWARD = "refseg.autograd.Tensor.backward"
ADAM_STEP = "refseg.autograd.optim.Adam.step"


def layer_table(model) -> list[dict]:
    """Every layer of the network in evaluation order: name, Keras op, inputs, part and its
    settings (the architecture an outside implementation builds from the weights)."""
    from refseg.autograd import layers as L

    table = []
    for name, node in model.graph.nodes.items():
        layer = node.layer
        row = {"name": name, "op": layer.keras_type, "inputs": list(node.inputs),
               "part": node.part, "weights": sorted(layer.weights())}
        if isinstance(layer, (L.Conv2D, L.Conv2DTranspose, L.DepthwiseConv2D)):
            row.update(kernel=list(layer.kernel.shape[:2]), strides=list(layer.strides),
                       padding=layer.padding, use_bias=layer.bias is not None,
                       activation=layer.activation)
            if not isinstance(layer, L.DepthwiseConv2D):
                row["filters"] = int(layer.kernel.shape[3 if isinstance(layer, L.Conv2D)
                                                        else 2])
        elif isinstance(layer, L.BatchNormalization):
            row.update(epsilon=layer.epsilon, axis=-1)
        elif isinstance(layer, L.ReLU):
            row["max_value"] = layer.max_value
        elif isinstance(layer, L.ZeroPadding2D):
            row["padding"] = [list(p) for p in layer.padding]
        elif isinstance(layer, L.MaxPooling2D):
            row.update(pool_size=layer.pool_size, strides=layer.strides, padding="valid")
        table.append(row)
    return table


def _network_info(model, weights: dict, names: list[str]) -> dict:
    """The manifest's ``network``: size, seed, the weights' hash, notes, layers."""
    return {
        "input_hw": list(NET_HW), "seed": NET_SEED,
        "dtype": "float32 weights and input; computed in float64",
        "weights_sha256": weights_sha256(weights), "weights_count": len(weights),
        "weights_numbers": int(sum(w.size for w in weights.values())),
        "weights_file": (f"{WEIGHTS} in the bundle when it was written with --with-weights "
                         "(Keras paths as keys, float32); it hashes to weights_sha256 by "
                         "hash_rule"),
        "regenerate": (f"refseg.models.ResMobileNet({tuple(NET_HW)}, seed={NET_SEED})"
                       ".weights(), or: refseg golden weights DIR OUT.npz (keys = Keras "
                       "weight paths)"),
        **NETWORK_NOTES,
        "images": names,
        "flow": network_flow(ADAM_STEPS),
        "conventions": CONVENTIONS,
        "layers": layer_table(model),
    }


def _add_inputs(bundle: BundleBuilder, welds: dict, x, labels) -> None:
    exact = tolerance("exact")
    names = list(welds)
    pre = np.stack([features.extract(s.rgb).feature_map.astype(np.float32)
                    for s in welds.values()])
    bundle.add("net/pre_resize", pre, exact, claim="claim1.step2.dataset",
               function=NETWORK_INPUT, role="input",
               computed_from=[f"claim1/{n}/feature_map" for n in names],
               meaning="the feature maps of the images (claim1/<image>/feature_map) as float32 "
                       "0/1 at their own resolution, stacked: what the resize reads")
    bundle.add("net/input", x, exact, claim="claim1.step2.dataset", function=NETWORK_INPUT,
               role="input", computed_from=("net/pre_resize",),
               meaning="the network's input (N, H, W, 3) float32 in [-1, 1]: each feature "
                       "map resized to (H, W) (params.resize), scaled 2 r - 1, 3 channels",
               params={"images": names, "kind": "feature", "input_hw": list(NET_HW),
                       "resize": RESIZE_RULE})
    bundle.add("net/labels", labels, exact, claim="claim1.step2.dataset",
               function=RESIZE_LABELS, role="input", params={"resize": LABELS_RESIZE},
               meaning="class ids (N, H, W) uint8: 0 contour, 1 inside, 2 outside")


def _add_forward(bundle: BundleBuilder, model, x) -> dict:
    """The taps, every decoder layer and the prediction; returns the taps."""
    f32 = tolerance("float32")
    taps = model.taps(x)
    for name, value in taps.items():
        bundle.add(f"net/tap/{name}", value.astype(np.float32), f32, claim="claim2.taps",
                   function=TAPS, computed_from=("net/input",),
                   meaning=f"the output of backbone layer {name} (network.layers) for "
                           "net/input", also=("claim2.backbones",))
    with no_grad():
        given = {name: Tensor(taps[name]) for name in model.decoder_inputs}
        outputs = model.graph.run(given, [*(layer.name for layer in DECODER), model.OUTPUT])

    def source(name):
        return f"net/tap/{name}" if name in taps else f"net/layer/{name}"

    for layer in DECODER:
        bundle.add(f"net/layer/{layer.name}", outputs[layer.name].data.astype(np.float32), f32,
                   claim="claim2.fusion", function=DECODE, paragraphs=layer.paragraph,
                   computed_from=tuple(source(s) for s in layer.sources),
                   meaning=f"the output of decoder layer {layer.name} (network.layers)",
                   params={"op": layer.op, "sources": list(layer.sources),
                           "filters": layer.filters, "stride": layer.stride,
                           "activation": layer.activation})
    bundle.add("net/prediction", outputs[model.OUTPUT].data.astype(np.float32), f32,
               claim="claim2.fusion", function=DECODE, computed_from=("net/layer/x23",),
               meaning="class probabilities (N, H, W, 3), softmax over the channels",
               params={"classes": ["contour", "inside", "outside"]},
               also=("claim3.formula", "claim1.step4.predict", "claim5.output_module"))
    return taps


def _add_adam_state(bundle: BundleBuilder, optimizer, params, step: int) -> None:
    grad = tolerance("float32_grad")
    hyper = {"learning_rate": optimizer.learning_rate, "beta_1": optimizer.beta_1,
             "beta_2": optimizer.beta_2, "epsilon": optimizer.epsilon, "iterations": step,
             **ADAM_RULE}
    before = f"net/adam{ADAM_STEPS[ADAM_STEPS.index(step) - 1]}" if step != ADAM_STEPS[0] \
        else None
    for p in params:
        for key, value, tol, what in (
                ("param", p.data, tolerance("adam_param"), f"the weight {p.name}"),
                ("m", optimizer.m[p.name], grad, f"Adam's first moment m of {p.name}"),
                ("v", optimizer.v[p.name], grad, f"Adam's second moment v of {p.name}")):
            upstream = (f"{before}/{key}/{p.name}",) if before else (f"net/grad/{p.name}",)
            bundle.add(f"net/adam{step}/{key}/{p.name}", value.astype(np.float32), tol,
                       claim="claim4.update", function=ADAM_STEP, params=hyper,
                       computed_from=upstream,
                       meaning=f"{what} after {step} Adam step{'s' * (step > 1)}")


def _add_training(bundle: BundleBuilder, model, taps: dict, labels) -> None:
    """The loss, its gradients at the initial weights, and Adam's state after each of
    :data:`ADAM_STEPS`."""
    f32, grad = tolerance("float32"), tolerance("float32_grad")
    params = model.trainable_parameters()
    optimizer = Adam(params)
    losses = []
    for step in range(1, max(ADAM_STEPS) + 1):
        optimizer.zero_grad()
        loss = ag.categorical_crossentropy(model.decode(taps), labels)
        losses.append(loss.data.copy())
        loss.backward()
        if step == 1:
            bundle.add("net/loss", loss.data.astype(np.float32), f32, claim="claim4.update",
                       function=LOSS, params=LOSS_RULE,
                       computed_from=("net/prediction", "net/labels"),
                       meaning="the loss of net/prediction against net/labels (a scalar)")
            for p in params:
                bundle.add(f"net/grad/{p.name}", p.grad.astype(np.float32), grad,
                           claim="claim4.propagation", computed_from=("net/loss",),
                           function=BACKWARD,
                           meaning=f"d net/loss / d {p.name} at the initial weights")
        optimizer.step()
        if step in ADAM_STEPS:
            _add_adam_state(bundle, optimizer, params, step)
    bundle.add("net/adam/losses", np.array(losses, dtype=np.float32), f32,
               claim="claim4.update", function=ADAM_STEP, computed_from=("net/loss",),
               params=LOSS_RULE,
               meaning="the loss before each Adam step, steps 1..3 (the first is net/loss)",
               also=("claim1.step3.train", "claim5.training_module"))


def add_network(bundle: BundleBuilder, welds: dict) -> dict:
    """Add the network part to ``bundle``; returns the manifest's ``network`` description.

    Notes
    -----
    The network at :data:`NET_HW` with the weights of :data:`NET_SEED` is computed in float64
    from the float32 weights and input, and its arrays are stored rounded to float32: the
    golden values are then the float32-rounded exact results, not one float32 summation
    order (the manifest's ``network.precision``).
    """
    samples = list(welds.values())
    x = np.stack([inputs.network_input(s.rgb, NET_HW) for s in samples])
    labels = np.stack([inputs.resize_labels(s.classes, NET_HW) for s in samples])
    weights = ResMobileNet(NET_HW, seed=NET_SEED).weights()
    model = ResMobileNet(NET_HW, seed=NET_SEED, dtype=np.float64)
    model.set_weights({k: v.astype(np.float64) for k, v in weights.items()})
    info = _network_info(model, weights, list(welds))
    _add_inputs(bundle, welds, x, labels)
    taps = _add_forward(bundle, model, x)
    _add_training(bundle, model, taps, labels)
    return info
