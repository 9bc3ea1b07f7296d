"""What the network sees: the first data set of claim 1 ([0075], [0121], [0203]).

Each training image goes through the claim-1 feature extraction at its own resolution; the
binary feature-region image is resized to the network's input size and repeated to three
channels in [-1, 1] (R-dataset); the other readings of the feature regions
(:mod:`refseg.data.kinds`) mask the gray image with the map or carry both as channels. The
plain grayscale image is the alternative input the patent compares against ([0121], [0264]).
Labels are resized with nearest neighbours, so they stay exact class ids.
"""
from __future__ import annotations

import numpy as np
from PIL import Image
from scipy import ndimage

from refseg.claim1 import alternatives
from refseg.claim1 import features
from refseg.claim1 import preprocess
from refseg.data import kinds
from refseg.errors import InputError
from refseg.workers import checked_jobs, map_in_workers
from refseg.cite import implements


def _resize(plane: np.ndarray, input_hw, resample) -> np.ndarray:
    h, w = input_hw
    if plane.shape == (h, w):
        return plane.astype(np.float32)
    image = Image.fromarray(plane.astype(np.float32), mode="F")
    return np.asarray(image.resize((w, h), resample=resample), dtype=np.float32)


def _feature_map(rgb, reading) -> np.ndarray:
    """The claim-1 feature map (M, N) float32 0/1, under refseg's readings or ``reading``."""
    if reading is None:
        return features.extract(rgb).feature_map.astype(np.float32)
    return alternatives.feature_image(rgb, reading).astype(np.float32)


def _dilated(feature_map: np.ndarray, radius: int) -> np.ndarray:
    """The map dilated by a (2 radius + 1)-square (values in [0, 1] kept as the maximum)."""
    return ndimage.maximum_filter(feature_map, size=2 * radius + 1, mode="constant")


@implements("claim1.step2.dataset", "claim1.step4.predict")
def network_input(rgb: np.ndarray, input_hw, kind: str = kinds.FEATURE,
                  reading: str | None = None) -> np.ndarray:
    """One image as the network's input.

    Parameters
    ----------
    rgb : ndarray of shape (M, N, 3), uint8 (or (M, N) gray)
    input_hw : (int, int)
        The network's input size (H, W), multiples of 32.
    kind : str
        One of ``refseg.data.kinds.INPUT_KINDS`` (R-dataset): "feature", the claim-1
        feature-region image (0/1, refseg's reading); "gray", the grayscale image (0-255);
        "masked-gray", the gray image on the feature map, 0 elsewhere; "masked-gray-dilated",
        the same on the map dilated by ``refseg.data.kinds.MASK_RADIUS``; "gray-and-feature",
        the channels gray, feature map, gray.
    reading : str or None
        For the kinds built from the feature map (``refseg.data.kinds.FEATURE_KINDS``): the
        name of an alternative to refseg's claim-1 readings
        (``refseg.claim1.alternatives.ALTERNATIVES``) whose feature image replaces the claim-1
        one, for the sensitivity audit; None: refseg's readings.

    Returns
    -------
    ndarray of shape (H, W, 3), float32 in [-1, 1]

    Notes
    -----
    1. The feature map by ``refseg.claim1.features.extract`` at the image's resolution ([0075],
       [0203]); the gray image by ``refseg.claim1.preprocess.to_gray`` ([0079]); a masked kind
       multiplies the gray image by the map (dilated for "masked-gray-dilated") at the image's
       resolution.
    2. Resize each plane to (H, W), bilinear (Pillow, on floats: a binary map becomes a coverage
       fraction rather than aliased pixels) ([0196]).
    3. Scale to [-1, 1] (a map: 2f - 1; a gray plane: g / 127.5 - 1, as the backbones expect)
       and repeat the plane to three channels ("gray-and-feature": gray, map, gray).

    References
    ----------
    [0075], [0121], [0196], [0203], [0264]; R-dataset.
    """
    if kind not in kinds.INPUT_KINDS:
        raise InputError(f"input kind must be one of {kinds.INPUT_KINDS}, got {kind!r}")
    if reading is not None and kind not in kinds.FEATURE_KINDS:
        raise InputError(f"reading {reading!r}: alternative readings apply to the inputs "
                         f"built from the feature map ({', '.join(kinds.FEATURE_KINDS)}) only")
    if kind != kinds.FEATURE:
        gray = np.asarray(rgb if np.ndim(rgb) == 2 else preprocess.to_gray(rgb), np.float32)
    if kind != kinds.GRAY:
        fmap = _feature_map(rgb, reading)
    if kind == kinds.FEATURE:
        planes = [_resize(fmap, input_hw, Image.BILINEAR) * 2 - 1]
    elif kind == kinds.GRAY:
        planes = [_resize(gray, input_hw, Image.BILINEAR) / 127.5 - 1]
    elif kind in (kinds.MASKED_GRAY, kinds.MASKED_GRAY_DILATED):
        mask = fmap if kind == kinds.MASKED_GRAY else _dilated(fmap, kinds.MASK_RADIUS)
        planes = [_resize(gray * mask, input_hw, Image.BILINEAR) / 127.5 - 1]
    else:
        g = _resize(gray, input_hw, Image.BILINEAR) / 127.5 - 1
        planes = [g, _resize(fmap, input_hw, Image.BILINEAR) * 2 - 1, g]
    # bilinear cannot overshoot, but rounding may by an ulp
    planes = [np.clip(p, -1, 1) for p in planes]
    if len(planes) == 1:
        return np.repeat(planes[0][:, :, None], 3, axis=2)
    return np.stack(planes, axis=2)


