"""Classification scores: accuracy and the confusion matrix."""

from __future__ import annotations

import torch
from torch import Tensor


def confusion_matrix(predicted: Tensor, target: Tensor, num_classes: int) -> Tensor:
    """``(K, K)`` counts: row = true class, column = predicted class."""
    index = target.long() * num_classes + predicted.long()
    return torch.bincount(index, minlength=num_classes * num_classes).view(num_classes, num_classes)


def accuracy(predicted: Tensor, target: Tensor) -> float:
    """The share of predictions equal to the target."""
    return float((predicted == target).float().mean()) if target.numel() else 0.0


__all__ = ["accuracy", "confusion_matrix"]
