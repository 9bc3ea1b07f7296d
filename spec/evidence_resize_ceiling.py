"""The accuracy a network could reach if it were perfect at its input size (README, *Training the
backbones too*): each label is resized to the input size as training sees it (nearest,
``resize_labels``), one-hot, and brought back to the image's size as prediction does (bilinear per
class, ``resize_probabilities``, most probable class). What is lost is lost to the two resizings
alone. Usage: ``python spec/evidence_resize_ceiling.py DATA HxW [HxW ...]``."""
import json
import sys

import numpy as np
from refseg.data import dataset
from refseg.run import metrics
from refseg.data.inputs import resize_labels, resize_probabilities
from refseg.data.labels import CONTOUR, LABEL_COLOURS

data, sizes = sys.argv[1], [tuple(int(v) for v in s.split("x")) for s in sys.argv[2:]]
labels = [dataset.load_pair(sample)[1] for sample in dataset.load_dataset(data)]
classes = len(LABEL_COLOURS)
ceiling = {}
for hw in sizes:
    cm = np.zeros((classes, classes), np.int64)
    for label in labels:
        small = resize_labels(label, hw)
        one_hot = (small[:, :, None] == np.arange(classes)).astype(np.float32)
        back = np.argmax(resize_probabilities(one_hot, label.shape), axis=2)
        cm += metrics.confusion_matrix(label, back, classes)
    ceiling[f"{hw[0]}x{hw[1]}"] = {"pixel_accuracy": float(metrics.pixel_accuracy(cm)),
                                   "contour_iou": float(metrics.class_iou(cm)[CONTOUR])}
print(json.dumps({"data": data, "images": len(labels), "ceiling": ceiling}, indent=1))
