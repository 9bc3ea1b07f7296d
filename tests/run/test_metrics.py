"""Evaluation metrics of predicted class maps (classes of [0263]).

Expected numbers are worked out by hand in the comments; the properties compare with
brute-force loops written here, not with the code under test."""
import json
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from refseg.run import metrics as mt
from refseg.errors import InputError
from strategies import class_map_pairs

# the patent claims no evaluation measure: these check refseg's tools for judging step 4
pytestmark = pytest.mark.infrastructure

# 4x4 example: classes 0 contour, 1 inside, 2 outside
TRUE_4x4 = np.array([[0, 0, 1, 1],
                     [0, 0, 1, 1],
                     [2, 2, 2, 2],
                     [2, 2, 2, 2]], dtype=np.uint8)
PRED_4x4 = np.array([[0, 1, 1, 1],
                     [0, 0, 1, 2],
                     [2, 0, 2, 2],
                     [2, 2, 2, 1]], dtype=np.uint8)
# by hand, pixel by pixel: true 0 -> predicted 0, 1, 0, 0; true 1 -> 1, 1, 1, 2;
# true 2 -> 2, 0, 2, 2, 2, 2, 2, 1
CM_4x4 = [[3, 1, 0],
          [0, 3, 1],
          [1, 1, 6]]


# ------------------------------------------------------------------------- brute force
def brute_confusion(true, predicted, classes):
    cm = [[0] * classes for _ in range(classes)]
    for t, p in zip(np.asarray(true).ravel().tolist(), np.asarray(predicted).ravel().tolist()):
        cm[t][p] += 1
    return cm


def brute_iou(true, predicted, classes):
    """IoU from the pixel sets: |T_c and P_c| / |T_c or P_c|, NaN for an empty union."""
    t, p = np.asarray(true).ravel().tolist(), np.asarray(predicted).ravel().tolist()
    out = []
    for c in range(classes):
        inter = sum(1 for a, b in zip(t, p) if a == c and b == c)
        union = sum(1 for a, b in zip(t, p) if a == c or b == c)
        out.append(inter / union if union else math.nan)
    return out


def brute_boundary(labels):
    rows, cols = labels.shape
    out = np.zeros((rows, cols), bool)
    for r in range(rows):
        for c in range(cols):
            for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
                rr, cc = r + dr, c + dc
                if 0 <= rr < rows and 0 <= cc < cols and labels[rr, cc] != labels[r, c]:
                    out[r, c] = True
    return out


def brute_bf(true, predicted, tolerance):
    """Boundary F1 by pairwise distances between boundary pixel coordinates."""
    tb, pb = np.argwhere(brute_boundary(true)), np.argwhere(brute_boundary(predicted))
    if len(tb) == 0 and len(pb) == 0:
        return 1.0
    if len(tb) == 0 or len(pb) == 0:
        return 0.0
    d2 = ((pb[:, None, :] - tb[None, :, :]) ** 2).sum(axis=2)   # (pred, true) squared
    precision = np.mean(d2.min(axis=1) <= tolerance ** 2)
    recall = np.mean(d2.min(axis=0) <= tolerance ** 2)
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


# ------------------------------------------------------------------ hand-computed cases
def test_confusion_matrix_by_hand():
    cm = mt.confusion_matrix(TRUE_4x4, PRED_4x4)
    assert cm.dtype == np.int64 and cm.shape == (3, 3)
    assert cm.tolist() == CM_4x4
    # rows are the truth: swapping the maps transposes the matrix
    assert mt.confusion_matrix(PRED_4x4, TRUE_4x4).tolist() == np.transpose(CM_4x4).tolist()


def test_scores_by_hand():
    cm = np.array(CM_4x4)
    assert mt.pixel_accuracy(cm) == 12 / 16               # diagonal 3 + 3 + 6
    # union = row + column - diagonal: class 0: 4 + 4 - 3 = 5; 1: 4 + 5 - 3 = 6; 2: 8 + 7 - 6 = 9
    np.testing.assert_allclose(mt.class_iou(cm), [3 / 5, 3 / 6, 6 / 9], rtol=1e-15)
    assert mt.mean_iou(cm) == pytest.approx((0.6 + 0.5 + 2 / 3) / 3, rel=1e-15)   # 53/90
    precision, recall = mt.class_precision_recall(cm)
    np.testing.assert_allclose(precision, [3 / 4, 3 / 5, 6 / 7], rtol=1e-15)   # / column sums
    np.testing.assert_allclose(recall, [3 / 4, 3 / 4, 6 / 8], rtol=1e-15)      # / row sums


