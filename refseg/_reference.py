"""Slow, obvious NumPy twins of the compiled kernels of ``refseg._kernels``: the module that
backend ``"numpy"`` runs (``refseg.backend``).

Same names, same signatures (outputs written into ``out`` arrays), same arithmetic order: the
tests hold each pair equal bit for bit. The twins live beside their kernels' ``.pxi`` files, in
``claim1/_reference.py`` and ``autograd/_reference.py``; this module gathers them.
"""
from refseg.claim1._reference import (
    rgb_to_gray, correlate3x3, gradient3x3, gradient_magnitude3x3, threshold_above,
    non_maximum_suppression, non_maximum_suppression3x3, hysteresis, zero_crossings,
    weighted_vote, value_range, histogram, edge_statistics,
)
from refseg.autograd._reference import (
    im2col, col2im, col2im_transposed, depthwise_forward, depthwise_backward_input,
    depthwise_backward_weight, window_maximum, max_pool_forward, max_pool_backward,
    channel_moments, channel_sums, batch_norm_forward, batch_norm_backward, adam_update, channel_affine, clamp,
    add_arrays, channel_add, zero_pad, subtract_row_max, divide_by_row_sum, conv_small_forward,
    conv_small_weight, winograd_input, winograd_output, winograd_kernel, winograd_output_adjoint,
    winograd_kernel_adjoint, winograd4_input, winograd4_output, winograd4_kernel, gemm_stack,
)

__all__ = [
    "rgb_to_gray", "correlate3x3", "gradient3x3", "gradient_magnitude3x3", "threshold_above",
    "non_maximum_suppression", "non_maximum_suppression3x3", "hysteresis", "zero_crossings",
    "weighted_vote", "value_range", "histogram", "edge_statistics", "im2col", "col2im",
    "col2im_transposed", "depthwise_forward",
    "depthwise_backward_input", "depthwise_backward_weight", "window_maximum", "max_pool_forward",
    "max_pool_backward", "channel_moments", "channel_sums", "batch_norm_forward",
    "batch_norm_backward", "adam_update", "channel_affine", "clamp", "add_arrays",
    "channel_add", "zero_pad", "subtract_row_max", "divide_by_row_sum",
    "conv_small_forward", "conv_small_weight", "winograd_input", "winograd_output",
    "winograd_kernel", "winograd_output_adjoint", "winograd_kernel_adjoint", "winograd4_input",
    "winograd4_output", "winograd4_kernel", "gemm_stack",
]
