"""Plans: a model compiled once into the engine's steps, its weights folded and packed, each
convolution's algorithm chosen and recorded.

``plan(model)`` walks the model's layer graph once, in its (topological) order, and turns each
layer, or each chain of layers whose intermediate values nothing else reads, into one step of
:mod:`refseg.engine.runtime`:

* Conv2D / DepthwiseConv2D / Conv2DTranspose, then (when the convolution has no activation) a
  batch norm on its moving statistics, folded into the kernel and bias, then a ReLU / ReLU6,
  the clamp of the epilogue, then an Add whose other operand is already computed, the residual
  of the epilogue; a softmax activation runs on the step's output;
* a ZeroPadding2D read only by a "valid" convolution or max pool becomes that step's padding
  (a convolution reads zeros there, from its offset table);
* a batch norm after an Add (ResNet50V2's pre-activations, ``post_bn``) cannot be folded into
  the next convolution's kernel (the ReLU between them, and the zero padding of a 3x3
  convolution that would have to stay zero): the step computing its input writes it, with its
  ReLU, as a second output (``ConvStep.second``: the epilogue stores the raw sum, which the
  residual path reads, and its affine map); where that step is not a convolution it runs as
  one affine pass;
* max pooling runs in C; whatever else is left in NumPy.

Algorithms (``runtime.ALGORITHMS``): each convolution step's tiles can run in two loop orders
of the panel micro-kernel, a step of at most ``runtime.DOT_MAX`` output channels (the
decoder's 3-class layers) also as one dot product per output and, if it is a transposed
convolution, as the columns of all its taps gathered per output; a stride-1 3x3 convolution
also by Winograd F(2x2, 3x3) and F(4x4, 3x3). ``mode="measure"`` times each on this machine at
batch 1 (the better of ``MEASURE_REPEATS`` calls each, FFTW's ``FFTW_MEASURE`` in spirit) and
keeps the fastest; ``mode="estimate"`` takes the columns where they run, else the dot products
where they run, Winograd F(4x4) on maps of at least ``WINOGRAD4_MIN_MAP`` pixels a side and
F(2x2) on maps of at least ``WINOGRAD_MIN_MAP``, else the order that keeps the larger operand
in place (``estimated_order``; it agreed with the faster order, timed on one thread, on the
decoder's large layers); ``choices={name: algorithm}`` replays a plan's ``choices``. A plan
keeps only the weights its chosen algorithms read; Winograd's (16/9 of the direct kernel's,
36/9 for F(4x4)) are made from the packed kernel when first needed, and where they would take
the plan past ``MEMORY_LIMIT`` times the model's weights the layers that lose least per byte
freed step down (F(4x4) to F(2x2) or a direct order, F(2x2) to a direct order; measured or
estimated costs) until it fits, and the steps it then did not need are undone
(``_within_memory``). The choices are for one image: on a batch, a step on a loop order may
run F(4x4) on weights made for the call, or the other order (``ConvStep.order_for``).
"""
from __future__ import annotations

import time

import numpy as np

from refseg.autograd import layers
from refseg.autograd.geometry import conv_output, transpose_output
from refseg.engine import allocator, packing
from refseg.engine.runtime import (ALGORITHMS, DOT_MAX, WINOGRAD_TILES, AffineStep, ConvStep,
                                   DepthwiseStep, MaxPoolStep, NumpyStep, backend_name,
                                   larger_operand_order)
from refseg.cite import implements, infrastructure
from refseg.errors import InputError
from refseg.models.graph import INPUT
from refseg.engine.training.threads import sized_to_load

