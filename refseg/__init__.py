"""refseg: a reference implementation of the image semantic segmentation method of patent
CN114419081B, written from scratch in NumPy and Cython.

Modules, in the order of claim 1:
``preprocess`` (grayscale, Gaussian), ``operators`` (Canny, Sobel, Prewitt, LoG),
``weighting`` (coefficient-of-variation weights and the vote), ``features`` (all of it),
``imageio`` (reading images, writing outputs), ``trace`` (claim-element citations).
"""
__version__ = "0.1.0"
