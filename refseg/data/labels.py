"""The label schema of the weld data set: class ids, names and colours ([0261]-[0263]).

One home for the vocabulary that the data set reader, the synthetic generator, the metrics, the
predictions and the command line all speak: a label image is RGB with one colour per class,
red for the weld's contour, green for its inside and blue for the outside ([0263]); in memory a
label is a (H, W) uint8 array of class ids.
"""
from __future__ import annotations

import numpy as np

from refseg.cite import infrastructure
from refseg.data.classes import (CLASS_COUNT, CLASS_NAMES, CONTOUR, INSIDE,  # noqa: F401
                                 OUTSIDE)

#: Label colours of [0263], indexed by class id: contour red, inside green, outside blue.
LABEL_COLOURS = np.array([[255, 0, 0], [0, 255, 0], [0, 0, 255]], dtype=np.uint8)
LABEL_COLOURS.setflags(write=False)


@infrastructure("the label schema as JSON")
def colour_table() -> dict[str, list[int]]:
    """{class name: [R, G, B]} of :data:`LABEL_COLOURS`, for manifests and reports."""
    return {name: [int(v) for v in LABEL_COLOURS[k]] for k, name in enumerate(CLASS_NAMES)}


@infrastructure("the label schema as JSON")
def class_table() -> dict[str, str]:
    """{class id as text: class name}, for manifests and reports."""
    return {str(k): name for k, name in enumerate(CLASS_NAMES)}
