"""Models: a layer graph with named taps, Keras-path weights, input checks and load/save.

:class:`Model` is the shared machinery; :func:`resnet50v2` and :func:`mobilenetv2` are the two
frozen backbones on their own, :class:`ResMobileNet` is the fusion network of claims 2-4.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from refseg.autograd.tensor import Tensor, no_grad
from refseg.errors import InputError
from refseg.publish import write_npz
from refseg.models import mobilenetv2 as mnv2
from refseg.models import resnet50v2 as rn50
from refseg.autograd import layers
from refseg.models.decoder import add_decoder
from refseg.models.parts import BRANCHES
from refseg.models.graph import INPUT, Graph
from refseg.models.weights import LoadReport, match_weights, read_weight_file
from refseg.cite import implements
from refseg.models.parts import BACKBONE_INPUT_HW

#: Input heights and widths must be multiples of this (both backbones halve the size 5 times).
SIZE_MULTIPLE = 32


@implements("claim2.backbones")
def preprocess_input(rgb) -> np.ndarray:
    """8-bit RGB (0-255) scaled to [-1, 1] as both backbones expect: x / 127.5 - 1.

    Parameters
    ----------
    rgb : array_like of shape (..., 3), values 0-255

    Returns
    -------
    float32 ndarray of the same shape
    """
    return np.asarray(rgb, dtype=np.float32) / np.float32(127.5) - np.float32(1.0)


class Model:
    """A :class:`Graph` run from one image input, with taps, weights by Keras path and frozen
    parts. Subclasses name the taps; ``ignorable`` lists weight keys of architecture layers the
    model leaves out (loading them only gives a notice)."""

    def __init__(self, name: str, graph: Graph, tap_names, *, dtype, ignorable=None):
        self.name, self.graph = name, graph
        self.tap_names = tuple(tap_names)
        self.dtype = np.dtype(dtype)
        self.ignorable = dict(ignorable or {})
        self._index = {}
        for node in graph.nodes.values():
            layer = node.layer
            for tensor in layer.params.values():
                self._index[tensor.name] = (layer, tensor)
            for short in layer.state:
                self._index[f"{layer.name}/{short}"] = (layer, short)

    # -- weights ------------------------------------------------------------------------------
    def weights(self) -> dict[str, np.ndarray]:
        """Every weight and state array (views, not copies) by Keras path."""
        out = {}
        for node in self.graph.nodes.values():
            out.update(node.layer.weights())
        return out

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        return {key: value.shape for key, value in self.weights().items()}

    def parameter_count(self, trainable_only: bool = False) -> int:
        if trainable_only:
            return sum(p.data.size for p in self.trainable_parameters())
        return sum(layer.parameter_count() for layer in self.graph.layers())

    def trainable_parameters(self) -> list[Tensor]:
        """The tensors an optimizer updates (the decoder's, when the backbones are frozen)."""
        return [p for node in self.graph.nodes.values() for p in node.layer.params.values()
                if p.requires_grad]

    def freeze(self, part: str | None = None, frozen: bool = True) -> None:
        """Freeze (or unfreeze) the layers of ``part`` (all parts when None)."""
        for layer in self.graph.layers(part):
            layer.trainable = not frozen

    @implements("claim1.step3.train", "claim2.backbones")
    def set_training(self, training: bool) -> None:
        """Training mode: trainable batch-norm layers normalise with their batch's statistics
        and update their moving ones (Keras' ``training=True``); frozen ones never do."""
        for layer in self.graph.layers():
            if isinstance(layer, layers.BatchNormalization):
                layer.training = bool(training)

    @implements("claim2.backbones", "claim4.propagation")
    def set_weights(self, arrays: dict[str, np.ndarray], *, strict: bool = True,
                    source: str = "<arrays>") -> LoadReport:
        """Assign arrays by key; see :meth:`load_weights`."""
        report = match_weights(source, arrays, self.weight_shapes(), self.ignorable)
        if strict and report.problems:
            raise InputError(f"{source}: weights do not fit {self.name}: {report.problem_line()}")
        self._assign(arrays, report.loaded)
        return report

    @implements("claim2.backbones", "claim4.propagation")
    def load_weights(self, path, *, strict: bool = True) -> LoadReport:
        """Load an ``.npz`` of Keras-path arrays.

        Parameters
        ----------
        path : str or Path
        strict : bool
            True: every weight of the model must be in the file with its shape, floating point
            and finite, and the file may hold nothing else but ignorable layers; otherwise
            InputError and the model is unchanged. False: load what matches, report the rest.

        Returns
        -------
        LoadReport
            ``notices()`` lists ignored layers and, when not strict, what was not loaded.
        """
        return self.set_weights(read_weight_file(path), strict=strict, source=str(path))

    @implements("claim2.backbones")
    def load_part_weights(self, path, parts, *, strict: bool = True) -> LoadReport:
        """Load the weights of the layers of ``parts`` (e.g. both backbones) from an ``.npz``.

        Parameters
        ----------
        path : str or Path
        parts : sequence of str
            The parts whose every weight the file must hold ("resnet50v2", "mobilenetv2").
            Weights of other parts the file holds with the right shape are loaded too; keys the
            model does not have are reported, not loaded.
        strict : bool
            True: every weight of ``parts`` must be in the file, and every array the model uses
            must have its shape, be floating point and finite; otherwise InputError naming the
            file, the first problem and how many more there are, and the model is unchanged.
            False: load what fits and report the rest (``LoadReport.problem_line``).

        Returns
        -------
        LoadReport
        """
        arrays = read_weight_file(path)
        report = match_weights(str(path), arrays, self.weight_shapes(), self.ignorable)
        required = {key for part in parts for layer in self.graph.layers(part)
                    for key in layer.weights()}
        report.missing = [key for key in report.missing if key in required]
        blocking = [f"{kind.replace('_', '-')} {key}" for kind in report.PROBLEMS
                    if kind != "unexpected" for key in getattr(report, kind)]
        if strict and blocking:
            more = f" (and {len(blocking) - 1} more problems)" if len(blocking) > 1 else ""
            raise InputError(f"{path}: weights do not fit the {' and '.join(parts)} "
                             f"backbones: {blocking[0]}{more}; --partial-weights loads what fits")
        self._assign(arrays, report.loaded)
        return report

    def _assign(self, arrays: dict[str, np.ndarray], keys) -> None:
        for key in keys:
            layer, slot = self._index[key]
            target = slot.data if isinstance(slot, Tensor) else layer.state[slot]
            target[...] = arrays[key]  # in place: optimizers and ops keep their references

    def save_weights(self, path) -> None:
        """Write every weight and state array to ``path`` (.npz, atomically)."""
        write_npz(Path(path), **{key: np.ascontiguousarray(value)
                                 for key, value in self.weights().items()})

    # -- running ------------------------------------------------------------------------------
    def check_input(self, x) -> Tensor:
        """x as a Tensor of the model's dtype; InputError naming the problem otherwise."""
        data = x.data if isinstance(x, Tensor) else np.asarray(x)
        if data.ndim != 4 or data.shape[3] != 3:
            raise InputError(f"{self.name}: input must be (N, H, W, 3), got shape {data.shape}")
        if not np.issubdtype(data.dtype, np.floating):
            raise InputError(f"{self.name}: input must be floating point scaled to [-1, 1] "
                             f"(refseg.models.preprocess_input), got {data.dtype}")
        h, w = data.shape[1:3]
        if h % SIZE_MULTIPLE or w % SIZE_MULTIPLE or min(h, w) == 0:
            raise InputError(f"{self.name}: input height and width must be positive multiples "
                             f"of {SIZE_MULTIPLE}, got {h}x{w}")
        if not np.isfinite(data).all():
            raise InputError(f"{self.name}: input holds NaN or infinite values")
        if isinstance(x, Tensor) and data.dtype == self.dtype:
            return x
        return Tensor(data.astype(self.dtype, copy=False))

    @implements("claim2.backbones", "claim1.step3.train")
    def calibrate_batch_norm(self, x, parts=BRANCHES) -> int:
        """Set the moving statistics of every batch-norm layer of ``parts`` to the mean and
        (biased) variance of its input over the images ``x``, in network order.

        Without pretrained weights the frozen backbones are random, and their default
        statistics (mean 0, variance 1) let activations vanish (MobileNetV2's
        block_16_project ~1e-11): calibrating them on the training images before freezing is
        refseg's documented extension to the patent (R-frozen; spec/measurements.md, M-random-backbones).

        Parameters
        ----------
        x : ndarray of shape (N, H, W, 3)
            Images in [-1, 1]; one pass, so N should be large enough for stable statistics.
        parts : tuple of str

        Returns
        -------
        int
            The number of layers calibrated.
        """
        norms = [layer for part in parts for layer in self.graph.layers(part)
                 if isinstance(layer, layers.BatchNormalization)]
        for layer in norms:
            layer.calibrating = True
        try:
            with no_grad():
                self.graph.run({INPUT: self.check_input(x)}, self.tap_names)
        finally:
            for layer in norms:
                layer.calibrating = False
        return len(norms)

    @implements("claim2.taps")
    def taps(self, x) -> dict[str, np.ndarray]:
        """The tap layers' outputs for images ``x`` (N, H, W, 3) in [-1, 1], deepest first.

        References
        ----------
        [0145], [0169], [0216].
        """
        with no_grad():
            outputs = self.graph.run({INPUT: self.check_input(x)}, self.tap_names)
        return {name: outputs[name].data for name in self.tap_names}


@implements("claim2.backbones")
def resnet50v2(*, seed: int = 0, dtype=np.float32) -> Model:
    """Keras' ResNet50V2 (include_top=False), frozen, seeded random weights; taps ([0145]):
    post_relu, conv4_block6_1_relu, conv3_block4_1_relu, conv2_block3_1_relu, conv1_conv."""
    model = Model("resnet50v2", rn50.resnet50v2_graph(seed=seed, dtype=dtype), rn50.TAPS,
                  dtype=dtype)
    model.freeze()
    return model


@implements("claim2.backbones")
def mobilenetv2(*, seed: int = 0, dtype=np.float32) -> Model:
    """Keras' MobileNetV2 (alpha 1, include_top=False), frozen, seeded random weights; taps
    ([0169]): block_16_project, block_13_expand_relu, block_6_expand_relu, block_3_expand_relu,
    block_1_expand_relu."""
    model = Model("mobilenetv2", mnv2.mobilenetv2_graph(seed=seed, dtype=dtype), mnv2.TAPS,
                  dtype=dtype)
    model.freeze()
    return model


def _prune(graph: Graph, outputs) -> tuple[Graph, dict[str, tuple]]:
    """The part of ``graph`` that ``outputs`` need, and the weight shapes of the rest."""
    pruned = graph.pruned(outputs)
    dropped = {}
    for name, node in graph.nodes.items():
        if name not in pruned.nodes:
            dropped.update({key: value.shape for key, value in node.layer.weights().items()})
    return pruned, dropped


@implements("claim2.backbones", "claim2.taps", "claim2.fusion", "claim3.formula")
class ResMobileNet(Model):
    """The fusion network: both frozen backbones on the same input, the decoder of [0144]-[0195]
    fusing their ten taps, softmax over three classes.

    Parameters
    ----------
    input_shape : (int, int)
        (H, W), multiples of 32. The patent's examples use 224x224-class inputs.
    seed : int
        Seed of the random initial weights (Keras' initialisers); ``load_weights`` replaces them.
    dtype : float32 (default) or float64 (gradient checks)

    Notes
    -----
    ``predict(x)`` returns (N, H, W, 3) class probabilities in the order contour, inside,
    outside ([0263]). ``forward(x)`` returns the prediction as a Tensor whose graph reaches
    only decoder weights; ``decode(taps)`` does the same from precomputed taps.
    Backbone layers that feed no tap (MobileNetV2's ``block_16_project_BN``, ``Conv_1``,
    ``Conv_1_bn``, ``out_relu``) are not built; their weights in a file are ignored.

    References
    ----------
    Claims 2-4; [0122]-[0145], [0169]-[0195], [0216]-[0241].
    """

    OUTPUT = "prediction"

    def __init__(self, input_shape=BACKBONE_INPUT_HW, *, branches=BRANCHES, seed: int = 0,
                 dtype=np.float32):
        h, w = (int(v) for v in input_shape)
        if h % SIZE_MULTIPLE or w % SIZE_MULTIPLE or min(h, w) <= 0:
            raise InputError(f"ResMobileNet: input_shape must be positive multiples of "
                             f"{SIZE_MULTIPLE}, got {h}x{w}")
        branches = tuple(branches)
        if not branches or len(set(branches)) != len(branches) or not set(branches) <= set(
                BRANCHES):
            raise InputError(f"ResMobileNet: branches must be one or both of {BRANCHES}, "
                             f"got {branches}")
        self.input_shape, self.branches = (h, w), branches
        graph, ignorable, taps = Graph(), {}, ()
        for branch, build, branch_taps in (("resnet50v2", rn50.resnet50v2_graph, rn50.TAPS),
                                           ("mobilenetv2", mnv2.mobilenetv2_graph, mnv2.TAPS)):
            if branch in branches:
                part, dropped = _prune(build(seed=seed, dtype=dtype), branch_taps)
                graph.merge(part)
                ignorable.update(dropped)
                taps += branch_taps
        add_decoder(graph, branches=branches, seed=seed, dtype=dtype)
        name = "ResMobileNet" if len(branches) == 2 else f"ResMobileNet[{branches[0]} only]"
        super().__init__(name, graph, taps, dtype=dtype, ignorable=ignorable)
        for branch in branches:
            self.freeze(branch)
        # the taps the decoder reads (two of the ten feed nothing: erratum E14)
        self.decoder_inputs = tuple(t for t in taps if any(
            t in node.inputs for node in graph.nodes.values() if node.part == "decoder"))

    def check_input(self, x) -> Tensor:
        tensor = super().check_input(x)
        if tensor.shape[1:3] != self.input_shape:
            raise InputError(f"{self.name}: built for {self.input_shape[0]}x"
                             f"{self.input_shape[1]} inputs, got {tensor.shape[1]}x"
                             f"{tensor.shape[2]}")
        return tensor

    @implements("claim2.fusion", "claim4.propagation")
    def forward(self, x) -> Tensor:
        """The prediction (N, H, W, 3) as a Tensor (gradients reach the decoder only)."""
        return self.graph.run({INPUT: self.check_input(x)}, [self.OUTPUT])[self.OUTPUT]

    @implements("claim2.fusion", "claim4.propagation")
    def decode(self, taps: dict[str, np.ndarray]) -> Tensor:
        """The prediction from precomputed taps (the frozen backbones' features, cached once
        per image in training); only ``decoder_inputs`` are read."""
        missing = [name for name in self.decoder_inputs if name not in taps]
        if missing:
            raise InputError(f"{self.name}: decode needs the taps {self.decoder_inputs}; "
                             "missing " + ", ".join(missing))
        values = {name: taps[name] if isinstance(taps[name], Tensor)
                  else Tensor(np.asarray(taps[name], dtype=self.dtype))
                  for name in self.decoder_inputs}
        return self.graph.run(values, [self.OUTPUT])[self.OUTPUT]

    @implements("claim2.fusion")
    def predict(self, x, batch_size: int = 8) -> np.ndarray:
        """Class probabilities (N, H, W, 3) for images (N, H, W, 3) in [-1, 1], no gradients."""
        x = self.check_input(x).data
        with no_grad():
            parts = [self.forward(x[i:i + batch_size]).data
                     for i in range(0, x.shape[0], batch_size)]
        return np.concatenate(parts) if parts else np.empty((0, *self.input_shape, 3),
                                                            dtype=self.dtype)

    def __call__(self, x) -> Tensor:
        return self.forward(x)
