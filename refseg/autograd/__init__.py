"""A small reverse-mode autograd engine on NHWC float32/float64 arrays (claim 4).

Ops: conv2d, depthwise_conv2d, conv2d_transpose, zero_pad2d, max_pool2d, batch_norm, relu,
relu6, add, softmax, categorical_crossentropy, mean_squared_error. Keras semantics and Keras
weight layouts throughout.
"""
from refseg.autograd.conv import conv2d, conv2d_transpose, depthwise_conv2d
from refseg.autograd.elementwise import add, relu, relu6, softmax, zero_pad2d
from refseg.autograd.losses import categorical_crossentropy, mean_squared_error, one_hot
from refseg.autograd.norm import batch_norm, inference_affine
from refseg.autograd.pool import max_pool2d
from refseg.autograd.tensor import Op, Tensor, grad_enabled, no_grad

__all__ = [
    "Op", "Tensor", "add", "batch_norm", "categorical_crossentropy", "conv2d",
    "conv2d_transpose", "depthwise_conv2d", "grad_enabled", "inference_affine", "max_pool2d",
    "mean_squared_error", "no_grad",
    "one_hot", "relu", "relu6", "softmax", "zero_pad2d",
]