#: Calls of each loop order timed per convolution in ``mode="measure"``.
MEASURE_REPEATS = 3
#: Plan modes.
MODES = ("measure", "estimate")
#: The weights' dtype the engine runs.
DTYPE = np.float32
#: The smallest output map (pixels a side) on which the estimate takes Winograd F(2x2, 3x3).
WINOGRAD_MIN_MAP = 14
#: The smallest on which it takes F(4x4, 3x3) instead: its tiles past the map's edge waste more,
#: its transforms cost more, and its rounding errors grow faster with the magnitudes.
WINOGRAD4_MIN_MAP = 28
#: Multiply-adds of each algorithm per direct multiply-add, for the estimate's gains.
WINOGRAD_SHARE = {"winograd": 16 / 36, "winograd4": 36 / 144}
#: A plan holds at most this many times the model's weights (packed weights + workspace);
#: Winograd, whose weights are 16/9 of the direct kernel's, is given up where it would not fit.
MEMORY_LIMIT = 1.3


def _clamp(activation) -> tuple[float, float]:
    """(lo, hi) of an activation name or ReLU layer's cap."""
    if activation == "relu":
        return 0.0, np.inf
    if activation == "relu6":
        return 0.0, 6.0
    return -np.inf, np.inf


class _Walker:
    """The graph's readers and what has been computed, while the steps are made."""

    def __init__(self, graph, outputs):
        self.graph, self.outputs = graph, set(outputs)
        self.order = graph.required(outputs)
        self.readers: dict[str, list[str]] = {}
        for name in self.order:
            for source in graph.nodes[name].inputs:
                self.readers.setdefault(source, []).append(name)
        self.done: set[str] = {INPUT}
        self.pads: dict[str, tuple] = {}     # folded ZeroPadding2D -> (source, padding)

    def sole_reader(self, name, kind):
        """The node reading ``name`` when it alone does, is a ``kind`` and ``name`` is not an
        output; else None."""
        readers = self.readers.get(name, [])
        if len(readers) != 1 or name in self.outputs:
            return None
        node = self.graph.nodes[readers[0]]
        return readers[0] if isinstance(node.layer, kind) else None

    def source(self, name):
        """(the value a layer reads, zero padding folded in ((top, bottom), (left, right)))."""
        if name in self.pads:
            return self.pads[name]
        return name, ((0, 0), (0, 0))


def _fold_tail(walker: _Walker, name: str, activation, residual_ok: bool = True):
    """The batch norm, ReLU and (when ``residual_ok``) Add that follow convolution ``name``
    and fold into it: (last layer's name, fused layer names, scale, shift, (lo, hi),
    residual)."""
    fused, scale, shift, residual = [], None, None, None
    lo, hi = _clamp(activation)
    current = name
    if activation is None:
        bn = walker.sole_reader(current, layers.BatchNormalization)
        if bn is not None:
            scale, shift = packing.batch_norm_affine(walker.graph.nodes[bn].layer)
            fused.append(bn)
            current = bn
        relu = walker.sole_reader(current, layers.ReLU)
        if relu is not None:
            lo, hi = _clamp("relu" if walker.graph.nodes[relu].layer.max_value is None
                            else "relu6")
            fused.append(relu)
            current = relu
    if activation != "softmax" and residual_ok:
        add = walker.sole_reader(current, layers.Add)
        if add is not None:
            others = [s for s in walker.graph.nodes[add].inputs if s != current]
            if len(others) == 1 and others[0] in walker.done:
                residual = others[0]
                fused.append(add)
                current = add
    return current, tuple(fused), scale, shift, (lo, hi), residual


