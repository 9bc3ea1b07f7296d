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
from refseg import imageio
from refseg._version import __version__
from refseg.autograd import Tensor, no_grad
from refseg.autograd.optim import Adam
from refseg.claim1 import features
from refseg.claim1.features import STEP_CLAIMS
from refseg.claim1.operators import OPERATORS
from refseg.data import inputs, synthetic
from refseg.errors import InputError
from refseg.golden.format import (ARRAYS, FORMAT, FORMAT_VERSION, HASH_RULE, MANIFEST,
                                  TOLERANCES, BundleBuilder, array_sha256, read_bundle,
                                  tolerance, weights_sha256, write_deterministic_npz)
from refseg.models import ResMobileNet
from refseg.models.decoder import DECODER
from refseg.threads import limit_threads

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
        rgb = imageio.read_image(path).pixels
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


def _claim1(bundle: BundleBuilder, name: str, rgb: np.ndarray):
    r = features.extract(rgb)
    fn = "refseg.claim1.features.extract"
    params = {"sigma": r.params["sigma"], "border": r.params["border"],
              "gray_weights": r.params["gray_weights"], "operator_order": list(OPERATORS)}
    p = f"claim1/{name}"
    f64, exact = tolerance("float64"), tolerance("exact")
    bundle.add(f"{p}/gray", r.gray, f64, claim=STEP_CLAIMS["gray"], function=fn,
               params={"gray_weights": params["gray_weights"]})
    bundle.add(f"{p}/blurred", r.blurred, f64, claim=STEP_CLAIMS["blurred"], function=fn,
               params={"sigma": params["sigma"], "border": params["border"]})
    for op in OPERATORS:
        claim = STEP_CLAIMS[op]
        bundle.add(f"{p}/response/{op}", r.responses[op], f64, claim=claim, function=fn, note=(
                       "Sobel gradient magnitude" if op in ("canny", "sobel") else
                       "Prewitt gradient magnitude" if op == "prewitt" else
                       "3x3 Laplacian of the blurred image"))
        for key, value in r.thresholds[op].items():
            bundle.add(f"{p}/threshold/{op}/{key}", np.float64(value), f64, claim=claim,
                       function=fn, params=r.params["threshold_rules"][op])
        bundle.add(f"{p}/edges/{op}", r.edges[op], exact, claim=claim, function=fn,
                   note="binary edge map, 1 on an edge")
    bundle.add(f"{p}/mean_image", r.mean_image, f64, claim=STEP_CLAIMS["mean_image"],
               function=fn)
    for key in ("std", "mean", "cv", "weights"):
        claim = STEP_CLAIMS.get(key, STEP_CLAIMS["cv"])
        bundle.add(f"{p}/{key}", r.vector(key), f64, claim=claim, function=fn,
                   params={"order": list(OPERATORS)})
    bundle.add(f"{p}/intermediate_cv", np.float64(r.intermediate_cv), f64,
               claim=STEP_CLAIMS["intermediate_cv"], function=fn)
    bundle.add(f"{p}/final_weight", r.final_weight, f64, claim=STEP_CLAIMS["final_weight"],
               function=fn, params={"edge_value": r.params["edge_value"],
                       "non_edge_value": r.params["non_edge_value"],
                       "vote_offset": r.params["vote_offset"]})
    bundle.add(f"{p}/feature_map", r.feature_map, exact, claim=STEP_CLAIMS["feature_map"],
               function=fn, params={"rule": "F >= 0 -> 1"},
               also=("claim1.step2.traverse", "claim1.step2.extract", "claim5.feature_module"))


def _ops(bundle: BundleBuilder):
    rng = np.random.default_rng(OPS_SEED)
    f64 = tolerance("float64")

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
                           function=fn, params=params,
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
                           function="refseg.autograd.batch_norm",
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


