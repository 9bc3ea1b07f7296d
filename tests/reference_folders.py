"""Helpers of the reference-folder tests: made-up images and refseg's own candidates for a
reference folder (the self-check of `golden compare`)."""
import numpy as np
from PIL import Image

from refseg.golden.claim1_arrays import add_claim1, add_input
from refseg.golden.format import BundleBuilder


def make_image(path, rows, cols, seed=0):
    """An RGB PNG of gradients and noise, edges everywhere."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:rows, :cols]
    rgb = np.stack([x * 3 + y, y * 2, (x ^ y) & 255], -1) + rng.integers(0, 40, (rows, cols, 3))
    Image.fromarray((rgb % 256).astype(np.uint8)).save(path)
    return path


def own_candidates(reference, out):
    """refseg's own arrays, whole, for every reference file of a folder: OUT/<image>.npz under
    the reference's key names."""
    out.mkdir(exist_ok=True)
    for path in sorted(reference.glob("*.npz")):
        name = path.stem
        with np.load(path, allow_pickle=False) as npz:
            rgb = npz[f"input/{name}"]
        bundle = BundleBuilder(keep=("*",))
        add_input(bundle, name, rgb, "test", {})
        add_claim1(bundle, name, rgb)
        arrays = {k: v for k, v in bundle.arrays.items() if "@" not in k}
        np.savez(out / f"{name}.npz", **arrays, **bundle.kept)
    return out
