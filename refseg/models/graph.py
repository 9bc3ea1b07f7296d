"""A directed acyclic graph of named layers, run from one image input (Keras' functional model,
reduced to what the fusion network needs).

Each node is a layer of :mod:`refseg.autograd.layers` with the names of the nodes it reads, the
part of the network it belongs to ("resnet50v2", "mobilenetv2", "decoder") and the patent
paragraphs it comes from. Running the graph for a set of outputs evaluates only the nodes those outputs depend on, in
insertion order (which is topological: a node can only read nodes added before it), and drops each
intermediate as soon as its last reader has run, so inference holds few activations at a time.
A layer may write its result over an input that it alone reads (not an output asked for, not a
given value, not kept by the op that made it; ``Layer.reuses_input``): batch norm in inference,
ReLU and Add, so that the graph holds one array where it would hold two. A batch norm whose
output only the next node reads, a ReLU, runs with that ReLU in one pass
(``BatchNormalization.forward(..., then=relu)``): the same values to the bit, one sweep over
memory and one op call instead of two, and the batch norm's own output never exists. When no
graph is recorded, a convolution without bias or activation whose output only the next node
reads, a batch norm on its moving statistics, runs with that batch norm (and the ReLU that
alone reads it) in its own output pass (``Conv2D.forward_with_batch_norm``): again the same
values to the bit, and neither the convolution's nor the batch norm's output exists.
"""
from __future__ import annotations

from dataclasses import dataclass

from refseg.autograd.tensor import Tensor, grad_enabled
from refseg.errors import InputError
from refseg.autograd.layers import BatchNormalization, Conv2D, Layer, ReLU
from refseg.cite import implements

#: Name of the image input node (Keras' default name of a model's input layer).
INPUT = "input_layer"


def _kept_by_its_op(value: Tensor) -> bool:
    """Whether the op that computed ``value`` reads that array again in its backward."""
    return value.node is not None and value.node[0].keeps_output


@dataclass(frozen=True)
class Node:
    """One layer of the graph and where it sits."""

    layer: Layer
    inputs: tuple[str, ...]
    part: str
    paragraphs: str