def _conv_step(walker, name, layer, shapes) -> ConvStep:
    source, pad = walker.source(walker.graph.nodes[name].inputs[0])
    h, w, _ = shapes[source]
    ph, pw = h + sum(pad[0]), w + sum(pad[1])
    last, fused, scale, shift, (lo, hi), residual = _fold_tail(walker, name, layer.activation)
    stride = layer.strides[0]
    if layer.strides[0] != layer.strides[1]:
        raise InputError(f"engine: {name}: unequal strides are not supported")
    kernel = layer.kernel.data
    bias = None if layer.bias is None else layer.bias.data
    if isinstance(layer, layers.Conv2DTranspose):
        kernel, bias = packing.folded(kernel, bias, scale, shift, axis=2)
        kh, kw = kernel.shape[:2]
        (ho, ct), (wo, cl) = (transpose_output(h, kh, stride, layer.padding, name),
                              transpose_output(w, kw, stride, layer.padding, name))
        phases = packing.transpose_phases(kernel, (h, w), stride, (ct, cl), (ho, wo))
        kind = "transposed"
    else:
        kernel, bias = packing.folded(kernel, bias, scale, shift, axis=3)
        kh, kw = kernel.shape[:2]
        (ho, pt), (wo, pl) = (conv_output(ph, kh, stride, layer.padding, name),
                              conv_output(pw, kw, stride, layer.padding, name))
        phases = packing.conv_phases(kernel, (h, w), stride,
                                     (pt + pad[0][0], pl + pad[1][0]), (ho, wo))
        kind = "conv"
    if max(phase.taps for phase in phases) > 64:
        raise InputError(f"engine: {name}: kernels of more than 64 taps are not supported")
    winograd = None
    if kind == "conv" and (kh, kw, stride) == (3, 3, 1) and layer.activation != "softmax":
        winograd = (pt + pad[0][0], pl + pad[1][0])
    second, second_layers = None, ()
    if kind == "conv" and winograd is None and bias.size > DOT_MAX and \
            layer.activation != "softmax":
        second, second_layers = _second_output(walker, last)
    return ConvStep(last, source, (name, *fused, *second_layers), (ho, wo, bias.size), phases,
                    packing.padded_bias(bias), lo, hi, residual,
                    softmax=layer.activation == "softmax", kind=kind, winograd_pads=winograd,
                    second=second)


def _second_output(walker, name):
    """The batch norm (on moving statistics) and ReLU that read ``name`` beside its other
    readers, as a second output of the step computing it: ((output name, scale, shift, lo,
    hi), their layer names); (None, ()) where there is none. ResNet50V2 applies one to each
    block's input (the pre-activation), which the next convolution cannot take in (its ReLU
    comes first, and a 3x3 convolution's zero padding would have to stay zero); the previous
    block's last step writes it as it writes its own output, instead of a pass of its own."""
    norms = [reader for reader in walker.readers.get(name, [])
             if isinstance(walker.graph.nodes[reader].layer, layers.BatchNormalization)]
    if len(norms) != 1 or walker.graph.nodes[norms[0]].layer.on_batch_statistics:
        return None, ()
    bn = norms[0]
    scale, shift = packing.batch_norm_affine(walker.graph.nodes[bn].layer)
    lo, hi, last, fused = -np.inf, np.inf, bn, (bn,)
    relu = walker.sole_reader(bn, layers.ReLU)
    if relu is not None:
        lo, hi = _clamp("relu" if walker.graph.nodes[relu].layer.max_value is None
                        else "relu6")
        last, fused = relu, (bn, relu)
    return (last, packing.padded_bias(scale.astype(DTYPE)),
            packing.padded_bias(shift.astype(DTYPE)), lo, hi), fused


def _depthwise_step(walker, name, layer, shapes) -> DepthwiseStep:
    source, pad = walker.source(walker.graph.nodes[name].inputs[0])
    h, w, c = shapes[source]
    # the depthwise kernel has no residual epilogue: an Add after it stays a step of its own
    last, fused, scale, shift, (lo, hi), _ = _fold_tail(walker, name, layer.activation,
                                                        residual_ok=False)
    kernel, bias = packing.folded(layer.kernel.data[:, :, :, 0], None if layer.bias is None
                                  else layer.bias.data, scale, shift, axis=2)
    kh, kw = kernel.shape[:2]
    stride = layer.strides[0]
    (ho, pt), (wo, pl) = (conv_output(h + sum(pad[0]), kh, stride, layer.padding, name),
                          conv_output(w + sum(pad[1]), kw, stride, layer.padding, name))
    return DepthwiseStep(last, source, (name, *fused), (ho, wo, c),
                         np.ascontiguousarray(kernel), bias, stride,
                         (pt + pad[0][0], pl + pad[1][0]), lo, hi)


