"""Golden-file bundles: refseg's outputs, with their tolerances, for cross-checking other
implementations of the method (issue 6).

A bundle is a folder with two files:

``manifest.json``
    The format and its version, the versions that wrote it (refseg, NumPy, Python, the C
    compiler), where each input came from, the network's seed and the SHA-256 of its
    regenerated weights, and one entry per array: shape, dtype, SHA-256, role (input or
    output), the tolerance a candidate must meet and why, the claim element and paragraphs,
    the refseg function and its parameters.
``arrays.npz``
    The arrays, one ``.npy`` member each, deflate-compressed, written with fixed zip timestamps
    so that the same refseg on the same machine writes the same bytes.

Array names are paths: ``input/<image>``, ``claim1/<image>/<step>``, ``net/...``,
``ops/<op>/<role>``. A candidate is an ``.npz`` whose keys are these names
(``np.savez("candidate.npz", **{"claim1/coffee/gray": gray, ...})``); :func:`check_bundle`
compares it to the bundle. Arrays too large to store (the decoder's big gradient and Adam
tensors) are stored as two corner slices plus summary statistics; the candidate still supplies
the whole array, and the check slices it and recomputes the statistics.

References: claims 1-4; [0075]-[0119], [0122]-[0197], [0242]-[0255].
"""
from __future__ import annotations

import fnmatch
import hashlib
import io
import json
import os
import platform
import sysconfig
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from refseg.errors import InputError
from refseg.trace import implements

FORMAT = "refseg-golden"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
ARRAYS = "arrays.npz"

#: The three photographs of ``skimage.data`` and the crop (rows, cols) copied in. Crops keep
#: the pixels as published (no resampling) and keep the bundle small.
PHOTOS = (
    ("astronaut", (slice(30, 190), slice(150, 374))),
    ("coffee", (slice(100, 260), slice(150, 374))),
    ("chelsea", (slice(50, 210), slice(100, 324))),
)
#: The licence notes of ``skimage.data``'s docstrings for these photographs.
PHOTO_LICENSES = {
    "astronaut": "NASA Great Images database; no known copyright restrictions, public domain",
    "coffee": "courtesy of Pikolo Espresso Bar; CC0 by the photographer (Rachel Michetti)",
    "chelsea": "CC0 by the photographer (Stefan van der Walt)",
}
#: Synthetic welds (``refseg.synthetic.weld_image``): seeds and size.
WELD_SEEDS = (0, 1)
WELD_SHAPE = (96, 256)
#: The network part: input size, weight seed, Adam steps recorded.
NET_HW = (32, 64)
NET_SEED = 0
ADAM_STEPS = (1, 3)
#: Seed of the small float64 tensors of the op section.
OPS_SEED = 6
#: Arrays with more elements than this are stored as slices and statistics, not in full.
FULL_LIMIT = 1 << 17
#: Edge of the corner blocks stored of a large array (along each of its last two axes).
SLICE_EDGE = 16

# -- tolerances ----------------------------------------------------------------------------------
#: ``exact``: equal values. ``relmax``: |candidate - golden| <= rtol * max|golden| at every
#: element (max|golden| taken as 1 when the golden array is all zero).
TOLERANCES = {
    "exact": {
        "rule": "exact", "rtol": 0.0,
        "why": "integer data (input pixels, labels) and the binary maps of claim 1: a decision "
               "either agrees or it does not; any difference is a different edge or vote."},
    "float64": {
        "rule": "relmax", "rtol": 1e-9,
        "why": "float64 results of sums and products whose order an independent "
               "implementation may change (e.g. 0.299 R + 0.587 G + 0.114 B against "
               "(299 R + 587 G + 114 B) / 1000, separable against 2-D filters): rounding "
               "differences are ~1e-15 of the largest value; 1e-9 leaves six orders of "
               "headroom and still catches any change of formula, constant or border."},
    "float32": {
        "rule": "relmax", "rtol": 1e-4,
        "why": "float32 network activations after up to ~50 layers of sums of up to 18,432 "
               "products (3x3x2048); float32 rounding (6e-8) accumulated over that depth and "
               "a different GEMM blocking stays below ~1e-5 of the largest value (measured: "
               "refseg float32 against refseg float64 on the same weights, taps <= 8.1e-7, "
               "decoder layers <= 6.5e-7; refseg against Keras <= 1.4e-6 per layer); 1e-4 "
               "catches any wrong weight layout, "
               "padding or activation, which give errors of order 1."},
    "float32_grad": {
        "rule": "relmax", "rtol": 1e-3,
        "why": "float32 gradients and Adam moments: as float32 activations, plus the "
               "backward pass through every decoder layer, whose ReLU masks can flip at "
               "values within rounding of 0 (measured float32 against float64: gradients <= 1.9e-6, "
               "Adam moments <= 3.6e-5); 1e-3 of the largest value."},
    "adam_param": {
        "rule": "relmax", "rtol": 1e-3,
        "why": "weights after Adam steps: each step moves a weight by lr * m_hat / "
               "(sqrt(v_hat) + eps), about +-lr (1e-3) wherever |g| >> eps but with a slope "
               "of up to lr / eps = 1e4 in g where |g| is near eps (1e-7), so rounding-level "
               "gradient differences are amplified; biases start at 0, so their largest value "
               "is ~lr. Measured refseg float32 against float64: 3.6e-5; 1e-3 of the largest "
               "weight still catches a wrong update rule, bias correction or eps placement "
               "(errors of order 1 relative to lr)."},
}

