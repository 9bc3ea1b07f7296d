"""Claim 1 of CN114419081B with OpenCV and NumPy only (no refseg), as a candidate for
``refseg golden check``.

Follows the readings of refseg's spec/readings.md: gray (299 R + 587 G + 114 B) / 1000;
3x3 Gaussian, sigma 0.8, border reflect-101; Sobel and Prewitt magnitudes > Otsu (the
manifest's binning: bin = floor((v - min) * (256 / (max - min))), bin centres); Canny on the float
Sobel gradients with low = Otsu(Sobel magnitude), high = 2 low (the manifest's non-maximum
suppression, hysteresis through 8 neighbours); LoG = 4-neighbour Laplacian, zero crossings
whose jump exceeds 2 Otsu(|LoG|); mean image, RMS deviation from it, CV = std / mean,
weights = CV / sum(CV); F = sum w X - 1.5 with X = 2 on an edge, 1 elsewhere; feature = F >= 0.
``--reading cv2-canny`` uses cv2.Canny on int16 gradients instead, ``--reading otsu-numpy``
np.histogram's bins (scikit-image's threshold_otsu): library defaults the bundle flags.

``--reading NAME`` implements one alternative reading instead (the names of refseg's
spec/sensitivity.md, e.g. gray-average), or ``gray-bgr``, a misreading no alternative covers
(the BT.601 weights applied to the channels in BGR order): candidates for the diagnosis of
``refseg golden check``. ``--folder`` reads per-image reference files (``refseg golden
reference``) instead of a bundle and writes one candidate file per image into the output
folder, for ``refseg golden compare``.

Usage: python examples/opencv_claim1.py BUNDLE_DIR candidate.npz [--reading NAME]
       python examples/opencv_claim1.py --folder REFERENCE_DIR CANDIDATE_DIR [--reading NAME]
"""
import argparse
import json
from pathlib import Path

import cv2
import numpy as np

OPS = ("canny", "sobel", "prewitt", "log")
BORDERS = {"reflect101": cv2.BORDER_REFLECT_101, "replicate": cv2.BORDER_REPLICATE,
           "zero": cv2.BORDER_CONSTANT}
LAPLACE_8 = np.array([[1, 1, 1], [1, -8, 1], [1, 1, 1]], np.float64)
#: Each reading: the choices it changes from the defaults of ``claim1``.
READINGS = {
    "refseg": {},
    "gray-average": {"gray": "average"}, "gray-green": {"gray": "green"},
    "gray-maximum": {"gray": "maximum"}, "gray-bt709": {"gray": "bt709"},
    "gray-bgr": {"gray": "bgr"},
    "border-replicate": {"border": "replicate"}, "border-zero": {"border": "zero"},
    "gauss-sigma-1": {"sigma": 1.0}, "gauss-sigma-1.5": {"sigma": 1.5},
    "gauss-binomial": {"sigma": 0.0},
    "canny-ratio-1.5": {"canny_ratio": 1.5}, "canny-ratio-3": {"canny_ratio": 3.0},
    "canny-otsu-high": {"canny_otsu": "high"},
    "log-ratio-1": {"log_ratio": 1.0}, "log-ratio-3": {"log_ratio": 3.0},
    "log-laplace8": {"laplacian": LAPLACE_8}, "log-positive": {"log_side": "positive"},
    "std-own-mean": {"std": "own"}, "cv-mean-image": {"cv": "mean_image"},
    "weights-equal": {"weights": "equal"}, "weights-inverse": {"weights": "inverse"},
    "offset-1.45": {"offset": 1.45}, "offset-1.6": {"offset": 1.6},
    "offset-1.7": {"offset": 1.7},
    "cv2-canny": {"canny": "cv2"}, "otsu-numpy": {"otsu": "numpy"},
}
DEFAULTS = {"gray": "bt601", "border": "reflect101", "sigma": 0.8, "canny_ratio": 2.0,
            "canny_otsu": "low", "log_ratio": 2.0, "laplacian": None, "log_side": "negative",
            "std": "mean_image", "cv": "own", "weights": "share", "offset": 1.5,
            "canny": "float", "otsu": "manifest"}
GRAY_WEIGHTS = {"bt601": [0.299, 0.587, 0.114], "bt709": [0.2126, 0.7152, 0.0722],
                "bgr": [0.114, 0.587, 0.299]}


