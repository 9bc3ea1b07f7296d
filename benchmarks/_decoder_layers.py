"""The decoder's convolution layers as bench_ops.py times them: the layer table at a 224x224
input (``TAPS``, ``LAYERS``, ``ADDS``, ``ORDER``, from ``refseg.models.decoder.DECODER``), each
layer's random data, its op in refseg and in torch, and the interleaved timing of one layer
(``benchmark_layer``). torch is loaded by :func:`load_torch`, which pins its threads: a refseg
child process never imports it.
"""
from __future__ import annotations

from dataclasses import dataclass

import refseg  # noqa: F401  (before NumPy: refseg sets how OpenBLAS's idle threads wait)
import numpy as np

import _common
from _common import OtherLoad, median_ms, time_rounds
from refseg import autograd as ag
from refseg.models.parts import DECODER

# torch is imported by load_torch(): the refseg training child must not load it (it would
# add torch's own memory to the RSS that child measures).
torch = None
F = None


def load_torch(threads: int) -> None:
    global torch, F
    torch = _common.load_torch(threads)
    F = torch.nn.functional


# --- the decoder ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Layer:
    """One 3x3 convolution of the decoder: input size x size x cin -> output x cout."""

    name: str
    kind: str      # "conv" (Conv2D, stride 1) or "convT" (Conv2DTranspose), as in DECODER
    cin: int
    cout: int
    size: int      # input height = width
    stride: int    # 1 for conv; 2 for convT except the prediction layer
    src: str       # the tensor it reads (a tap or another decoder output)
    k: int = 3

    @property
    def out_size(self) -> int:
        return self.size * self.stride if self.kind == "convT" else self.size

    def flops(self, batch: int) -> float:
        """Forward FLOPs (2 per multiply-add), bias ignored."""
        pixels = self.size ** 2 if self.kind == "convT" else self.out_size ** 2
        return 2.0 * batch * pixels * self.k * self.k * self.cin * self.cout

    def kernel_shape(self) -> tuple:
        # Keras layouts: Conv2D HWIO, Conv2DTranspose (kh, kw, out, in).
        if self.kind == "conv":
            return (self.k, self.k, self.cin, self.cout)
        return (self.k, self.k, self.cout, self.cin)

    def describe(self) -> str:
        op = "Conv" if self.kind == "conv" else f"ConvT s{self.stride}"
        return f"{op} {self.cin}->{self.cout} {self.size}->{self.out_size}"


#: Backbone taps the decoder reads, (H, W, C) at a 224x224 input (spec/measurements.md, M-keras-shapes).
#: conv2_block3_1_relu and block_1_expand_relu are tapped by the patent but used by no Add.
TAPS = {
    "post_relu": (7, 7, 2048), "conv4_block6_1_relu": (14, 14, 256),
    "conv3_block4_1_relu": (28, 28, 128), "conv1_conv": (112, 112, 64),
    "block_16_project": (7, 7, 320), "block_13_expand_relu": (14, 14, 576),
    "block_6_expand_relu": (28, 28, 192), "block_3_expand_relu": (56, 56, 144),
}


def decoder_layers(taps: dict) -> tuple[dict, dict, list]:
    """(layers: name -> Layer, adds: name -> the two tensors added, the evaluation order) of
    the decoder table ``refseg.models.decoder.DECODER``, each layer's input size and channels
    followed from the taps' (H, W, C)."""
    shapes = dict(taps)
    layers, adds, order = {}, {}, []
    for row in DECODER:
        order.append(row.name)
        if row.op == "add":
            adds[row.name] = row.sources
            shapes[row.name] = shapes[row.sources[0]]
            continue
        (source,) = row.sources
        size, _, cin = shapes[source]
        layer = layers[row.name] = Layer(row.name, row.op, cin, row.filters, size, row.stride,
                                         source)
        shapes[row.name] = (layer.out_size, layer.out_size, layer.cout)
    return layers, adds, order


