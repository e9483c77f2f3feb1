"""Average precision on cases worked by hand (COCO's 101-point interpolation and greedy matching)."""

import math

import pytest
import torch

from aiayn.evaluation import average_precision


def dets(boxes, scores, labels=None):
    return {"boxes": torch.tensor(boxes, dtype=torch.float32), "scores": torch.tensor(scores),
            "labels": torch.tensor(labels if labels is not None else [0] * len(scores))}


def gts(boxes, labels=None):
    return {"boxes": torch.tensor(boxes, dtype=torch.float32),
            "labels": torch.tensor(labels if labels is not None else [0] * len(boxes))}


A, B, FAR = [0, 0, 10, 10], [20, 20, 30, 30], [50, 50, 60, 60]


def test_a_false_positive_between_two_hits():
    # Scores .9 hit, .8 miss, .7 hit: recall .5 .5 1, precision 1 .5 .67 -> interpolated 1 .67 .67.
    # Recall levels 0 .. .50 (51 of them) get precision 1, the 50 above get 2/3.
    r = average_precision([dets([A, FAR, B], [0.9, 0.8, 0.7])], [gts([A, B])])
    assert r["map50"] == pytest.approx((51 * 1 + 50 * 2 / 3) / 101)
    assert r["map"] == pytest.approx(r["map50"])  # exact boxes: the same at every IoU threshold


def test_a_duplicate_is_a_false_positive_and_order_matters():
    assert average_precision([dets([A, A], [0.9, 0.8])], [gts([A])])["map50"] == pytest.approx(1.0)
    # A miss ranked first: recall 0 then 1, precision 0 then 1/2 -> 1/2 at every recall level.
    assert average_precision([dets([FAR, A], [0.9, 0.8])], [gts([A])])["map50"] == pytest.approx(0.5)


def test_classes_are_averaged_and_a_wrong_class_is_a_false_positive():
    # Image 1: an object of class 0, found. Image 2: an object of class 1, reported as class 0 with a higher score.
    r = average_precision([dets([A], [0.9], [0]), dets([B], [0.95], [0])], [gts([A], [0]), gts([B], [1])])
    assert r["per_class"] == {0: pytest.approx(0.5), 1: 0.0}  # class 0: miss then hit; class 1: never found
    assert r["map50"] == pytest.approx(0.25)


def test_iou_thresholds_coco_averages_over():
    # IoU of [0,0,10,6.25] with [0,0,10,10] is 0.625: a hit at 0.50, 0.55, 0.60, a miss at 0.65 .. 0.95.
    r = average_precision([dets([[0, 0, 10, 6.25]], [0.9])], [gts([A])])
    assert (r["map50"], r["map75"]) == (1.0, 0.0)
    assert r["map"] == pytest.approx(0.3)


def test_a_detection_takes_the_free_ground_truth_it_overlaps_most():
    # The first detection overlaps box a (IoU 2/3) more than box b (IoU 0.54); taking b would leave the
    # second detection, which is b exactly, without a match.
    a, b = [0, 0, 10, 10], [5, 0, 15, 10]
    r = average_precision([dets([[2, 0, 12, 10], b], [0.9, 0.8])], [gts([b, a])])
    assert r["map50"] == pytest.approx(1.0)


def test_no_detections_no_ground_truth_and_classes_without_ground_truth():
    assert average_precision([dets([], [])], [gts([A])])["map50"] == 0.0
    assert math.isnan(average_precision([dets([A], [0.9])], [gts([])])["map"])
    # A class with detections but no ground truth is left out of the mean, as COCO leaves it out.
    r = average_precision([dets([A, B], [0.9, 0.8], [0, 7])], [gts([A], [0])])
    assert r["per_class"] == {0: 1.0} and r["map50"] == 1.0
    with pytest.raises(ValueError, match="detections"):
        average_precision([], [gts([A])])
