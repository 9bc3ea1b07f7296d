"""The weight keys and shapes of every part refseg knows, for inspecting weight files."""
from __future__ import annotations

from functools import lru_cache

from refseg.models.decoder import add_decoder
from refseg.models.mobilenetv2 import mobilenetv2_graph
from refseg.models.resnet50v2 import resnet50v2_graph
from refseg.cite import implements


@implements("claim2.backbones", "claim2.fusion")
@lru_cache(maxsize=1)
def known_weight_shapes() -> dict[str, dict[str, tuple[int, ...]]]:
    """{part: {Keras weight path: shape}} for "resnet50v2", "mobilenetv2" (the whole Keras
    architecture, ``Conv_1`` included) and "decoder"."""
    resnet, mobile = resnet50v2_graph(), mobilenetv2_graph()
    both = resnet50v2_graph()
    both.merge(mobilenetv2_graph())
    add_decoder(both)
    out = {}
    for part, graph in (("resnet50v2", resnet), ("mobilenetv2", mobile), ("decoder", both)):
        out[part] = {key: value.shape for layer in graph.layers(part)
                     for key, value in layer.weights().items()}
    return out
