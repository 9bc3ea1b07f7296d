"""Slow, obvious NumPy twins of the compiled kernels of ``refseg._kernels``: the module that
backend ``"numpy"`` runs (``refseg.backend``).

Same names, same signatures (outputs written into ``out`` arrays), same arithmetic order: the
tests hold each pair equal bit for bit. The twins live beside their kernels' ``.pxi`` files, in
``claim1/_twins.py``, ``autograd/_twins.py`` and ``autograd/_twins_training.py`` (batch norm in
training and Adam): every public function of those modules is a twin, and this module gathers
them, so a new twin needs no list of names here.
``tests/test_backend.py`` holds the twins and the kernels to the same names.
"""
from refseg.autograd import _twins as _autograd
from refseg.autograd import _twins_training as _training
from refseg.claim1 import _twins as _claim1

#: The wings' twin modules.
WINGS = (_claim1, _autograd, _training)


def _twins_of(module) -> dict:
    """The public functions that ``module`` itself defines: its twins."""
    return {name: value for name, value in vars(module).items()
            if not name.startswith("_") and callable(value)
            and getattr(value, "__module__", None) == module.__name__}


_TWINS = {name: twin for wing in WINGS for name, twin in _twins_of(wing).items()}
globals().update(_TWINS)
__all__ = sorted(_TWINS)