def test_absent_class_is_nan_and_left_out_of_the_mean():
    true = np.array([[0, 1], [1, 0]])
    cm = mt.confusion_matrix(true, true)
    assert cm.tolist() == [[2, 0, 0], [0, 2, 0], [0, 0, 0]]
    iou = mt.class_iou(cm)
    assert iou[:2].tolist() == [1.0, 1.0] and np.isnan(iou[2])
    assert mt.mean_iou(cm) == 1.0
    precision, recall = mt.class_precision_recall(cm)
    assert np.isnan(precision[2]) and np.isnan(recall[2])
    # a class in the truth only is not absent: IoU 0, recall 0, precision NaN (never predicted)
    cm = mt.confusion_matrix(true, np.zeros_like(true))
    assert cm.tolist() == [[2, 0, 0], [2, 0, 0], [0, 0, 0]]
    iou = mt.class_iou(cm)
    assert iou[0] == 0.5 and iou[1] == 0.0 and np.isnan(iou[2])
    assert mt.mean_iou(cm) == 0.25
    precision, recall = mt.class_precision_recall(cm)
    assert precision[0] == 0.5 and np.isnan(precision[1]) and recall.tolist()[:2] == [1.0, 0.0]


def test_confusion_matrix_pools_a_batch():
    true = np.stack([TRUE_4x4, PRED_4x4, np.zeros((4, 4), np.uint8)])[:, None]   # (3, 1, 4, 4)
    pred = np.stack([PRED_4x4, TRUE_4x4, np.full((4, 4), 2, np.uint8)])[:, None]
    cm = mt.confusion_matrix(true, pred)
    # the 4x4 matrix, its transpose, and 16 pixels of true 0 predicted 2
    expected = np.array(CM_4x4) + np.transpose(CM_4x4) + [[0, 0, 16], [0, 0, 0], [0, 0, 0]]
    assert cm.tolist() == expected.tolist() and cm.sum() == 48


def test_other_class_counts():
    true = np.array([[0, 1, 2, 3, 4]])
    assert mt.confusion_matrix(true, true, classes=5).tolist() == np.eye(5, dtype=int).tolist()
    assert mt.confusion_matrix(np.zeros((1, 2), int), np.zeros((1, 2), int), 1).tolist() == [[2]]


def test_boundary_mask_by_hand():
    labels = np.array([[0, 0, 1, 1],
                       [0, 0, 1, 1],
                       [2, 2, 2, 2]])
    # (0, 1) meets 1 on its right; (1, 0) meets 2 below; (0, 0) meets only 0s; every pixel of
    # row 2 meets a 0 or a 1 above it
    expected = np.array([[0, 1, 1, 0],
                         [1, 1, 1, 1],
                         [1, 1, 1, 1]], bool)
    assert mt.boundary_mask(labels).tolist() == expected.tolist()
    assert not mt.boundary_mask(np.full((3, 5), 2)).any()           # one class: no boundary
    batch = np.stack([labels, np.full((3, 4), 1)])
    out = mt.boundary_mask(batch)
    assert out.shape == (2, 3, 4) and out[0].tolist() == expected.tolist() and not out[1].any()


def halves(left_cols, rows=8, cols=8):
    """Class 1 in the first ``left_cols`` columns, class 2 in the rest."""
    m = np.full((rows, cols), 2, np.uint8)
    m[:, :left_cols] = 1
    return m


@pytest.mark.parametrize("shift, tolerance, expected", [
    # truth: boundary columns 3 and 4 (16 pixels). Shift 1: predicted boundary columns 4 and 5.
    (0, 0, 1.0),
    (1, 0, 0.5),     # column 4 matches exactly, 5 does not (and 3 is unmatched): P = R = 8/16
    (1, 1, 1.0),     # every pixel is within 1 of the other boundary
    (1, 2, 1.0),
    # shift 3: predicted columns 6 and 7, at distances 2 and 3 from the truth's column 4;
    # the truth's columns 3 and 4 are at 3 and 2 from column 6
    (3, 1, 0.0),
    (3, 2, 0.5),     # P = R = 8/16
    (3, 2.9, 0.5),
    (3, 3, 1.0),
])
def test_boundary_f1_of_a_shifted_boundary(shift, tolerance, expected):
    true, pred = halves(4), halves(4 + shift)
    assert mt.boundary_f1(true, pred, tolerance) == expected
    assert mt.boundary_f1(pred, true, tolerance) == expected