@implements("claim2.fusion")
class Graph:
    """Named layers wired by name; see the module docstring."""

    def __init__(self):
        self.nodes: dict[str, Node] = {}

    def add(self, layer: Layer, *inputs: str, part: str, paragraphs: str) -> str:
        """Append ``layer`` reading ``inputs`` (node names or INPUT); returns the layer's name."""
        if layer.name in self.nodes or layer.name == INPUT:
            raise InputError(f"graph: duplicate layer name {layer.name!r}")
        for source in inputs:
            if source != INPUT and source not in self.nodes:
                raise InputError(f"graph: {layer.name} reads unknown layer {source!r}")
        self.nodes[layer.name] = Node(layer, tuple(inputs), part, paragraphs)
        return layer.name

    def merge(self, other: "Graph") -> None:
        """Add every node of ``other`` (which must share no layer name with this graph)."""
        for name, node in other.nodes.items():
            self.add(node.layer, *node.inputs, part=node.part, paragraphs=node.paragraphs)

    def required(self, outputs, provided=(INPUT,)) -> list[str]:
        """The nodes ``outputs`` depend on, in insertion order, stopping at ``provided``."""
        needed, stack = set(), list(outputs)
        while stack:
            name = stack.pop()
            if name in provided or name in needed:
                continue
            if name not in self.nodes:
                raise InputError(f"graph: no layer named {name!r}")
            needed.add(name)
            stack.extend(self.nodes[name].inputs)
        return [name for name in self.nodes if name in needed]

    def pruned(self, outputs) -> "Graph":
        """A graph of only the nodes ``outputs`` depend on (same layer objects)."""
        graph = Graph()
        for name in self.required(outputs):
            node = self.nodes[name]
            graph.add(node.layer, *node.inputs, part=node.part, paragraphs=node.paragraphs)
        return graph

    def run(self, given: dict[str, Tensor], outputs) -> dict[str, Tensor]:
        """Evaluate ``outputs`` (names) from the ``given`` values ({INPUT: images}, or the taps
        by name to run only what follows them)."""
        return self._run(given, list(outputs))

    def _run(self, given, outputs):
        order = self.required(outputs, provided=given)
        last_reader, readers = {}, {}
        for step, name in enumerate(order):
            for source in self.nodes[name].inputs:
                last_reader[source] = step
                readers[source] = readers.get(source, 0) + 1
        keep = set(outputs)
        values = dict(given)
        fused_ahead = 0
        for step, name in enumerate(order):
            if fused_ahead:
                fused_ahead -= 1
                continue
            node = self.nodes[name]
            reusable = tuple(readers[source] == 1 and source not in keep and source not in given
                             and not _kept_by_its_op(values[source]) for source in node.inputs)
            folded = self._fusable_batch_norm(order, step, readers, keep, values)
            then = None if folded else self._fusable_relu(order, step, readers, keep)
            if folded:
                # the next node is that batch norm (and the one after it that ReLU): the value
                # of the last, computed here, the convolution's and the batch norm's never
                batch_norm, relu = folded
                fused_ahead = 1 if relu is None else 2
                name = order[step + fused_ahead]
                values[name] = node.layer.forward_with_batch_norm(values[node.inputs[0]],
                                                                  batch_norm, relu)
            elif then is not None:
                # the next node is that ReLU: its value, computed here, the batch norm's never
                values[order[step + 1]] = node.layer.forward(values[node.inputs[0]],
                                                             reusable=reusable, then=then)
                fused_ahead = 1
                name = order[step + 1]
            else:
                values[name] = node.layer(*(values[source] for source in node.inputs),
                                          reusable=reusable)
            for source, may in zip(node.inputs, reusable):
                # the readers counted above are a value's own: a layer that handed on an input's
                # array as its output would let a later layer overwrite what others still read
                if not may and values[name].data is values[source].data:
                    raise AssertionError(f"graph: {name} returned the array of its input "
                                         f"{source}; layers must return fresh arrays")
            for source in node.inputs:
                if last_reader[source] == step and source not in keep:
                    del values[source]
        return {name: values[name] for name in outputs}

    def _read_by_next_alone(self, order, step, readers, keep, kind) -> Layer | None:
        """The layer of the node after ``order[step]`` when it is a ``kind`` reading that node
        alone, which nothing else reads and nobody asked for, else None."""
        name = order[step]
        if step + 1 == len(order) or readers.get(name, 0) != 1 or name in keep:
            return None
        following = self.nodes[order[step + 1]]
        if isinstance(following.layer, kind) and following.inputs == (name,):
            return following.layer
        return None

    def _fusable_relu(self, order, step, readers, keep) -> ReLU | None:
        """The ReLU layer of the node after ``order[step]`` when that node is a batch norm read
        by that ReLU alone (and not asked for), else None."""
        if not isinstance(self.nodes[order[step]].layer, BatchNormalization):
            return None
        return self._read_by_next_alone(order, step, readers, keep, ReLU)

    def _fusable_batch_norm(self, order, step, readers, keep, values):
        """(batch norm layer, ReLU layer or None) that follow ``order[step]`` and fold into it:
        a Conv2D without bias or activation, read only by a batch norm on its moving
        statistics (then the ReLU that alone reads that, if one does), with nothing of the
        three to record a graph for; else None."""
        node = self.nodes[order[step]]
        conv = node.layer
        if not isinstance(conv, Conv2D) or conv.bias is not None or conv.activation is not None:
            return None
        batch_norm = self._read_by_next_alone(order, step, readers, keep, BatchNormalization)
        if batch_norm is None or batch_norm.on_batch_statistics:
            return None
        learning = (values[node.inputs[0]], conv.kernel, batch_norm.gamma, batch_norm.beta)
        if grad_enabled() and any(t.requires_grad for t in learning):
            return None
        return batch_norm, self._read_by_next_alone(order, step + 1, readers, keep, ReLU)

    def shapes(self, input_shape) -> dict[str, tuple[int, int, int]]:
        """Per-image output shape (H, W, C) of every node for an input of ``input_shape``."""
        shapes = {INPUT: tuple(input_shape)}
        for name, node in self.nodes.items():
            shapes[name] = tuple(node.layer.output_shape(*(shapes[s] for s in node.inputs)))
        return shapes

    def layers(self, part: str | None = None) -> list[Layer]:
        return [node.layer for node in self.nodes.values() if part in (None, node.part)]