def _other_step(walker, name, layer):
    node = walker.graph.nodes[name]
    if isinstance(layer, layers.BatchNormalization):
        scale, shift = packing.batch_norm_affine(layer)
        relu = walker.sole_reader(name, layers.ReLU)
        lo, hi, last, fused = -np.inf, np.inf, name, ()
        if relu is not None:
            lo, hi = _clamp("relu" if walker.graph.nodes[relu].layer.max_value is None
                            else "relu6")
            last, fused = relu, (relu,)
        return AffineStep(last, node.inputs[0], (name, *fused), scale.astype(DTYPE),
                          shift.astype(DTYPE), lo, hi)
    if isinstance(layer, layers.MaxPooling2D):
        source, pad = walker.source(node.inputs[0])
        return MaxPoolStep(name, source, (name,), layer.pool_size, layer.strides, pad)
    if isinstance(layer, layers.Add):
        return NumpyStep(name, "add", node.inputs, (name,))
    if isinstance(layer, layers.ReLU):
        return NumpyStep(name, "relu", node.inputs, (name,),
                         hi=np.inf if layer.max_value is None else layer.max_value)
    if isinstance(layer, layers.ZeroPadding2D):
        return NumpyStep(name, "pad", node.inputs, (name,), pads=layer.padding)
    raise InputError(f"engine: no step for layer {name} ({type(layer).__name__})")


def _window_reads_padding(walker, name, layer) -> bool:
    """Whether ZeroPadding2D ``name`` is read by one "valid" convolution or max pool alone."""
    kinds = (layers.Conv2D, layers.DepthwiseConv2D, layers.MaxPooling2D)
    reader = walker.sole_reader(name, kinds)
    if reader is None:
        return False
    return getattr(walker.graph.nodes[reader].layer, "padding", "valid") == "valid"


@infrastructure("the engine's compilation of a layer graph")
def compile_steps(graph, outputs, input_hw) -> list:
    """The steps computing ``outputs`` of ``graph`` for inputs (N, H, W, 3), in order."""
    walker = _Walker(graph, outputs)
    shapes = graph.shapes((*input_hw, 3))
    steps = []
    taken: set[str] = set()
    for name in walker.order:
        if name in taken:
            continue
        layer = graph.nodes[name].layer
        if isinstance(layer, layers.ZeroPadding2D) and _window_reads_padding(walker, name,
                                                                             layer):
            walker.pads[name] = (walker.source(graph.nodes[name].inputs[0])[0], layer.padding)
            continue
        if isinstance(layer, layers.BatchNormalization) and layer.on_batch_statistics:
            raise InputError(f"engine: {name} normalises by batch statistics; plans are for "
                             f"inference")
        if isinstance(layer, (layers.Conv2D, layers.Conv2DTranspose)):
            step = _conv_step(walker, name, layer, shapes)
        elif isinstance(layer, layers.DepthwiseConv2D):
            step = _depthwise_step(walker, name, layer, shapes)
        else:
            step = _other_step(walker, name, layer)
        taken.update(step.layers)
        walker.done.update(step.layers)
        steps.append(step)
    return steps


