"""Evidence for readings R-binary and R-weights: operator weights under competing readings.

Prints, for synthetic welds (seeds 0-9) and the photographs of scikit-image's data set, the
weights that refseg's reading gives and those of the alternatives the spec rejects. Run:
``python spec/evidence_weights.py`` (needs scikit-image for the photographs).
"""
import numpy as np

from refseg.claim1 import features
from refseg.claim1 import operators as ops
from refseg.claim1 import weighting
from refseg.claim1.operators import OPERATORS
from refseg.data.synthetic import weld_image

PATENT_WELD = {"canny": 0.4124, "sobel": 0.1316, "prewitt": 0.1339, "log": 0.3221}


def weights_for(edges, inverse=False):
    stack = weighting.binary_stack(edges)
    mean_img, std, mean = weighting._binary_statistics(stack, "cython")
    cv = weighting.coefficients_of_variation(std, mean)
    if inverse:  # rejected alternative: w proportional to 1/V
        cv = {k: (1 / v if v > 0 else 0.0) for k, v in cv.items()}
    return weighting.operator_weights(cv)


def matlab_style_edges(blurred):
    """Rejected alternative: MATLAB edge() default thresholds on our 3x3-filtered image."""
    gx, gy, mag = ops._gradient(blurred, ops.SOBEL_SMOOTH, "cython")
    _, _, pmag = ops._gradient(blurred, ops.PREWITT_SMOOTH, "cython")
    high = float(np.quantile(mag, 0.7))
    log = ops._log(blurred, 0.75 * float(np.mean(np.abs(ops._log(blurred, 0, "cython").response))),
                   "cython")
    return {
        "canny": ops._canny_from_gradient(gx, gy, mag, 0.4 * high, high, "cython").edges,
        "sobel": (mag > 2 * np.sqrt(np.mean(mag ** 2))).astype(np.uint8),
        "prewitt": (pmag > 2 * np.sqrt(np.mean(pmag ** 2))).astype(np.uint8),
        "log": log.edges,
    }


def row(name, w, density=None):
    text = " | ".join(f"{w[k]:.3f}" for k in OPERATORS)
    order = "yes" if min(w["canny"], w["log"]) > max(w["sobel"], w["prewitt"]) else "no"
    dens = (" | " + " | ".join(f"{density[k]:.3f}" for k in OPERATORS)) if density else ""
    return f"| {name} | {text} | {order}{dens} |"


def main():
    images = {f"weld seed {s}": weld_image(s).rgb for s in range(10)}
    try:
        import skimage.data as data
        for name in ("astronaut", "camera", "coffee", "coins", "chelsea", "rocket"):
            images[name] = getattr(data, name)()
    except ImportError:
        print("(scikit-image not installed: photographs left out)")
    print(row("patent [0213] weld", PATENT_WELD))
    for title, rule in (("refseg reading (Otsu; V_i / sum V)", "ours"),
                        ("rejected: MATLAB edge() defaults", "matlab"),
                        ("rejected: inverse weighting 1/V_i", "inverse")):
        print(f"\n{title}\n| image | Canny | Sobel | Prewitt | LoG | Canny, LoG above both |"
              " density C | S | P | L |\n|---|---|---|---|---|---|---|---|---|---|")
        for name, rgb in images.items():
            result = features.extract(rgb)
            edges = matlab_style_edges(result.blurred) if rule == "matlab" else result.edges
            w = weights_for(edges, inverse=(rule == "inverse"))
            print(row(name, w, {k: float(edges[k].mean()) for k in OPERATORS}))


if __name__ == "__main__":
    main()
