"""refseg: a reference implementation of the image semantic segmentation method of patent
CN114419081B, written from scratch in NumPy and Cython.

Modules, in the order of claim 1:
``preprocess`` (grayscale, Gaussian), ``operators`` (Canny, Sobel, Prewitt, LoG),
``weighting`` (coefficient-of-variation weights and the vote), ``features`` (all of it),
``imageio`` (reading images, writing outputs), ``trace`` (claim-element citations).
"""
import os

# OpenBLAS's idle worker threads spin for a long time after each matrix product and then
# compete with refseg's OpenMP loops on the same cores (measured: an im2col after a GEMM took
# 9-12 ms instead of 4.6 ms on 2 cores). A short timeout removes that without slowing the GEMM.
# It only takes effect if refseg is imported before NumPy loads OpenBLAS; set it yourself
# otherwise (see README).
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
# The other direction: libgomp's threads spin after every parallel region of refseg's kernels and
# take the cores from the OpenBLAS threads of the next product. Passive waiting (sleep at once)
# measured, 2 cores, ResMobileNet at 224x224: batch 1 475 -> 225 ms, batch 8 2124 -> 1330 ms.
# Like the line above it only takes effect if refseg loads libgomp first (before torch, say).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