@infrastructure("the engine's choice of loop order")
def estimated_order(step: ConvStep, input_bytes: int, winograd: bool = True) -> str:
    """For few output channels, the columns of a transposed convolution's taps (at 224x224,
    Zen 5, 2 threads: the decoder's 3-class layers 0.6-0.8 of the dot products' time at batch
    1, 0.33-0.5 at batch 8, the 3 -> 3 prediction layer 0.7 and 1.04) or else the dot
    products; for a stride-1 3x3 convolution Winograd F(4x4, 3x3) on a map of at least
    ``WINOGRAD4_MIN_MAP`` pixels a side, F(2x2, 3x3) on one of at least ``WINOGRAD_MIN_MAP``
    (on smaller maps the tiles past the edge and the transforms eat much of the saving); else
    the order that keeps the larger operand in place (``runtime.larger_operand_order`` of
    ``input_bytes``, one image's input activations)."""
    if "columns" in step.algorithms:
        return "columns"
    if "dot" in step.algorithms:
        return "dot"
    if winograd and "winograd" in step.algorithms:
        side = min(step.out_shape[:2])
        if side >= WINOGRAD4_MIN_MAP:
            return "winograd4"
        if side >= WINOGRAD_MIN_MAP:
            return "winograd"
    return larger_operand_order(step, input_bytes)


def _measured_times(step: ConvStep, values: dict) -> dict[str, float]:
    """The best of ``MEASURE_REPEATS`` calls of each algorithm of ``step``, in seconds."""
    best = {}
    for order in step.algorithms:
        step.prepare(order)
        step.order = order
        seconds = []
        for _ in range(MEASURE_REPEATS):
            start = time.perf_counter()
            step.run(values)
            seconds.append(time.perf_counter() - start)
        best[order] = min(seconds)
    # Winograd's weights are made again, if chosen, when the plan settles
    step.winograd = None
    return best


def _outputs(step) -> tuple[str, ...]:
    return getattr(step, "outputs", (step.name,))


def _store(values: dict, step, out) -> None:
    """A step's output(s) into ``values`` by name."""
    if isinstance(out, tuple):
        values.update(zip(step.outputs, out))
    else:
        values[step.name] = out


def _workspace(model, steps, scratch: dict) -> int:
    """The most activation bytes alive at once in a batch-1 run of ``steps`` (input
    included), plus the largest scratch of one step (``scratch``, bytes by step name)."""
    shapes = model.graph.shapes((*model.input_shape, 3))
    last_use = {}
    for index, step in enumerate(steps):
        for source in step.inputs:
            last_use[source] = index
    output = steps[-1].name
    live = {INPUT: int(np.prod(shapes[INPUT])) * 4}
    peak = sum(live.values())
    for index, step in enumerate(steps):
        for name in _outputs(step):
            live[name] = int(np.prod(shapes[name])) * 4
        peak = max(peak, sum(live.values()))
        for name in _outputs(step):
            if name not in last_use and name != output:
                live.pop(name)
        for source in step.inputs:
            if last_use[source] == index and source != output:
                live.pop(source, None)
    return peak + max(scratch.values(), default=0)


def _within_memory(model, steps, chosen: dict, costs: dict) -> dict:
    """``chosen`` (algorithm by conv step name), with Winograd given up where the plan would
    hold more than ``MEMORY_LIMIT`` times the model's weights: its weights are 16/9 (F(2x2))
    or 36/9 (F(4x4)) of the direct kernel's. ``costs`` gives, for the steps that may give
    way, the cost (seconds, or multiply-adds) of each algorithm considered. Step by step a
    step moves to an algorithm that holds fewer bytes (F(4x4) to F(2x2) or to the direct
    order, F(2x2) to the direct order), the move that costs least per byte it frees, until the
    plan fits; then the moves are undone, the dearest per byte first, wherever the plan still
    fits without them (the last move may free far more than was missing: at 224x224 the 14x14
    576 -> 576 layer's F(2x2) holds 9.3 MB)."""
    weights = sum(a.nbytes for a in model.weights().values())
    chosen = dict(chosen)
    convs = {step.name: step for step in steps if isinstance(step, ConvStep)}

    def total():
        packed = sum(step.nbytes_for(chosen[step.name]) if isinstance(step, ConvStep)
                     else step.nbytes for step in steps)
        scratch = {step.name: step.scratch_bytes(1, chosen[step.name]) for step in steps
                   if isinstance(step, ConvStep)}
        return packed + _workspace(model, steps, scratch)

    moves = []  # (loss per byte freed, step name, algorithm before, after)
    while total() > MEMORY_LIMIT * weights:
        options = []
        for name, cost in costs.items():
            step, now = convs[name], chosen[name]
            held = step.nbytes_for(now)
            options += [((cost[a] - cost[now]) / (held - step.nbytes_for(a)), name, a)
                        for a in cost if step.nbytes_for(a) < held]
        if not options:
            break
        per_byte, name, algorithm = min(options)
        moves.append((per_byte, name, chosen[name], algorithm))
        chosen[name] = algorithm
    for _, name, before, after in sorted(moves, reverse=True):
        if chosen[name] == after:
            chosen[name] = before
            if total() > MEMORY_LIMIT * weights:
                chosen[name] = after
    return chosen