#: The decoder's layers (name -> Layer), Adds (name -> the two tensors added) and evaluation
#: order (every name is a LAYERS or an ADDS entry).
LAYERS, ADDS, ORDER = decoder_layers(TAPS)

#: "Large" layers, for the 50%-of-sgemm target: at least 1 GFLOP forward per image.
LARGE_FLOPS = 1e9


# --- the sgemm ceiling ---------------------------------------------------------------------

def gemm_shape(layer: Layer, batch: int) -> tuple:
    """(M, K, N) of the layer's forward matrix product in refseg."""
    if layer.kind == "conv":
        return batch * layer.out_size ** 2, layer.k * layer.k * layer.cin, layer.cout
    return batch * layer.size ** 2, layer.cin, layer.k * layer.k * layer.cout


# --- one layer in refseg and in torch ------------------------------------------------------

@dataclass
class LayerData:
    """Random float32 inputs of one layer at one batch size (NHWC, Keras kernel layout)."""

    x: np.ndarray
    kernel: np.ndarray
    bias: np.ndarray
    g: np.ndarray      # the fixed output gradient


def layer_data(layer: Layer, batch: int, seed: int = 0) -> LayerData:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, layer.size, layer.size, layer.cin), dtype=np.float32)
    scale = np.sqrt(2.0 / (layer.k * layer.k * layer.cin))  # He: keeps outputs O(1)
    kernel = (scale * rng.standard_normal(layer.kernel_shape())).astype(np.float32)
    bias = (0.1 * rng.standard_normal(layer.cout)).astype(np.float32)
    g = rng.standard_normal((batch, layer.out_size, layer.out_size, layer.cout),
                            dtype=np.float32)
    return LayerData(x, kernel, bias, g)


def refseg_layer(layer: Layer):
    """f(x, kernel, bias) -> Tensor, refseg's op for the layer."""
    if layer.kind == "conv":
        return lambda x, w, b: ag.conv2d(x, w, b, strides=1, padding="same")
    return lambda x, w, b: ag.conv2d_transpose(x, w, b, strides=layer.stride, padding="same")