def _network(bundle: BundleBuilder, welds) -> dict:
    f32, grad, exact = tolerance("float32"), tolerance("float32_grad"), tolerance("exact")
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
    fn_in = "refseg.data.inputs.network_input"
    bundle.add("net/input", x, exact, claim="claim1.step2.dataset", function=fn_in,
               role="input",
               params={"images": info["images"], "kind": "feature", "input_hw": list(NET_HW)})
    bundle.add("net/labels", labels, exact, claim="claim1.step2.dataset",
               function="refseg.data.inputs.resize_labels", role="input",
               note="0 contour, 1 inside, 2 outside")
    taps = model.taps(x)
    for name, value in taps.items():
        bundle.add(f"net/tap/{name}", value.astype(f32_), f32, claim="claim2.taps",
                   function="refseg.models.ResMobileNet.taps",
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
               function="refseg.models.ResMobileNet.decode",
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
                       params={"reduction": "mean over N*H*W pixels", "labels": "net/labels"})
            for p in params:
                bundle.add(f"net/grad/{p.name}", p.grad.astype(f32_), grad,
                           claim="claim4.propagation",
                           function="refseg.autograd.Tensor.backward")
        optimizer.step()
        if step in ADAM_STEPS:
            hyper = {"learning_rate": optimizer.learning_rate, "beta_1": optimizer.beta_1,
                     "beta_2": optimizer.beta_2, "epsilon": optimizer.epsilon,
                     "iterations": step, "update": "torch form: eps added to sqrt(v_hat)"}
            for p in params:
                for key, value, tol in (("param", p.data, tolerance("adam_param")),
                                        ("m", optimizer.m[p.name], grad),
                                        ("v", optimizer.v[p.name], grad)):
                    bundle.add(f"net/adam{step}/{key}/{p.name}", value.astype(f32_), tol,
                               claim="claim4.update", function="refseg.autograd.optim.Adam.step",
                               params=hyper)
    bundle.add("net/adam/losses", np.array(losses, dtype=np.float32), f32,
               claim="claim4.update", function="refseg.autograd.optim.Adam.step",
               note="loss before each Adam step, steps 1..3",
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
    ``arrays.npz`` and the seconds taken."""

    folder: Path
    arrays: int
    npz_bytes: int
    seconds: float
    kept: dict = field(default_factory=dict)


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
        A shipped photograph does not match its recorded SHA-256.

    Notes
    -----
    1. Inputs: three photographs (crops of ``skimage.data`` images, :data:`PHOTOS`) and the
       synthetic welds of :data:`WELD_SEEDS`.
    2. Claim 1 on each: every intermediate of :func:`refseg.claim1.features.extract`.
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
    bundle = BundleBuilder(keep=tuple(keep))
    images = {**photos, **{name: s.rgb for name, s in welds.items()}}
    for name, rgb in images.items():
        bundle.add(f"input/{name}", rgb, tolerance("exact"), claim="claim1.step1.acquire",
                   function=("skimage.data" if name in photos
                             else "refseg.data.synthetic.weld_image"),
                   role="input", params=provenance[name],
                   also=("claim5.acquisition_module",))
        _claim1(bundle, name, rgb)
    if network_threads is None:
        network = _network(bundle, welds)
    else:
        with limit_threads(network_threads):
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
    The folder is staged beside its destination and swapped into place in one step when both
    files are complete: an earlier bundle stays whole until then. The same refseg on the same machine writes byte-identical files.

    References
    ----------
    Claims 1-4.
    """

    start = time.perf_counter()
    folder = Path(os.path.abspath(folder))
    if folder.exists():
        if not folder.is_dir():
            raise InputError(f"{folder}: exists and is not a folder")
        others = sorted(p.name for p in folder.iterdir()
                        if p.name not in (MANIFEST, ARRAYS, imageio.OUTPUT_MARKER))
        if others or (any(folder.iterdir()) and not (folder / MANIFEST).is_file()):
            raise InputError(f"{folder}: exists and holds files that are not a golden bundle "
                             f"({', '.join(others[:3]) or 'no manifest.json'}); choose another "
                             "folder")
    manifest, arrays, kept = build_bundle(network_threads, keep)
    with imageio.staged_folders(folder) as staging:
        target = staging.root
        write_deterministic_npz(target / ARRAYS, arrays)
        manifest["arrays_file_sha256"] = hashlib.sha256(
            (target / ARRAYS).read_bytes()).hexdigest()
        (target / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n",
                                       encoding="utf-8")
    return WriteResult(folder, len(manifest["arrays"]), (folder / ARRAYS).stat().st_size,
                       time.perf_counter() - start, kept)


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

    manifest, _ = read_bundle(folder)
    net = manifest["network"]
    model = ResMobileNet(tuple(net["input_hw"]), seed=net["seed"])
    weights = model.weights()
    digest = weights_sha256(weights)
    if digest != net["weights_sha256"]:
        raise InputError(f"{folder}: the regenerated weights hash to {digest[:16]}..., the "
                         f"manifest says {net['weights_sha256'][:16]}...; this refseg does "
                         "not regenerate them")
    imageio.write_npz(Path(out), **{k: np.ascontiguousarray(v) for k, v in weights.items()})
    return digest


