"""The network's vocabulary: the decoder's branches, the number of classes, and the decoder's
table of layers (R-decoder).

A leaf of :mod:`refseg.models` (nothing of the network, no kernels): the run settings, the
synthetic data and the benchmarks name branches and layers from here, and
:mod:`refseg.models.decoder` builds the table.

The text cannot be built as written; ``DECODER`` is the table of ``spec/readings.md`` R-decoder
with the corrections of ``spec/errata.md`` (E6 ff.). Every convolution has a 3x3 kernel and a
bias, "Padding" is Keras' "same", every "strides=3" is read as kernel 3, stride 1.
"""
from __future__ import annotations

from dataclasses import dataclass

from refseg.data.classes import CLASS_COUNT

#: The decoder's branches, each reading one backbone's taps.
BRANCHES = ("resnet50v2", "mobilenetv2")
#: (rows, cols) of the network's default input: ImageNet's 224x224, the size the Keras
#: ResNet50V2 and MobileNetV2 backbones are trained at.
BACKBONE_INPUT_HW = (224, 224)
#: Number of output classes, those of the label schema: contour, inside, outside ([0263]).
CLASSES = CLASS_COUNT


@dataclass(frozen=True)
class DecoderLayer:
    """One row of the decoder table: name, op ("convT", "conv", "add"), sources, filters,
    stride, activation, paragraph."""

    name: str
    op: str
    sources: tuple[str, ...]
    filters: int = 0
    stride: int = 1
    activation: str | None = "relu"
    paragraph: str = ""

    @property
    def branch(self) -> str | None:
        """The backbone whose taps this layer's path starts from (None: the fusion itself)."""
        return BRANCH_OF.get(self.name)


def _t(name, source, filters, paragraph, stride=2, activation="relu"):
    return DecoderLayer(name, "convT", (source,), filters, stride, activation, paragraph)


def _c(name, source, filters, paragraph):
    return DecoderLayer(name, "conv", (source,), filters, 1, "relu", paragraph)


def _a(name, a, b, paragraph):
    return DecoderLayer(name, "add", (a, b), activation=None, paragraph=paragraph)


#: The decoder, in order (R-decoder). ResNet50V2 branch x1-x11, MobileNetV2 branch x12-x22,
#: fusion x23 and the prediction.
DECODER = (
    _t("x1", "post_relu", 720, "[0146]"),
    _c("x2", "x1", 256, "[0148]"),
    _a("x3", "x2", "conv4_block6_1_relu", "[0150]"),
    _t("x4", "x3", 256, "[0152]"),
    _c("x5", "x4", 128, "[0154]"),
    _a("x6", "x5", "conv3_block4_1_relu", "[0156]"),
    _t("x7a", "x6", 144, "[0158]"),
    _c("x7b", "x7a", 256, "[0160]"),
    _t("x8", "x7b", 96, "[0162]"),
    _c("x9", "x8", 64, "[0164]"),
    _a("x10", "x9", "conv1_conv", "[0166]"),
    _t("x11", "x10", CLASSES, "[0168]"),
    _t("x12", "block_16_project", 576, "[0170]"),
    _c("x13", "x12", 576, "[0172]"),
    _a("x14", "x13", "block_13_expand_relu", "[0174]"),
    _t("x15", "x14", 192, "[0176]"),
    _a("x16", "x15", "block_6_expand_relu", "[0178]"),
    _t("x17", "x16", 144, "[0180]"),
    _c("x18", "x17", 144, "[0182]"),
    _a("x19", "x18", "block_3_expand_relu", "[0184]"),
    _t("x20", "x19", 96, "[0186]"),
    _c("x21", "x20", 96, "[0188]"),
    _t("x22", "x21", CLASSES, "[0190]"),
    _a("x23", "x22", "x11", "[0192]"),
    _t("prediction", "x23", CLASSES, "[0194]-[0195]", stride=1, activation="softmax"),
)


#: Branch of each decoder layer: x1-x11 read ResNet50V2's taps, x12-x22 MobileNetV2's.
BRANCH_OF = {**{f"x{i}": "resnet50v2" for i in range(1, 12)}, "x7a": "resnet50v2",
             "x7b": "resnet50v2", **{f"x{i}": "mobilenetv2" for i in range(12, 23)}}
#: The layer each branch ends in (the prediction reads it when that branch is alone).
BRANCH_OUTPUT = {"resnet50v2": "x11", "mobilenetv2": "x22"}