def test_boundary_precision_and_recall_differ():
    true = np.zeros((6, 6), np.uint8)
    true[:, 3:] = 2                   # boundary: columns 2 and 3, 12 pixels
    pred = true.copy()
    pred[5, 5] = 1                    # adds (5, 5), (4, 5), (5, 4) to the boundary: 15 pixels
    # tolerance 1: (5, 4) is 1 from column 3; (5, 5) and (4, 5) are 2 away -> P = 13/15;
    # every true boundary pixel is also predicted -> R = 1; F1 = 2 (13/15) / (28/15) = 13/14
    precision, recall, f1 = mt.boundary_precision_recall(true, pred, 1)
    assert precision == pytest.approx(13 / 15, rel=1e-15) and recall == 1.0
    assert f1 == pytest.approx(13 / 14, rel=1e-15)
    assert mt.boundary_precision_recall(pred, true, 1) == pytest.approx((1.0, 13 / 15, 13 / 14))
    assert mt.boundary_f1(true, pred, 2) == 1.0


@pytest.mark.parametrize("tolerance, expected", [
    (0, 0.4), (1, 0.6), (1.41, 0.6), (math.sqrt(2), 1.0), (2, 1.0)])
def test_boundary_f1_diagonal_distances(tolerance, expected):
    """One-pixel blobs at (1, 1) and (2, 2) of a 5x5 map: two plus-shaped boundaries of 5
    pixels sharing (1, 2) and (2, 1). The other predicted pixels: (2, 2) is 1 from (1, 2);
    (3, 2) and (2, 3) are sqrt(2) away; the same for the truth by symmetry. Tolerance 0:
    P = R = 2/5; 1: 3/5; sqrt(2): 1."""
    true = np.zeros((5, 5), np.int64)
    pred = np.zeros((5, 5), np.int64)
    true[1, 1] = pred[2, 2] = 1
    assert mt.boundary_f1(true, pred, tolerance) == pytest.approx(expected, rel=1e-15)


def test_boundary_f1_empty_boundaries():
    one, other, split = np.zeros((4, 4), int), np.full((4, 4), 2), halves(2, 4, 4)
    assert mt.boundary_f1(one, other) == 1.0                   # both empty: nothing to find
    assert mt.boundary_precision_recall(one, other) == (1.0, 1.0, 1.0)
    assert mt.boundary_f1(split, one) == 0.0                   # prediction has none
    assert mt.boundary_precision_recall(split, one) == (1.0, 0.0, 0.0)
    assert mt.boundary_f1(one, split) == 0.0                   # truth has none
    assert mt.boundary_precision_recall(one, split) == (0.0, 1.0, 0.0)


def test_mean_boundary_f1_averages_images():
    true = np.stack([halves(4), halves(4), halves(4)])
    pred = np.stack([halves(4), halves(5), halves(7)])       # F1 at tolerance 0: 1, 0.5, 0
    assert mt.mean_boundary_f1(true, pred, 0) == pytest.approx(0.5, rel=1e-15)
    assert mt.mean_boundary_f1(true[:, None], pred[:, None], 0) == pytest.approx(0.5)
    assert mt.mean_boundary_f1(true[0], pred[1], 0) == 0.5   # a single (H, W) image


def test_evaluate_and_as_dict():
    scores = mt.evaluate(TRUE_4x4, PRED_4x4, tolerance=1)
    assert scores.confusion.tolist() == CM_4x4
    assert scores.pixel_accuracy == 0.75
    assert scores.mean_iou == pytest.approx(53 / 90, rel=1e-15)
    assert scores.boundary_f1 == mt.boundary_f1(TRUE_4x4, PRED_4x4, 1)
    assert scores.class_names == ("contour", "inside", "outside")
    d = scores.as_dict()
    assert json.loads(json.dumps(d, allow_nan=False)) == d
    assert d["confusion_matrix"] == CM_4x4 and d["boundary_tolerance"] == 1.0
    assert d["class_iou"] == pytest.approx([0.6, 0.5, 2 / 3], rel=1e-15)
    # an absent class: NaN in the scores, None in the dict
    true = np.array([[0, 1], [1, 0]])
    scores = mt.evaluate(true, true)
    assert np.isnan(scores.class_iou[2])
    d = scores.as_dict()
    assert d["class_iou"] == [1.0, 1.0, None] and d["mean_iou"] == 1.0
    assert json.dumps(d, allow_nan=False)
    assert mt.evaluate(true, true, classes=2).as_dict()["classes"] == ["0", "1"]


