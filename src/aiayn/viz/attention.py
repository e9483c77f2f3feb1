"""Pictures of attention weights (matplotlib, written as PNG)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from torch import Tensor

from aiayn.io import atomic_write


def plot_attention_grid(
    weights: Sequence[Tensor],
    queries: Sequence[str],
    keys: Sequence[str],
    path: str | os.PathLike,
    title: str = "",
    row_label: str = "layer",
) -> Path:
    """One heat map per (layer, head): rows are layers, columns heads.

    Args:
        weights: per layer, ``(H, T, S)`` attention weights of one example.
        queries: the T query tokens (y axis); keys: the S key tokens (x axis).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n_rows, n_heads = len(weights), weights[0].size(0)
    t, s = len(queries), len(keys)
    fig, axes = plt.subplots(
        n_rows, n_heads, figsize=(1.0 + n_heads * max(2.0, 0.22 * s), 0.6 + n_rows * max(1.6, 0.25 * t)), squeeze=False
    )
    for r, layer in enumerate(weights):
        for h in range(n_heads):
            ax = axes[r][h]
            ax.imshow(layer[h, :t, :s].float().cpu().numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
            ax.set_xticks(range(s), [k if k.strip() else "␣" for k in keys], fontsize=6, rotation=90)
            ax.set_yticks(range(t), list(queries), fontsize=6)
            ax.set_title(f"{row_label} {r} head {h}", fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)
    return path