#: How SHA-256 digests are taken.
HASH_RULE = ("sha256 of the array's bytes in C order, little-endian, in its dtype; for the "
             "network weights: for each key in sorted order, the UTF-8 key, a NUL byte, the "
             "dtype string (e.g. '<f4'), a NUL byte, the shape as comma-separated integers, a "
             "NUL byte, then the array's bytes as above")


def _canonical(array: np.ndarray) -> np.ndarray:
    array = np.asarray(array)
    # np.ascontiguousarray would turn a 0-d array into 1-d
    return np.asarray(array, dtype=array.dtype.newbyteorder("<"), order="C")


@implements("claim1.step2.extract", "claim4.propagation")
def array_sha256(array) -> str:
    """SHA-256 (hex) of an array's bytes in C order, little-endian (see :data:`HASH_RULE`).

    Parameters
    ----------
    array : array_like

    Returns
    -------
    str
    """
    return hashlib.sha256(_canonical(array).tobytes()).hexdigest()


@implements("claim2.backbones", "claim2.fusion")
def weights_sha256(weights: dict) -> str:
    """SHA-256 (hex) of a set of named weight arrays, keys in sorted order (see
    :data:`HASH_RULE`).

    Parameters
    ----------
    weights : dict of str to ndarray

    Returns
    -------
    str
    """
    digest = hashlib.sha256()
    for key in sorted(weights):
        array = _canonical(weights[key])
        digest.update(key.encode() + b"\0" + array.dtype.str.encode() + b"\0"
                      + ",".join(str(n) for n in array.shape).encode() + b"\0")
        digest.update(array.tobytes())
    return digest.hexdigest()


# -- building the bundle -------------------------------------------------------------------------
@dataclass
class _Bundle:
    arrays: dict = field(default_factory=dict)     # stored npz members
    entries: dict = field(default_factory=dict)    # manifest entries by array name
    keep: tuple = ()                               # patterns of arrays to keep whole
    kept: dict = field(default_factory=dict)       # copies of summary-stored arrays

    def add(self, name, array, tolerance, *, claim, function, paragraphs="", params=None,
            role="output", note="", also=()):
        array = np.asarray(array)
        if name in self.entries:
            raise AssertionError(f"golden: duplicate array name {name}")
        entry = {"shape": list(array.shape), "dtype": array.dtype.str,
                 "sha256": array_sha256(array), "role": role,
                 "tolerance": tolerance, "claim": claim, "paragraphs": paragraphs,
                 "function": function}
        if also:
            # further claim elements this array pins: the result of a whole step (the feature
            # map: the traversal, the extraction, the feature module), not only its last formula
            entry["also_pins"] = list(also)
        if params:
            entry["params"] = params
        if note:
            entry["note"] = note
        if array.size <= FULL_LIMIT:
            entry["storage"] = "full"
            self.arrays[name] = _canonical(array)
        else:
            entry["storage"] = "summary"
            if any(fnmatch.fnmatchcase(name, p) for p in self.keep):
                self.kept[name] = array.copy()
            entry["stats"] = _stats(array)
            entry["slices"] = []
            for i, index in enumerate(_corner_slices(array.shape)):
                key = f"{name}@slice{i}"
                self.arrays[key] = _canonical(array[tuple(slice(a, b) for a, b in index)])
                entry["slices"].append({"member": key, "index": [list(p) for p in index]})
        self.entries[name] = entry


def _corner_slices(shape):
    """The first and the last SLICE_EDGE x SLICE_EDGE block over the last two axes, whole
    leading axes (a 3x3 kernel's spatial axes) up to 3 elements."""
    first, last = [], []
    for axis, n in enumerate(shape):
        edge = SLICE_EDGE if axis >= len(shape) - 2 else 3
        first.append((0, min(n, edge)))
        last.append((max(0, n - edge), n))
    return [first, last]


def _stats(array) -> dict:
    a = np.asarray(array, dtype=np.float64)
    return {"sum": float(a.sum()), "abs_sum": float(np.abs(a).sum()),
            "l2": float(np.sqrt(np.square(a).sum())), "max_abs": float(np.abs(a).max())}


def _tol(kind):
    return {"name": kind, **TOLERANCES[kind]}


def _photos():
    try:
        import skimage
        from skimage import data
    except ImportError as exc:
        raise InputError("golden write needs scikit-image for its photographs "
                         f"(pip install scikit-image): {exc}") from None
    images, provenance = {}, {}
    for name, (rows, cols) in PHOTOS:
        full = getattr(data, name)()
        images[name] = np.ascontiguousarray(full[rows, cols])
        provenance[name] = {
            "source": f"skimage.data.{name}()", "skimage_version": skimage.__version__,
            "original_shape": list(full.shape), "original_sha256": array_sha256(full),
            "crop": {"rows": [rows.start, rows.stop], "cols": [cols.start, cols.stop]},
            "license": PHOTO_LICENSES[name]}
    return images, provenance


def _welds():
    from refseg import synthetic

    samples = {f"weld{s}": synthetic.weld_image(s, WELD_SHAPE) for s in WELD_SEEDS}
    provenance = {name: {"source": "refseg.synthetic.weld_image", "seed": s.seed,
                         "shape": list(WELD_SHAPE), "license": "synthetic, drawn by refseg"}
                  for name, s in samples.items()}
    return samples, provenance


