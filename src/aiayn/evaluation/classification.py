"""Classification scores: accuracy, precision and recall, and the confusion matrix."""

from __future__ import annotations

import torch
from torch import Tensor


def confusion_matrix(predicted: Tensor, target: Tensor, num_classes: int) -> Tensor:
    """``(K, K)`` counts: row = true class, column = predicted class.

    Raises:
        ValueError: ``predicted`` and ``target`` differ in shape, or hold a class outside ``[0, num_classes)``.
    """
    if predicted.shape != target.shape:
        raise ValueError(f"predicted {tuple(predicted.shape)} and target {tuple(target.shape)} must have one shape")
    for name, t in (("predicted", predicted), ("target", target)):
        if t.numel() and not 0 <= int(t.min()) <= int(t.max()) < num_classes:
            raise ValueError(f"{name} holds classes {int(t.min())}..{int(t.max())}, outside [0, {num_classes})")
    index = target.long() * num_classes + predicted.long()
    return torch.bincount(index, minlength=num_classes * num_classes).view(num_classes, num_classes)


def accuracy(predicted: Tensor, target: Tensor) -> float:
    """The share of predictions equal to the target."""
    return float((predicted == target).float().mean()) if target.numel() else 0.0


def precision_recall(matrix: Tensor) -> dict[str, list[float]]:
    """Per class, from a confusion matrix (rows true, columns predicted): ``precision`` (of the texts predicted
    as the class, the share that are), ``recall`` (of the class's texts, the share found) and ``f1``; a class
    never predicted (or never present) scores 0."""
    m = matrix.double()
    hits = m.diagonal()
    precision = torch.where(m.sum(0) > 0, hits / m.sum(0).clamp(min=1), 0.0)
    recall = torch.where(m.sum(1) > 0, hits / m.sum(1).clamp(min=1), 0.0)
    both = precision + recall
    f1 = torch.where(both > 0, 2 * precision * recall / both.clamp(min=1e-12), 0.0)
    return {"precision": precision.tolist(), "recall": recall.tolist(), "f1": f1.tolist()}


__all__ = ["accuracy", "confusion_matrix", "precision_recall"]
