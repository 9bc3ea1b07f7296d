"""The anchor libraries of the cross-checks (OpenCV, scikit-image, torch, Keras, h5py, ...),
imported so that a missing one fails the test that needs it instead of skipping it."""
import importlib

import pytest


def require(module_name):
    """Import an anchor library, failing (never skipping) when it is missing."""
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        pytest.fail(f"anchor library {module_name!r} is required for cross-checks "
                    f"(python -m pip install '.[test,crosscheck]'): {exc}")