def _claim1(bundle: _Bundle, name: str, rgb: np.ndarray):
    from refseg import features
    from refseg.features import STEP_CLAIMS
    from refseg.operators import OPERATORS

    r = features.extract(rgb)
    fn = "refseg.features.extract"
    params = {"sigma": r.params["sigma"], "border": r.params["border"],
              "gray_weights": r.params["gray_weights"], "operator_order": list(OPERATORS)}
    p = f"claim1/{name}"
    f64, exact = _tol("float64"), _tol("exact")
    bundle.add(f"{p}/gray", r.gray, f64, claim=STEP_CLAIMS["gray"], function=fn,
               paragraphs="[0077]-[0079]", params={"gray_weights": params["gray_weights"]})
    bundle.add(f"{p}/blurred", r.blurred, f64, claim=STEP_CLAIMS["blurred"], function=fn,
               paragraphs="[0080]-[0081]", params={"sigma": params["sigma"],
                                                  "border": params["border"]})
    for op in OPERATORS:
        claim = STEP_CLAIMS[op]
        bundle.add(f"{p}/response/{op}", r.responses[op], f64, claim=claim, function=fn,
                   paragraphs="[0082]-[0084]", note=(
                       "Sobel gradient magnitude" if op in ("canny", "sobel") else
                       "Prewitt gradient magnitude" if op == "prewitt" else
                       "3x3 Laplacian of the blurred image"))
        for key, value in r.thresholds[op].items():
            bundle.add(f"{p}/threshold/{op}/{key}", np.float64(value), f64, claim=claim,
                       function=fn, paragraphs="[0082]-[0084]",
                       params=r.params["threshold_rules"][op])
        bundle.add(f"{p}/edges/{op}", r.edges[op], exact, claim=claim, function=fn,
                   paragraphs="[0082]-[0084]", note="binary edge map, 1 on an edge")
    bundle.add(f"{p}/mean_image", r.mean_image, f64, claim=STEP_CLAIMS["mean_image"],
               function=fn, paragraphs="[0085]-[0087]")
    for key, paragraphs in (("std", "[0088]-[0090]"), ("mean", "[0091]-[0092]"),
                            ("cv", "[0091]-[0096]"), ("weights", "[0099]-[0101]")):
        claim = STEP_CLAIMS.get(key, STEP_CLAIMS["cv"])
        bundle.add(f"{p}/{key}", r.vector(key), f64, claim=claim, function=fn,
                   paragraphs=paragraphs, params={"order": list(OPERATORS)})
    bundle.add(f"{p}/intermediate_cv", np.float64(r.intermediate_cv), f64,
               claim=STEP_CLAIMS["intermediate_cv"], function=fn, paragraphs="[0097]-[0098]")
    bundle.add(f"{p}/final_weight", r.final_weight, f64, claim=STEP_CLAIMS["final_weight"],
               function=fn, paragraphs="[0102]-[0116]",
               params={"edge_value": r.params["edge_value"],
                       "non_edge_value": r.params["non_edge_value"],
                       "vote_offset": r.params["vote_offset"]})
    bundle.add(f"{p}/feature_map", r.feature_map, exact, claim=STEP_CLAIMS["feature_map"],
               function=fn, paragraphs="[0117]-[0119]", params={"rule": "F >= 0 -> 1"},
               also=("claim1.step2.traverse", "claim1.step2.extract", "claim5.feature_module"))


