"""What a golden bundle's manifest says about its arrays, for an implementer without refseg:
how each claim-1 step computes (every threshold rule, kernel and border), what each stored
array and scalar means, the network's conventions and the resize of its input, and how the
manifest itself reads.

Where refseg's own docstring already states a rule, the manifest takes it from there
(:func:`docstring_step`), so that the two cannot drift apart; what the manifest adds is the
precision a bit-exact reimplementation needs (bin rules, tie rules, comparison directions).
"""
from __future__ import annotations

import inspect
import re

from refseg.claim1 import operators as ops
from refseg.claim1 import preprocess
from refseg.claim1.operators import OPERATORS

INFRASTRUCTURE = "golden files: what the manifest says about each array"


def docstring_step(function, number: int) -> str:
    """Step ``number`` of the numbered Notes of ``function``'s docstring, as one line of plain
    text (Sphinx roles and literal markup removed)."""
    doc = inspect.getdoc(function) or ""
    notes = doc.split("Notes\n-----\n", 1)[-1].split("\n\n", 1)[0]
    steps = re.split(r"^\d+\. ", notes, flags=re.M)
    if len(steps) <= number:
        raise LookupError(f"{function.__qualname__}: no step {number} in its Notes")
    text = " ".join(steps[number].split())
    text = re.sub(r":\w+:`~?([^`]+)`", r"\1", text)
    return text.replace("``", "")


# ----------------------------------------------------------------------------- claim 1
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
GRADIENT = {
    "gx": "3x3 correlation of the blurred image with KX (positive where intensity rises "
          "towards higher column index)",
    "gy": "3x3 correlation with KX transposed (positive towards higher row index)",
    "magnitude": "sqrt(gx^2 + gy^2), float64",
    "border": "reflect-101 (dcb|abcd|cba)",
}
KERNELS = {"sobel": ops.SOBEL_X.tolist(), "prewitt": ops.PREWITT_X.tolist()}


def claim1_params(r) -> dict:
    """Every parameter of each claim-1 step, for the manifest (R-binary, R-canny, R-log)."""
    sobel = {"KX": KERNELS["sobel"], **GRADIENT}
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
        "response": docstring_step(ops.laplacian_of_gaussian, 1)
        + " LAPLACE_4 is the kernel above; no second Gaussian.",
        "threshold": "threshold/log/slope = jump_ratio * otsu(|response|), the ratio included",
        "jump_ratio": ops.LOG_JUMP_RATIO, "otsu": OTSU_RULE,
        "zero_crossing": " ".join(docstring_step(ops.laplacian_of_gaussian, n) for n in (2, 3))
        + " The threshold is threshold/log/slope.",
    }
    return {
        "gray": {"gray_weights": r.params["gray_weights"],
                 "formula": "((299 R + 587 G) + 114 B) / 1000 in float64 (RGB channel "
                            "order), not rounded"},
        "blurred": {"sigma": r.params["sigma"], "kernel": r.params["gaussian_kernel"],
                    "kernel_rule": " ".join(docstring_step(preprocess.gaussian_kernel, n)
                                            for n in (1, 2, 3)),
                    "border": "reflect-101 (dcb|abcd|cba)",
                    "operation": "3x3 correlation of the gray image"},
        "canny": canny, "log": log,
        "sobel": {**sobel, "threshold": "threshold/sobel/magnitude = otsu(magnitude)",
                  "otsu": OTSU_RULE, "edge": "magnitude > threshold (strict)"},
        "prewitt": {"KX": KERNELS["prewitt"], **GRADIENT,
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
THRESHOLD_MEANING = {
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
RESPONSE_MEANING = {
    "canny": "Sobel gradient magnitude sqrt(gx^2 + gy^2) of the blurred image, the magnitude "
             "Canny thresholds (equal to response/sobel)",
    "sobel": "Sobel gradient magnitude sqrt(gx^2 + gy^2) of the blurred image",
    "prewitt": "Prewitt gradient magnitude sqrt(gx^2 + gy^2) of the blurred image",
    "log": "the signed 4-neighbour Laplacian of the blurred image (the LoG response)",
}
EDGE_MEANING = {
    "canny": "Canny's binary edge map (1 edge, 0 not): non-maximum suppression, then "
             "hysteresis with 8-connectivity",
    "sobel": "Sobel's binary edge map: 1 where response/sobel > threshold/sobel/magnitude",
    "prewitt": "Prewitt's binary edge map: 1 where response/prewitt > "
               "threshold/prewitt/magnitude",
    "log": "LoG's binary edge map: the negative side of each zero crossing whose jump > "
           "threshold/log/slope (see params.zero_crossing)",
}


# ------------------------------------------------------------------------------ network
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

CONVENTIONS = {
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

#: How the labels are brought to the network's size.
LABELS_RESIZE = "Pillow Image.resize((W, H), resample=Image.NEAREST) of the uint8 class image"
#: The loss of the network's prediction (claim 4).
LOSS_RULE = {"reduction": "mean over N*H*W pixels", "labels": "net/labels",
             "formula": "-mean over pixels of log(clip(p[label], 1e-7, 1 - 1e-7)), p the "
                        "prediction's probabilities (the clip's gradient is 0 outside its "
                        "range)"}
#: Adam's update as the bundle records it.
ADAM_RULE = {"update": "torch form: eps added to sqrt(v_hat)",
             "formula": "m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; w = w - lr (m / (1 - "
                        "b1^t)) / (sqrt(v / (1 - b2^t)) + eps); m, v start at 0, t = 1, 2, ...; "
                        "g the gradient of the loss at the current weights"}

#: The network part's notes for an implementer: its batch norm, precision, threads.
NETWORK_NOTES = {
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
}


def network_flow(adam_steps) -> str:
    """How the network part's arrays follow from one another."""
    return ("net/input feeds both backbones (it is already in [-1, 1]); the decoder reads "
            "the taps; net/loss is the loss of net/prediction against net/labels; "
            "net/grad/* are its gradients at the initial weights; Adam then takes steps "
            "1, 2, 3 (net/adam/losses: the loss before each), recorded after steps "
            f"{', '.join(str(s) for s in adam_steps)}; only the decoder's kernels and "
            "biases are trained (R-frozen), the backbones' batch norm uses its moving "
            "statistics")


# ------------------------------------------------------------------------------ manifest
#: How the manifest reads: its parts, each entry's fields, the tolerance rules, a candidate.
MANIFEST_NOTES = {
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
    "candidate": "an .npz whose keys are the array names below; arrays of role 'input' "
                 "may be left out (they are checked exactly when present); every "
                 "'output' array of the parts checked must be present with the same "
                 "shape and dtype; a key that names no array fails the check",
}
