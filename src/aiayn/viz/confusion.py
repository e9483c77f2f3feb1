"""A picture of a confusion matrix (matplotlib, written as PNG)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from torch import Tensor

from aiayn.io import atomic_write


def plot_confusion(matrix: Tensor, classes: Sequence[str], path: str | os.PathLike, title: str = "") -> Path:
    """Counts per (true, predicted) class as a heat map, each row normalised, the counts written in.

    Args:
        matrix: ``(K, K)`` counts, rows the true classes (see :func:`aiayn.evaluation.classification.confusion_matrix`).
        classes: the K class names.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = matrix.cpu().float()
    share = counts / counts.sum(1, keepdim=True).clamp(min=1)
    k = len(classes)
    fig, ax = plt.subplots(figsize=(1.2 + 0.45 * k, 1.0 + 0.45 * k))
    ax.imshow(share.numpy(), cmap="Blues", vmin=0.0, vmax=1.0)
    for i in range(k):
        for j in range(k):
            if counts[i, j]:
                ax.text(j, i, f"{int(counts[i, j])}", ha="center", va="center", fontsize=6,
                        color="white" if share[i, j] > 0.5 else "black")
    ax.set_xticks(range(k), list(classes), fontsize=7)
    ax.set_yticks(range(k), list(classes), fontsize=7)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    if title:
        ax.set_title(title, fontsize=8)
    fig.tight_layout()
    path = Path(path)
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)
    return path


__all__ = ["plot_confusion"]