def _ops(bundle: _Bundle):
    from refseg import autograd as ag
    from refseg.autograd import Tensor

    rng = np.random.default_rng(OPS_SEED)
    f64 = _tol("float64")

    def leaf(shape, low=-1.0, high=1.0):
        return Tensor(rng.uniform(low, high, shape), requires_grad=True)

    def record(op, inputs: dict, output, params, claim, paragraphs, upstream=True):
        fn = f"refseg.autograd.{op.split('_inference')[0].split('_training')[0]}"
        for key, t in inputs.items():
            data = t.data if isinstance(t, Tensor) else t
            bundle.add(f"ops/{op}/{key}", data, f64, claim=claim, function=fn, role="input",
                       paragraphs=paragraphs, params=params)
        dy = rng.standard_normal(output.shape) if upstream else None
        if dy is not None:
            bundle.add(f"ops/{op}/dy", dy, f64, claim=claim, function=fn, role="input",
                       paragraphs=paragraphs, note="upstream gradient given to backward")
        bundle.add(f"ops/{op}/y", output.data, f64, claim=claim, function=fn,
                   paragraphs=paragraphs, params=params)
        output.backward(dy)
        for key, t in inputs.items():
            if isinstance(t, Tensor) and t.requires_grad:
                bundle.add(f"ops/{op}/d{key}", t.grad, f64, claim="claim4.propagation",
                           function=fn, paragraphs="[0129]-[0132]", params=params,
                           note=f"gradient of sum(y * dy) with respect to {key}")

    conv = "claim4.propagation"
    x, w, b = leaf((2, 5, 6, 3)), leaf((3, 3, 3, 4)), leaf((4,))
    params = {"strides": 2, "padding": "same", "kernel_layout": "HWIO"}
    record("conv2d", {"x": x, "kernel": w, "bias": b},
           ag.conv2d(x, w, b, strides=2, padding="same"), params, conv, "[0134]")
    x, w, b = leaf((2, 4, 5, 3)), leaf((3, 3, 2, 3)), leaf((2,))
    params = {"strides": 2, "padding": "same", "kernel_layout": "(kh, kw, out, in)"}
    record("conv2d_transpose", {"x": x, "kernel": w, "bias": b},
           ag.conv2d_transpose(x, w, b, strides=2, padding="same"), params, conv, "[0146]")
    x, w, b = leaf((2, 5, 6, 3)), leaf((3, 3, 3, 1)), leaf((3,))
    params = {"strides": 1, "padding": "same", "kernel_layout": "(kh, kw, C, 1)"}
    record("depthwise_conv2d", {"x": x, "kernel": w, "bias": b},
           ag.depthwise_conv2d(x, w, b, strides=1, padding="same"), params, conv, "[0226]")
    x = leaf((2, 7, 8, 3))
    params = {"pool_size": 3, "strides": 2, "padding": "valid"}
    record("max_pool2d", {"x": x}, ag.max_pool2d(x, 3, 2, "valid"), params, conv, "[0137]")
    for training in (True, False):
        x, gamma, beta = leaf((2, 4, 5, 3)), leaf((3,), 0.5, 1.5), leaf((3,))
        moving_mean = rng.uniform(-0.5, 0.5, 3)
        moving_variance = rng.uniform(0.5, 2.0, 3)
        op = "batch_norm_training" if training else "batch_norm_inference"
        params = {"training": training, "epsilon": 1e-3, "momentum": 0.99}
        inputs = {"x": x, "gamma": gamma, "beta": beta,
                  "moving_mean": moving_mean.copy(), "moving_variance": moving_variance.copy()}
        y = ag.batch_norm(x, gamma, beta, moving_mean, moving_variance, training=training,
                          epsilon=1e-3, momentum=0.99)
        record(op, inputs, y, params, conv, "[0135]")
        if training:
            for key, value in (("moving_mean", moving_mean), ("moving_variance",
                                                              moving_variance)):
                bundle.add(f"ops/{op}/{key}_updated", value, f64, claim=conv,
                           function="refseg.autograd.batch_norm", paragraphs="[0135]",
                           params=params, note="moving statistic after the update")
    x = leaf((2, 3, 4, 5), -2.0, 8.0)
    record("relu", {"x": x}, ag.relu(x), {}, conv, "[0140]")
    x = leaf((2, 3, 4, 5), -2.0, 8.0)
    record("relu6", {"x": x}, ag.relu6(x), {"max_value": 6.0}, conv, "[0140]")
    x = leaf((2, 3, 4, 3), -3.0, 3.0)
    record("softmax", {"x": x}, ag.softmax(x), {"axis": -1}, conv, "[0194]-[0195]")
    p = Tensor(rng.dirichlet(np.ones(3), (2, 3, 4)), requires_grad=True)
    labels = rng.integers(0, 3, (2, 3, 4)).astype(np.int64)
    record("categorical_crossentropy", {"probabilities": p, "labels": labels},
           ag.categorical_crossentropy(p, labels),
           {"labels": "integer classes", "reduction": "mean over N*H*W pixels"},
           "claim4.update", "[0242]-[0244]", upstream=False)
    x = leaf((2, 3, 4, 2))
    padding = ((1, 2), (0, 1))
    record("zero_pad2d", {"x": x}, ag.zero_pad2d(x, padding), {"padding": [[1, 2], [0, 1]]},
           conv, "[0137]")


