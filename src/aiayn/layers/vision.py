"""Building blocks of the vision Transformers: patches in, windows of patches, patches merged.

    patch embedding     (B, Cin, H, W) --k x k conv, stride k--> (B, H/k, W/k, C)       (ViT 3.1, Swin 3.1)
    window partition    (B, H, W, C) -> (B * nW, M*M, C): non-overlapping M x M windows (Swin 3.2)
    shifted windows     the region mask that keeps a cyclically shifted window from mixing patches that
                        were not neighbours before the shift (Swin 3.2, figure 4)
    relative positions  a learned bias B in softmax(Q K^T / sqrt(d) + B) V, indexed by the offset between
                        two patches of a window, (2M - 1)^2 offsets per head (Swin 3.2, eq. 4)
    patch merging       2 x 2 neighbours concatenated (4C), LayerNorm, Linear 4C -> 2C (Swin 3.1)

Feature maps are kept channels-last, ``(B, H, W, C)``, so a window is a reshape away and every token-wise
layer (LayerNorm, Linear) applies as it is. Sizes that are not a multiple of the patch, the window or 2
are padded at the bottom and right (with zeros, as the Swin reference code and Hugging Face pad) and the
caller crops back.

Shapes: B batch, Cin image channels, H x W a feature map (patches), C channels, M window side,
nW windows per image, heads the attention heads.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def pad_to_multiple(x: Tensor, multiple: int, channels_last: bool = True) -> Tensor:
    """Zero-pad the bottom and right of a ``(B, H, W, C)`` map (or ``(B, C, H, W)`` image with
    ``channels_last=False``) so that H and W are multiples of ``multiple``."""
    h, w = (x.shape[1], x.shape[2]) if channels_last else (x.shape[2], x.shape[3])
    ph, pw = -h % multiple, -w % multiple
    if not (ph or pw):
        return x
    return F.pad(x, (0, 0, 0, pw, 0, ph) if channels_last else (0, pw, 0, ph))


def check_images(images: Tensor, in_channels: int) -> None:
    """Refuse anything but a ``(B, in_channels, H, W)`` float batch, naming what it got."""
    if images.dim() != 4:
        raise ValueError(f"images must be (batch, channels, height, width), got shape {tuple(images.shape)}")
    if images.size(1) != in_channels:
        raise ValueError(f"images have {images.size(1)} channels (shape {tuple(images.shape)}); the model wants "
                         f"in_channels={in_channels}")
    if not images.is_floating_point():
        raise ValueError(f"images must be a float tensor (normalised pixels), got dtype {images.dtype}")


class PatchEmbedding(nn.Module):
    """Split the image into k x k patches and project each to C channels: one conv of kernel and stride k.

    Images whose sides are not multiples of k are zero-padded at the bottom and right first. With
    ``norm=True`` a LayerNorm follows (Swin's patch partition + linear embedding).
    """

    def __init__(self, in_channels: int, d_model: int, patch_size: int, norm: bool = False,
                 eps: float = 1e-5) -> None:
        super().__init__()
        self.in_channels, self.patch_size = in_channels, patch_size
        self.proj = nn.Conv2d(in_channels, d_model, kernel_size=patch_size, stride=patch_size)
        self.norm = nn.LayerNorm(d_model, eps=eps) if norm else None

    def forward(self, images: Tensor) -> Tensor:  # (B, Cin, H, W) -> (B, H/k, W/k, C)
        check_images(images, self.in_channels)
        x = self.proj(pad_to_multiple(images, self.patch_size, channels_last=False)).permute(0, 2, 3, 1)
        return x if self.norm is None else self.norm(x)


def window_partition(x: Tensor, window: int) -> Tensor:
    """``(B, H, W, C)`` -> ``(B * nW, M*M, C)``: windows in row-major order per image, patches row-major
    in a window. H and W must be multiples of M."""
    b, h, w, c = x.shape
    x = x.view(b, h // window, window, w // window, window, c)  # (B, H/M, M, W/M, M, C)
    return x.transpose(2, 3).reshape(-1, window * window, c)  # (B * nW, M*M, C)


def window_reverse(windows: Tensor, window: int, height: int, width: int) -> Tensor:
    """The inverse of :func:`window_partition`: ``(B * nW, M*M, C)`` -> ``(B, H, W, C)``."""
    c = windows.size(-1)
    x = windows.view(-1, height // window, width // window, window, window, c)  # (B, H/M, W/M, M, M, C)
    return x.transpose(2, 3).reshape(-1, height, width, c)


def window_index(height: int, width: int, window: int, shift: int = 0,
                 device: torch.device | str | None = None) -> Tensor:
    """Where each patch of the (shifted) windows sits in the flattened map: one gather that does the roll
    and the partition together.

    ``x.flatten(1, 2)[:, window_index(H, W, M, s)]`` equals ``window_partition(torch.roll(x, (-s, -s),
    (1, 2)), M)`` flattened to ``(B, nW * M*M, C)``; writing the windows back to those positions undoes
    both. H and W must be multiples of M. Swin's fast path (:func:`aiayn.layers.fast.window_attention`)
    is built on it.

    Returns:
        ``(H * W,)`` long: row-major map positions, windows in :func:`window_partition`'s order.
    """
    index = torch.arange(height * width, device=device).view(1, height, width, 1)
    if shift:
        index = torch.roll(index, shifts=(-shift, -shift), dims=(1, 2))
    return window_partition(index, window).flatten()


def shifted_window_mask(height: int, width: int, window: int, shift: int,
                        device: torch.device | str | None = None) -> Tensor:
    """Which patches of a cyclically shifted window may attend to each other (Swin 3.2, figure 4).

    After ``torch.roll(x, (-s, -s))`` the windows along the bottom and right edges hold patches from
    opposite sides of the map. Along each axis the rolled map has three regions, [0, L - M), [L - M, L - s)
    and [L - s, L); a patch attends only to patches of its own region pair (row region, column region).
    For a 2 x 4 map, M = 2, s = 1 the regions and the two windows' masks are::

        regions      window 0 (columns 0-1)    window 1 (columns 2-3)
        a a b c      1 1 0 0                   1 0 0 0
        d d e f      1 1 0 0                   0 1 0 0
                     0 0 1 1                   0 0 1 0
                     0 0 1 1                   0 0 0 1

    Args:
        height, width: the (padded) map, multiples of ``window``.
        window: M.
        shift: s, 0 < s < M.

    Returns:
        ``(nW, M*M, M*M)`` bool, ``True`` = may attend, windows in :func:`window_partition`'s order.
    """

    def regions(n: int) -> Tensor:  # (n,) region of each row (or column): 0, 1 or 2
        i = torch.arange(n, device=device)
        return (i >= n - window).long() + (i >= n - shift).long()

    label = regions(height)[:, None] * 3 + regions(width)[None, :]  # (H, W)
    label = window_partition(label[None, :, :, None], window)[..., 0]  # (nW, M*M)
    return label[:, :, None] == label[:, None, :]  # (nW, M*M, M*M)


def relative_position_index(window: int, table_window: int | None = None) -> Tensor:
    """``(M*M, M*M)`` index into the bias table of the offset (dy, dx) between two patches of a window.

    Offsets run over [-(M'-1), M'-1] on each axis, so the table of window ``table_window`` = M' >= M has
    (2M' - 1)^2 rows; the index is ``(dy + M' - 1) * (2M' - 1) + (dx + M' - 1)``. A smaller window (a
    feature map smaller than M', see :class:`aiayn.models.swin.SwinBlock`) uses the middle of the table.
    """
    table_window = table_window or window
    # (2, M*M)
    coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij")).flatten(1)
    rel = coords[:, :, None] - coords[:, None, :] + table_window - 1  # (2, M*M, M*M), each in [0, 2M' - 2]
    return rel[0] * (2 * table_window - 1) + rel[1]


class RelativePositionBias(nn.Module):
    """Swin's learned relative position bias (eq. 4): a ``((2M-1)^2, heads)`` table, looked up per window.

    The index is a buffer, not a parameter, and is not saved: it follows from M.
    """

    index: Tensor  # a buffer

    def __init__(self, window: int, n_heads: int) -> None:
        super().__init__()
        self.window = window
        self.table = nn.Parameter(torch.zeros((2 * window - 1) ** 2, n_heads))
        self.register_buffer("index", relative_position_index(window), persistent=False)

    def forward(self, window: int | None = None) -> Tensor:
        """``(1, heads, M*M, M*M)`` bias for windows of side ``window`` (default: the table's M)."""
        window = window or self.window
        index = self.index if window == self.window else relative_position_index(window, self.window).to(
            self.table.device)
        return self.table[index].permute(2, 0, 1)[None]  # (1, heads, M*M, M*M)


class PatchMerging(nn.Module):
    """Halve the resolution and double the channels: concatenate each 2 x 2 group of patches (4C),
    LayerNorm, Linear 4C -> 2C without bias (Swin 3.1, "patch merging")."""

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4 * d_model, eps=eps)
        self.reduction = nn.Linear(4 * d_model, 2 * d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:  # (B, H, W, C) -> (B, ceil(H/2), ceil(W/2), 2C)
        x = pad_to_multiple(x, 2)
        # the reference code's order: (even row, even col), (odd, even), (even, odd), (odd, odd)
        # (B, H/2, W/2, 4C)
        x = torch.cat([x[:, 0::2, 0::2], x[:, 1::2, 0::2], x[:, 0::2, 1::2], x[:, 1::2, 1::2]], dim=-1)
        return self.reduction(self.norm(x))


__all__ = [
    "PatchEmbedding",
    "PatchMerging",
    "RelativePositionBias",
    "check_images",
    "pad_to_multiple",
    "relative_position_index",
    "shifted_window_mask",
    "window_index",
    "window_partition",
    "window_reverse",
]
