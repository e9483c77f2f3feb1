"""Pictures of the attention masks, drawn from the functions the models use (bool, True = may attend).

    padding          keys that are padding are hidden from every query               (B, 1, 1, S)
    causal           query i sees keys <= i (section 3.2.3)                           (T, S)
                     (:func:`plot_lookahead`: the tutorials' 5 x 5 on "<Begin> I have a cat")
    combined         both: what a decoder self-attention over padded rows uses        (B, 1, T, S)
    shifted window   Swin's SW-MSA (Liu et al. 2021, section 3.2, figure 4): after the cyclic shift,
                     a window on the bottom or right edge holds patches from opposite sides of the map;
                     each may attend only within its own region                      (nW, M*M, M*M)

Shapes: B batch, T queries, S keys, M window side, nW windows.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch

from aiayn.layers.masks import causal_mask, combine, padding_mask
from aiayn.layers.vision import shifted_window_mask, window_partition
from aiayn.viz.common import pyplot, save


def shift_regions(height: int, width: int, window: int, shift: int) -> torch.Tensor:
    """``(H, W)`` region label (0..8) of every patch of the cyclically shifted map: along each axis the
    regions are [0, L - M), [L - M, L - s) and [L - s, L) (what :func:`shifted_window_mask` compares)."""

    def regions(n: int) -> torch.Tensor:
        i = torch.arange(n)
        return (i >= n - window).long() + (i >= n - shift).long()

    return regions(height)[:, None] * 3 + regions(width)[None, :]


def plot_masks(path: str | os.PathLike, lengths: Sequence[int] = (7, 4), map_size: int = 8, window: int = 4,
               shift: int = 2) -> Path:
    """Padding, causal and combined masks for a batch of rows of ``lengths`` (padded to the longest), and Swin's
    shifted-window masks for a ``map_size`` x ``map_size`` map of windows of ``window`` shifted by ``shift``.

    Args:
        path: the PNG to write.
        lengths: real tokens of each row; the picture shows the last (shortest) row.
        map_size: side of the patch map, a multiple of ``window``.
        window: M.
        shift: s, 0 < s < M.
    """
    if not lengths or min(lengths) < 1:
        raise ValueError(f"lengths={tuple(lengths)} must be positive")
    if map_size % window or not 0 < shift < window:
        raise ValueError(f"map_size={map_size} must be a multiple of window={window}, and 0 < shift={shift} < window")
    t = max(lengths)
    ids = torch.tensor([[1] * n + [0] * (t - n) for n in lengths])  # (B, T), 0 = padding
    pad = padding_mask(ids, pad_id=0)  # (B, 1, 1, T)
    causal = causal_mask(t)  # (T, T)
    both = combine(pad, causal)  # (B, 1, T, T)
    assert both is not None  # both masks are given
    row = len(lengths) - 1
    swin = shifted_window_mask(map_size, map_size, window, shift)  # (nW, M*M, M*M)
    labels = shift_regions(map_size, map_size, window, shift)  # (H, W)
    n_windows = swin.size(0)

    plt = pyplot()
    fig = plt.figure(figsize=(3.2 * 4, 3.2 * 2 + 0.6))
    grid = fig.add_gridspec(2, max(4, n_windows))
    panels = [
        (f"padding (row of {lengths[row]} real tokens)", pad[row, 0].expand(t, t)),
        ("causal (section 3.2.3)", causal),
        ("causal & padding", both[row, 0]),
    ]
    for j, (title, mask) in enumerate(panels):
        ax = fig.add_subplot(grid[0, j])
        ax.imshow(mask.numpy(), cmap="Greys", vmin=0, vmax=1, interpolation="nearest")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    ax = fig.add_subplot(grid[0, 3])
    ax.imshow(labels.numpy(), cmap="tab10", vmin=0, vmax=9, interpolation="nearest")
    for (y, x), v in zip(torch.cartesian_prod(torch.arange(map_size), torch.arange(map_size)).tolist(),
                         labels.flatten().tolist()):
        ax.text(x, y, str(v), ha="center", va="center", fontsize=8)
    for k in range(window, map_size, window):
        ax.axhline(k - 0.5, color="k", lw=2)
        ax.axvline(k - 0.5, color="k", lw=2)
    ax.set_xticks(range(map_size))
    ax.set_yticks(range(map_size))
    ax.set_title(f"{map_size}x{map_size} map rolled by -{shift}: regions, windows of {window}", fontsize=9)
    order = window_partition(labels[None, :, :, None], window)[..., 0]  # (nW, M*M) labels in window order
    for w in range(n_windows):
        ax = fig.add_subplot(grid[1, w])
        ax.imshow(swin[w].numpy(), cmap="Greys", vmin=0, vmax=1, interpolation="nearest")
        ax.set_title(f"window {w}: regions {sorted(set(order[w].tolist()))}", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.suptitle("Attention masks: black = may attend (True)", fontsize=11)
    fig.tight_layout()
    return save(fig, path)


LOOKAHEAD_TOKENS = ("<Begin>", "I", "have", "a", "cat")


def plot_lookahead(path: str | os.PathLike, tokens: Sequence[str] = LOOKAHEAD_TOKENS) -> Path:
    """The look-ahead (causal) mask of the decoder's self-attention (section 3.2.3) on ``tokens``: the query
    tokens down the side, the key tokens along the top, each cell allowed (the key is at or before the query)
    or blocked (a later token, which the decoder may not see while predicting). Drawn from
    :func:`aiayn.layers.masks.causal_mask`, what the models use.

    Args:
        path: the PNG to write.
        tokens: the sequence, one token per row and column (default the tutorials' five).
    """
    tokens = list(tokens)
    if not tokens:
        raise ValueError("tokens is empty: give at least one token")
    n = len(tokens)
    mask = causal_mask(n)  # (T, T), True = may attend
    plt = pyplot()
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    allowed, blocked = "#4c9a2a", "#d9d9d9"
    side = 1.0 + 0.75 * n
    fig, ax = plt.subplots(figsize=(side + 2.2, side))
    ax.imshow(mask.numpy(), cmap=ListedColormap([blocked, allowed]), vmin=0, vmax=1, interpolation="nearest")
    for i in range(n):
        for j in range(n):
            ax.text(j, i, "1" if mask[i, j] else "0", ha="center", va="center", fontsize=10,
                    color="white" if mask[i, j] else "dimgray")
    ax.set_xticks(range(n), tokens)
    ax.set_yticks(range(n), tokens)
    ax.xaxis.tick_top()
    ax.xaxis.set_label_position("top")
    ax.set_xlabel("key (the token attended to)")
    ax.set_ylabel("query (the token predicting the next)")
    ax.set_xticks([k - 0.5 for k in range(1, n)], minor=True)
    ax.set_yticks([k - 0.5 for k in range(1, n)], minor=True)
    ax.grid(which="minor", color="white", lw=2)
    ax.tick_params(which="minor", length=0)
    ax.legend(handles=[Patch(color=allowed, label="allowed (True)"), Patch(color=blocked, label="blocked (False)")],
              loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=9, frameon=False)
    ax.set_title(f"Look-ahead mask, {n} x {n} (section 3.2.3)", fontsize=11, pad=12)
    fig.tight_layout()
    return save(fig, path)


__all__ = ["LOOKAHEAD_TOKENS", "plot_lookahead", "plot_masks", "shift_regions"]