def _thread_limits(threads):
    """A context that pins BLAS/OpenMP threads (threadpoolctl, an optional package: without
    it the network arrays could depend on the thread count, so golden write refuses)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        raise InputError("golden write needs threadpoolctl to pin the BLAS threads of the "
                         "network part (pip install threadpoolctl, or the crosscheck "
                         "extra)") from None
    return threadpool_limits(limits=threads)


def _network(bundle: _Bundle, welds) -> dict:
    from refseg import autograd as ag
    from refseg import inputs
    from refseg.autograd import Tensor, no_grad
    from refseg.models import ResMobileNet
    from refseg.models.decoder import DECODER
    from refseg.optim import Adam

    f32, grad, exact = _tol("float32"), _tol("float32_grad"), _tol("exact")
    samples = list(welds.values())
    x = np.stack([inputs.network_input(s.rgb, NET_HW) for s in samples])
    labels = np.stack([inputs.resize_labels(s.classes, NET_HW) for s in samples])
    weights = ResMobileNet(NET_HW, seed=NET_SEED).weights()
    # computed in float64 from the float32 weights and input, stored rounded to float32: the
    # golden values are then the float32-rounded exact results, not one float32 summation
    # order (see the manifest's network.precision)
    model = ResMobileNet(NET_HW, seed=NET_SEED, dtype=np.float64)
    model.set_weights({k: v.astype(np.float64) for k, v in weights.items()})
    f32_ = np.float32
    info = {
        "input_hw": list(NET_HW), "seed": NET_SEED,
        "dtype": "float32 weights and input; computed in float64",
        "weights_sha256": weights_sha256(weights), "weights_count": len(weights),
        "weights_numbers": int(sum(w.size for w in weights.values())),
        "regenerate": (f"refseg.models.ResMobileNet({tuple(NET_HW)}, seed={NET_SEED})"
                       ".weights(), or: refseg golden weights DIR OUT.npz (keys = Keras "
                       "weight paths)"),
        "batch_norm": "Keras' initial statistics (moving mean 0, variance 1), not calibrated: "
                      "calibrating on two 32x64 images (4 values per channel at the deepest "
                      "level) makes the network ill-conditioned (float32 and float64 taps "
                      "then differ by 28 %); uncalibrated they agree to 8e-7. MobileNetV2's "
                      "deep taps are therefore tiny (block_16_project ~1e-11); relmax "
                      "tolerances are per array, so they are still checked.",
        "precision": "computed in float64 from the float32 weights and input (weights cast "
                     "up, Adam's state in float64), stored rounded to float32: the reference "
                     "is the float32-rounded exact result, independent of any one float32 "
                     "summation order. refseg's own float32 path differs from it by <= 8e-7 "
                     "(forward) and <= 2e-6 (gradients) of the largest value with 2 BLAS "
                     "threads; with 1 BLAS thread its float32 decoder gradients of the "
                     "ResNet50V2 branch move by 1-2 %: with random weights and zero biases "
                     "many ReLU inputs are mathematically 0, and float32 rounding of a "
                     "different summation order gives them either sign, flipping ReLU masks "
                     "(diagnosed: the forward pass decides it, the backward pass does not); "
                     "a float32 reference would bake one summation order in",
        "threads": "the network part runs with BLAS and OpenMP pinned to 1 thread "
                   "(threadpoolctl) so that the bundle is byte-identical whatever "
                   "OMP_NUM_THREADS / OPENBLAS_NUM_THREADS say",
        "images": [f"weld{s}" for s in WELD_SEEDS],
    }
    fn_in = "refseg.inputs.network_input"
    bundle.add("net/input", x, exact, claim="claim1.step2.dataset", function=fn_in,
               role="input", paragraphs="[0075], [0121], [0203]",
               params={"images": info["images"], "kind": "feature", "input_hw": list(NET_HW)})
    bundle.add("net/labels", labels, exact, claim="claim1.step2.dataset",
               function="refseg.inputs.resize_labels", role="input",
               paragraphs="[0261]-[0263]", note="0 contour, 1 inside, 2 outside")
    taps = model.taps(x)
    for name, value in taps.items():
        bundle.add(f"net/tap/{name}", value.astype(f32_), f32, claim="claim2.taps",
                   function="refseg.models.ResMobileNet.taps", paragraphs="[0145], [0169]",
                   also=("claim2.backbones",))
    names = [layer.name for layer in DECODER]
    with no_grad():
        given = {name: Tensor(taps[name]) for name in model.decoder_inputs}
        outputs = model.graph.run(given, [*names, model.OUTPUT])
    for layer in DECODER:
        bundle.add(f"net/layer/{layer.name}", outputs[layer.name].data.astype(f32_), f32,
                   claim="claim2.fusion", function="refseg.models.ResMobileNet.decode",
                   paragraphs=layer.paragraph,
                   params={"op": layer.op, "sources": list(layer.sources),
                           "filters": layer.filters, "stride": layer.stride,
                           "activation": layer.activation})
    bundle.add("net/prediction", outputs[model.OUTPUT].data.astype(f32_), f32,
               claim="claim2.fusion",
               function="refseg.models.ResMobileNet.decode", paragraphs="[0194]-[0195]",
               params={"classes": ["contour", "inside", "outside"]},
               also=("claim3.formula", "claim1.step4.predict", "claim5.output_module"))

    params = model.trainable_parameters()
    optimizer = Adam(params)
    losses = []
    for step in range(1, max(ADAM_STEPS) + 1):
        optimizer.zero_grad()
        loss = ag.categorical_crossentropy(model.decode(taps), labels)
        losses.append(loss.data.copy())
        loss.backward()
        if step == 1:
            bundle.add("net/loss", loss.data.astype(f32_), f32, claim="claim4.update",
                       function="refseg.autograd.categorical_crossentropy",
                       paragraphs="[0242]-[0244]",
                       params={"reduction": "mean over N*H*W pixels", "labels": "net/labels"})
            for p in params:
                bundle.add(f"net/grad/{p.name}", p.grad.astype(f32_), grad,
                           claim="claim4.propagation",
                           function="refseg.autograd.Tensor.backward",
                           paragraphs="[0129]-[0132], [0241]")
        optimizer.step()
        if step in ADAM_STEPS:
            hyper = {"learning_rate": optimizer.learning_rate, "beta_1": optimizer.beta_1,
                     "beta_2": optimizer.beta_2, "epsilon": optimizer.epsilon,
                     "iterations": step, "update": "torch form: eps added to sqrt(v_hat)"}
            for p in params:
                for key, value, tol in (("param", p.data, _tol("adam_param")),
                                        ("m", optimizer.m[p.name], grad),
                                        ("v", optimizer.v[p.name], grad)):
                    bundle.add(f"net/adam{step}/{key}/{p.name}", value.astype(f32_), tol,
                               claim="claim4.update", function="refseg.optim.Adam.step",
                               paragraphs="[0246]-[0255]", params=hyper)
    bundle.add("net/adam/losses", np.array(losses, dtype=np.float32), f32,
               claim="claim4.update", function="refseg.optim.Adam.step",
               paragraphs="[0242]-[0255]", note="loss before each Adam step, steps 1..3",
               also=("claim1.step3.train", "claim5.training_module"))
    return info


def _versions() -> dict:
    import PIL

    import refseg

    out = {"refseg": refseg.__version__, "numpy": np.__version__,
           "python": platform.python_version(), "pillow": PIL.__version__,
           "compiler": sysconfig.get_config_var("CC"), "machine": platform.machine(),
           "system": platform.system()}
    try:
        import skimage

        out["skimage"] = skimage.__version__
    except ImportError:
        pass
    return out


def _write_npz(path: Path, arrays: dict):
    """An .npz with fixed member timestamps and order: the same arrays give the same bytes."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        for name in sorted(arrays):
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, arrays[name], allow_pickle=False)
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, buffer.getvalue(), compresslevel=6)


