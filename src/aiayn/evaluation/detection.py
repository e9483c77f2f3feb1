"""Average precision of detections, as the COCO evaluation computes it (DETR reports it, section 4).

For one class and one IoU threshold t, over all images:

    1. sort the class's detections by score, highest first;
    2. in that order, a detection is a true positive if some ground-truth box of its image not yet taken
       has IoU >= t with it (it takes the one with the highest IoU), else a false positive;
    3. precision p_k and recall r_k after each detection; precision made non-increasing in recall
       (p_k <- max_{j >= k} p_j, the "interpolated" precision);
    4. AP = the mean over 101 recall levels r = 0, 0.01, ..., 1 of the precision at the first point whose
       recall reaches r (0 if none does).

``map50`` is the mean AP over classes at t = 0.5 (VOC's threshold, COCO's AP50); ``map`` also averages
over t = 0.50, 0.55, ..., 0.95 (COCO's AP). Classes without ground truth are left out of the means, as
COCO leaves them out; a class with ground truth but no detection has AP 0. COCO's area ranges, crowd
regions and 100-detections cap are not modelled.

Shapes: n detections of an image, m ground-truth boxes; boxes are corners (x0, y0, x1, y1), any unit.
"""

from __future__ import annotations

import numpy as np
from torch import Tensor

COCO_THRESHOLDS = tuple(round(0.5 + 0.05 * i, 2) for i in range(10))
RECALLS = np.linspace(0.0, 1.0, 101)


def _iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU ``(n, m)`` of corner boxes ``(n, 4)`` and ``(m, 4)``."""
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.clip(rb - lt, 0, None).prod(-1)  # (n, m)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    union = area_a[:, None] + area_b[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def _true_positives(ious: np.ndarray, thresholds: tuple[float, ...]) -> np.ndarray:
    """``(len(thresholds), n)`` bool: which of an image's n detections (in score order) match a ground truth,
    given their ``(n, m)`` IoUs, greedily as COCO matches."""
    tp = np.zeros((len(thresholds), ious.shape[0]), dtype=bool)
    for ti, t in enumerate(thresholds):
        taken = np.zeros(ious.shape[1], dtype=bool)
        for d in range(ious.shape[0]):
            candidates = np.where(taken, -1.0, ious[d])  # (m,) IoU with the boxes still free
            if candidates.size and candidates.max() >= t:
                best = int(candidates.argmax())
                taken[best], tp[ti, d] = True, True
    return tp


def _ap_101(tp: np.ndarray, n_gt: int) -> float:
    """AP of detections in descending score order, ``tp`` ``(n,)`` bool, against ``n_gt`` ground-truth boxes."""
    if tp.size == 0:
        return 0.0
    tps, fps = np.cumsum(tp), np.cumsum(~tp)
    recall, precision = tps / n_gt, tps / (tps + fps)
    precision = np.maximum.accumulate(precision[::-1])[::-1]  # non-increasing: the best precision further on
    idx = np.searchsorted(recall, RECALLS, side="left")  # first point reaching each recall level
    return float(np.where(idx < len(precision), precision[np.minimum(idx, len(precision) - 1)], 0.0).mean())


def _numpy(x: Tensor | np.ndarray | list, shape: tuple[int, ...] | None = None) -> np.ndarray:
    arr = x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)
    return arr.reshape(shape) if shape is not None else arr


def average_precision(
    detections: list[dict[str, Tensor]],
    ground_truths: list[dict[str, Tensor]],
    iou_thresholds: tuple[float, ...] = COCO_THRESHOLDS,
) -> dict[str, float | dict[int, float]]:
    """Mean average precision of detections against ground truth, per class and over IoU thresholds.

    Args:
        detections: one dict per image: ``boxes`` ``(n, 4)`` corners, ``scores`` ``(n,)``, ``labels`` ``(n,)``.
        ground_truths: one dict per image: ``boxes`` ``(m, 4)`` corners (the unit of ``detections``),
            ``labels`` ``(m,)``.
        iou_thresholds: the IoU thresholds averaged over (default COCO's ten, 0.50 to 0.95).

    Returns:
        ``{"map": mean over classes and thresholds, "map50": at IoU 0.5 (if among the thresholds),
        "map75": at 0.75 (likewise), "per_class": {class: AP averaged over thresholds}}``; the means are
        NaN when there is no ground-truth box at all.
    """
    if len(detections) != len(ground_truths):
        raise ValueError(f"detections ({len(detections)} images) and ground_truths ({len(ground_truths)}) differ")
    gts = [(_numpy(g["boxes"], (-1, 4)).astype(np.float64), _numpy(g["labels"]).reshape(-1)) for g in ground_truths]
    dets = [(_numpy(d["boxes"], (-1, 4)).astype(np.float64), _numpy(d["scores"]).reshape(-1),
             _numpy(d["labels"]).reshape(-1)) for d in detections]
    classes = sorted({int(c) for _, labels in gts for c in labels})
    ap = np.zeros((len(iou_thresholds), len(classes)))  # (thresholds, classes)
    for ci, c in enumerate(classes):
        scores, tps, n_gt = [], [], 0
        for (gt_boxes, gt_labels), (boxes, s, labels) in zip(gts, dets):
            g, keep = gt_boxes[gt_labels == c], labels == c
            n_gt += len(g)
            order = np.argsort(-s[keep], kind="stable")  # this image's detections of c, best first
            b, s_c = boxes[keep][order], s[keep][order]
            tps.append(_true_positives(_iou(b, g), iou_thresholds))
            scores.append(s_c)
        all_scores, all_tp = np.concatenate(scores), np.concatenate(tps, axis=1)  # (N,), (thresholds, N)
        order = np.argsort(-all_scores, kind="mergesort")  # across images, stable as COCO's
        for ti in range(len(iou_thresholds)):
            ap[ti, ci] = _ap_101(all_tp[ti, order], n_gt)
    nan = float("nan")
    result: dict[str, float | dict[int, float]] = {"map": float(ap.mean()) if classes else nan}
    for name, t in (("map50", 0.5), ("map75", 0.75)):
        if t in iou_thresholds:
            result[name] = float(ap[iou_thresholds.index(t)].mean()) if classes else nan
    result["per_class"] = {c: float(ap[:, ci].mean()) for ci, c in enumerate(classes)}
    return result


__all__ = ["COCO_THRESHOLDS", "average_precision"]