def torch_layer(layer: Layer):
    """f(x, weight, bias) -> tensor, torch's op giving Keras "same" (NCHW shapes)."""
    if layer.kind == "conv":
        return lambda x, w, b: F.conv2d(x, w, b, padding=layer.k // 2)
    s, k, out = layer.stride, layer.k, layer.out_size
    full = (layer.size - 1) * s + k
    crop = max(k - s, 0) // 2  # Keras: the full result cropped to `out` from index `crop`
    if full - out == 2 * crop:  # a symmetric crop is torch's own padding
        return lambda x, w, b: F.conv_transpose2d(x, w, b, stride=s, padding=crop)
    return lambda x, w, b: F.conv_transpose2d(x, w, b, stride=s)[:, :, crop:crop + out,
                                                                   crop:crop + out]


class RefsegCase:
    """refseg's forward and forward+backward of one layer on fixed data."""

    def __init__(self, layer: Layer, data: LayerData):
        self.op = refseg_layer(layer)
        self.data = data
        self.x = ag.Tensor(data.x, requires_grad=True)
        self.w = ag.Tensor(data.kernel, requires_grad=True)
        self.b = ag.Tensor(data.bias, requires_grad=True)

    def forward(self):
        with ag.no_grad():
            return self.op(self.data.x, self.data.kernel, self.data.bias)

    def forward_backward(self):
        for t in (self.x, self.w, self.b):
            t.grad = None
        y = self.op(self.x, self.w, self.b)
        y.backward(self.data.g)
        return y


class TorchCase:
    """torch's forward and forward+backward of one layer, NCHW or channels_last."""

    def __init__(self, layer: Layer, data: LayerData, channels_last: bool):
        self.op = torch_layer(layer)
        fmt = torch.channels_last if channels_last else torch.contiguous_format

        def tensor(array, grad):
            t = torch.from_numpy(np.ascontiguousarray(array))
            if t.ndim == 4:
                t = t.contiguous(memory_format=fmt)
            return t.requires_grad_(grad)

        # NHWC -> NCHW; Keras kernels (kh, kw, a, b) -> torch (b, a, kh, kw) for both ops.
        self.x = tensor(data.x.transpose(0, 3, 1, 2), True)
        self.w = tensor(data.kernel.transpose(3, 2, 0, 1), True)
        self.b = tensor(data.bias, True)
        self.g = tensor(data.g.transpose(0, 3, 1, 2), False)

    def forward(self):
        with torch.no_grad():
            return self.op(self.x, self.w, self.b)

    def forward_backward(self):
        for t in (self.x, self.w, self.b):
            t.grad = None
        y = self.op(self.x, self.w, self.b)
        y.backward(self.g)
        return y


def agreement(layer: Layer, data: LayerData) -> float:
    """Largest relative difference between refseg and torch (NCHW) over the output and the
    three gradients (each relative to the largest magnitude of torch's array)."""
    ours, theirs = RefsegCase(layer, data), TorchCase(layer, data, channels_last=False)
    y = ours.forward_backward().data
    ty = theirs.forward_backward().detach().numpy().transpose(0, 2, 3, 1)
    pairs = [(y, ty),
             (ours.x.grad, theirs.x.grad.numpy().transpose(0, 2, 3, 1)),
             (ours.w.grad, theirs.w.grad.numpy().transpose(2, 3, 1, 0)),
             (ours.b.grad, theirs.b.grad.numpy())]
    worst = 0.0
    for a, b in pairs:
        if a.shape != b.shape:
            return float("inf")
        worst = max(worst, float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30)))
    return worst


@dataclass
class LayerResult:
    layer: Layer
    batch: int
    times: dict        # variant -> list of seconds
    agreement: float
    other_cores: float  # cores used by other processes while this layer was timed

    def ms(self, variant: str, stat=median_ms) -> float:
        return stat(self.times[variant])

    def torch_best(self, mode: str) -> str:
        """The faster torch layout for "fwd" or "fb" (by median)."""
        return min((f"torch-nchw-{mode}", f"torch-cl-{mode}"), key=self.ms)

    def ratio(self, mode: str, stat=median_ms) -> float:
        ref = self.ms(f"refseg-{mode}", stat)
        return ref / min(self.ms(f"torch-nchw-{mode}", stat), self.ms(f"torch-cl-{mode}", stat))

    def gflops(self, mode: str) -> float:
        work = self.layer.flops(self.batch) * (3 if mode == "fb" else 1)
        return work / (self.ms(f"refseg-{mode}") * 1e-3) / 1e9


def benchmark_layer(layer: Layer, batch: int, repeat: int, switch=None) -> LayerResult:
    """Every variant of one layer in interleaved rounds; with a ThreadSwitch also refseg at 1
    thread ("refseg-fwd-1t", "refseg-fb-1t")."""
    data = layer_data(layer, batch)
    ours = RefsegCase(layer, data)
    nchw = TorchCase(layer, data, channels_last=False)
    cl = TorchCase(layer, data, channels_last=True)
    fns = {"refseg-fwd": ours.forward, "torch-nchw-fwd": nchw.forward,
           "torch-cl-fwd": cl.forward, "refseg-fb": ours.forward_backward,
           "torch-nchw-fb": nchw.forward_backward, "torch-cl-fb": cl.forward_backward}
    if switch is not None:
        fns["refseg-fwd-1t"] = switch.wrap(1, ours.forward)
        fns["refseg-fb-1t"] = switch.wrap(1, ours.forward_backward)
    load = OtherLoad()
    times = time_rounds(fns, repeat)[0]
    return LayerResult(layer, batch, times, agreement(layer, data), load.cores())