@dataclass(frozen=True)
class WriteResult:
    """What :func:`write_bundle` wrote: the folder, the number of arrays, the bytes of
    ``arrays.npz`` and the seconds taken."""

    folder: Path
    arrays: int
    npz_bytes: int
    seconds: float
    kept: dict = field(default_factory=dict)


@implements("claim1.step2.extract", "claim2.fusion", "claim4.propagation", "claim4.update")
def build_bundle(network_threads: int | None = 1, keep=()) -> tuple[dict, dict, dict]:
    """Compute every golden array and the manifest, in memory.

    Parameters
    ----------
    network_threads : int or None
        Threads for BLAS and OpenMP while the network part runs (None: leave as they are).
    keep : sequence of str
        Shell patterns: copies of the matching arrays stored as slices are returned whole
        (for checking refseg against its own bundle).

    Returns
    -------
    manifest : dict
    arrays : dict of str to ndarray
        The members of ``arrays.npz``.
    kept : dict of str to ndarray
        The whole arrays named by ``keep`` that the bundle stores as slices.

    Raises
    ------
    InputError
        scikit-image is not importable.

    Notes
    -----
    1. Inputs: three photographs of ``skimage.data`` (crops, :data:`PHOTOS`) and the
       synthetic welds of :data:`WELD_SEEDS`.
    2. Claim 1 on each: every intermediate of :func:`refseg.features.extract`.
    3. The network at :data:`NET_HW`: seeded weights (not stored: seed and SHA-256),
       batch norm calibrated on the input, the ten taps, every decoder layer, the prediction,
       the loss, the decoder gradients, Adam after :data:`ADAM_STEPS` steps.
    4. Each autograd op on small float64 tensors: inputs, output, gradients.

    References
    ----------
    Claims 1-4; [0075]-[0119], [0122]-[0197], [0242]-[0255].
    """
    photos, provenance = _photos()
    welds, weld_provenance = _welds()
    provenance.update(weld_provenance)
    bundle = _Bundle(keep=tuple(keep))
    images = {**photos, **{name: s.rgb for name, s in welds.items()}}
    for name, rgb in images.items():
        bundle.add(f"input/{name}", rgb, _tol("exact"), claim="claim1.step1.acquire",
                   function="skimage.data" if name in photos else "refseg.synthetic.weld_image",
                   role="input", paragraphs="[0076]", params=provenance[name],
                   also=("claim5.acquisition_module",))
        _claim1(bundle, name, rgb)
    if network_threads is None:
        network = _network(bundle, welds)
    else:
        with _thread_limits(network_threads):
            network = _network(bundle, welds)
    network["network_threads"] = network_threads
    _ops(bundle)
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "arrays_file": ARRAYS, "versions": _versions(), "hash_rule": HASH_RULE,
        "tolerance_rules": {
            "exact": "candidate == golden at every element",
            "relmax": "|candidate - golden| <= rtol * max|golden| at every element (max|golden| "
                      "is taken as 1 when the golden array is all zero); for arrays stored "
                      "as slices (storage 'summary'), the slices are checked so and the "
                      "statistics sum, abs_sum, l2, max_abs within rtol of abs_sum, abs_sum, l2 "
                      "and max_abs"},
        "tolerances": TOLERANCES,
        "candidate": "an .npz whose keys are the array names below; arrays of role 'input' "
                     "may be left out (they are checked exactly when present); every "
                     "'output' array must be present with the same shape and dtype",
        "inputs": provenance, "network": network,
        "arrays": dict(sorted(bundle.entries.items())),
    }
    return manifest, bundle.arrays, bundle.kept


@implements("claim1.step2.extract", "claim2.fusion", "claim4.update")
def write_bundle(folder, network_threads: int | None = 1, keep=()) -> WriteResult:
    """Write a golden bundle (``manifest.json`` and ``arrays.npz``) into ``folder``.

    Parameters
    ----------
    folder : str or Path
        Created, or replaced when it holds an earlier bundle; a folder with other files in it
        is refused.
    network_threads, keep
        See :func:`build_bundle`.

    Returns
    -------
    WriteResult

    Notes
    -----
    The folder is staged beside its destination and renamed into place when both files are
    complete. The same refseg on the same machine writes byte-identical files.

    References
    ----------
    Claims 1-4.
    """
    from refseg.imageio import StagedFolders

    start = time.perf_counter()
    folder = Path(os.path.abspath(folder))
    if folder.exists():
        if not folder.is_dir():
            raise InputError(f"{folder}: exists and is not a folder")
        others = sorted(p.name for p in folder.iterdir() if p.name not in (MANIFEST, ARRAYS))
        if others or (any(folder.iterdir()) and not (folder / MANIFEST).is_file()):
            raise InputError(f"{folder}: exists and holds files that are not a golden bundle "
                             f"({', '.join(others[:3]) or 'no manifest.json'}); choose another "
                             "folder")
    manifest, arrays, kept = build_bundle(network_threads, keep)
    staging = StagedFolders(folder.parent)
    try:
        target = staging.folder(folder.name)
        _write_npz(target / ARRAYS, arrays)
        manifest["arrays_file_sha256"] = hashlib.sha256(
            (target / ARRAYS).read_bytes()).hexdigest()
        (target / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n",
                                       encoding="utf-8")
        staging.publish()
    except BaseException:
        staging.abandon()
        raise
    return WriteResult(folder, len(manifest["arrays"]), (folder / ARRAYS).stat().st_size,
                       time.perf_counter() - start, kept)


