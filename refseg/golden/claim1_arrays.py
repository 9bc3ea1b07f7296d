"""The claim-1 part of a golden bundle: each input image (``input/<name>``) and every
intermediate of claim 1 on it (``claim1/<name>/<step>``), with its step's parameters, its
meaning and the arrays it is computed from.

References: claim 1; [0075]-[0119].
"""
from __future__ import annotations

import numpy as np

from refseg.claim1 import features
from refseg.claim1.features import STEP_CLAIMS
from refseg.claim1.operators import OPERATORS
from refseg.golden.descriptions import (EDGE_MEANING, RESPONSE_MEANING, THRESHOLD_MEANING,
                                        claim1_params)
from refseg.golden.format import BundleBuilder, tolerance
from refseg.golden.rounding import rounding_masks

INFRASTRUCTURE = "golden files: producing a bundle"

#: The function every claim-1 array is computed by.
EXTRACT = "refseg.claim1.features.extract"


def add_input(bundle: BundleBuilder, name: str, rgb: np.ndarray, function: str,
              provenance: dict) -> None:
    """Add an image, ``input/<name>``, stored whole."""
    bundle.add(f"input/{name}", rgb, tolerance("exact"), claim="claim1.step1.acquire",
               function=function, role="input", params=provenance,
               meaning="the RGB image (rows, cols, 3) uint8 that claim 1 starts from",
               also=("claim5.acquisition_module",), whole=True)


def add_claim1(bundle: BundleBuilder, name: str, rgb: np.ndarray) -> features.FeatureResult:
    """Add the claim-1 arrays of one image (``claim1/<name>/<step>``) to a bundle, after its
    ``input/<name>``; returns the extraction they come from."""
    r = features.extract(rgb)
    fn = EXTRACT
    steps = claim1_params(r)
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
                   meaning=RESPONSE_MEANING[op])
        keys = []
        for key, value in r.thresholds[op].items():
            bundle.add(f"{p}/threshold/{op}/{key}", np.float64(value), f64, claim=claim,
                       function=fn, params=steps[op], meaning=THRESHOLD_MEANING[op, key],
                       computed_from=(f"{p}/response/{op}",))
            keys.append(f"{p}/threshold/{op}/{key}")
        bundle.add(f"{p}/edges/{op}", r.edges[op], exact, claim=claim, function=fn,
                   params=steps[op], meaning=EDGE_MEANING[op],
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
    for step, mask in rounding_masks(r).items():
        key = f"{p}/{step}@rounding"
        bundle.arrays[key] = np.ascontiguousarray(mask, dtype=np.uint8)
        bundle.entries[f"{p}/{step}"]["rounding"] = {"member": key,
                                                     "count": int(mask.sum())}
    return r