@implements("claim1.step2.dataset")
def resize_labels(classes: np.ndarray, input_hw) -> np.ndarray:
    """Class ids (M, N) uint8 resized to (H, W) by nearest neighbour (ids stay exact)."""
    h, w = input_hw
    if classes.shape == (h, w):
        return classes.astype(np.uint8)
    image = Image.fromarray(classes.astype(np.uint8), mode="L")
    return np.asarray(image.resize((w, h), resample=Image.NEAREST), dtype=np.uint8)


@implements("claim1.step2.dataset")
def resize_probabilities(probabilities: np.ndarray, image_hw) -> np.ndarray:
    """(H, W, C) probabilities back to the image's (M, N) size, bilinear per class ([0197])."""
    m, n = image_hw
    planes = [_resize(probabilities[:, :, c], (m, n), Image.BILINEAR)
              for c in range(probabilities.shape[2])]
    return np.stack(planes, axis=2)


def _prepare_one(args):
    rgb, classes, input_hw, kind, reading = args
    x = network_input(rgb, input_hw, kind, reading)
    return x, None if classes is None else resize_labels(classes, input_hw)


@implements("claim1.step2.dataset")
def prepare(pairs, input_hw, kind: str = kinds.FEATURE, jobs: int | None = None,
            reading: str | None = None):
    """Network inputs and resized labels of many (rgb, classes) pairs, spread over processes.

    Parameters
    ----------
    pairs : iterable of (ndarray (M, N, 3) uint8, ndarray (M, N) uint8 or None)
    input_hw : (int, int)
    kind : str
        One of ``refseg.data.kinds.INPUT_KINDS`` (see :func:`network_input`).
    jobs : int or None
        Worker processes (default: every core this process may use; 1 runs in-process).
    reading : str or None
        An alternative reading for the feature input (see :func:`network_input`).

    Returns
    -------
    x : ndarray of shape (count, H, W, 3), float32
    y : ndarray of shape (count, H, W), uint8, or None when no labels were given
    """
    jobs = checked_jobs(jobs)
    work = [(rgb, classes, tuple(input_hw), kind, reading) for rgb, classes in pairs]
    results = map_in_workers(_prepare_one, work, jobs)
    h, w = input_hw
    x = np.stack([r[0] for r in results]) if results else np.empty((0, h, w, 3), np.float32)
    labels = [r[1] for r in results]
    y = None if any(label is None for label in labels) or not labels else np.stack(labels)
    return x, y
