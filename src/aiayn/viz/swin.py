"""Swin's windows, drawn from the functions the model uses (Liu et al. 2021, section 3.2, figures 2 and 4).

    toy            a 9 x 9 map, windows of 3 x 3: global attention is one computation over 81 patches
                   (81^2 scores); window attention is 9 computations over 9 patches each (9 x 9^2 scores)
    regular        an 8 x 8 map, windows of M = 4: 4 windows (W-MSA, block 2l)
    naive shift    the same windows moved by s = 2: 3 x 3 = 9 windows of 4, 8 and 16 patches (figure 2), so
                   more computations and of uneven sizes
    cyclic shift   roll the map by (-s, -s) instead (figure 4): 4 windows of 16 again, but a window on the
                   bottom or right edge holds patches from opposite sides of the map; the mask lets a patch
                   attend only within its region, so the 4 windows compute what the 9 would

The windows come from :func:`aiayn.layers.vision.window_partition` (and ``torch.roll``, as
:meth:`aiayn.models.swin.SwinBlock.window_attention` calls them); the regions are those
:func:`aiayn.layers.vision.shifted_window_mask` compares (:func:`aiayn.viz.masks.shift_regions`).

Shapes: H x W the map (patches), M window side, s shift, nW windows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from aiayn.layers.vision import pad_to_multiple, window_partition
from aiayn.viz.common import pyplot, save
from aiayn.viz.masks import shift_regions


@dataclass(frozen=True)
class WindowLayout:
    """Which window every patch falls in, three ways, for a ``side`` x ``side`` map and windows of ``window``.

    Attributes:
        regular: ``(H, W)`` window of each patch, windows from the top left.
        naive: ``(H, W)`` window of each patch when the window grid is moved by ``shift`` (no roll).
        naive_sizes: patches in each of the naive windows, in window order.
        rolled: ``(H, W)`` the original patch (row-major index) at each position of the map rolled by
            ``(-shift, -shift)``.
        cyclic: ``(H, W)`` window of each position of the rolled map.
        regions: ``(H, W)`` region (0-8) of each position of the rolled map: the mask lets two patches of a
            window attend to each other only if their regions are equal.
    """

    side: int
    window: int
    shift: int
    regular: Tensor
    naive: Tensor
    naive_sizes: tuple[int, ...]
    rolled: Tensor
    cyclic: Tensor
    regions: Tensor

    @property
    def counts(self) -> tuple[int, int, int]:
        """Windows: regular, naively shifted, cyclically shifted (8 x 8, M = 4, s = 2: 4, 9, 4)."""
        return (int(self.regular.max()) + 1, len(self.naive_sizes), int(self.cyclic.max()) + 1)


def _window_ids(ids: Tensor, window: int) -> Tensor:
    """``(H, W)`` window of each position of an ``(H, W)`` map (a multiple of ``window``), by partitioning
    the positions' indices."""
    h, w = ids.shape
    where = window_partition(torch.arange(h * w).view(1, h, w, 1), window)[..., 0]  # (nW, M*M) positions
    out = torch.empty(h * w, dtype=torch.long)
    out[where.flatten()] = torch.arange(where.size(0)).repeat_interleave(where.size(1))
    return out.view(h, w)


def window_layout(side: int = 8, window: int = 4, shift: int = 2) -> WindowLayout:
    """The windows of figure 2 and figure 4 (module docstring) for a ``side`` x ``side`` map.

    Args:
        side: the map's side in patches, a multiple of ``window``.
        window: M.
        shift: s, 0 < s < M (Swin: M // 2).
    """
    if window <= 0 or side <= 0 or side % window:
        raise ValueError(f"side={side} must be a positive multiple of window={window}")
    if not 0 < shift < window:
        raise ValueError(f"shift={shift} must be in (0, window={window})")
    index = torch.arange(side * side).view(side, side)  # (H, W) patch numbers, row-major
    regular = _window_ids(index, window)
    # Naive shift: windows whose grid starts at -(M - s): pad M - s at the top and left (and the bottom and
    # right up to a multiple of M), partition, keep the windows that hold any real patch.
    padded = F.pad((index + 1)[None, :, :, None], (0, 0, window - shift, 0, window - shift, 0))  # 0 = padding
    padded = pad_to_multiple(padded, window)  # (1, H', W', 1)
    windows = window_partition(padded, window)[..., 0]  # (nW', M*M) patch number + 1, 0 where padding
    real = windows[(windows > 0).any(dim=1)]  # (nW, M*M)
    naive = torch.empty(side * side, dtype=torch.long)
    for w, patches in enumerate(real):
        naive[patches[patches > 0] - 1] = w
    sizes = tuple(int(n) for n in (real > 0).sum(dim=1))
    rolled = torch.roll(index, shifts=(-shift, -shift), dims=(0, 1))  # (H, W), as SwinBlock rolls the map
    return WindowLayout(side, window, shift, regular, naive.view(side, side), sizes, rolled,
                        _window_ids(rolled, window), shift_regions(side, side, window, shift))