@implements("claim2.fusion")
class Plan:
    """A model compiled for the engine; see the module docstring.

    Attributes
    ----------
    steps : list
        The runtime steps, in order; ``step.layers`` names the model layers each computes.
    choices : dict of str to str
        The algorithm chosen for each convolution step (``runtime.ALGORITHMS``), by the
        step's name (its last layer).
    mode : str
        "measure", "estimate" or "replay".
    """

    def __init__(self, model, steps, output: str, mode: str):
        self.model, self.steps, self.output, self.mode = model, steps, output, mode
        self.input_shape = tuple(model.input_shape)
        self.backend = backend_name()
        self._last_use = {}
        for index, step in enumerate(steps):
            for source in step.inputs:
                self._last_use[source] = index

    @property
    def choices(self) -> dict[str, str]:
        return {step.name: step.order for step in self.steps if isinstance(step, ConvStep)}

    def _check(self, x) -> np.ndarray:
        data = self.model.check_input(x).data
        return np.ascontiguousarray(data, dtype=DTYPE)

    def run(self, x, keep_all: bool = False) -> dict[str, np.ndarray]:
        """The steps' values for images ``x`` (N, H, W, 3) in [-1, 1]: the output alone, or
        with ``keep_all`` every step's value by name (tests compare them layer by layer)."""
        values = {INPUT: self._check(x)}
        if not allocator.considered:
            allocator.keep_freed_memory()
        # beside busy neighbours two threads that take turns with them lose to one: the
        # count follows the load, as the reference's graph runs do (refseg.engine.training.threads)
        with sized_to_load(("engine plan", id(self), values[INPUT].shape)):
            return self._run(values, keep_all)

    def _run(self, values, keep_all):
        for index, step in enumerate(self.steps):
            _store(values, step, step.run(values))
            if not keep_all:
                for name in _outputs(step):  # a second output nothing reads
                    if name not in self._last_use and name != self.output:
                        del values[name]
                for source in step.inputs:
                    if self._last_use[source] == index and source != self.output:
                        del values[source]
        return values if keep_all else {self.output: values[self.output]}

    def predict(self, x, batch_size: int = 8) -> np.ndarray:
        """Class probabilities (N, H, W, 3) float32 for images (N, H, W, 3) in [-1, 1],
        ``batch_size`` images at a time (as ``ResMobileNet.predict``)."""
        x = self._check(x)
        parts = [self.run(x[i:i + batch_size])[self.output]
                 for i in range(0, x.shape[0], batch_size)]
        return np.concatenate(parts) if parts else np.empty((0, *self.input_shape, 3), DTYPE)

    def memory(self) -> dict[str, int]:
        """Bytes: ``packed`` (the steps' weights and offset tables), ``workspace`` (the most
        activation bytes alive at once in a batch-1 run, input included, and the largest
        scratch of a step), ``model_weights``
        (every array of the model's weights), ``plan`` (packed + workspace)."""
        peak = _workspace(self.model, self.steps,
                          {step.name: step.scratch_bytes(1) for step in self.steps
                           if isinstance(step, ConvStep)})
        packed = sum(step.nbytes for step in self.steps)
        weights = sum(a.nbytes for a in self.model.weights().values())
        return {"packed": packed, "workspace": peak, "model_weights": weights,
                "plan": packed + peak}

    def describe(self) -> list[dict]:
        """One row per step: name, kind, layers it computes, the values it writes, its
        algorithm."""
        return [{"step": step.name, "kind": step.kind, "layers": list(step.layers),
                 "outputs": list(_outputs(step)), "order": step.order} for step in self.steps]