# -- checking a candidate ------------------------------------------------------------------------
@dataclass
class CheckRow:
    """The comparison of one array: status ``pass``/``fail``/``missing``, the reason of a
    failure, the largest absolute and relative (to the tolerance's scale) errors, the first
    position beyond the tolerance (or, for a pass, the first that differs at all), and whether
    the candidate is bit-identical to refseg's array."""

    name: str
    status: str
    reason: str = ""
    max_abs: float | None = None
    max_rel: float | None = None
    position: tuple | None = None
    identical: bool = False

    def as_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "reason": self.reason,
                "max_abs": self.max_abs, "max_rel": self.max_rel,
                "position": None if self.position is None else list(self.position),
                "identical": self.identical}


@dataclass
class CheckReport:
    """Every row of a check, and the candidate keys the manifest does not name."""

    bundle: Path
    candidate: Path
    rows: list
    unexpected: list

    @property
    def passed(self) -> bool:
        return all(r.status == "pass" for r in self.rows)

    def as_dict(self) -> dict:
        return {"bundle": str(self.bundle), "candidate": str(self.candidate),
                "passed": self.passed, "checked": len(self.rows),
                "failed": sum(r.status != "pass" for r in self.rows),
                "unexpected": self.unexpected, "rows": [r.as_dict() for r in self.rows]}

    def text(self) -> str:
        width = max([len(r.name) for r in self.rows] + [5])
        lines = [f"{'array':<{width}}  status   max abs err  max rel err  first diff  note"]
        for r in self.rows:
            ma = "" if r.max_abs is None else f"{r.max_abs:.3e}"
            mr = "" if r.max_rel is None else f"{r.max_rel:.3e}"
            pos = "" if r.position is None else str(list(r.position)).replace(" ", "")
            note = r.reason or ("bit-identical" if r.identical else "")
            lines.append(f"{r.name:<{width}}  {r.status:<7}  {ma:>11}  {mr:>11}  {pos:<10}  "
                         f"{note}")
        failed = sum(r.status != "pass" for r in self.rows)
        lines.append(f"{len(self.rows)} arrays checked: {len(self.rows) - failed} passed, "
                     f"{failed} failed or missing" + (
                         f"; {len(self.unexpected)} candidate arrays not in the manifest "
                         f"(ignored): {', '.join(self.unexpected[:5])}"
                         if self.unexpected else ""))
        return "\n".join(lines)


@implements("claim1.step2.extract", "claim4.propagation")
def read_bundle(folder) -> tuple[dict, dict]:
    """The manifest and stored arrays of a bundle.

    Parameters
    ----------
    folder : str or Path

    Returns
    -------
    manifest : dict
    arrays : dict of str to ndarray

    Raises
    ------
    InputError
        Missing or unreadable files, another format or a newer format version.
    """
    folder = Path(folder)
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{folder}: no {MANIFEST}; not a golden bundle") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"{folder / MANIFEST}: not readable JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise InputError(f"{folder / MANIFEST}: not a {FORMAT} manifest")
    if manifest.get("format_version", 0) > FORMAT_VERSION:
        raise InputError(f"{folder / MANIFEST}: format version "
                         f"{manifest.get('format_version')} is newer than this refseg "
                         f"reads ({FORMAT_VERSION})")
    arrays = _read_npz(folder / manifest.get("arrays_file", ARRAYS), "bundle arrays")
    return manifest, arrays


def _read_npz(path: Path, what: str) -> dict:
    if not path.is_file():
        raise InputError(f"{path}: no such file ({what})")
    with open(path, "rb") as f:
        head = f.read(4)
    if head != b"PK\x03\x04":
        raise InputError(f"{path}: not an .npz archive ({what})")
    arrays = {}
    try:
        with np.load(path, allow_pickle=False) as npz:
            for key in npz.files:
                try:
                    arrays[key] = npz[key]
                except ValueError as exc:
                    arrays[key] = exc  # object arrays: reported per array
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise InputError(f"{path}: not a readable .npz archive ({what}: {exc})") from None
    return arrays


def _first(mask: np.ndarray):
    flat = np.flatnonzero(mask)
    if flat.size == 0:
        return None
    return tuple(int(i) for i in np.unravel_index(flat[0], mask.shape))


def _compare(golden: np.ndarray, candidate: np.ndarray, tolerance: dict, offset=None,
             scale=None):
    """(max_abs, max_rel, first failing position or None, first differing position)."""
    g = golden.astype(np.float64)
    c = candidate.astype(np.float64)
    diff = np.abs(c - g)
    if golden.size == 0:
        return 0.0, 0.0, None, None
    scale = (float(np.abs(g).max()) if scale is None else scale) or 1.0
    max_abs = float(diff.max())
    allowed = 0.0 if tolerance["rule"] == "exact" else tolerance["rtol"] * scale
    bad = _first(diff > allowed)
    differ = _first(diff > 0)
    if offset is not None:
        bad = None if bad is None else tuple(a + o for a, o in zip(bad, offset))
        differ = None if differ is None else tuple(a + o for a, o in zip(differ, offset))
    return max_abs, max_abs / scale, bad, differ