def _grid(ax, values: Tensor, window: int, cmap: str, labels: Tensor | None, title: str, n_colors: int,
          origin: int = 0, lines: Tensor | None = None) -> None:
    """One map: cells coloured by ``values``, thick lines between windows (every ``window`` from ``origin``,
    or where ``lines`` changes), ``labels`` written in the cells."""
    side = values.size(0)
    ax.imshow(values.numpy(), cmap=cmap, vmin=-0.5, vmax=n_colors - 0.5, interpolation="nearest")
    for k in range(1, side):  # every patch
        ax.axhline(k - 0.5, color="w", lw=0.6)
        ax.axvline(k - 0.5, color="w", lw=0.6)
    if lines is None:
        for k in range(origin % window or window, side, window):
            ax.axhline(k - 0.5, color="k", lw=2.2)
            ax.axvline(k - 0.5, color="k", lw=2.2)
    else:  # borders where the window changes from one cell to the next
        for i in range(side):
            for j in range(side):
                if j + 1 < side and lines[i, j] != lines[i, j + 1]:
                    ax.plot([j + 0.5, j + 0.5], [i - 0.5, i + 0.5], color="k", lw=2.2)
                if i + 1 < side and lines[i, j] != lines[i + 1, j]:
                    ax.plot([j - 0.5, j + 0.5], [i + 0.5, i + 0.5], color="k", lw=2.2)
    if labels is not None:
        for i in range(side):
            for j in range(side):
                ax.text(j, i, str(int(labels[i, j])), ha="center", va="center", fontsize=6)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=9)


def plot_swin_windows(path: str | os.PathLike, side: int = 8, window: int = 4, shift: int = 2, toy_side: int = 9,
                      toy_window: int = 3) -> Path:
    """Four panels (module docstring): the ``toy_side`` x ``toy_side`` map in windows of ``toy_window``, then
    the ``side`` x ``side`` map's regular, naively shifted and cyclically shifted windows, the last coloured
    by the regions its attention mask keeps apart; the numbers in the cells are the patches' row-major
    indices in the unshifted map, so a patch can be followed through the roll.

    Args:
        path: the PNG to write.
        side, window, shift: the map, M and s of :func:`window_layout` (figure 2's 8, 4, 2).
        toy_side, toy_window: the toy map and its windows (the tutorials' 9 and 3).
    """
    layout = window_layout(side, window, shift)
    if toy_window <= 0 or toy_side <= 0 or toy_side % toy_window:
        raise ValueError(f"toy_side={toy_side} must be a positive multiple of toy_window={toy_window}")
    toy_index = torch.arange(toy_side * toy_side).view(toy_side, toy_side)
    toy = _window_ids(toy_index, toy_window)
    toy_windows = window_partition(toy_index[None, :, :, None], toy_window)  # (nW, M*M, 1)
    n_toy, per_toy = toy_windows.shape[:2]
    regular, naive, cyclic = layout.counts
    plt = pyplot()
    fig, axes = plt.subplots(1, 4, figsize=(18, 5.4))
    _grid(axes[0], toy, toy_window, "tab20", None,
          f"{toy_side}x{toy_side} map, windows of {toy_window}x{toy_window}:\nglobal: 1 attention over "
          f"{toy_side ** 2} patches ({toy_side ** 4:,} scores)\nwindows: {n_toy} attentions over {per_toy} "
          f"patches ({n_toy * per_toy ** 2:,} scores)", max(n_toy, 1))
    _grid(axes[1], layout.regular, window, "tab20", torch.arange(side * side).view(side, side),
          f"{side}x{side} map, M = {window}: {regular} windows (W-MSA)", 20)
    _grid(axes[2], layout.naive, window, "tab20", torch.arange(side * side).view(side, side),
          f"windows moved by s = {shift}: {naive} windows\nof {', '.join(map(str, sorted(set(layout.naive_sizes))))}"
          " patches (figure 2)", 20, lines=layout.naive)
    _grid(axes[3], layout.regions, window, "Pastel1", layout.rolled,
          f"cyclic shift, torch.roll by (-{shift}, -{shift}): {cyclic} windows\ncolour = region; the mask "
          "keeps regions apart (figure 4)", 9)
    fig.suptitle("Swin's shifted windows (Liu et al. 2021, section 3.2): computed by window_partition and the "
                 "shift mask the model uses", fontsize=11)
    fig.tight_layout()
    return save(fig, path)


__all__ = ["WindowLayout", "plot_swin_windows", "window_layout"]
