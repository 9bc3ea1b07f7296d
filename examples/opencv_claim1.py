"""Claim 1 of CN114419081B with OpenCV and NumPy only (no refseg), as a candidate for
``refseg golden check``.

Follows the readings of refseg's spec/readings.md: gray (299 R + 587 G + 114 B) / 1000;
3x3 Gaussian, sigma 0.8, border reflect-101; Sobel and Prewitt magnitudes > Otsu; Canny
(cv2.Canny) with low = Otsu(Sobel magnitude), high = 2 low; LoG = 4-neighbour Laplacian, zero
crossings whose jump exceeds 2 Otsu(|LoG|); mean image, RMS deviation from it, CV = std / mean,
weights = CV / sum(CV); F = sum w X - 1.5 with X = 2 on an edge, 1 elsewhere; feature = F >= 0.

Usage: python examples/opencv_claim1.py BUNDLE_DIR candidate.npz
"""
import json
import sys

import cv2
import numpy as np

B = cv2.BORDER_REFLECT_101
OPS = ("canny", "sobel", "prewitt", "log")


def otsu(values, bins=256):
    """Otsu's threshold of float values: 256 equal bins over [min, max], bin centres."""
    lo, hi = float(values.min()), float(values.max())
    if lo == hi:
        return lo
    counts, edges = np.histogram(values, bins=bins, range=(lo, hi))
    centres = (edges[:-1] + edges[1:]) / 2
    w0 = np.cumsum(counts)[:-1].astype(np.float64)
    w1 = np.cumsum(counts[::-1])[::-1][1:].astype(np.float64)
    m0 = np.cumsum(counts * centres)[:-1] / w0
    m1 = (np.cumsum((counts * centres)[::-1]) / np.cumsum(counts[::-1]))[::-1][1:]
    return float(centres[np.argmax(w0 * w1 * (m0 - m1) ** 2)])


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


def claim1(rgb):
    out = {}
    rgbf = rgb.astype(np.float64)
    gray = cv2.transform(rgbf, np.array([[0.299, 0.587, 0.114]]))  # RGB order (not BGR)
    blurred = cv2.GaussianBlur(gray, (3, 3), 0.8, borderType=B)
    gx = cv2.Sobel(blurred, cv2.CV_64F, 1, 0, ksize=3, borderType=B)
    gy = cv2.Sobel(blurred, cv2.CV_64F, 0, 1, ksize=3, borderType=B)
    sob = cv2.magnitude(gx, gy)
    kx = np.array([[-1, 0, 1]] * 3, np.float64)
    px = cv2.filter2D(blurred, cv2.CV_64F, kx, borderType=B)
    py = cv2.filter2D(blurred, cv2.CV_64F, kx.T, borderType=B)
    pre = cv2.magnitude(px, py)
    lap = cv2.Laplacian(blurred, cv2.CV_64F, ksize=1, borderType=B)
    low = otsu(sob)
    # cv2.Canny takes int16 gradients: scale by 32 (|gx| <= 1020 * 32 fits) and the thresholds too
    dx, dy = (np.round(g * 32).astype(np.int16) for g in (gx, gy))
    edges = {
        "canny": (cv2.Canny(dx, dy, low * 32, 2 * low * 32, L2gradient=True) > 0),
        "sobel": sob > low,
        "prewitt": pre > otsu(pre),
    }
    slope = 2 * otsu(np.abs(lap))
    edges = {k: v.astype(np.uint8) for k, v in edges.items()}
    edges["log"] = zero_crossings(lap, slope)
    stack = np.stack([edges[k] for k in OPS]).astype(np.float64)
    mean_image = stack.mean(axis=0)
    std = np.sqrt(((stack - mean_image) ** 2).mean(axis=(1, 2)))
    mean = stack.mean(axis=(1, 2))
    cv = np.divide(std, mean, out=np.zeros(4), where=mean > 0)
    weights = cv / cv.sum() if cv.sum() > 0 else np.full(4, 0.25)
    x = stack + 1.0  # 2 on an edge, 1 elsewhere
    final = sum(w * xi for w, xi in zip(weights, x)) - 1.5
    out.update(gray=gray, blurred=blurred, mean_image=mean_image, std=std, mean=mean, cv=cv,
               weights=weights, intermediate_cv=np.float64(cv.sum()), final_weight=final,
               feature_map=(final >= 0).astype(np.uint8))
    out.update({f"response/{k}": v for k, v in
                (("canny", sob), ("sobel", sob), ("prewitt", pre), ("log", lap))})
    out.update({f"edges/{k}": edges[k] for k in OPS})
    out.update({"threshold/canny/low": np.float64(low), "threshold/canny/high": np.float64(2 * low),
                "threshold/sobel/magnitude": np.float64(low),
                "threshold/prewitt/magnitude": np.float64(otsu(pre)),
                "threshold/log/slope": np.float64(slope)})
    return out


def main(bundle, candidate):
    manifest = json.load(open(f"{bundle}/manifest.json", encoding="utf-8"))
    names = [n.split("/", 1)[1] for n in manifest["arrays"]
             if n.startswith("input/") and f"claim1/{n.split('/', 1)[1]}/gray" in manifest["arrays"]]
    arrays = {}
    with np.load(f"{bundle}/{manifest['arrays_file']}", allow_pickle=False) as npz:
        for name in names:
            for key, value in claim1(npz[f"input/{name}"]).items():
                arrays[f"claim1/{name}/{key}"] = value
    np.savez(candidate, **arrays)
    print(f"{candidate}: {len(arrays)} arrays for {len(names)} images")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python examples/opencv_claim1.py BUNDLE_DIR candidate.npz")
    main(*sys.argv[1:3])