def otsu(values, bins=256, rule="manifest"):
    """Otsu's threshold of float values: 256 equal bins over [min, max], bin centres; a value's
    bin is floor((v - min) * (bins / (max - min))), the last bin holding max (the manifest's
    rule), or np.histogram's (rule "numpy")."""
    lo, hi = float(values.min()), float(values.max())
    if lo == hi:
        return lo
    if rule == "numpy":
        counts, edges = np.histogram(values, bins=bins, range=(lo, hi))
        centres = (edges[:-1] + edges[1:]) / 2
    else:
        index = np.minimum((values - lo) * (bins / (hi - lo)), bins - 1).astype(np.intp)
        counts = np.bincount(index.ravel(), minlength=bins)
        centres = lo + (np.arange(bins) + 0.5) * ((hi - lo) / bins)
    w0 = np.cumsum(counts)[:-1].astype(np.float64)
    w1 = np.cumsum(counts[::-1])[::-1][1:].astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        m0 = np.cumsum(counts * centres)[:-1] / w0
        m1 = (np.cumsum((counts * centres)[::-1]) / np.cumsum(counts[::-1]))[::-1][1:]
        between = w0 * w1 * (m0 - m1) ** 2
    return float(centres[np.argmax(between)])


def canny(gx, gy, mag, low, high):
    """Non-maximum suppression in four sectors (tan 22.5 and tan 67.5 degrees): along an
    axis > the neighbour before and >= the one after, diagonally > both, magnitudes outside
    the image 0; kept where > low; the 8-connected chains holding a pixel > high."""
    z = np.pad(mag, 1)
    rows, cols = mag.shape

    def at(dr, dc):
        return z[1 + dr:1 + dr + rows, 1 + dc:1 + dc + cols]

    ax, ay = np.abs(gx), np.abs(gy)
    tan_lo, tan_hi = np.sqrt(2.0) - 1.0, np.sqrt(2.0) + 1.0
    horizontal = ay < tan_lo * ax
    vertical = ~horizontal & (ay > tan_hi * ax)
    falling = ~horizontal & ~vertical & ((gx < 0) == (gy < 0))
    rising = ~horizontal & ~vertical & ~falling
    keep = ((horizontal & (mag > at(0, -1)) & (mag >= at(0, 1)))
            | (vertical & (mag > at(-1, 0)) & (mag >= at(1, 0)))
            | (falling & (mag > at(-1, -1)) & (mag > at(1, 1)))
            | (rising & (mag > at(-1, 1)) & (mag > at(1, -1)))) & (mag > low)
    _, labels = cv2.connectedComponents(keep.astype(np.uint8), connectivity=8)
    strong = np.unique(labels[keep & (mag > high)])
    return np.isin(labels, strong[strong > 0])


def zero_crossings(r, t):
    """Negative side of each 4-neighbour sign change whose jump exceeds t; zeros between
    opposite signs (left/right or up/down) whose neighbours differ by more than t."""
    p = np.pad(r, 1, constant_values=np.nan)  # no neighbour outside the image
    c = p[1:-1, 1:-1]
    nb = [p[:-2, 1:-1], p[2:, 1:-1], p[1:-1, :-2], p[1:-1, 2:]]
    with np.errstate(invalid="ignore"):
        neg = (c < 0) & np.any([(n > 0) & (n - c > t) for n in nb], axis=0)
        zero = (c == 0) & (
            ((nb[2] * nb[3] < 0) & (np.abs(nb[2] - nb[3]) > t))
            | ((nb[0] * nb[1] < 0) & (np.abs(nb[0] - nb[1]) > t)))
    return (neg | zero).astype(np.uint8)


def to_gray(rgb, rule):
    rgbf = rgb.astype(np.float64)
    if rule == "average":
        return rgbf.sum(axis=2) / 3
    if rule == "green":
        return rgbf[:, :, 1].copy()
    if rule == "maximum":
        return rgbf.max(axis=2)
    return cv2.transform(rgbf, np.array([GRAY_WEIGHTS[rule]]))  # RGB order (not BGR)


def weights_of(std, mean, mean_image, c):
    cv = np.divide(std, mean, out=np.zeros(4), where=mean > 0)
    if c["cv"] == "mean_image":
        cv = std / mean_image.mean()
    if c["weights"] == "equal":
        return cv, np.full(4, 0.25)
    share = cv
    if c["weights"] == "inverse":
        share = np.divide(1.0, cv, out=np.zeros(4), where=cv > 0)
    return cv, (share / share.sum() if share.sum() > 0 else np.full(4, 0.25))


