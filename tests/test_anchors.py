"""The anchor libraries of the cross-checks are installed: CI fails, never skips, without them.

OpenCV, scikit-image and SciPy anchor claim 1 today; torch, Keras (torch backend) and h5py
anchor the network and its weight converter. They are optional at run time (extra
``crosscheck``), required by the test suite.
"""
import os

import pytest

from anchors import require

pytestmark = pytest.mark.infrastructure


@pytest.mark.parametrize("module", ["cv2", "skimage", "scipy", "torch", "keras", "h5py"])
def test_anchor_library_is_importable(module):
    lib = require(module)
    assert getattr(lib, "__version__", None), module


def test_keras_runs_on_the_torch_backend():
    keras = require("keras")
    assert os.environ["KERAS_BACKEND"] == "torch" and keras.backend.backend() == "torch"
