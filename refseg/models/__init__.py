"""The fusion network of claims 2-4: ResNet50V2 and MobileNetV2 backbones (Keras architectures,
Keras weight paths) and the Res-Mobile Net decoder.

The names below are imported when first used, so that importing a leaf of this package (the
vocabulary of :mod:`refseg.models.parts`) does not build the network's modules.
"""
import sys
import types

from refseg.lazy import lazy_names

#: public name -> the module that defines it
_PUBLIC = {
    "Model": "refseg.models.model",
    "ResMobileNet": "refseg.models.model",
    "mobilenetv2": "refseg.models.model",
    "preprocess_input": "refseg.models.model",
    "resnet50v2": "refseg.models.model",
    "known_weight_shapes": "refseg.models.registry",
}

__all__ = sorted(_PUBLIC)
__getattr__, __dir__ = lazy_names(__name__, _PUBLIC)


class _Package(types.ModuleType):
    """The package, whose two backbone builders share their names with the backbones' modules:
    the import system sets every loaded submodule on its package, and here the builders keep
    their names (the modules stay in ``sys.modules``)."""

    def __setattr__(self, name, value):
        if name in _PUBLIC and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