def _check_one(name, entry, stored, value) -> CheckRow:
    if isinstance(value, Exception):
        return CheckRow(name, "fail", f"unreadable without pickles ({value})")
    shape, dtype = tuple(entry["shape"]), np.dtype(entry["dtype"])
    if value.dtype != dtype:
        return CheckRow(name, "fail", f"dtype {value.dtype}, expected {dtype}")
    if value.shape != shape:
        return CheckRow(name, "fail", f"shape {value.shape}, expected {shape}")
    if value.dtype.kind in "fc":
        finite = np.isfinite(value)
        if not finite.all():
            where = _first(~finite)
            kind = "NaN" if np.isnan(value[where]) else "infinite value"
            return CheckRow(name, "fail", f"{kind} at {list(where)}", position=where)
    tolerance = entry["tolerance"]
    identical = array_sha256(value.astype(dtype, copy=False)) == entry["sha256"]
    if entry["storage"] == "full":
        parts = [(stored[name], value, None)]
        scale = None
    else:
        parts, scale = [], entry["stats"]["max_abs"]
        for part in entry["slices"]:
            index = tuple(slice(a, b) for a, b in part["index"])
            parts.append((stored[part["member"]], value[index],
                          tuple(a for a, _ in part["index"])))
    max_abs = max_rel = 0.0
    bad = differ = None
    for golden, candidate, offset in parts:
        a, r, b, d = _compare(golden, candidate, tolerance, offset, scale)
        max_abs, max_rel = max(max_abs, a), max(max_rel, r)
        bad = bad or b
        differ = differ or d
    if bad is not None:
        return CheckRow(name, "fail", f"beyond {tolerance['rule']} tolerance "
                        f"{tolerance['rtol']:g} at {list(bad)}", max_abs, max_rel, bad)
    if entry["storage"] == "summary":
        got, want = _stats(value), entry["stats"]
        for key in ("sum", "abs_sum", "l2", "max_abs"):
            scale = want["abs_sum" if key == "sum" else key] or 1.0
            if abs(got[key] - want[key]) > tolerance["rtol"] * scale:
                return CheckRow(name, "fail", f"statistic {key} {got[key]:.9g}, expected "
                                f"{want[key]:.9g} (rtol {tolerance['rtol']:g})",
                                max_abs, max_rel, None)
    return CheckRow(name, "pass", "", max_abs, max_rel, None if identical else differ,
                    identical)


@implements("claim1.step2.extract", "claim2.fusion", "claim4.propagation", "claim4.update")
def check_bundle(folder, candidate, select=None) -> CheckReport:
    """Compare a candidate ``.npz`` with a golden bundle, array by array.

    Parameters
    ----------
    folder : str or Path
        The bundle.
    candidate : str or Path
        An ``.npz`` keyed by the manifest's array names; read with ``allow_pickle=False``.
    select : list of str or None
        Shell patterns (``claim1/*``): check only the arrays whose names match one of them.

    Returns
    -------
    CheckReport
        One row per checked array; ``passed`` is False on any failure or missing output.

    Notes
    -----
    An array fails on: another dtype or shape, a NaN or infinite value, an element beyond its
    tolerance (the first such position is reported), or, for arrays stored as slices, a
    statistic beyond it. Output arrays missing from the candidate fail as ``missing``; input
    arrays may be left out.
    """
    manifest, stored = read_bundle(folder)
    values = _read_npz(Path(candidate), "candidate")
    entries = manifest["arrays"]
    names = [n for n in entries
             if not select or any(fnmatch.fnmatchcase(n, p) for p in select)]
    if select and not names:
        raise InputError(f"--select {' '.join(select)}: matches no array of the manifest")
    rows = []
    for name in names:
        entry = entries[name]
        if name not in values:
            if entry["role"] == "output":
                rows.append(CheckRow(name, "missing", "not in the candidate"))
            continue
        rows.append(_check_one(name, entry, stored, values[name]))
    unexpected = sorted(set(values) - set(entries))
    return CheckReport(Path(folder), Path(candidate), rows, unexpected)


@implements("claim2.backbones", "claim2.fusion")
def export_weights(folder, out) -> str:
    """Regenerate the network weights a bundle was computed with, verify their SHA-256 and
    write them as an ``.npz`` keyed by Keras weight path.

    Parameters
    ----------
    folder : str or Path
        The bundle.
    out : str or Path
        The ``.npz`` to write.

    Returns
    -------
    str
        The SHA-256 of the weights.

    Raises
    ------
    InputError
        The regenerated weights differ from the manifest's hash.
    """
    from refseg.imageio import write_npz
    from refseg.models import ResMobileNet

    manifest, _ = read_bundle(folder)
    net = manifest["network"]
    model = ResMobileNet(tuple(net["input_hw"]), seed=net["seed"])
    weights = model.weights()
    digest = weights_sha256(weights)
    if digest != net["weights_sha256"]:
        raise InputError(f"{folder}: the regenerated weights hash to {digest[:16]}..., the "
                         f"manifest says {net['weights_sha256'][:16]}...; this refseg does "
                         "not regenerate them")
    write_npz(Path(out), **{k: np.ascontiguousarray(v) for k, v in weights.items()})
    return digest


@implements("claim5.output_module")
def pinned_elements(manifest: dict) -> dict[str, list[str]]:
    """{claim element: the names of the arrays that pin it} of a bundle's manifest (each
    array's ``claim`` and its ``also_pins``)."""
    out: dict[str, list[str]] = {}
    for name, entry in manifest["arrays"].items():
        for claim in [entry["claim"], *entry.get("also_pins", [])]:
            out.setdefault(claim, []).append(name)
    return out
