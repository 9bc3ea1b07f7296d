"""The fusion network of claims 2-4: ResNet50V2 and MobileNetV2 backbones (Keras architectures,
Keras weight paths) and the Res-Mobile Net decoder."""
from refseg.models.model import Model, ResMobileNet, mobilenetv2, preprocess_input, resnet50v2
from refseg.models.registry import known_weight_shapes

__all__ = ["Model", "ResMobileNet", "known_weight_shapes", "mobilenetv2", "preprocess_input",
           "resnet50v2"]
