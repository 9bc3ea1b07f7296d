"""Evaluation of predicted class maps against labelled ones: confusion matrix, pixel accuracy,
per-class IoU and mean IoU, per-class precision and recall, and the boundary F1 score.

Class maps are integer arrays of shape (..., H, W): any leading axes are a batch of images.
The weld data set has three classes ([0263]): 0 contour, 1 inside, 2 outside
(:data:`CLASS_NAMES`). The patent states no evaluation measure; these are the usual ones of
semantic segmentation, evaluating the prediction of step 4.

References: [0258]-[0260], [0263]; claim 1, step 4.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from refseg.data.labels import CLASS_NAMES, CONTOUR
from refseg.errors import InputError, check_threshold

INFRASTRUCTURE = "evaluation measures of segmentations (the patent claims none)"

#: Default boundary tolerance of :func:`boundary_f1`, in pixels.
BOUNDARY_TOLERANCE = 2


# ------------------------------------------------------------------------------ validation
def _class_count(classes) -> int:
    try:
        if isinstance(classes, (bool, np.bool_)):
            raise TypeError
        n = operator.index(classes)
    except TypeError:
        raise InputError(f"classes: expected an integer >= 1, got {classes!r}") from None
    if n < 1:
        raise InputError(f"classes: expected an integer >= 1, got {n}")
    return n


def _class_map(array, name: str, *, image: bool = False) -> np.ndarray:
    """An integer array of shape (..., H, W) (exactly (H, W) when ``image``), not empty."""
    try:
        a = np.asarray(array)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name}: not an array: {exc}") from None
    if a.dtype.kind not in "iu":
        raise InputError(f"{name}: expected an integer class map, got dtype {a.dtype}")
    if image and a.ndim != 2:
        raise InputError(f"{name}: expected one class map of shape (H, W), got shape {a.shape}")
    if a.ndim < 2:
        raise InputError(f"{name}: expected class maps of shape (..., H, W), got shape {a.shape}")
    if a.size == 0:
        raise InputError(f"{name}: empty class map of shape {a.shape}")
    return a


def _pair(true, predicted, *, image: bool = False) -> tuple[np.ndarray, np.ndarray]:
    t = _class_map(true, "true", image=image)
    p = _class_map(predicted, "predicted", image=image)
    if t.shape != p.shape:
        raise InputError(f"predicted: shape {p.shape} differs from true's {t.shape}")
    return t, p


def _in_range(a: np.ndarray, name: str, classes: int) -> None:
    low, high = a.min(), a.max()
    if low < 0 or high >= classes:
        bad = low if low < 0 else high
        raise InputError(f"{name}: class values must be in 0..{classes - 1} "
                         f"(classes={classes}); found {bad}")


def _confusion(cm) -> np.ndarray:
    """A square, finite, non-negative confusion matrix with at least one count, as float64."""
    try:
        a = np.asarray(cm)
    except (TypeError, ValueError) as exc:
        raise InputError(f"cm: not an array: {exc}") from None
    if a.dtype.kind not in "iuf":
        raise InputError(f"cm: expected a numeric confusion matrix, got dtype {a.dtype}")
    if a.ndim != 2 or a.shape[0] != a.shape[1] or a.shape[0] == 0:
        raise InputError(f"cm: expected a square (classes, classes) matrix, got shape {a.shape}")
    a = a.astype(np.float64)
    if not np.isfinite(a).all() or (a < 0).any():
        raise InputError("cm: counts must be finite and >= 0")
    if a.sum() == 0:
        raise InputError("cm: holds no pixels (all counts are 0)")
    return a


# ------------------------------------------------------------------------ confusion matrix
def confusion_matrix(true, predicted, classes: int = 3) -> np.ndarray:
    """Confusion matrix of predicted against true class maps.

    Parameters
    ----------
    true, predicted : ndarray of shape (..., H, W), integer dtype
        Class maps of the same shape; leading axes are a batch (all pixels are pooled).
        Values in ``0 .. classes - 1``.
    classes : int, default 3
        Number of classes (3 for the weld data set: contour, inside, outside).

    Returns
    -------
    cm : ndarray of shape (classes, classes), int64
        ``cm[i, j]`` is the number of pixels of true class ``i`` predicted as class ``j``
        (rows true, columns predicted). It sums to the number of pixels.

    Raises
    ------
    InputError
        Non-integer dtype (floats and bools are refused), fewer than 2 axes, no pixels,
        shapes that differ, a value outside ``0 .. classes - 1``, or a bad ``classes``.

    Notes
    -----
    1. Each pixel gets the index ``classes * true + predicted`` into the flattened matrix.
    2. The indices are counted (``np.bincount``) and the counts reshaped to (classes, classes).

    References
    ----------
    [0263] (the three classes).
    """
    n = _class_count(classes)
    t, p = _pair(true, predicted)
    _in_range(t, "true", n)
    _in_range(p, "predicted", n)
    index = n * t.astype(np.int64).ravel() + p.astype(np.int64).ravel()
    return np.bincount(index, minlength=n * n).astype(np.int64).reshape(n, n)


def pixel_accuracy(cm) -> float:
    """Fraction of pixels whose predicted class is the true class.

    Parameters
    ----------
    cm : ndarray of shape (classes, classes)
        Confusion matrix of :func:`confusion_matrix` (rows true, columns predicted); counts
        finite and >= 0, at least one non-zero.

    Returns
    -------
    float
        ``trace(cm) / sum(cm)``, in [0, 1].
    """
    a = _confusion(cm)
    return float(np.trace(a) / a.sum())


def class_iou(cm) -> np.ndarray:
    """Intersection over union of each class.

    Parameters
    ----------
    cm : ndarray of shape (classes, classes)
        Confusion matrix (rows true, columns predicted).

    Returns
    -------
    iou : ndarray of shape (classes,), float64
        ``TP / (TP + FP + FN)`` per class, with ``TP = cm[c, c]``, ``FP`` the rest of column
        ``c`` and ``FN`` the rest of row ``c``. NaN for a class absent from both the true and
        the predicted maps (``TP + FP + FN == 0``): its IoU is undefined, not 0 or 1.
    """
    a = _confusion(cm)
    tp = np.diag(a)
    union = a.sum(axis=0) + a.sum(axis=1) - tp
    iou = np.full(a.shape[0], np.nan)
    present = union > 0
    iou[present] = tp[present] / union[present]
    return iou


def mean_iou(cm) -> float:
    """Mean IoU over the classes present in the true or the predicted maps.

    Parameters
    ----------
    cm : ndarray of shape (classes, classes)
        Confusion matrix (rows true, columns predicted).

    Returns
    -------
    float
        Mean of :func:`class_iou` over its non-NaN entries (``np.nanmean``); a class absent from
        both maps neither raises nor lowers the mean. There is always at least one present class,
        since ``cm`` must hold a pixel.
    """
    return float(np.nanmean(class_iou(cm)))


def class_precision_recall(cm) -> tuple[np.ndarray, np.ndarray]:
    """Precision and recall of each class.

    Parameters
    ----------
    cm : ndarray of shape (classes, classes)
        Confusion matrix (rows true, columns predicted).

    Returns
    -------
    precision : ndarray of shape (classes,), float64
        ``TP / (TP + FP)``: the fraction of the pixels predicted as the class that are of it.
        NaN for a class never predicted.
    recall : ndarray of shape (classes,), float64
        ``TP / (TP + FN)``: the fraction of the pixels of the class predicted as it.
        NaN for a class absent from the true maps.
    """
    a = _confusion(cm)
    tp = np.diag(a)

    def ratio(total):
        out = np.full(a.shape[0], np.nan)
        out[total > 0] = tp[total > 0] / total[total > 0]
        return out

    return ratio(a.sum(axis=0)), ratio(a.sum(axis=1))


# ------------------------------------------------------------------------------ boundary F1
def boundary_mask(labels) -> np.ndarray:
    """Boundary pixels of class maps.

    Parameters
    ----------
    labels : ndarray of shape (..., H, W), integer dtype
        Class maps; leading axes are a batch, each (H, W) map is treated on its own.

    Returns
    -------
    boundary : ndarray of shape (..., H, W), bool
        True at a pixel whose 4-neighbourhood (the pixels above, below, left and right of it
        within the same image) holds a class other than its own.

    Notes
    -----
    1. Compare each pixel with its right neighbour and with the one below it.
    2. Where they differ, mark both pixels of the pair.
    The boundary is thus two pixels thick across each change of class, one on either side.
    It is class-agnostic: any change of class counts, whichever the two classes. The image edge
    is not a boundary (pixels outside the image are no one's neighbours), so a map of one class
    has no boundary.
    """
    a = _class_map(labels, "labels")
    return _boundary(a)


def _boundary(a: np.ndarray) -> np.ndarray:
    out = np.zeros(a.shape, dtype=bool)
    across = a[..., :, 1:] != a[..., :, :-1]      # horizontal neighbour pairs
    out[..., :, 1:] |= across
    out[..., :, :-1] |= across
    down = a[..., 1:, :] != a[..., :-1, :]        # vertical neighbour pairs
    out[..., 1:, :] |= down
    out[..., :-1, :] |= down
    return out


def _matched(boundary: np.ndarray, reference: np.ndarray, tolerance: float) -> int:
    """How many pixels of ``boundary`` lie within ``tolerance`` of a ``reference`` pixel."""
    distance = ndimage.distance_transform_edt(~reference)
    # squared distances on the pixel grid are integers: round away the sqrt's error and
    # compare exactly, so that e.g. a diagonal neighbour is within tolerance sqrt(2)
    squared = np.rint(distance[boundary] ** 2)
    return int(np.count_nonzero(squared <= tolerance * tolerance))


def boundary_precision_recall(true, predicted, tolerance: float = BOUNDARY_TOLERANCE
                              ) -> tuple[float, float, float]:
    """Boundary precision, recall and F1 of one predicted class map.

    Parameters
    ----------
    true, predicted : ndarray of shape (H, W), integer dtype
        One true and one predicted class map of the same shape (any integer labels).
    tolerance : float, default 2
        Largest Euclidean distance, in pixels, at which a boundary pixel counts as matched;
        finite and >= 0 (0: only the same pixel matches).

    Returns
    -------
    precision, recall, f1 : float
        Precision: the fraction of predicted boundary pixels within ``tolerance`` of a true
        boundary pixel. Recall: the fraction of true boundary pixels within ``tolerance`` of a
        predicted boundary pixel. F1: their harmonic mean ``2 P R / (P + R)``, 0 when both are 0.

    Notes
    -----
    1. Boundaries of both maps as in :func:`boundary_mask`.
    2. Distance of every pixel to the nearest true (resp. predicted) boundary pixel by the exact
       Euclidean distance transform (``scipy.ndimage.distance_transform_edt``).
    3. Count the predicted (resp. true) boundary pixels at distance <= ``tolerance``.
    Empty boundaries (a map of one class): when both are empty, precision = recall = F1 = 1
    (nothing to find, nothing falsely found); when only one is empty, F1 = 0, with
    precision 1 and recall 0 when the prediction has none (nothing falsely found, nothing
    found) and precision 0 and recall 1 when the truth has none.
    The score is the BF score of Csurka et al. (2013) computed on the class-agnostic boundary
    of the whole map, not per class and averaged, and with the tolerance in pixels rather than
    as a fraction of the image diagonal.

    References
    ----------
    G. Csurka, D. Larlus, F. Perronnin, "What is a good evaluation measure for semantic
    segmentation?", BMVC 2013.
    """
    t, p = _pair(true, predicted, image=True)
    tol = check_threshold(tolerance, "tolerance")
    return _boundary_scores(_boundary(t), _boundary(p), tol)


def _boundary_scores(tb: np.ndarray, pb: np.ndarray, tol: float) -> tuple[float, float, float]:
    n_true, n_pred = int(np.count_nonzero(tb)), int(np.count_nonzero(pb))
    if n_true == 0 and n_pred == 0:
        return 1.0, 1.0, 1.0
    if n_pred == 0:
        return 1.0, 0.0, 0.0
    if n_true == 0:
        return 0.0, 1.0, 0.0
    precision = _matched(pb, tb, tol) / n_pred
    recall = _matched(tb, pb, tol) / n_true
    if precision + recall == 0:
        return precision, recall, 0.0
    return precision, recall, 2.0 * precision * recall / (precision + recall)


def boundary_f1(true, predicted, tolerance: float = BOUNDARY_TOLERANCE) -> float:
    """Boundary F1 score (BF score) of one predicted class map.

    Parameters
    ----------
    true, predicted : ndarray of shape (H, W), integer dtype
        One true and one predicted class map of the same shape.
    tolerance : float, default 2
        Matching distance in pixels, finite and >= 0.

    Returns
    -------
    float
        In [0, 1]; the F1 of :func:`boundary_precision_recall`, whose Notes give the boundary,
        the matching and the conventions for empty boundaries (both empty: 1.0; one empty: 0.0).
        Symmetric in ``true`` and ``predicted``.
    """
    return boundary_precision_recall(true, predicted, tolerance)[2]


def mean_boundary_f1(true, predicted, tolerance: float = BOUNDARY_TOLERANCE) -> float:
    """Boundary F1 averaged over a batch of images.

    Parameters
    ----------
    true, predicted : ndarray of shape (..., H, W), integer dtype
        Class maps of the same shape; every (H, W) map is one image.
    tolerance : float, default 2
        Matching distance in pixels, finite and >= 0.

    Returns
    -------
    float
        The mean of :func:`boundary_f1` over the images (each image weighs the same).
    """
    t, p = _pair(true, predicted)
    tol = check_threshold(tolerance, "tolerance")
    tb = _boundary(t).reshape(-1, *t.shape[-2:])
    pb = _boundary(p).reshape(-1, *p.shape[-2:])
    return float(np.mean([_boundary_scores(a, b, tol)[2] for a, b in zip(tb, pb)]))


# ------------------------------------------------------------------------------ all of it
def contour_coverage(feature_map, classes) -> tuple[int, int]:
    """How much of the labelled contour a feature map keeps.

    Parameters
    ----------
    feature_map : ndarray of shape (M, N)
        Nonzero on a feature pixel.
    classes : ndarray of shape (M, N)
        Class ids (0 contour).

    Returns
    -------
    (covered, total) : (int, int)
        The contour pixels within 1 pixel (4-neighbourhood) of a feature pixel, and all of
        them; pool them over images and divide for the share.
    """
    f, c = np.asarray(feature_map), np.asarray(classes)
    if f.shape != c.shape or f.ndim != 2:
        raise InputError(f"feature map {f.shape} and classes {c.shape}: expected one 2-D shape")
    near = ndimage.binary_dilation(f != 0, iterations=1)
    contour = c == CONTOUR
    return int((near & contour).sum()), int(contour.sum())


def _json_float(x) -> float | None:
    x = float(x)
    return None if np.isnan(x) else x


@dataclass(frozen=True, eq=False)
class Scores:
    """The scores of :func:`evaluate`.

    Attributes
    ----------
    pixel_accuracy : float
        :func:`pixel_accuracy` of the pooled confusion matrix.
    class_iou : ndarray of shape (classes,), float64
        :func:`class_iou`; NaN for a class absent from both maps.
    mean_iou : float
        :func:`mean_iou`.
    boundary_f1 : float
        :func:`mean_boundary_f1`: boundary F1 averaged over the images.
    confusion : ndarray of shape (classes, classes), int64
        Pooled over all pixels of all images; rows true, columns predicted.
    tolerance : float
        The boundary tolerance used, in pixels.
    """

    pixel_accuracy: float
    class_iou: np.ndarray
    mean_iou: float
    boundary_f1: float
    confusion: np.ndarray
    tolerance: float

    @property
    def class_names(self) -> tuple[str, ...]:
        """:data:`CLASS_NAMES` for three classes, else the class values as strings."""
        n = len(self.class_iou)
        return CLASS_NAMES if n == len(CLASS_NAMES) else tuple(str(i) for i in range(n))

    def as_dict(self) -> dict:
        """A JSON-ready dict: floats, ints, lists and strings only; NaN becomes None."""
        return {
            "pixel_accuracy": _json_float(self.pixel_accuracy),
            "mean_iou": _json_float(self.mean_iou),
            "boundary_f1": _json_float(self.boundary_f1),
            "boundary_tolerance": float(self.tolerance),
            "classes": list(self.class_names),
            "class_iou": [_json_float(v) for v in self.class_iou],
            "confusion_matrix": [[int(v) for v in row] for row in self.confusion],
        }


def evaluate(true, predicted, *, classes: int = 3,
             tolerance: float = BOUNDARY_TOLERANCE) -> Scores:
    """All the scores of predicted against true class maps.

    Parameters
    ----------
    true, predicted : ndarray of shape (..., H, W), integer dtype
        Class maps of the same shape, values in ``0 .. classes - 1``; leading axes a batch.
    classes : int, default 3
        Number of classes.
    tolerance : float, default 2
        Boundary matching distance in pixels.

    Returns
    -------
    Scores
        Pixel accuracy, per-class IoU and mean IoU of the confusion matrix pooled over all
        pixels; boundary F1 as the mean over the images; the confusion matrix itself.
    """
    cm = confusion_matrix(true, predicted, classes)
    return Scores(pixel_accuracy=pixel_accuracy(cm), class_iou=class_iou(cm),
                  mean_iou=mean_iou(cm),
                  boundary_f1=mean_boundary_f1(true, predicted, tolerance),
                  confusion=cm, tolerance=check_threshold(tolerance, "tolerance"))