# ----------------------------------------------------------------------------- properties
@given(class_map_pairs(batch=2))
def test_confusion_matrix_counts_every_pixel(pair):
    true, pred = pair
    cm = mt.confusion_matrix(true, pred)
    assert cm.dtype == np.int64 and cm.sum() == true.size
    assert cm.tolist() == brute_confusion(true, pred, 3)


@given(class_map_pairs(batch=1))
def test_accuracy_and_iou_equal_brute_force(pair):
    true, pred = pair
    cm = mt.confusion_matrix(true, pred)
    assert mt.pixel_accuracy(cm) == pytest.approx(np.mean(true == pred), rel=1e-15)
    t, p = true.ravel().tolist(), pred.ravel().tolist()
    assert mt.pixel_accuracy(cm) == pytest.approx(sum(a == b for a, b in zip(t, p)) / len(t))
    iou, expected = mt.class_iou(cm), brute_iou(true, pred, 3)
    np.testing.assert_allclose(iou, expected, rtol=1e-15)    # NaNs in the same places
    present = [v for v in expected if not math.isnan(v)]
    assert mt.mean_iou(cm) == pytest.approx(sum(present) / len(present), rel=1e-15)


@given(class_map_pairs(batch=1))
def test_perfect_prediction(pair):
    true, _ = pair
    scores = mt.evaluate(true, true)
    assert scores.pixel_accuracy == 1.0 and scores.mean_iou == 1.0 and scores.boundary_f1 == 1.0
    present = np.isin(np.arange(3), true)
    assert (scores.class_iou[present] == 1.0).all() and np.isnan(scores.class_iou[~present]).all()
    assert (np.diag(scores.confusion) == np.bincount(true.ravel(), minlength=3)).all()


@given(class_map_pairs(max_side=10), st.sampled_from([0, 1, 1.5, 2, 3]))
def test_boundary_f1_equals_brute_force_and_is_symmetric(pair, tolerance):
    true, pred = pair
    assert (mt.boundary_mask(true) == brute_boundary(true)).all()
    f1 = mt.boundary_f1(true, pred, tolerance)
    assert 0.0 <= f1 <= 1.0
    assert f1 == pytest.approx(brute_bf(true, pred, tolerance), abs=1e-12)
    assert mt.boundary_f1(pred, true, tolerance) == pytest.approx(f1, abs=1e-15)
    p, r, _ = mt.boundary_precision_recall(true, pred, tolerance)
    assert mt.boundary_precision_recall(pred, true, tolerance)[:2] == (r, p)


@given(class_map_pairs(max_side=8, batch=2))
def test_mean_boundary_f1_is_the_mean_over_images(pair):
    true, pred = pair
    images = zip(true.reshape(-1, *true.shape[-2:]), pred.reshape(-1, *pred.shape[-2:]))
    expected = np.mean([mt.boundary_f1(t, p) for t, p in images])
    assert mt.mean_boundary_f1(true, pred) == pytest.approx(expected, rel=1e-15)
    assert mt.evaluate(true, pred).boundary_f1 == pytest.approx(expected, rel=1e-15)


# ------------------------------------------------------------------------------ bad input
GOOD = np.zeros((3, 3), np.uint8)


