"""The op part of a golden bundle (``ops/<op>/...``): each autograd op of the network on
small seeded float64 tensors, forward and backward, so that an implementation's ops can be
checked one at a time.

References: claim 4; [0134]-[0146], [0194]-[0195], [0226], [0242]-[0244].
"""
from __future__ import annotations

import numpy as np

from refseg import autograd as ag
from refseg.autograd import Tensor
from refseg.golden.format import BundleBuilder, tolerance

INFRASTRUCTURE = "golden files: producing a bundle"

#: Seed of the small float64 tensors of the op section.
OPS_SEED = 6
#: Where the ops are public: each entry's function is ``AUTOGRAD.<op>``.
AUTOGRAD = "refseg.autograd"


class _Recorder:
    """Adds each op's arrays to a bundle, drawing its tensors and upstream gradients from
    one seeded generator in a fixed order."""

    def __init__(self, bundle: BundleBuilder):
        self.bundle, self.rng = bundle, np.random.default_rng(OPS_SEED)
        self.f64 = tolerance("float64")

    def leaf(self, shape, low=-1.0, high=1.0):
        return Tensor(self.rng.uniform(low, high, shape), requires_grad=True)

    def record(self, op: str, inputs: dict, output, params, claim, paragraphs, upstream=True):
        """Add op's inputs, the upstream gradient it is given (none when ``upstream`` is
        False: the output is a scalar loss), its output, and its inputs' gradients."""
        add, f64 = self.bundle.add, self.f64
        fn = f"{AUTOGRAD}.{op.split('_inference')[0].split('_training')[0]}"
        given = []
        for key, t in inputs.items():
            data = t.data if isinstance(t, Tensor) else t
            add(f"ops/{op}/{key}", data, f64, claim=claim, function=fn, role="input",
                paragraphs=paragraphs, params=params,
                meaning=f"input {key} of {op} (float64, seeded uniform)")
            given.append(f"ops/{op}/{key}")
        dy = self.rng.standard_normal(output.shape) if upstream else None
        if dy is not None:
            add(f"ops/{op}/dy", dy, f64, claim=claim, function=fn, role="input",
                paragraphs=paragraphs, note="upstream gradient given to backward",
                meaning=f"the upstream gradient dy given to {op}'s backward pass")
        add(f"ops/{op}/y", output.data, f64, claim=claim, function=fn, paragraphs=paragraphs,
            params=params, computed_from=given,
            meaning=f"y = {op}({', '.join(inputs)}) with params")
        output.backward(dy)
        for key, t in inputs.items():
            if isinstance(t, Tensor) and t.requires_grad:
                add(f"ops/{op}/d{key}", t.grad, f64, claim="claim4.propagation", function=fn,
                    params=params,
                    computed_from=(f"ops/{op}/y", *([f"ops/{op}/dy"] if upstream else [])),
                    note=f"gradient of sum(y * dy) with respect to {key}",
                    meaning=(f"the gradient of sum(y * dy) with respect to {key}"
                             if upstream else f"the gradient of y with respect to {key}"))


def add_ops(bundle: BundleBuilder) -> None:
    """Add each autograd op on small seeded float64 tensors (``ops/<op>/...``): its inputs,
    the upstream gradient, its output and the gradients of its inputs."""
    recorder = _Recorder(bundle)
    leaf, record, rng, f64 = recorder.leaf, recorder.record, recorder.rng, recorder.f64
    conv = "claim4.propagation"
    x, w, b = leaf((2, 5, 6, 3)), leaf((3, 3, 3, 4)), leaf((4,))
    params = {"strides": 2, "padding": "same", "kernel_layout": "HWIO"}
    record("conv2d", {"x": x, "kernel": w, "bias": b},
           ag.conv2d(x, w, b, strides=2, padding="same"), params, conv, "[0134]")
    x, w, b = leaf((2, 4, 5, 3)), leaf((3, 3, 2, 3)), leaf((2,))
    params = {"strides": 2, "padding": "same", "kernel_layout": "(kh, kw, out, in)"}
    record("conv2d_transpose", {"x": x, "kernel": w, "bias": b},
           ag.conv2d_transpose(x, w, b, strides=2, padding="same"), params, conv, "[0146]")
    x, w, b = leaf((2, 5, 6, 3)), leaf((3, 3, 3, 1)), leaf((3,))
    params = {"strides": 1, "padding": "same", "kernel_layout": "(kh, kw, C, 1)"}
    record("depthwise_conv2d", {"x": x, "kernel": w, "bias": b},
           ag.depthwise_conv2d(x, w, b, strides=1, padding="same"), params, conv, "[0226]")
    x = leaf((2, 7, 8, 3))
    params = {"pool_size": 3, "strides": 2, "padding": "valid"}
    record("max_pool2d", {"x": x}, ag.max_pool2d(x, 3, 2, "valid"), params, conv, "[0137]")
    for training in (True, False):
        x, gamma, beta = leaf((2, 4, 5, 3)), leaf((3,), 0.5, 1.5), leaf((3,))
        moving_mean = rng.uniform(-0.5, 0.5, 3)
        moving_variance = rng.uniform(0.5, 2.0, 3)
        op = "batch_norm_training" if training else "batch_norm_inference"
        params = {"training": training, "epsilon": 1e-3, "momentum": 0.99}
        inputs = {"x": x, "gamma": gamma, "beta": beta,
                  "moving_mean": moving_mean.copy(), "moving_variance": moving_variance.copy()}
        y = ag.batch_norm(x, gamma, beta, moving_mean, moving_variance, training=training,
                          epsilon=1e-3, momentum=0.99)
        record(op, inputs, y, params, conv, "[0135]")
        if training:
            for key, value in (("moving_mean", moving_mean), ("moving_variance",
                                                              moving_variance)):
                bundle.add(f"ops/{op}/{key}_updated", value, f64, claim=conv,
                           function=f"{AUTOGRAD}.batch_norm",
                           params=params, computed_from=(f"ops/{op}/{key}", f"ops/{op}/x"),
                           meaning=f"{key} after the update: momentum * {key} + (1 - "
                                   "momentum) * the batch's statistic over N, H, W (the "
                                   "variance biased, divisor N*H*W)")
    x = leaf((2, 3, 4, 5), -2.0, 8.0)
    record("relu", {"x": x}, ag.relu(x), {}, conv, "[0140]")
    x = leaf((2, 3, 4, 5), -2.0, 8.0)
    record("relu6", {"x": x}, ag.relu6(x), {"max_value": 6.0}, conv, "[0140]")
    x = leaf((2, 3, 4, 3), -3.0, 3.0)
    record("softmax", {"x": x}, ag.softmax(x), {"axis": -1}, conv, "[0194]-[0195]")
    p = Tensor(rng.dirichlet(np.ones(3), (2, 3, 4)), requires_grad=True)
    labels = rng.integers(0, 3, (2, 3, 4)).astype(np.int64)
    record("categorical_crossentropy", {"probabilities": p, "labels": labels},
           ag.categorical_crossentropy(p, labels),
           {"labels": "integer classes", "reduction": "mean over N*H*W pixels"},
           "claim4.update", "[0242]-[0244]", upstream=False)
    x = leaf((2, 3, 4, 2))
    padding = ((1, 2), (0, 1))
    record("zero_pad2d", {"x": x}, ag.zero_pad2d(x, padding), {"padding": [[1, 2], [0, 1]]},
           conv, "[0137]")