@implements("claim2.fusion")
def plan(model, mode: str = "measure", choices: dict | None = None) -> Plan:
    """Compile ``model`` (a ``ResMobileNet``) for the engine, once.

    Parameters
    ----------
    model : refseg.models.ResMobileNet
        Its weights as they are now are folded and packed: a plan does not follow later
        changes of the model's weights (make a new one).
    mode : {"measure", "estimate"}
        How each convolution's algorithm is chosen (module docstring).
    choices : dict of str to str, optional
        A plan's ``choices`` to replay (overrides ``mode``); every convolution step must be
        named.

    Returns
    -------
    Plan
    """
    if mode not in MODES:
        raise InputError(f"engine plan: mode must be one of {MODES}, got {mode!r}")
    if np.dtype(model.dtype) != DTYPE:
        raise InputError(f"engine plan: the engine runs float32 models, got {model.dtype}")
    output = model.OUTPUT
    steps = compile_steps(model.graph, [output], model.input_shape)
    convs = [step for step in steps if isinstance(step, ConvStep)]
    if choices is not None:
        unknown = sorted(set(choices) - {step.name for step in convs})
        missing = sorted({step.name for step in convs} - set(choices))
        bad = sorted(v for v in choices.values() if v not in ALGORITHMS)
        if unknown or missing or bad:
            raise InputError(f"engine plan: the choices do not fit this model "
                             f"(unknown {unknown[:3]}, missing {missing[:3]}, "
                             f"orders {bad[:3]})")
        for step in convs:
            if choices[step.name] not in step.algorithms:
                raise InputError(f"engine plan: {step.name} cannot run {choices[step.name]}")
            step.settle(choices[step.name])
        return Plan(model, steps, output, "replay")
    if mode == "estimate":
        shapes = model.graph.shapes((*model.input_shape, 3))
        chosen, costs = {}, {}
        for step in convs:
            input_bytes = 4 * int(np.prod(shapes[step.source]))
            chosen[step.name] = estimated_order(step, input_bytes)
            if chosen[step.name] in WINOGRAD_TILES:
                direct = estimated_order(step, input_bytes, winograd=False)
                macs = np.prod(step.out_shape) * step.phases[0].cin * 9
                costs[step.name] = {direct: macs, "winograd": macs * WINOGRAD_SHARE["winograd"],
                                    chosen[step.name]: macs * WINOGRAD_SHARE[chosen[step.name]]}
        chosen = _within_memory(model, steps, chosen, costs)
        for step in convs:
            step.settle(chosen[step.name])
        return Plan(model, steps, output, mode)
    rng = np.random.default_rng(0)
    values = {INPUT: rng.uniform(-1, 1, (1, *model.input_shape, 3)).astype(DTYPE)}
    chosen, costs = {}, {}
    for step in steps:
        if isinstance(step, ConvStep):
            times = _measured_times(step, values)
            chosen[step.name] = min(times, key=times.get)
            if step.winograd_pads is not None:
                costs[step.name] = times
            # the next steps' input, on an order that keeps no Winograd weights
            step.order = min((a for a in times if a not in WINOGRAD_TILES), key=times.get)
        _store(values, step, step.run(values))
    chosen = _within_memory(model, steps, chosen, costs)
    for step in convs:
        step.settle(chosen[step.name])
    return Plan(model, steps, output, mode)
