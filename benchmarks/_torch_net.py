"""The Res-Mobile Net fusion network as a plain ``torch.nn.Module``, for bench_model.py.

Built from a weight dict keyed by Keras path (``ResMobileNet.weights()``), so that refseg,
torch and Keras run with identical weights. The architecture is written out here in torch
terms (ResNet50V2 pre-activation bottlenecks, MobileNetV2 inverted residuals, then the decoder
table of ``refseg.models.parts.DECODER``); only the layer tables and the BN epsilons are
taken from refseg. Keras semantics reproduced exactly:

* Conv2D "same": TensorFlow's padding, total = max((ceil(n/s) - 1) s + k - n, 0), the extra
  row/column (when the total is odd) at the bottom/right; symmetric totals use the conv's own
  ``padding``, odd ones an explicit ``F.pad``. "valid": no padding.
* ZeroPadding2D: ``F.pad``, or the next convolution's ``padding`` where that "valid"
  convolution is all it feeds and the padding is symmetric (the same zeros, no padded copy);
  MaxPooling2D "valid": ``F.max_pool2d``.
* BatchNormalization in inference: ``F.batch_norm`` on the moving statistics with the
  backbone's epsilon (ResNet50V2 1.001e-5, MobileNetV2 1e-3); not folded into the convolutions.
* ReLU6: ``F.hardtanh(x, 0, 6)``; softmax over the channel axis.
* Conv2DTranspose "same": the full transposed convolution, cropped to n*s from index
  (k - s) // 2 (k = 3, s = 2: start 0, so the last row and column are dropped, which torch's
  symmetric ``padding`` cannot express; s = 1: torch ``padding=1`` is the same crop).

Kernel layouts: Conv2D (kh, kw, in, out) and Conv2DTranspose (kh, kw, out, in) both become
``transpose(3, 2, 0, 1)``: (out, in, kh, kw) for ``conv2d``, (in, out, kh, kw) for
``conv_transpose2d``; depthwise (kh, kw, C, 1) becomes (C, 1, kh, kw) with ``groups=C``.

With ``trainable=True`` every weight except the moving statistics is an ``nn.Parameter``
and, in training mode (``.train()``), batch norm normalises with the batch's statistics and
updates the moving ones (momentum 0.99 in Keras' terms; torch's moving variance is the
unbiased one, Keras' the biased: the step's loss and gradients do not depend on it): the
network as ``refseg train --train-backbone`` trains it. By default the network is for
inference only and its weights are buffers.

Input and output are NCHW-indexed tensors; with ``channels_last=True`` the weights (and the
input the caller passes) use torch's channels_last memory format, i.e. NHWC in memory.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from refseg.models.parts import DECODER
from refseg.models.mobilenetv2 import BLOCKS as MOBILENET_BLOCKS
from refseg.models.mobilenetv2 import EPSILON as MOBILENET_EPSILON
from refseg.models.mobilenetv2 import TAPS as MOBILENET_TAPS
from refseg.models.resnet50v2 import EPSILON as RESNET_EPSILON
from refseg.models.resnet50v2 import STAGES as RESNET_STAGES


def _same_padding(size: int, k: int, s: int) -> tuple[int, int]:
    """(before, after) of TensorFlow's "same" padding along one axis."""
    out = -(-size // s)
    total = max((out - 1) * s + k - size, 0)
    return total // 2, total - total // 2


class TorchResMobileNet(nn.Module):
    """forward(x: (N, 3, H, W)) -> class probabilities (N, 3, H, W)."""

    def __init__(self, weights: dict[str, np.ndarray], *, channels_last: bool = False,
                 trainable: bool = False):
        super().__init__()
        self.channels_last, self.trainable = channels_last, trainable
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        self._w: dict[str, torch.Tensor] = {}
        for path, array in weights.items():
            a = np.asarray(array, dtype=np.float32)
            if a.ndim == 4:  # Keras kernel -> torch weight layout (see the module docstring)
                a = a.transpose(2, 3, 0, 1) if path.endswith("depthwise/kernel") else \
                    a.transpose(3, 2, 0, 1)
            t = torch.from_numpy(np.ascontiguousarray(a)).clone()
            if t.ndim == 4:
                t = t.contiguous(memory_format=fmt)
            if trainable and not path.endswith(("/moving_mean", "/moving_variance")):
                t = nn.Parameter(t)
                self.register_parameter(path.replace("/", "__"), t)
            else:
                self.register_buffer(path.replace("/", "__"), t, persistent=False)
            self._w[path] = t

    # -- layers (Keras semantics) -------------------------------------------------------------
    def conv(self, x, name, stride=1, padding="valid", bias=True, groups=1):
        """Keras Conv2D; ``padding`` "valid", "same", or an int: Keras' ZeroPadding2D of that
        many pixels on every side followed by a "valid" convolution, which is torch's own
        zero ``padding`` (so no padded copy of the input is made)."""
        w = self._w[f"{name}/kernel"]
        b = self._w[f"{name}/bias"] if bias else None
        k = w.shape[-1]
        if padding == "valid":
            return F.conv2d(x, w, b, stride=stride, groups=groups)
        if isinstance(padding, int):
            return F.conv2d(x, w, b, stride=stride, padding=padding, groups=groups)
        (top, bottom), (left, right) = (_same_padding(x.shape[2], k, stride),
                                        _same_padding(x.shape[3], k, stride))
        if top == bottom and left == right:
            return F.conv2d(x, w, b, stride=stride, padding=(top, left), groups=groups)
        return F.conv2d(F.pad(x, (left, right, top, bottom)), w, b, stride=stride,
                        groups=groups)

    def depthwise(self, x, name, stride, padding):
        return self.conv(x, name, stride, padding, bias=False, groups=x.shape[1])

    def conv_transpose(self, x, name, stride):
        """Keras Conv2DTranspose, padding "same"."""
        w, b = self._w[f"{name}/kernel"], self._w[f"{name}/bias"]
        k = w.shape[-1]
        crop = max(k - stride, 0) // 2
        h, wd = x.shape[2] * stride, x.shape[3] * stride
        full = (x.shape[2] - 1) * stride + k
        if full - h == 2 * crop:  # a symmetric crop is torch's own padding
            return F.conv_transpose2d(x, w, b, stride=stride, padding=crop)
        return F.conv_transpose2d(x, w, b, stride=stride)[:, :, crop:crop + h, crop:crop + wd]

    def bn(self, x, name, eps):
        # trainable and in training mode: batch statistics, moving ones updated with Keras'
        # momentum 0.99 (torch counts it the other way round)
        return F.batch_norm(x, self._w[f"{name}/moving_mean"],
                            self._w[f"{name}/moving_variance"], self._w[f"{name}/gamma"],
                            self._w[f"{name}/beta"], training=self.trainable and self.training,
                            momentum=0.01, eps=eps)

    # -- ResNet50V2 ---------------------------------------------------------------------------
    def resnet_block(self, x, name, stride, conv_shortcut):
        eps = RESNET_EPSILON
        preact = F.relu(self.bn(x, f"{name}_preact_bn", eps))
        if conv_shortcut:
            shortcut = self.conv(preact, f"{name}_0_conv", stride)
        elif stride > 1:
            shortcut = F.max_pool2d(x, 1, stride)
        else:
            shortcut = x
        y = self.conv(preact, f"{name}_1_conv", bias=False)
        tap = y = F.relu(self.bn(y, f"{name}_1_bn", eps))
        y = self.conv(y, f"{name}_2_conv", stride, padding=1, bias=False)  # _2_pad + conv
        y = F.relu(self.bn(y, f"{name}_2_bn", eps))
        return shortcut + self.conv(y, f"{name}_3_conv"), tap

    def resnet50v2(self, x):
        """The five taps of ResNet50V2, by Keras layer name."""
        taps = {}
        x = taps["conv1_conv"] = self.conv(x, "conv1_conv", 2, padding=3)  # conv1_pad + conv
        # pool1_pad pads zeros, not -inf as max_pool2d's padding would: padded explicitly
        x = F.max_pool2d(F.pad(x, (1, 1, 1, 1)), 3, 2)
        for stage, _filters, blocks, last_stride in RESNET_STAGES:
            for index in range(1, blocks + 1):
                name = f"{stage}_block{index}"
                x, taps[f"{name}_1_relu"] = self.resnet_block(
                    x, name, last_stride if index == blocks else 1, conv_shortcut=index == 1)
        taps["post_relu"] = F.relu(self.bn(x, "post_bn", RESNET_EPSILON))
        return taps

    # -- MobileNetV2 --------------------------------------------------------------------------
    def mobilenetv2(self, x):
        """The five taps of MobileNetV2 (up to block_16_project, the last one needed)."""
        eps, taps = MOBILENET_EPSILON, {}
        x = self.conv(x, "Conv1", 2, "same", bias=False)
        x = F.hardtanh(self.bn(x, "bn_Conv1", eps), 0.0, 6.0)
        channels = x.shape[1]
        for block_id, (filters, stride, _expansion) in enumerate(MOBILENET_BLOCKS):
            prefix = f"block_{block_id}_" if block_id else "expanded_conv_"
            y = x
            if block_id:
                y = self.conv(y, f"{prefix}expand", bias=False)
                y = taps[f"{prefix}expand_relu"] = F.hardtanh(
                    self.bn(y, f"{prefix}expand_BN", eps), 0.0, 6.0)
            if stride == 2:
                y = F.pad(y, (0, 1, 0, 1))  # Keras' correct_pad on even sizes
            y = self.depthwise(y, f"{prefix}depthwise", stride,
                               "same" if stride == 1 else "valid")
            y = F.hardtanh(self.bn(y, f"{prefix}depthwise_BN", eps), 0.0, 6.0)
            y = self.conv(y, f"{prefix}project", bias=False)
            if prefix + "project" in MOBILENET_TAPS:  # block_16: the tap is before its BN
                taps[prefix + "project"] = y
                break
            y = self.bn(y, f"{prefix}project_BN", eps)
            x = x + y if channels == filters and stride == 1 else y
            channels = filters
        return taps

    # -- the decoder and the whole network ----------------------------------------------------
    def forward(self, x):
        values = {**self.resnet50v2(x), **self.mobilenetv2(x)}
        for layer in DECODER:
            if layer.op == "add":
                a, b = layer.sources
                values[layer.name] = values[a] + values[b]
                continue
            y = values[layer.sources[0]]
            if layer.op == "convT":
                y = self.conv_transpose(y, layer.name, layer.stride)
            else:
                y = self.conv(y, layer.name, padding="same")
            if layer.activation == "relu":
                y = F.relu(y)
            elif layer.activation == "softmax":
                y = torch.softmax(y, dim=1)
            values[layer.name] = y
        return values[DECODER[-1].name]
