"""DETR's outputs as scored boxes (Carion et al., 2020, section 4 and the released ``PostProcess``).

Every query gives one detection: its most likely real class (the "no object" probability left out) with
that probability as the score, and its box in pixels. No non-maximum suppression: the set loss already
discourages duplicates (section 4.2, "Importance of NMS").

Shapes: B batch, Q queries, K classes.
"""

from __future__ import annotations

import torch
from torch import Tensor

from aiayn.models.detr.boxes import cxcywh_to_xyxy


@torch.no_grad()
def postprocess(outputs: dict[str, Tensor],
                sizes: Tensor | list[tuple[int, int]] | None = None) -> list[dict[str, Tensor]]:
    """Scored detections of every image.

    Args:
        outputs: ``{"logits": (B, Q, K+1), "boxes": (B, Q, 4)}``.
        sizes: ``(B, 2)`` (height, width) of each image in pixels; ``None`` keeps boxes in [0, 1].

    Returns:
        B dicts: ``scores`` ``(Q,)``, ``labels`` ``(Q,)`` in ``[0, K)``, ``boxes`` ``(Q, 4)`` (x0, y0, x1, y1).
    """
    prob = outputs["logits"].softmax(-1)[..., :-1]  # (B, Q, K), without "no object"
    scores, labels = prob.max(-1)  # (B, Q) each
    boxes = cxcywh_to_xyxy(outputs["boxes"])  # (B, Q, 4)
    if sizes is not None:
        hw = torch.as_tensor(sizes, dtype=boxes.dtype, device=boxes.device)  # (B, 2)
        if tuple(hw.shape) != (boxes.size(0), 2):
            raise ValueError(f"sizes must be one (height, width) per image, ({boxes.size(0)}, 2), got "
                             f"{tuple(hw.shape)}")
        boxes = boxes * torch.stack([hw[:, 1], hw[:, 0], hw[:, 1], hw[:, 0]], dim=-1)[:, None, :]
    return [{"scores": s, "labels": la, "boxes": b} for s, la, b in zip(scores, labels, boxes)]


__all__ = ["postprocess"]
