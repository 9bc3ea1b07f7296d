"""Where a trained run's errors on a data set lie (README, *Training the backbones too*): the
distance of each wrong pixel to the nearest class boundary of its label, and how many errors
involve the contour class. Usage: ``python spec/evidence_errors.py RUN DATA``."""
import json
import sys

import numpy as np
from scipy import ndimage
from refseg.data import dataset
from refseg.run.training import load_run
from refseg.run.evaluation import predict_image

run, data = sys.argv[1], sys.argv[2]
model, config = load_run(run)
samples = dataset.load_dataset(data)
wrong = total = 0
near = np.zeros(4, np.int64)  # errors at [0, 1], (1, 2], (2, 3], over 3 px from a boundary
wrong_contour_label = wrong_contour_pred = 0
for sample in samples:
    rgb, label = dataset.load_pair(sample)
    pred = predict_image(model, config, rgb).classes
    boundary = np.zeros(label.shape, bool)
    boundary[:-1] |= label[:-1] != label[1:]
    boundary[1:] |= label[:-1] != label[1:]
    boundary[:, :-1] |= label[:, :-1] != label[:, 1:]
    boundary[:, 1:] |= label[:, :-1] != label[:, 1:]
    dist = ndimage.distance_transform_edt(~boundary)
    err = pred != label
    wrong += err.sum(); total += err.size
    d = dist[err]
    near += [(d <= 1).sum(), ((d > 1) & (d <= 2)).sum(), ((d > 2) & (d <= 3)).sum(), (d > 3).sum()]
    wrong_contour_label += (err & (label == 0)).sum()
    wrong_contour_pred += (err & (pred == 0)).sum()
print(json.dumps({"run": run, "images": len(samples), "accuracy": 1 - wrong / total,
                  "error_share_by_distance_px": {"<=1": near[0] / wrong, "1-2": near[1] / wrong,
                                                 "2-3": near[2] / wrong, ">3": near[3] / wrong},
                  "errors_on_contour_labels": wrong_contour_label / wrong,
                  "errors_predicted_contour": wrong_contour_pred / wrong,
                  "errors_not_involving_contour": 1 - (wrong_contour_label + wrong_contour_pred) / wrong},
                 indent=1))
