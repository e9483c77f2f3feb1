"""DETR's set loss (Carion et al., 2020, section 3.1, eq. 2, and section 3.2 "Auxiliary decoding losses").

After Hungarian matching sigma (:mod:`~aiayn.models.detr.matcher`), with K the "no object" class:

    L = sum_i [ -log p_sigma(i)(c_i) ]                       cross-entropy over all Q queries; the unmatched
                                                             ones target "no object", weighted eos_coef = 0.1
      + sum_{i: c_i != no object} [ 5 ||b_i - bhat_sigma(i)||_1 + 2 (1 - GIoU(b_i, bhat_sigma(i))) ]

The cross-entropy is the weighted mean over queries (the class imbalance: most queries see no object);
the box losses are summed over matched objects and divided by the number of objects in the batch.
The same loss, with its own matching, is added for every decoder layer's output ("aux").

Shapes: B batch, Q queries, K classes, T matched objects in the batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.models.detr.boxes import cxcywh_to_xyxy, generalized_box_iou
from aiayn.models.detr.matcher import HungarianMatcher, Target


class SetCriterion(nn.Module):
    """The loss of DETR's outputs against each image's objects.

    Args:
        num_classes: K real classes (the logits have K + 1, the last "no object").
        matcher: the assignment; default the Hungarian matcher with costs 1, 5, 2.
        eos_coef: weight of the "no object" class in the cross-entropy.
        weight_ce, weight_bbox, weight_giou: weights of the three losses (1, 5, 2).
    """

    class_weight: Tensor

    def __init__(self, num_classes: int, matcher: HungarianMatcher | None = None, eos_coef: float = 0.1,
                 weight_ce: float = 1.0, weight_bbox: float = 5.0, weight_giou: float = 2.0) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.matcher = matcher or HungarianMatcher()
        self.weights = {"ce": weight_ce, "bbox": weight_bbox, "giou": weight_giou}
        class_weight = torch.ones(num_classes + 1)
        class_weight[-1] = eos_coef
        self.register_buffer("class_weight", class_weight, persistent=False)

    def layer_losses(self, outputs: dict[str, Tensor], targets: list[Target], num_boxes: float) -> dict[str, Tensor]:
        """``{"ce", "bbox", "giou"}`` of one layer's ``{"logits": (B, Q, K+1), "boxes": (B, Q, 4)}``."""
        logits, boxes = outputs["logits"], outputs["boxes"]
        if logits.size(-1) != self.num_classes + 1:
            raise ValueError(f"logits have {logits.size(-1)} classes; the criterion wants num_classes + 1 = "
                             f"{self.num_classes + 1}")
        indices = self.matcher(outputs, targets)
        batch = torch.cat([torch.full_like(q, i) for i, (q, _) in enumerate(indices)]).to(logits.device)  # (T,)
        query = torch.cat([q for q, _ in indices]).to(logits.device)  # (T,)
        target_classes = torch.full(logits.shape[:2], self.num_classes, dtype=torch.int64, device=logits.device)
        target_classes[batch, query] = torch.cat([t["labels"][j] for t, (_, j) in zip(targets, indices)]).to(
            logits.device)  # (B, Q), "no object" where unmatched
        ce = F.cross_entropy(logits.transpose(1, 2), target_classes, self.class_weight.to(logits.dtype))
        matched = boxes[batch, query]  # (T, 4)
        wanted = torch.cat([t["boxes"][j] for t, (_, j) in zip(targets, indices)]).to(boxes)  # (T, 4)
        bbox = F.l1_loss(matched, wanted, reduction="sum") / num_boxes
        giou = (1 - torch.diag(generalized_box_iou(cxcywh_to_xyxy(matched), cxcywh_to_xyxy(wanted)))).sum() / num_boxes
        return {"ce": ce, "bbox": bbox, "giou": giou}

    def forward(self, outputs: dict, targets: list[Target]) -> dict[str, Tensor]:
        """The weighted total ``"loss"`` over the last layer and every auxiliary one, and its parts.

        Args:
            outputs: the model's ``{"logits", "boxes", "aux"}``.
            targets: one dict per image: ``labels`` ``(n,)`` in ``[0, K)``, ``boxes`` ``(n, 4)`` normalised
                (cx, cy, w, h); ``n`` may be 0.

        Returns:
            ``{"loss", "ce", "bbox", "giou"}`` (the parts of the last layer, unweighted) and
            ``"ce_<i>"``, ``"bbox_<i>"``, ``"giou_<i>"`` of auxiliary layer ``i``.
        """
        for i, t in enumerate(targets):
            labels, boxes = t["labels"], t["boxes"]
            if labels.dim() != 1 or labels.is_floating_point():
                raise ValueError(f"targets[{i}]['labels'] must be (n,) integer class ids, got {labels.dtype} "
                                 f"{tuple(labels.shape)}")
            if tuple(boxes.shape) != (labels.numel(), 4):
                raise ValueError(f"targets[{i}]['boxes'] must be (n, 4) with n = {labels.numel()} labels, got "
                                 f"{tuple(boxes.shape)}")
            if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= self.num_classes):
                raise ValueError(f"target labels must be in [0, {self.num_classes}), got {labels.tolist()}")
            if boxes.numel() and not bool(((boxes >= -0.01) & (boxes <= 1.01)).all()):  # rounding aside
                raise ValueError(f"targets[{i}]['boxes'] must be (cx, cy, w, h) normalised to [0, 1] by the image "
                                 f"size, not pixels; got values up to {float(boxes.max()):g}")
        num_boxes = max(float(sum(len(t["labels"]) for t in targets)), 1.0)
        layers = [("", outputs)] + [(f"_{i}", aux) for i, aux in enumerate(outputs.get("aux", []))]
        out: dict[str, Tensor] = {}
        total: Tensor | float = 0.0
        for suffix, layer in layers:
            parts = self.layer_losses(layer, targets, num_boxes)
            total = total + sum(self.weights[k] * v for k, v in parts.items())
            out.update({f"{k}{suffix}": v for k, v in parts.items()})
        assert isinstance(total, Tensor)  # layers holds at least the last layer, whose losses are tensors
        return {"loss": total, **out}


__all__ = ["SetCriterion"]
