"""Box formats and overlaps (DETR, Carion et al., 2020, section 3.1 and appendix A.1).

DETR predicts boxes as normalised (cx, cy, w, h), centre and size relative to the image; IoU and the
generalised IoU of Rezatofighi et al. (2019) are computed on corners (x0, y0, x1, y1):

    IoU(a, b)  = |a n b| / |a u b|
    GIoU(a, b) = IoU(a, b) - |C \\ (a u b)| / |C|,   C the smallest box enclosing a and b

GIoU lies in [-1, 1]: 1 for equal boxes, near -1 for small boxes far apart, and unlike IoU it keeps
decreasing as disjoint boxes move apart, so ``1 - GIoU`` gives a gradient even with no overlap.

Shapes: N, M numbers of boxes; boxes are ``(N, 4)``.
"""

from __future__ import annotations

import torch
from torch import Tensor


def cxcywh_to_xyxy(boxes: Tensor) -> Tensor:
    """``(..., 4)`` (cx, cy, w, h) -> ``(..., 4)`` (x0, y0, x1, y1)."""
    cx, cy, w, h = boxes.unbind(-1)
    return torch.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], dim=-1)


def xyxy_to_cxcywh(boxes: Tensor) -> Tensor:
    """``(..., 4)`` (x0, y0, x1, y1) -> ``(..., 4)`` (cx, cy, w, h)."""
    x0, y0, x1, y1 = boxes.unbind(-1)
    return torch.stack([(x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0], dim=-1)


def box_area(boxes: Tensor) -> Tensor:
    """``(..., 4)`` corners -> ``(...)`` areas."""
    return (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])


def box_iou(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """Pairwise IoU of corner boxes ``a`` ``(N, 4)`` and ``b`` ``(M, 4)``: ``(iou, union)``, each ``(N, M)``."""
    lt = torch.max(a[:, None, :2], b[None, :, :2])  # (N, M, 2) top-left of the intersection
    rb = torch.min(a[:, None, 2:], b[None, :, 2:])  # (N, M, 2) bottom-right
    wh = (rb - lt).clamp(min=0)  # (N, M, 2), zero when they do not overlap
    inter = wh[..., 0] * wh[..., 1]  # (N, M)
    union = box_area(a)[:, None] + box_area(b)[None, :] - inter
    return inter / union, union


def generalized_box_iou(a: Tensor, b: Tensor) -> Tensor:
    """Pairwise GIoU ``(N, M)`` of corner boxes ``a`` ``(N, 4)`` and ``b`` ``(M, 4)``.

    Raises:
        ValueError: a box with x1 < x0 or y1 < y0 (degenerate boxes make the loss NaN; drop them first).
    """
    for name, boxes in (("a", a), ("b", b)):
        if not bool(torch.isfinite(boxes).all()):  # predictions after training diverged
            raise FloatingPointError(f"boxes {name} hold NaN or infinite values (has training diverged?)")
        bad = (boxes[:, 2:] < boxes[:, :2]).any(-1)
        if bool(bad.any()):
            raise ValueError(f"boxes {name} must have x1 >= x0 and y1 >= y0 (corner format); {int(bad.sum())} of "
                             f"{len(boxes)} do not, the first {boxes[bad][0].tolist()}")
    iou, union = box_iou(a, b)
    lt = torch.min(a[:, None, :2], b[None, :, :2])  # (N, M, 2) the enclosing box C
    rb = torch.max(a[:, None, 2:], b[None, :, 2:])
    wh = (rb - lt).clamp(min=0)
    hull = wh[..., 0] * wh[..., 1]  # (N, M)
    return iou - (hull - union) / hull


__all__ = ["box_area", "box_iou", "cxcywh_to_xyxy", "generalized_box_iou", "xyxy_to_cxcywh"]
