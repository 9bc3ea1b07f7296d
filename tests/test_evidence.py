"""The evidence scripts under spec/ that the README quotes: run as a reader would run them."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import refseg
from refseg import imageio, synthetic
from refseg.dataset import write_label

SPEC = Path(__file__).resolve().parent.parent / "spec"
# the scripts import the refseg these tests import, installed or not
ENV = {**os.environ, "PYTHONPATH": str(Path(refseg.__file__).resolve().parent.parent)}


def write_set(root, classes_list):
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    for i, classes in enumerate(classes_list):
        imageio.write_png(root / "images" / f"w{i}.png", np.zeros(classes.shape + (3,), np.uint8))
        write_label(root / "labels" / f"w{i}.png", classes)
    return root


def ceiling(data, *sizes):
    out = subprocess.run([sys.executable, str(SPEC / "evidence_resize_ceiling.py"), str(data), *sizes],
                         capture_output=True, text=True, check=True, env=ENV).stdout
    return json.loads(out)["ceiling"]


@pytest.fixture(scope="module")
def welds(tmp_path_factory):
    classes = [synthetic.weld_image(7 + i, shape=(48, 160)).classes for i in range(2)]
    return write_set(tmp_path_factory.mktemp("welds"), classes)


def test_resize_ceiling_is_lossless_at_the_image_size(welds):
    result = ceiling(welds, "48x160")["48x160"]
    assert result == {"pixel_accuracy": 1.0, "contour_iou": 1.0}


def test_resize_ceiling_loses_thin_bands_at_smaller_sizes(welds):
    result = ceiling(welds, "16x64", "32x96")
    # a 3-px contour band cannot survive a 3x shrink intact, and the smaller size loses more
    assert result["16x64"]["pixel_accuracy"] < result["32x96"]["pixel_accuracy"] < 1.0
    assert result["16x64"]["contour_iou"] < result["32x96"]["contour_iou"] < 1.0


def test_resize_ceiling_of_a_one_class_label_is_exact_at_any_size(tmp_path):
    data = write_set(tmp_path / "d", [np.full((30, 50), synthetic.OUTSIDE, np.uint8)])
    result = ceiling(data, "7x11")["7x11"]
    assert result["pixel_accuracy"] == 1.0
