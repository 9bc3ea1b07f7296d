"""Test configuration: claim-element markers, and the anchors that cross-checks require.

Each test cites the claim elements it verifies with ``@pytest.mark.claim("claim1.step2.cv")``.
This file registers the marker, checks every cited ID against ``spec/registry.toml`` at
collection, and gives each test one marker per ID and per ID prefix, so that
``pytest -m claim1.step2.cv`` (one element) or ``pytest -m claim1`` (a whole claim) selects them.
"""
import os

import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")

from refseg.trace import load_registry  # noqa: E402

REGISTRY = load_registry()


def _prefixes(element_id):
    parts = element_id.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def pytest_configure(config):
    config.addinivalue_line("markers", "claim(id, ...): the claim elements a test verifies")
    names = sorted({p for e in REGISTRY.elements for p in _prefixes(e)})
    for name in names:
        config.addinivalue_line("markers", f"{name}: tests of claim element {name}")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    unknown = []
    for item in items:
        for mark in item.iter_markers("claim"):
            for element_id in mark.args:
                if element_id not in REGISTRY.elements:
                    unknown.append(f"{item.nodeid}: {element_id}")
                    continue
                for name in _prefixes(element_id):
                    item.add_marker(name)
    if unknown:
        raise pytest.UsageError("tests cite unknown claim elements: " + "; ".join(unknown))


def require(module_name):
    """Import an anchor library, failing (never skipping) when it is missing."""
    import importlib

    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        pytest.fail(f"anchor library {module_name!r} is required for cross-checks "
                    f"(pip install -e '.[crosscheck]'): {exc}")


from hypothesis import settings  # noqa: E402

# No per-example deadline: the NumPy twins are deliberately slow, and this machine is noisy.
settings.register_profile("refseg", deadline=None, max_examples=60)
# A long hunt for rare failing draws, run by hand: REFSEG_HYPOTHESIS=soak python -m pytest ...
settings.register_profile("soak", deadline=None, max_examples=1500)
settings.load_profile(os.environ.get("REFSEG_HYPOTHESIS", "refseg"))