def claim1(rgb, reading="refseg"):
    c = {**DEFAULTS, **READINGS[reading]}
    B = BORDERS[c["border"]]
    out = {}
    gray = to_gray(rgb, c["gray"])
    blurred = cv2.GaussianBlur(gray, (3, 3), c["sigma"], borderType=B)
    gx = cv2.Sobel(blurred, cv2.CV_64F, 1, 0, ksize=3, borderType=B)
    gy = cv2.Sobel(blurred, cv2.CV_64F, 0, 1, ksize=3, borderType=B)
    sob = cv2.magnitude(gx, gy)
    kx = np.array([[-1, 0, 1]] * 3, np.float64)
    px = cv2.filter2D(blurred, cv2.CV_64F, kx, borderType=B)
    py = cv2.filter2D(blurred, cv2.CV_64F, kx.T, borderType=B)
    pre = cv2.magnitude(px, py)
    if c["laplacian"] is None:
        lap = cv2.Laplacian(blurred, cv2.CV_64F, ksize=1, borderType=B)
    else:
        lap = cv2.filter2D(blurred, cv2.CV_64F, c["laplacian"], borderType=B)
    rule = c["otsu"]
    otsu_sobel = otsu(sob, rule=rule)
    low, high = ((otsu_sobel, c["canny_ratio"] * otsu_sobel) if c["canny_otsu"] == "low"
                 else (otsu_sobel / c["canny_ratio"], otsu_sobel))
    if c["canny"] == "cv2":
        # cv2.Canny takes int16 gradients: scale by 32 (|gx| <= 1020 * 32 fits), thresholds too
        dx, dy = (np.round(g * 32).astype(np.int16) for g in (gx, gy))
        canny_map = cv2.Canny(dx, dy, low * 32, high * 32, L2gradient=True) > 0
    else:
        canny_map = canny(gx, gy, sob, low, high)
    otsu_prewitt = otsu(pre, rule=rule)
    edges = {"canny": canny_map, "sobel": sob > otsu_sobel, "prewitt": pre > otsu_prewitt}
    slope = c["log_ratio"] * otsu(np.abs(lap), rule=rule)
    edges = {k: v.astype(np.uint8) for k, v in edges.items()}
    edges["log"] = zero_crossings(lap if c["log_side"] == "negative" else -lap, slope)
    stack = np.stack([edges[k] for k in OPS]).astype(np.float64)
    mean_image = stack.mean(axis=0)
    if c["std"] == "own":
        std = stack.std(axis=(1, 2))
    else:
        std = np.sqrt(((stack - mean_image) ** 2).mean(axis=(1, 2)))
    mean = stack.mean(axis=(1, 2))
    cv, weights = weights_of(std, mean, mean_image, c)
    x = stack + 1.0  # 2 on an edge, 1 elsewhere
    final = sum(w * xi for w, xi in zip(weights, x)) - c["offset"]
    out.update(gray=gray, blurred=blurred, mean_image=mean_image, std=std, mean=mean, cv=cv,
               weights=weights, intermediate_cv=np.float64(cv.sum()), final_weight=final,
               feature_map=(final >= 0).astype(np.uint8))
    out.update({f"response/{k}": v for k, v in
                (("canny", sob), ("sobel", sob), ("prewitt", pre), ("log", lap))})
    out.update({f"edges/{k}": edges[k] for k in OPS})
    out.update({"threshold/canny/low": np.float64(low), "threshold/canny/high": np.float64(high),
                "threshold/sobel/magnitude": np.float64(otsu_sobel),
                "threshold/prewitt/magnitude": np.float64(otsu_prewitt),
                "threshold/log/slope": np.float64(slope)})
    return out


def main(bundle, candidate, reading="refseg"):
    manifest = json.load(open(f"{bundle}/manifest.json", encoding="utf-8"))
    names = [n.split("/", 1)[1] for n in manifest["arrays"]
             if n.startswith("input/") and f"claim1/{n.split('/', 1)[1]}/gray" in manifest["arrays"]]
    arrays = {}
    with np.load(f"{bundle}/{manifest['arrays_file']}", allow_pickle=False) as npz:
        for name in names:
            for key, value in claim1(npz[f"input/{name}"], reading).items():
                arrays[f"claim1/{name}/{key}"] = value
    np.savez(candidate, **arrays)
    print(f"{candidate}: {len(arrays)} arrays for {len(names)} images")


def main_folder(reference, out, reading="refseg"):
    """One candidate file per reference file, for the image it holds (key input/<image>)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    count = 0
    for path in sorted(Path(reference).glob("*.npz")):
        with np.load(path, allow_pickle=False) as npz:
            key = next(k for k in npz.files if k.startswith("input/"))
            rgb = npz[key]
        name = key.split("/", 1)[1]
        np.savez(out / path.name, **{f"claim1/{name}/{k}": v
                                     for k, v in claim1(rgb, reading).items()})
        count += 1
    print(f"{out}: {count} candidate files")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="claim 1 with OpenCV, as a refseg candidate")
    parser.add_argument("source", help="bundle folder (or, with --folder, reference folder)")
    parser.add_argument("destination", help="candidate .npz (or, with --folder, a folder)")
    parser.add_argument("--reading", default="refseg", choices=sorted(READINGS),
                        help="an alternative reading to implement (default: refseg's)")
    parser.add_argument("--folder", action="store_true",
                        help="per-image reference files in, per-image candidates out")
    args = parser.parse_args()
    (main_folder if args.folder else main)(args.source, args.destination, args.reading)
