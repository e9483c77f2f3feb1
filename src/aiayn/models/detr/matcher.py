"""Hungarian matching of predictions to ground truth (DETR, Carion et al., 2020, section 3.1, eq. 1 and 2).

The loss is defined on the best one-to-one assignment sigma of the N predictions to the n <= N objects:

    sigma = argmin_sigma sum_i L_match(y_i, yhat_sigma(i))
    L_match(y_i, yhat_j) = - w_class * p_j(c_i) + w_L1 * ||b_i - bhat_j||_1 - w_giou * GIoU(b_i, bhat_j)

with weights 1, 5 and 2 (appendix A.1 and the released code); the probability, not its log, keeps the
class cost on the scale of the box costs. ``scipy.optimize.linear_sum_assignment`` (the Hungarian
algorithm) solves each image's (N, n) problem; predictions left over are matched to "no object".

Shapes: B batch, Q queries, K classes, n objects in one image, T = total objects in the batch.
"""

from __future__ import annotations

import torch
from torch import Tensor

from aiayn.models.detr.boxes import cxcywh_to_xyxy, generalized_box_iou

Target = dict[str, Tensor]  # {"labels": (n,) int64, "boxes": (n, 4) normalised (cx, cy, w, h)}


class HungarianMatcher:
    """Assigns each image's objects to distinct queries at the lowest total matching cost.

    Args:
        cost_class, cost_bbox, cost_giou: weights of ``-p(class)``, the L1 box distance and ``-GIoU``.
    """

    def __init__(self, cost_class: float = 1.0, cost_bbox: float = 5.0, cost_giou: float = 2.0) -> None:
        if cost_class == cost_bbox == cost_giou == 0:
            raise ValueError("the matcher's costs cost_class, cost_bbox, cost_giou cannot all be 0")
        self.cost_class, self.cost_bbox, self.cost_giou = cost_class, cost_bbox, cost_giou

    def cost(self, logits: Tensor, boxes: Tensor, labels: Tensor, target_boxes: Tensor) -> Tensor:
        """The matching cost ``(P, T)`` of P predictions (logits ``(P, K+1)``, boxes ``(P, 4)``) against T
        objects (``labels`` ``(T,)``, ``target_boxes`` ``(T, 4)``)."""
        prob = logits.softmax(-1)  # (P, K+1)
        cost_class = -prob[:, labels]  # (P, T)
        cost_bbox = torch.cdist(boxes, target_boxes, p=1)  # (P, T)
        cost_giou = -generalized_box_iou(cxcywh_to_xyxy(boxes), cxcywh_to_xyxy(target_boxes))  # (P, T)
        return self.cost_bbox * cost_bbox + self.cost_class * cost_class + self.cost_giou * cost_giou

    @torch.no_grad()
    def __call__(self, outputs: dict[str, Tensor], targets: list[Target]) -> list[tuple[Tensor, Tensor]]:
        """One assignment per image.

        Args:
            outputs: ``{"logits": (B, Q, K+1), "boxes": (B, Q, 4)}``.
            targets: B dicts, ``labels`` ``(n,)`` and ``boxes`` ``(n, 4)`` (n may be 0).

        Returns:
            B pairs ``(query_idx, target_idx)``, each ``(min(Q, n),)`` int64: query ``query_idx[k]`` predicts
            object ``target_idx[k]``.
        """
        b, q = outputs["logits"].shape[:2]
        if len(targets) != b:
            raise ValueError(f"targets must hold one dict per image ({b}), got {len(targets)}")
        sizes = [len(t["boxes"]) for t in targets]
        empty = torch.empty(0, dtype=torch.int64)
        if sum(sizes) == 0:
            return [(empty, empty) for _ in range(b)]
        # One (B*Q, T) cost matrix for the whole batch, then each image's own (Q, n) block.
        c = self.cost(outputs["logits"].flatten(0, 1), outputs["boxes"].flatten(0, 1),
                      torch.cat([t["labels"] for t in targets]), torch.cat([t["boxes"] for t in targets]))
        c = c.view(b, q, -1).float().cpu()  # (B, Q, T)
        out = []
        for i, block in enumerate(c.split(sizes, dim=-1)):
            rows, cols = _linear_sum_assignment()(block[i].numpy())
            out.append((torch.as_tensor(rows, dtype=torch.int64), torch.as_tensor(cols, dtype=torch.int64)))
        return out


def _linear_sum_assignment():
    try:
        from scipy.optimize import linear_sum_assignment
    except ImportError as e:  # scipy is an extra: only DETR's training needs it
        raise ImportError("DETR's Hungarian matcher needs scipy: pip install 'aiayn[vision]'") from e
    return linear_sum_assignment


__all__ = ["HungarianMatcher", "Target"]

