"""The backbones' layer graphs against Keras' own (``spec/keras_backbones_224.txt``,
read from keras 3.15.1): every layer's name, type, configuration, inputs and output shape."""
import ast
import re

import pytest

from refseg.autograd import layers as nn
from refseg.models.graph import INPUT
from refseg.models.mobilenetv2 import mobilenetv2_graph
from refseg.models.resnet50v2 import resnet50v2_graph

from checkout import SPEC

# the layer graph Keras 3.15.1 gives the two backbones, shipped with the spec
REFERENCE = SPEC / "keras_backbones_224.txt"
LINE = re.compile(r"^(\S+) (\S+) (.*?)<- (\S*)\s+out=(\(.*\))$")


def keras_layers(section):
    """{name: (type, config dict, inputs, output shape)} of one backbone in the reference."""
    layers, current = {}, None
    for line in REFERENCE.read_text().splitlines():
        if line.startswith("# ResNet50V2"):
            current = "resnet50v2"
        elif line.startswith("# MobileNetV2"):
            current = "mobilenetv2"
        elif current == section and line and not line.startswith("#"):
            name, kind, config, inputs, out = LINE.match(line).groups()
            pairs = re.findall(r"(\w+)=(\(\(.*?\)\)|\(.*?\)|\S+)", config)
            layers[name] = (kind, dict(pairs), tuple(filter(None, inputs.split(","))),
                            ast.literal_eval(out))
    return layers


def describe(layer):
    """Our layer's configuration in the reference's vocabulary."""
    if isinstance(layer, (nn.Conv2D, nn.DepthwiseConv2D)):
        kh, kw = layer.kernel.shape[:2]
        out = {"kernel_size": str((kh, kw)), "strides": str(layer.strides),
               "padding": layer.padding, "use_bias": str(layer.bias is not None)}
        if isinstance(layer, nn.Conv2D):
            out["filters"] = str(layer.kernel.shape[3])
        return out
    if isinstance(layer, nn.BatchNormalization):
        return {"epsilon": repr(layer.epsilon)}
    if isinstance(layer, nn.ZeroPadding2D):
        return {"padding": str(layer.padding)}
    if isinstance(layer, nn.MaxPooling2D):
        return {"pool_size": str((layer.pool_size,) * 2), "strides": str((layer.strides,) * 2),
                "padding": "valid"}
    if isinstance(layer, nn.ReLU) and layer.max_value is not None:
        return {"max_value": repr(layer.max_value)}
    return {}


@pytest.mark.claim("claim2.backbones")
@pytest.mark.parametrize("section, build", [("resnet50v2", resnet50v2_graph),
                                            ("mobilenetv2", mobilenetv2_graph)])
def test_graph_is_keras_graph(section, build):
    reference = keras_layers(section)
    inputs = [name for name, row in reference.items() if row[0] == "InputLayer"]
    assert len(inputs) == 1
    graph = build()
    shapes = graph.shapes((224, 224, 3))
    ours = list(graph.nodes)
    assert ours == [name for name in reference if name not in inputs]  # same layers, same order
    for name, node in graph.nodes.items():
        kind, config, sources, out = reference[name]
        assert node.layer.keras_type == kind, name
        assert node.inputs == tuple(INPUT if s in inputs else s for s in sources), name
        assert shapes[name] == out, name
        for key, value in describe(node.layer).items():
            assert config[key] == value, (name, key, config[key], value)
        if kind in ("Conv2D", "DepthwiseConv2D"):
            assert config["activation"] == "linear" and node.layer.activation is None


@pytest.mark.claim("claim2.backbones")
def test_parameter_counts_are_keras_counts():
    # Keras' model.count_params() of the two applications (include_top=False)
    assert sum(layer.parameter_count() for layer in resnet50v2_graph().layers()) == 23_564_800
    assert sum(layer.parameter_count() for layer in mobilenetv2_graph().layers()) == 2_257_984