@pytest.mark.parametrize("call, message", [
    (lambda: mt.confusion_matrix(GOOD, np.zeros((3, 4), np.uint8)),
     r"predicted: shape \(3, 4\) differs from true's \(3, 3\)"),
    (lambda: mt.confusion_matrix(GOOD + 3, GOOD), r"true: class values must be in 0\.\.2"),
    (lambda: mt.confusion_matrix(GOOD, GOOD.astype(np.int8) - 1),
     r"predicted: class values .* found -1"),
    (lambda: mt.confusion_matrix(GOOD, GOOD + 1, classes=1), r"predicted: .* in 0\.\.0"),
    (lambda: mt.confusion_matrix(GOOD.astype(float), GOOD), "true: expected an integer"),
    (lambda: mt.confusion_matrix(GOOD, GOOD.astype(np.float32)), "predicted: .*float32"),
    (lambda: mt.confusion_matrix(GOOD.astype(bool), GOOD), "true: .*dtype bool"),
    (lambda: mt.confusion_matrix(np.zeros(3, int), np.zeros(3, int)), r"true: .*\(\.\.\., H, W\)"),
    (lambda: mt.confusion_matrix(np.zeros((0, 3), int), np.zeros((0, 3), int)), "true: empty"),
    (lambda: mt.confusion_matrix(GOOD, GOOD, classes=0), "classes: expected an integer >= 1"),
    (lambda: mt.confusion_matrix(GOOD, GOOD, classes=2.5), "classes: "),
    (lambda: mt.boundary_f1(GOOD[None], GOOD[None]), r"true: expected one class map of shape"),
    (lambda: mt.boundary_f1(GOOD, GOOD[:2]), r"predicted: shape \(2, 3\) differs"),
    (lambda: mt.boundary_f1(GOOD, GOOD * 0.5), "predicted: expected an integer"),
    (lambda: mt.boundary_f1(GOOD, GOOD, tolerance=-1), "tolerance: expected a finite number"),
    (lambda: mt.mean_boundary_f1(GOOD, GOOD, tolerance=math.nan), "tolerance: "),
    (lambda: mt.boundary_mask(GOOD.astype(float)), "labels: expected an integer"),
    (lambda: mt.evaluate(GOOD, GOOD + 5), "predicted: class values"),
    (lambda: mt.pixel_accuracy(np.ones((2, 3))), r"cm: expected a square"),
    (lambda: mt.class_iou(-np.eye(3)), "cm: counts must be finite and >= 0"),
    (lambda: mt.mean_iou(np.zeros((3, 3), int)), "cm: holds no pixels"),
    (lambda: mt.class_precision_recall([["a"]]), "cm: expected a numeric"),
])
def test_bad_input_is_one_line(call, message):
    with pytest.raises(InputError, match=message) as info:
        call()
    assert "\n" not in str(info.value)


@pytest.mark.infrastructure
def test_the_evaluation_panel_takes_images_of_different_sizes():
    """A data set may mix image sizes (``dataset check`` accepts it; the network input is
    resized): the panel pads narrower rows with white instead of failing."""
    from refseg.data.labels import LABEL_COLOURS
    from refseg.run.evaluation import comparison_panel

    wide = (np.full((4, 10, 3), 9, np.uint8), np.zeros((4, 10), np.uint8))
    narrow = (np.full((6, 3, 3), 7, np.uint8), np.ones((6, 3), np.uint8))
    predictions = [[np.full((4, 10), 2, np.uint8), np.full((6, 3), 2, np.uint8)]]
    panel = comparison_panel([wide, narrow], predictions)
    width = 3 * 10 + 2 * 4
    assert panel.shape == (4 + 4 + 6, width, 3)
    row = panel[8:]
    assert (row[:, :3] == 7).all() and (row[:, 7:10] == LABEL_COLOURS[1]).all()
    assert (row[:, 14:17] == LABEL_COLOURS[2]).all() and (row[:, 17:] == 255).all()


def test_contour_coverage_counts_contour_pixels_next_to_a_feature_pixel():
    classes = np.full((5, 6), 2, np.uint8)
    classes[1, :] = 0                      # a contour row of 6 pixels
    classes[3, 2] = 0                      # and a lone one
    feature = np.zeros((5, 6), np.uint8)
    feature[2, 0] = 1                      # touches the contour at (1, 0) (4-neighbours)
    feature[0, 4] = 1                      # touches (1, 4) only; (1, 3), (1, 5) are diagonal
    assert mt.contour_coverage(feature, classes) == (2, 7)
    assert mt.contour_coverage(np.ones((5, 6)), classes) == (7, 7)
    assert mt.contour_coverage(feature, np.full((5, 6), 1)) == (0, 0)
    with pytest.raises(InputError, match="one 2-D shape"):
        mt.contour_coverage(feature, classes[:4])
