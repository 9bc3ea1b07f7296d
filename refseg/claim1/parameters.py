"""Claim 1's parameters that the command line states before any heavy import.

A leaf module (standard library only): ``refseg edges`` names the default sigma and the
choices of ``--arrays`` in its help without loading NumPy, Pillow or the kernels.
:mod:`refseg.claim1.preprocess` and :mod:`refseg.claim1.features` act on these values; the
smallest image side, which :mod:`refseg.images` checks too, is :data:`refseg.vocabulary.MIN_SIZE`.
"""
from __future__ import annotations

#: Default standard deviation of the 3x3 Gaussian: OpenCV's rule for a 3x3 kernel,
#: 0.3*((3-1)/2 - 1) + 0.8 (R-gauss).
DEFAULT_SIGMA = 0.8
#: What :func:`refseg.claim1.features.extract` keeps and ``features.npz`` holds (``refseg edges
#: --arrays``): every intermediate, or only the binary maps, the mean image and the numbers
#: (each float plane dropped is 8 bytes per pixel).
KEEP = ("all", "maps")
