"""Producing a golden bundle: the inputs, claim 1 on each, the network, the autograd ops.

References: claims 1-4; [0075]-[0119], [0122]-[0197], [0242]-[0255].
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import sysconfig
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from refseg import autograd as ag
from refseg import publish
from refseg.images import read_image
from refseg._version import __version__
from refseg.autograd import Tensor, no_grad
from refseg.autograd.optim import Adam
from refseg.claim1 import features
from refseg.claim1 import operators as ops
from refseg.claim1.features import STEP_CLAIMS
from refseg.claim1.operators import OPERATORS
from refseg.data import inputs, synthetic
from refseg.errors import InputError
from refseg.golden.flagged import flagged_section
from refseg.golden.own import read_user_images
from refseg.golden.schema import SCHEMA, schema, schema_bytes
from refseg.golden.format import (ARRAYS, BUNDLE_FILES, FORMAT, FORMAT_MINOR, FORMAT_VERSION,
                                  HASH_RULE,
                                  MANIFEST, READINGS, TOLERANCES, WEIGHTS, BundleBuilder,
                                  array_sha256, read_bundle, read_weights, tolerance,
                                  weights_sha256, write_deterministic_npz)
from refseg.models import ResMobileNet
from refseg.models.parts import DECODER
from refseg.threads import limit_threads
from refseg.registry import load_registry

INFRASTRUCTURE = "golden files: producing a bundle"

#: The three photographs: crops of ``skimage.data`` images shipped in ``photos/`` beside this
#: module, with their provenance and licences (``photos/photos.json``, ``photos/LICENSES.md``).
PHOTOS = ("astronaut", "coffee", "chelsea")
PHOTO_FOLDER = Path(__file__).resolve().parent / "photos"
#: Synthetic welds (``refseg.data.synthetic.weld_image``): seeds and size.
WELD_SEEDS = (0, 1)
WELD_SHAPE = (96, 256)
#: The network part: input size, weight seed, Adam steps recorded.
NET_HW = (32, 64)
NET_SEED = 0
ADAM_STEPS = (1, 3)
#: Seed of the small float64 tensors of the op section.
OPS_SEED = 6
def _photos():
    """The shipped photographs as (rows, cols, 3) uint8 arrays, checked against the SHA-256
    that ``photos.json`` records for each crop, and their provenance."""
    records = json.loads((PHOTO_FOLDER / "photos.json").read_text(encoding="utf-8"))
    images, provenance = {}, {}
    for name in PHOTOS:
        path = PHOTO_FOLDER / f"{name}.png"
        rgb = read_image(path).pixels
        record = dict(records[name])
        if array_sha256(rgb) != record.pop("crop_sha256"):
            raise InputError(f"{path}: the photograph differs from the one photos.json "
                             "describes (SHA-256); reinstall refseg")
        images[name], provenance[name] = rgb, record
    return images, provenance


def _welds():
    samples = {f"weld{s}": synthetic.weld_image(s, WELD_SHAPE) for s in WELD_SEEDS}
    provenance = {name: {"source": "refseg.data.synthetic.weld_image", "seed": s.seed,
                         "shape": list(WELD_SHAPE), "license": "synthetic, drawn by refseg"}
                  for name, s in samples.items()}
    return samples, provenance


#: How Otsu's threshold is taken (R-binary), for the manifest: every automatic threshold.
OTSU_RULE = {
    "bins": ops.OTSU_BINS,
    "range": "[min, max] of the values; when max == min the threshold is min (no edge)",
    "bin_of_value": "k = int((v - min) * (bins / (max - min))), clamped to [0, bins - 1] "
                    "(int truncates; the factor bins / (max - min) is computed first)",
    "bin_centre": "min + (k + 0.5) * ((max - min) / bins)",
    "criterion": "for each split after bin k (k = 0 .. bins - 2): w0 * w1 * (m0 - m1)^2, w0, "
                 "w1 the value counts below and above the split, m0, m1 their means taken "
                 "from the bin centres",
    "ties": "the first k of largest criterion",
    "threshold": "the centre of bin k",
}
_GRADIENT = {
    "gx": "3x3 correlation of the blurred image with KX (positive where intensity rises "
          "towards higher column index)",
    "gy": "3x3 correlation with KX transposed (positive towards higher row index)",
    "magnitude": "sqrt(gx^2 + gy^2), float64",
    "border": "reflect-101 (dcb|abcd|cba)",
}
_KERNELS = {"sobel": ops.SOBEL_X.tolist(), "prewitt": ops.PREWITT_X.tolist()}


def _claim1_params(r) -> dict:
    """Every parameter of each claim-1 step, for the manifest (R-binary, R-canny, R-log)."""
    sobel = {"KX": _KERNELS["sobel"], **_GRADIENT}
    canny = {
        "gradient": sobel,
        "low": "threshold/canny/low = otsu(Sobel magnitude)", "otsu": OTSU_RULE,
        "high": f"threshold/canny/high = {ops.CANNY_HIGH_RATIO:g} * low",
        "high_ratio": ops.CANNY_HIGH_RATIO,
        "nms_sector_tangents": [ops.TAN_22_5, ops.TAN_67_5],
        "non_maximum_suppression": (
            "a candidate needs magnitude m > low. With ax = |gx|, ay = |gy|: if ay < t1 * ax "
            "(t1 = tan 22.5 deg = sqrt(2) - 1) compare with the pixels left (column - 1) and "
            "right (column + 1): kept when m > left and m >= right; else if ay > t2 * ax "
            "(t2 = tan 67.5 deg = sqrt(2) + 1) compare up (row - 1) and down (row + 1): "
            "m > up and m >= down; else diagonal: if (gx < 0) == (gy < 0) compare (row - 1, "
            "column - 1) and (row + 1, column + 1), otherwise (row - 1, column + 1) and "
            "(row + 1, column - 1), strictly (> both). Magnitudes outside the image are 0."),
        "hysteresis": ("8-connectivity: a kept pixel with magnitude > high is an edge, and so "
                       "is every kept pixel 8-connected to one through kept pixels"),
        "smoothing": "none of its own: the blurred image is Canny's smoothing",
    }
    log = {
        "kernel": ops.LAPLACE_4.tolist(),
        "response": "3x3 correlation of the blurred image with the 4-neighbour Laplacian "
                    "kernel, reflect-101 border (no second Gaussian)",
        "threshold": "threshold/log/slope = jump_ratio * otsu(|response|), the ratio included",
        "jump_ratio": ops.LOG_JUMP_RATIO, "otsu": OTSU_RULE,
        "zero_crossing": (
            "neighbours inside the image only (up, down, left, right). A pixel with response "
            "r < 0 is an edge when some 4-neighbour n has n > 0 and n - r > slope; a pixel "
            "with r == 0 is an edge when its left and right neighbours have opposite signs "
            "(product < 0) and |left - right| > slope, or the same holds for up and down"),
    }
    return {
        "gray": {"gray_weights": r.params["gray_weights"],
                 "formula": "((299 R + 587 G) + 114 B) / 1000 in float64 (RGB channel "
                            "order), not rounded"},
        "blurred": {"sigma": r.params["sigma"], "kernel": r.params["gaussian_kernel"],
                    "kernel_rule": "exp(-(x^2 + y^2) / (2 sigma^2)) at x, y in {-1, 0, 1}, "
                                   "divided by its sum",
                    "border": "reflect-101 (dcb|abcd|cba)",
                    "operation": "3x3 correlation of the gray image"},
        "canny": canny, "log": log,
        "sobel": {**sobel, "threshold": "threshold/sobel/magnitude = otsu(magnitude)",
                  "otsu": OTSU_RULE, "edge": "magnitude > threshold (strict)"},
        "prewitt": {"KX": _KERNELS["prewitt"], **_GRADIENT,
                    "threshold": "threshold/prewitt/magnitude = otsu(magnitude)",
                    "otsu": OTSU_RULE, "edge": "magnitude > threshold (strict)"},
        "order": list(OPERATORS),
        "vote": {"edge_value": r.params["edge_value"],
                 "non_edge_value": r.params["non_edge_value"],
                 "vote_offset": r.params["vote_offset"],
                 "formula": "F = w_canny X_canny + w_sobel X_sobel + w_prewitt X_prewitt + "
                            "w_log X_log - vote_offset, summed left to right in float64, X = "
                            "edge_value on an edge of that map, non_edge_value elsewhere"},
    }


#: What each claim-1 threshold value is (the stored scalar itself, not its rule's input).
_THRESHOLD_MEANING = {
    ("canny", "low"): "Canny's low threshold itself: otsu(response/canny); non-maximum "
                      "suppression keeps only pixels with magnitude > it",
    ("canny", "high"): "Canny's high threshold itself, the ratio included: high_ratio * low "
                       "= 2 * otsu(response/canny); hysteresis starts from kept pixels with "
                       "magnitude > it",
    ("sobel", "magnitude"): "the Sobel threshold itself: otsu(response/sobel); edge where "
                            "the magnitude > it",
    ("prewitt", "magnitude"): "the Prewitt threshold itself: otsu(response/prewitt); edge "
                              "where the magnitude > it",
    ("log", "slope"): "the LoG jump threshold itself, the ratio included: jump_ratio * "
                      "otsu(|response/log|) = 2 * otsu(|LoG|); a zero crossing counts where "
                      "the jump > it",
}
_RESPONSE_MEANING = {
    "canny": "Sobel gradient magnitude sqrt(gx^2 + gy^2) of the blurred image, the magnitude "
             "Canny thresholds (equal to response/sobel)",
    "sobel": "Sobel gradient magnitude sqrt(gx^2 + gy^2) of the blurred image",
    "prewitt": "Prewitt gradient magnitude sqrt(gx^2 + gy^2) of the blurred image",
    "log": "the signed 4-neighbour Laplacian of the blurred image (the LoG response)",
}
_EDGE_MEANING = {
    "canny": "Canny's binary edge map (1 edge, 0 not): non-maximum suppression, then "
             "hysteresis with 8-connectivity",
    "sobel": "Sobel's binary edge map: 1 where response/sobel > threshold/sobel/magnitude",
    "prewitt": "Prewitt's binary edge map: 1 where response/prewitt > "
               "threshold/prewitt/magnitude",
    "log": "LoG's binary edge map: the negative side of each zero crossing whose jump > "
           "threshold/log/slope (see params.zero_crossing)",
}


def add_input(bundle: BundleBuilder, name: str, rgb: np.ndarray, function: str,
              provenance: dict) -> None:
    """Add an image, ``input/<name>``, stored whole."""
    bundle.add(f"input/{name}", rgb, tolerance("exact"), claim="claim1.step1.acquire",
               function=function, role="input", params=provenance,
               meaning="the RGB image (rows, cols, 3) uint8 that claim 1 starts from",
               also=("claim5.acquisition_module",), whole=True)


def add_claim1(bundle: BundleBuilder, name: str, rgb: np.ndarray):
    """Add the claim-1 arrays of one image (``claim1/<name>/<step>``) to a bundle, after its
    ``input/<name>``."""
    r = features.extract(rgb)
    fn = "refseg.claim1.features.extract"
    steps = _claim1_params(r)
    p = f"claim1/{name}"
    f64, exact = tolerance("float64"), tolerance("exact")
    bundle.add(f"{p}/gray", r.gray, f64, claim=STEP_CLAIMS["gray"], function=fn,
               params=steps["gray"], readings=("R-input",), computed_from=(f"input/{name}",),
               meaning="the gray image (rows, cols) float64 of the RGB input")
    bundle.add(f"{p}/blurred", r.blurred, f64, claim=STEP_CLAIMS["blurred"], function=fn,
               params=steps["blurred"], computed_from=(f"{p}/gray",),
               meaning="the gray image filtered with the normalised 3x3 Gaussian template")
    edge_maps = []
    for op in OPERATORS:
        claim = STEP_CLAIMS[op]
        bundle.add(f"{p}/response/{op}", r.responses[op], f64, claim=claim, function=fn,
                   params=steps[op], computed_from=(f"{p}/blurred",),
                   meaning=_RESPONSE_MEANING[op])
        keys = []
        for key, value in r.thresholds[op].items():
            bundle.add(f"{p}/threshold/{op}/{key}", np.float64(value), f64, claim=claim,
                       function=fn, params=steps[op], meaning=_THRESHOLD_MEANING[op, key],
                       computed_from=(f"{p}/response/{op}",))
            keys.append(f"{p}/threshold/{op}/{key}")
        bundle.add(f"{p}/edges/{op}", r.edges[op], exact, claim=claim, function=fn,
                   params=steps[op], meaning=_EDGE_MEANING[op],
                   computed_from=(f"{p}/blurred", f"{p}/response/{op}", *keys))
        edge_maps.append(f"{p}/edges/{op}")
    order = {"order": steps["order"]}
    bundle.add(f"{p}/mean_image", r.mean_image, f64, claim=STEP_CLAIMS["mean_image"],
               function=fn, params=order, computed_from=edge_maps,
               meaning="(E_canny + E_sobel + E_prewitt + E_log) / 4 per pixel, the edge maps "
                       "taken as 0/1")
    bundle.add(f"{p}/std", r.vector("std"), f64, claim=STEP_CLAIMS["std"], function=fn,
               params={**order, "std_ddof": r.params["std_ddof"]},
               computed_from=(*edge_maps, f"{p}/mean_image"),
               meaning="length 4, operator order: sigma_i = sqrt(sum over pixels of "
                       "(E_i - mean_image)^2 / (rows * cols)), the deviation from the mean "
                       "image, not from E_i's own mean")
    bundle.add(f"{p}/mean", r.vector("mean"), f64, claim=STEP_CLAIMS["cv"], function=fn,
               params=order, computed_from=edge_maps,
               meaning="length 4, operator order: mu_i, the pixel mean of edge map E_i")
    bundle.add(f"{p}/cv", r.vector("cv"), f64, claim=STEP_CLAIMS["cv"], function=fn,
               params=order, computed_from=(f"{p}/std", f"{p}/mean"),
               meaning="length 4, operator order: V_i = sigma_i / mu_i, 0 where mu_i = 0 "
                       "(R-empty)")
    bundle.add(f"{p}/intermediate_cv", np.float64(r.intermediate_cv), f64,
               claim=STEP_CLAIMS["intermediate_cv"], function=fn, params=order,
               computed_from=(f"{p}/cv",),
               meaning="V = V_canny + V_sobel + V_prewitt + V_log, summed in that order")
    bundle.add(f"{p}/weights", r.vector("weights"), f64, claim=STEP_CLAIMS["weights"],
               function=fn, params=order, computed_from=(f"{p}/cv", f"{p}/intermediate_cv"),
               meaning="length 4, operator order: w_i = V_i / V (1/4 each when V = 0)")
    bundle.add(f"{p}/final_weight", r.final_weight, f64, claim=STEP_CLAIMS["final_weight"],
               function=fn, params=steps["vote"],
               computed_from=(*edge_maps, f"{p}/weights"),
               meaning="F per pixel: sum of w_i X_i minus vote_offset (params.formula)")
    bundle.add(f"{p}/feature_map", r.feature_map, exact, claim=STEP_CLAIMS["feature_map"],
               function=fn, params={"rule": "F >= 0 -> 1, F < 0 -> 0", "dtype": "uint8"},
               computed_from=(f"{p}/final_weight",),
               meaning="the binary feature-region image: 1 where final_weight >= 0",
               also=("claim1.step2.traverse", "claim1.step2.extract", "claim5.feature_module"))


def _ops(bundle: BundleBuilder):
    rng = np.random.default_rng(OPS_SEED)
    f64 = tolerance("float64")

    def leaf(shape, low=-1.0, high=1.0):
        return Tensor(rng.uniform(low, high, shape), requires_grad=True)

    def record(op, inputs: dict, output, params, claim, paragraphs, upstream=True):
        fn = f"refseg.autograd.{op.split('_inference')[0].split('_training')[0]}"
        given = []
        for key, t in inputs.items():
            data = t.data if isinstance(t, Tensor) else t
            bundle.add(f"ops/{op}/{key}", data, f64, claim=claim, function=fn, role="input",
                       paragraphs=paragraphs, params=params,
                       meaning=f"input {key} of {op} (float64, seeded uniform)")
            given.append(f"ops/{op}/{key}")
        dy = rng.standard_normal(output.shape) if upstream else None
        if dy is not None:
            bundle.add(f"ops/{op}/dy", dy, f64, claim=claim, function=fn, role="input",
                       paragraphs=paragraphs, note="upstream gradient given to backward",
                       meaning=f"the upstream gradient dy given to {op}'s backward pass")
        bundle.add(f"ops/{op}/y", output.data, f64, claim=claim, function=fn,
                   paragraphs=paragraphs, params=params, computed_from=given,
                   meaning=f"y = {op}({', '.join(inputs)}) with params")
        output.backward(dy)
        for key, t in inputs.items():
            if isinstance(t, Tensor) and t.requires_grad:
                bundle.add(f"ops/{op}/d{key}", t.grad, f64, claim="claim4.propagation",
                           function=fn, params=params,
                           computed_from=(f"ops/{op}/y", *([f"ops/{op}/dy"] if upstream
                                                           else [])),
                           note=f"gradient of sum(y * dy) with respect to {key}",
                           meaning=(f"the gradient of sum(y * dy) with respect to {key}"
                                    if upstream else f"the gradient of y with respect to {key}"))

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
                           function="refseg.autograd.batch_norm",
                           params=params, computed_from=(f"ops/{op}/{key}", f"ops/{op}/x"),
                           meaning=f"{key} after the update: momentum * {key} + (1 - "
                                   "momentum) * the batch's statistic over N, H, W (the "
                                   "variance biased, divisor N*H*W)")
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


#: The network input's resize (R-dataset), for the manifest: exactly what Pillow's BILINEAR
#: does to a float32 image, so that an implementation without Pillow reproduces it bit for bit.
RESIZE_RULE = {
    "library": "Pillow Image.fromarray(plane, mode='F').resize((W, H), resample="
               "Image.BILINEAR), plane the float32 feature map (0/1) of net/pre_resize",
    "method": "separable, antialiased triangle filter: rows are resized along the columns "
              "first (horizontal pass), the result rounded to float32, then along the rows "
              "(vertical pass), rounded to float32",
    "pass": "for n_in samples to n_out: scale s = n_in / n_out, filter width f = max(s, 1); "
            "output i has centre c = (i + 0.5) * s and reads inputs j = lo .. hi - 1, "
            "lo = max(int(c - f + 0.5), 0), hi = min(int(c + f + 0.5), n_in) (int truncates "
            "towards 0); weight(j) = max(0, 1 - |(j + 0.5 - c) / f|), divided by the sum of "
            "the weights of lo .. hi - 1; the weighted sum is taken in float64",
    "not": "not OpenCV's INTER_LINEAR nor align_corners interpolation: when shrinking, the "
           "filter widens with the scale (antialiasing); torch's interpolate(mode='bilinear', "
           "antialias=True) uses the same weights but skips the float32 rounding between the "
           "passes",
    "then": "x = clip(2 * r - 1, -1, 1) in float32, repeated to 3 channels (NHWC)",
}

_CONVENTIONS = {
    "layout": "NHWC float arrays; weights by Keras path <layer>/<name>",
    "Conv2D": "kernel (kh, kw, in, out), correlation (no flip), bias added, then the "
              "activation; padding 'same' (R-same): ceil(n / s) outputs, total padding "
              "max((out - 1) s + k - n, 0), the odd pixel at the end; 'valid': no padding",
    "Conv2DTranspose": "kernel (kh, kw, out, in); the adjoint of the 'same' Conv2D with that "
                       "kernel: the full result ((n - 1) s + k long per axis) cropped from "
                       "index max(k - s, 0) // 2 to n s outputs (R-same); bias, activation",
    "DepthwiseConv2D": "kernel (kh, kw, C, 1), one 3x3 filter per channel, no bias",
    "BatchNormalization": "inference form: gamma (x - moving_mean) / sqrt(moving_variance + "
                          "epsilon) + beta, per channel",
    "ReLU": "max(x, 0); with max_value 6: min(max(x, 0), 6)",
    "ZeroPadding2D": "zeros, padding ((top, bottom), (left, right))",
    "MaxPooling2D": "'valid' windows of pool_size with strides",
    "Add": "elementwise sum",
    "softmax": "over the channel axis",
}


def _layer_table(model) -> list[dict]:
    """Every layer of the network in evaluation order: name, Keras op, inputs, part and its
    settings (the architecture an outside implementation builds from the weights)."""
    from refseg.autograd import layers as L

    table = []
    for name, node in model.graph.nodes.items():
        layer = node.layer
        row = {"name": name, "op": layer.keras_type, "inputs": list(node.inputs),
               "part": node.part, "weights": sorted(layer.weights())}
        if isinstance(layer, (L.Conv2D, L.Conv2DTranspose, L.DepthwiseConv2D)):
            row.update(kernel=list(layer.kernel.shape[:2]), strides=list(layer.strides),
                       padding=layer.padding, use_bias=layer.bias is not None,
                       activation=layer.activation)
            if not isinstance(layer, L.DepthwiseConv2D):
                row["filters"] = int(layer.kernel.shape[3 if isinstance(layer, L.Conv2D)
                                                        else 2])
        elif isinstance(layer, L.BatchNormalization):
            row.update(epsilon=layer.epsilon, axis=-1)
        elif isinstance(layer, L.ReLU):
            row["max_value"] = layer.max_value
        elif isinstance(layer, L.ZeroPadding2D):
            row["padding"] = [list(p) for p in layer.padding]
        elif isinstance(layer, L.MaxPooling2D):
            row.update(pool_size=layer.pool_size, strides=layer.strides, padding="valid")
        table.append(row)
    return table


def _network(bundle: BundleBuilder, welds) -> dict:
    f32, grad, exact = tolerance("float32"), tolerance("float32_grad"), tolerance("exact")
    names = list(welds)
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
        "weights_file": (f"{WEIGHTS} in the bundle when it was written with --with-weights "
                         "(Keras paths as keys, float32); it hashes to weights_sha256 by "
                         "hash_rule"),
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
        "images": names,
        "flow": ("net/input feeds both backbones (it is already in [-1, 1]); the decoder reads "
                 "the taps; net/loss is the loss of net/prediction against net/labels; "
                 "net/grad/* are its gradients at the initial weights; Adam then takes steps "
                 "1, 2, 3 (net/adam/losses: the loss before each), recorded after steps "
                 f"{', '.join(str(s) for s in ADAM_STEPS)}; only the decoder's kernels and "
                 "biases are trained (R-frozen), the backbones' batch norm uses its moving "
                 "statistics"),
        "conventions": _CONVENTIONS,
        "layers": _layer_table(model),
    }
    feature_maps = [f"claim1/{n}/feature_map" for n in names]
    pre = np.stack([features.extract(s.rgb).feature_map.astype(f32_) for s in samples])
    bundle.add("net/pre_resize", pre, exact, claim="claim1.step2.dataset",
               function="refseg.data.inputs.network_input", role="input",
               computed_from=feature_maps,
               meaning="the feature maps of the images (claim1/<image>/feature_map) as float32 "
                       "0/1 at their own resolution, stacked: what the resize reads")
    fn_in = "refseg.data.inputs.network_input"
    bundle.add("net/input", x, exact, claim="claim1.step2.dataset", function=fn_in,
               role="input", computed_from=("net/pre_resize",),
               meaning="the network's input (N, H, W, 3) float32 in [-1, 1]: each feature "
                       "map resized to (H, W) (params.resize), scaled 2 r - 1, 3 channels",
               params={"images": names, "kind": "feature", "input_hw": list(NET_HW),
                       "resize": RESIZE_RULE})
    bundle.add("net/labels", labels, exact, claim="claim1.step2.dataset",
               function="refseg.data.inputs.resize_labels", role="input",
               params={"resize": "Pillow Image.resize((W, H), resample=Image.NEAREST) of the "
                                 "uint8 class image"},
               meaning="class ids (N, H, W) uint8: 0 contour, 1 inside, 2 outside")
    taps = model.taps(x)
    for name, value in taps.items():
        bundle.add(f"net/tap/{name}", value.astype(f32_), f32, claim="claim2.taps",
                   function="refseg.models.ResMobileNet.taps", computed_from=("net/input",),
                   meaning=f"the output of backbone layer {name} (network.layers) for "
                           "net/input", also=("claim2.backbones",))
    names_ = [layer.name for layer in DECODER]
    with no_grad():
        given = {name: Tensor(taps[name]) for name in model.decoder_inputs}
        outputs = model.graph.run(given, [*names_, model.OUTPUT])

    def source(name):
        return f"net/tap/{name}" if name in taps else f"net/layer/{name}"

    for layer in DECODER:
        bundle.add(f"net/layer/{layer.name}", outputs[layer.name].data.astype(f32_), f32,
                   claim="claim2.fusion", function="refseg.models.ResMobileNet.decode",
                   paragraphs=layer.paragraph,
                   computed_from=tuple(source(s) for s in layer.sources),
                   meaning=f"the output of decoder layer {layer.name} (network.layers)",
                   params={"op": layer.op, "sources": list(layer.sources),
                           "filters": layer.filters, "stride": layer.stride,
                           "activation": layer.activation})
    bundle.add("net/prediction", outputs[model.OUTPUT].data.astype(f32_), f32,
               claim="claim2.fusion",
               function="refseg.models.ResMobileNet.decode",
               computed_from=("net/layer/x23",),
               meaning="class probabilities (N, H, W, 3), softmax over the channels",
               params={"classes": ["contour", "inside", "outside"]},
               also=("claim3.formula", "claim1.step4.predict", "claim5.output_module"))

    params = model.trainable_parameters()
    optimizer = Adam(params)
    losses = []
    loss_rule = {"reduction": "mean over N*H*W pixels", "labels": "net/labels",
                 "formula": "-mean over pixels of log(clip(p[label], 1e-7, 1 - 1e-7)), p "
                            "the prediction's probabilities (the clip's gradient is 0 "
                            "outside its range)"}
    for step in range(1, max(ADAM_STEPS) + 1):
        optimizer.zero_grad()
        loss = ag.categorical_crossentropy(model.decode(taps), labels)
        losses.append(loss.data.copy())
        loss.backward()
        if step == 1:
            bundle.add("net/loss", loss.data.astype(f32_), f32, claim="claim4.update",
                       function="refseg.autograd.categorical_crossentropy", params=loss_rule,
                       computed_from=("net/prediction", "net/labels"),
                       meaning="the loss of net/prediction against net/labels (a scalar)")
            for p in params:
                bundle.add(f"net/grad/{p.name}", p.grad.astype(f32_), grad,
                           claim="claim4.propagation", computed_from=("net/loss",),
                           function="refseg.autograd.Tensor.backward",
                           meaning=f"d net/loss / d {p.name} at the initial weights")
        optimizer.step()
        if step in ADAM_STEPS:
            hyper = {"learning_rate": optimizer.learning_rate, "beta_1": optimizer.beta_1,
                     "beta_2": optimizer.beta_2, "epsilon": optimizer.epsilon,
                     "iterations": step, "update": "torch form: eps added to sqrt(v_hat)",
                     "formula": "m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; w = w - "
                                "lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps); m, v "
                                "start at 0, t = 1, 2, ...; g the gradient of the loss at "
                                "the current weights"}
            before = (f"net/adam{ADAM_STEPS[ADAM_STEPS.index(step) - 1]}" if step != ADAM_STEPS[0]
                      else None)
            for p in params:
                for key, value, tol, what in (
                        ("param", p.data, tolerance("adam_param"), f"the weight {p.name}"),
                        ("m", optimizer.m[p.name], grad, f"Adam's first moment m of {p.name}"),
                        ("v", optimizer.v[p.name], grad,
                         f"Adam's second moment v of {p.name}")):
                    upstream = ((f"{before}/{key}/{p.name}",) if before
                                else (f"net/grad/{p.name}",))
                    bundle.add(f"net/adam{step}/{key}/{p.name}", value.astype(f32_), tol,
                               claim="claim4.update", function="refseg.autograd.optim.Adam.step",
                               params=hyper, computed_from=upstream,
                               meaning=f"{what} after {step} Adam step{'s' * (step > 1)}")
    bundle.add("net/adam/losses", np.array(losses, dtype=np.float32), f32,
               claim="claim4.update", function="refseg.autograd.optim.Adam.step",
               computed_from=("net/loss",), params=loss_rule,
               meaning="the loss before each Adam step, steps 1..3 (the first is net/loss)",
               also=("claim1.step3.train", "claim5.training_module"))
    return info


def _versions() -> dict:
    import PIL

    return {"refseg": __version__, "numpy": np.__version__,
            "python": platform.python_version(), "pillow": PIL.__version__,
            "compiler": sysconfig.get_config_var("CC"), "machine": platform.machine(),
            "system": platform.system()}


@dataclass(frozen=True)
class WriteResult:
    """What :func:`write_bundle` wrote: the folder, the number of arrays, the bytes of
    ``arrays.npz`` (and of ``weights.npz``, 0 without it) and the seconds taken."""

    folder: Path
    arrays: int
    npz_bytes: int
    seconds: float
    kept: dict = field(default_factory=dict)
    weights_bytes: int = 0


def readings_text(ids) -> str:
    """The sections of the spec's readings whose IDs are in ``ids``, in the spec's order,
    with its preamble: the ``readings.md`` a bundle carries."""
    registry = load_registry()
    sections, current = [[]], None
    for line in registry.readings_text.splitlines(keepends=True):
        if line.startswith("## R-"):
            current = line[3:].split(":", 1)[0].strip()
            sections.append([])
        sections[-1].append((current, line))
    wanted = set(ids)
    missing = sorted(wanted - registry.reading_ids)
    if missing:
        raise AssertionError(f"golden: cited readings not in readings.md: {missing}")
    preamble = "".join(line for _, line in sections[0])
    body = "".join(line for section in sections[1:] for rid, line in section
                   if rid in wanted)
    return (f"<!-- the readings cited by this golden bundle's manifest, from refseg "
            f"{__version__}'s spec/readings.md -->\n" + preamble + body)


def build_bundle(network_threads: int | None = 1, keep=(),
                 extra: dict | None = None) -> tuple[dict, dict, dict]:
    """Compute every golden array and the manifest, in memory.

    Parameters
    ----------
    network_threads : int or None
        Threads for BLAS and OpenMP while the network part runs (None: leave as they are).
    keep : sequence of str
        Shell patterns: copies of the matching arrays stored as slices are returned whole
        (for checking refseg against its own bundle).
    extra : dict or None
        More images, {name: ((rows, cols, 3) uint8 array, provenance dict)}: their claim-1
        arrays and flagged vectors join those of the bundle's own images.

    Returns
    -------
    manifest : dict
        Without ``files`` and ``arrays_file_sha256``, which :func:`write_bundle` adds.
    arrays : dict of str to ndarray
        The members of ``arrays.npz``.
    kept : dict of str to ndarray
        The whole arrays named by ``keep`` that the bundle stores as slices.

    Raises
    ------
    InputError
        A shipped photograph does not match its recorded SHA-256.

    Notes
    -----
    1. Inputs: three photographs (crops of ``skimage.data`` images, :data:`PHOTOS`) and the
       synthetic welds of :data:`WELD_SEEDS`.
    2. Claim 1 on each: every intermediate of :func:`refseg.claim1.features.extract`, with
       every parameter of its step.
    3. The network at :data:`NET_HW`: seeded weights (their SHA-256; the weights themselves
       with ``--with-weights``), every layer's settings, the feature maps before and after
       the resize, the ten taps, every decoder layer, the prediction, the loss, the decoder
       gradients, Adam after :data:`ADAM_STEPS` steps.
    4. Each autograd op on small float64 tensors: inputs, output, gradients.
    5. The flagged vectors of every alternative reading on every image
       (:func:`refseg.golden.flagged.flagged_section`).

    Entries are in pipeline order; each names the arrays it is computed from.

    References
    ----------
    Claims 1-4; [0075]-[0119], [0122]-[0197], [0242]-[0255].
    """
    photos, provenance = _photos()
    welds, weld_provenance = _welds()
    provenance.update(weld_provenance)
    bundle = BundleBuilder(keep=tuple(keep))
    images = {**photos, **{name: s.rgb for name, s in welds.items()}}
    functions = {name: "skimage.data" if name in photos else "refseg.data.synthetic.weld_image"
                 for name in images}
    for name, (rgb, record) in (extra or {}).items():
        if name in images:
            raise InputError(f"{record.get('file', name)}: the image name {name!r} is one of "
                             "the bundle's own images; rename the file")
        images[name], provenance[name] = rgb, record
        functions[name] = "refseg.images.read_image"
    for name, rgb in images.items():
        add_input(bundle, name, rgb, functions[name], provenance[name])
        add_claim1(bundle, name, rgb)
    flagged_table, flagged_members = flagged_section(images)
    bundle.arrays.update(flagged_members)
    if network_threads is None:
        network = _network(bundle, welds)
    else:
        with limit_threads(network_threads):
            network = _network(bundle, welds)
    network["network_threads"] = network_threads
    _ops(bundle)
    cited = sorted({r for e in bundle.entries.values() for r in e["readings"]})
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "format_minor": FORMAT_MINOR,
        "schema": f"{SCHEMA}: the JSON Schema of this manifest ({schema()['$id']})",
        "arrays_file": ARRAYS, "versions": _versions(), "hash_rule": HASH_RULE,
        "readings_file": (f"{READINGS}: the text of the spec readings the entries cite "
                          f"({', '.join(cited)})"),
        "parts": {"claim1": "input/<image> and claim1/<image>/<step>: claim 1 on each image",
                  "net": "net/...: the network's input, taps, layers, prediction, loss, "
                         "gradients and Adam steps",
                  "ops": "ops/<op>/...: each autograd op on small float64 tensors"},
        "entry_fields": {
            "meaning": "what the array (or scalar) is",
            "computed_from": "the arrays it is computed from (its step's inputs)",
            "readings": "the spec readings (R-..., text in readings.md) its step follows",
            "params": "every parameter its step used",
            "storage": "full: the array itself in arrays.npz; summary: two corner slices "
                       "(member@slice0/1), a sample of C-order positions (member@sample_index, "
                       "uint32) with their values (member@sample_value), per-block sums "
                       "(member@blocks: rows of (sum, sum of |x|) in float64 over runs of "
                       "blocks.length consecutive C-order elements) and stats"},
        "tolerance_rules": {
            "exact": "candidate == golden at every element (for summary arrays: the "
                     "candidate's SHA-256 equals the entry's)",
            "relmax": "|candidate - golden| <= rtol * max|golden| at every element (max|golden| "
                      "is taken as 1 when the golden array is all zero); for arrays stored "
                      "as summaries, at the slices' and the sample's elements so, the "
                      "statistics sum, abs_sum, l2, max_abs within rtol of abs_sum, abs_sum, l2 "
                      "and max_abs, and each block's sum and sum of |x| within rtol of "
                      "max(its sum of |x|, max|golden|)"},
        "tolerances": TOLERANCES,
        "candidate": "an .npz whose keys are the array names below; arrays of role 'input' "
                     "may be left out (they are checked exactly when present); every "
                     "'output' array of the parts checked must be present with the same "
                     "shape and dtype; a key that names no array fails the check",
        "inputs": provenance, "network": network,
        "arrays": dict(bundle.entries),
        "flagged": flagged_table,
    }
    return manifest, bundle.arrays, bundle.kept


def write_bundle(folder, network_threads: int | None = 1, keep=(),
                 with_weights: bool = False, images=(),
                 max_pixels: int | None = None) -> WriteResult:
    """Write a golden bundle (``manifest.json``, ``manifest.schema.json``, ``arrays.npz``,
    ``readings.md``, and with ``with_weights`` ``weights.npz``) into ``folder``.

    Parameters
    ----------
    folder : str or Path
        Created, or replaced when it holds an earlier bundle; a folder with other files in it
        is refused.
    network_threads, keep
        See :func:`build_bundle`.
    with_weights : bool
        Also write the network's weights (``weights.npz``, about 195 MB).
    images : sequence of str or Path
        Image files (any that ``refseg edges`` reads): their claim-1 arrays and flagged
        vectors are added, and the manifest records each file's and pixels' SHA-256
        (:func:`refseg.golden.own.read_user_images`).
    max_pixels : int or None
        Refuse larger images (None: :data:`refseg.images.MAX_PIXELS`).

    Returns
    -------
    WriteResult

    Notes
    -----
    The folder is staged beside its destination and swapped into place in one step when
    every file is complete: an earlier bundle stays whole until then. The same refseg on the
    same machine writes byte-identical files, with or without the weights (the manifest holds
    their hash either way).

    References
    ----------
    Claims 1-4.
    """

    start = time.perf_counter()
    folder = Path(os.path.abspath(folder))
    if folder.exists():
        if not folder.is_dir():
            raise InputError(f"{folder}: exists and is not a folder")
        present = [p.name for p in folder.iterdir() if not publish.is_reserved(p.name)]
        others = sorted(name for name in present if name not in BUNDLE_FILES)
        if others or (present and not (folder / MANIFEST).is_file()):
            raise InputError(f"{folder}: exists and holds files that are not a golden bundle "
                             f"({', '.join(others[:3]) or 'no manifest.json'}); choose another "
                             "folder")
    extra = read_user_images(images, max_pixels) if images else None
    manifest, arrays, kept = build_bundle(network_threads, keep, extra)
    readings = readings_text(r for e in manifest["arrays"].values() for r in e["readings"])
    weights = (ResMobileNet(tuple(manifest["network"]["input_hw"]),
                            seed=manifest["network"]["seed"]).weights()
               if with_weights else None)
    with publish.staged_folders(folder) as staging:
        target = staging.root
        with publish.naming(target / ARRAYS):
            write_deterministic_npz(target / ARRAYS, arrays)
        with publish.naming(target / READINGS):
            (target / READINGS).write_bytes(readings.encode("utf-8"))
        if weights is not None:
            with publish.naming(target / WEIGHTS):
                write_deterministic_npz(target / WEIGHTS, weights, compress=False)
        with publish.naming(target / SCHEMA):
            (target / SCHEMA).write_bytes(schema_bytes())
        manifest["files"] = {READINGS: hashlib.sha256(readings.encode("utf-8")).hexdigest(),
                             SCHEMA: hashlib.sha256(schema_bytes()).hexdigest()}
        manifest["arrays_file_sha256"] = hashlib.sha256(
            (target / ARRAYS).read_bytes()).hexdigest()
        with publish.naming(target / MANIFEST):
            (target / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n",
                                           encoding="utf-8")
    return WriteResult(folder, len(manifest["arrays"]), (folder / ARRAYS).stat().st_size,
                       time.perf_counter() - start, kept,
                       (folder / WEIGHTS).stat().st_size if with_weights else 0)


def export_weights(folder, out) -> str:
    """The network weights a bundle was computed with, verified against the manifest's
    SHA-256, written as an ``.npz`` keyed by Keras weight path: the bundle's ``weights.npz``
    when it has one, otherwise regenerated from the seed.

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
        The bundle's weights or the regenerated ones differ from the manifest's hash.
    """

    manifest, _ = read_bundle(folder)
    net = manifest["network"]
    if (Path(folder) / WEIGHTS).is_file():
        weights = read_weights(folder, manifest)
    else:
        weights = ResMobileNet(tuple(net["input_hw"]), seed=net["seed"]).weights()
    digest = weights_sha256(weights)
    if digest != net["weights_sha256"]:
        raise InputError(f"{folder}: the regenerated weights hash to {digest[:16]}..., the "
                         f"manifest says {net['weights_sha256'][:16]}...; this refseg does "
                         "not regenerate them")
    publish.write_npz(Path(out), **{k: np.ascontiguousarray(v) for k, v in weights.items()})
    return digest
