"""Swin Transformer (Liu et al., 2021): attention inside local windows that shift between blocks.

    images (B, Cin, H, W) -> 4 x 4 patches, linear embedding (a conv), LayerNorm          (section 3.1)
      stage 1:  2 Swin blocks on the H/4 x W/4 map of C channels
      stage i:  patch merging (2 x 2 patches -> one, C -> 2C), then Swin blocks         (figure 3a)
      -> LayerNorm -> average over the map -> Linear -> class logits (B, K)

A Swin block is a pre-norm Transformer block whose self-attention runs inside M x M windows (W-MSA), with
a learned relative position bias (eq. 4); every second block shifts the windows by M/2 (SW-MSA), so
information crosses window borders (eq. 3, figure 2). The shift is a cyclic roll of the map, which keeps
the number of windows; a mask keeps patches that meet only because of the roll from attending to each
other (figure 4). On an 8 x 8 map with M = 4 (letters name the windows of each picture):

    W-MSA (block 2l)       SW-MSA (block 2l+1):       ... computed: rolled by (-2, -2), still 4 windows,
    4 windows              windows moved by 2, 9      the letters of one window masked apart
    a a a a b b b b        a a b b b b c c            e e e e f f d d
    a a a a b b b b        a a b b b b c c            e e e e f f d d
    a a a a b b b b        d d e e e e f f            e e e e f f d d
    a a a a b b b b        d d e e e e f f            e e e e f f d d
    c c c c d d d d        d d e e e e f f            h h h h i i g g
    c c c c d d d d        d d e e e e f f            h h h h i i g g
    c c c c d d d d        g g h h h h i i            b b b b c c a a
    c c c c d d d d        g g h h h h i i            b b b b c c a a

The bias and the shift mask are added to the attention scores as ONE additive float mask, so attention
takes PyTorch's fused ``scaled_dot_product_attention`` path. Attention and the MLP are the package's own
:class:`~aiayn.layers.MultiHeadAttention` and :class:`~aiayn.layers.FeedForward`; the window helpers are in
:mod:`aiayn.layers.vision`. Maps whose sides are not multiples of M are zero-padded and cropped back,
as the reference code and Hugging Face do; a map no larger than M is one window, unshifted.

:meth:`SwinBlock.window_attention` computes the paper's steps as written: roll, partition, attend, reverse,
roll back. With :data:`aiayn.layers.fast.ENABLED` (the default) :func:`aiayn.layers.fast.window_attention`
computes the same with one gather and one scatter, and without gradients takes the windows a group at a time
(``CHUNK_TOKENS`` patches' worth), as the feed-forward network takes its rows; ``docs/benchmarks.md`` (the
``swin-forward`` case) has the measured effect.

Shapes: B batch, Cin image channels, H x W the patch map of a stage, C its channels, M window side,
nW windows per image, T = M*M patches per window, heads the attention heads, K classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from aiayn.layers import FeedForward, MultiHeadAttention, fast
from aiayn.layers.feedforward import CHUNK_ROWS
from aiayn.layers.vision import (
    PatchEmbedding,
    PatchMerging,
    RelativePositionBias,
    pad_to_multiple,
    shifted_window_mask,
    window_partition,
    window_reverse,
)
from aiayn.models.config import check_positive, check_probability
from aiayn.models.outputs import ModelOutput, image_outputs
from aiayn.models.pretrained import PretrainedMixin

# the fast path without gradients attends this many patches' worth of windows at a time (as the MLP its rows)
CHUNK_TOKENS = CHUNK_ROWS


@dataclass(frozen=True)
class SwinConfig:
    """Sizes of a Swin Transformer; defaults are Swin-T at 224 px, 1,000 classes (section 3.3).

    ``d_model`` is C, the channels of the first stage (doubled by each patch merging); ``n_layers`` and
    ``n_heads`` give the blocks and heads of each stage. ``image_size`` is the size the model is made for
    (it has no absolute positions, so any size runs). ``drop_path`` is the stochastic depth rate of the
    last block, rising linearly from 0 at the first (training only). ``num_classes=0`` leaves the head out.
    """

    image_size: int = 224
    patch_size: int = 4
    in_channels: int = 3
    num_classes: int = 1000
    d_model: int = 96
    n_layers: tuple[int, ...] = (2, 2, 6, 2)
    n_heads: tuple[int, ...] = (3, 6, 12, 24)
    window_size: int = 7
    mlp_ratio: float = 4.0
    dropout: float = 0.0
    attention_dropout: float = 0.0
    drop_path: float = 0.1
    layer_norm_eps: float = 1e-5

    def __post_init__(self) -> None:
        for name in ("n_layers", "n_heads"):  # JSON gives lists; keep tuples so configs compare and hash
            object.__setattr__(self, name, tuple(getattr(self, name)))
        check_positive(self, "image_size", "patch_size", "in_channels", "d_model", "window_size")
        check_probability(self, "dropout", "attention_dropout", "drop_path")
        if not isinstance(self.num_classes, int) or self.num_classes < 0:
            raise ValueError(f"num_classes={self.num_classes!r} must be a non-negative integer (0: no head)")
        if not self.n_layers or len(self.n_layers) != len(self.n_heads):
            raise ValueError(f"n_layers={self.n_layers} and n_heads={self.n_heads} must give one value per stage")
        for name in ("n_layers", "n_heads"):
            if not all(isinstance(v, int) and v > 0 for v in getattr(self, name)):
                raise ValueError(f"{name}={getattr(self, name)} must hold positive integers")
        for i, heads in enumerate(self.n_heads):
            if self.dims[i] % heads:
                raise ValueError(f"stage {i + 1} has {self.dims[i]} channels (d_model * 2^{i}), not divisible by "
                                 f"n_heads[{i}]={heads}")
        if not self.mlp_ratio > 0:
            raise ValueError(f"mlp_ratio={self.mlp_ratio} must be positive")

    @property
    def dims(self) -> tuple[int, ...]:
        """Channels of each stage: C, 2C, 4C, ..."""
        return tuple(self.d_model * 2**i for i in range(len(self.n_layers)))

    @property
    def num_features(self) -> int:
        """Channels of the last stage, the pooled features."""
        return self.dims[-1]


def _swin(c: int, depths: tuple[int, ...], drop_path: float) -> SwinConfig:
    return SwinConfig(d_model=c, n_layers=depths, n_heads=tuple(c // 32 * 2**i for i in range(4)),
                      drop_path=drop_path)


PRESETS = {
    # Section 3.3: C and layer numbers; heads = C/32 in stage 1, doubling; 224 px, M = 7, 1,000 classes.
    # Stochastic depth as section 4.1 trains on ImageNet-1K (Swin-L, only pre-trained on 22K there: 0.2).
    "swin-t": _swin(96, (2, 2, 6, 2), 0.2),  # 28,288,354 parameters
    "swin-s": _swin(96, (2, 2, 18, 2), 0.3),  # 49,606,258
    "swin-b": _swin(128, (2, 2, 18, 2), 0.5),  # 87,768,224
    "swin-l": _swin(192, (2, 2, 18, 2), 0.2),  # 196,532,476
    # For tests and the image job on a laptop CPU: 28 px grey digits, 4 px patches, a 7 x 7 map padded to
    # 2 x 2 windows of 4 (shifted by 2 in every second block), merged to one 4 x 4 window in stage 2.
    "swin-tiny": SwinConfig(image_size=28, patch_size=4, in_channels=1, num_classes=10, d_model=32, n_layers=(2, 2),
                            n_heads=(2, 4), window_size=4, drop_path=0.0),
}


class SwinBlock(nn.Module):
    """W-MSA (``shift=0``) or SW-MSA, then the MLP, each pre-norm with a residual (eq. 3)."""

    def __init__(self, d_model: int, n_heads: int, window: int, shift: int, mlp_ratio: float = 4.0,
                 dropout: float = 0.0, attention_dropout: float = 0.0, drop_path: float = 0.0,
                 eps: float = 1e-5) -> None:
        super().__init__()
        self.window, self.shift, self.drop_path = window, shift, drop_path
        self.norm1 = nn.LayerNorm(d_model, eps=eps)
        self.attn = MultiHeadAttention(d_model, n_heads, attention_dropout)
        self.relative_position = RelativePositionBias(window, n_heads)
        self.norm2 = nn.LayerNorm(d_model, eps=eps)
        self.ff = FeedForward(d_model, int(mlp_ratio * d_model), activation="gelu")
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:  # (B, H, W, C) -> (B, H, W, C)
        x = x + self._residual(self.window_attention(self.norm1(x)), self._keep(x))
        return x + self._residual(self.ff(self.norm2(x)), self._keep(x))

    def _keep(self, x: Tensor) -> Tensor | None:
        """Stochastic depth for one branch: 0 or 1 / (1 - rate) for each image, drawn afresh for each branch, as
        the reference's two DropPath calls draw (``None``: not training, or no drop)."""
        if not (self.training and self.drop_path > 0):
            return None
        return x.new_empty(x.size(0), 1, 1, 1).bernoulli_(1 - self.drop_path).div_(1 - self.drop_path)

    def window_attention(self, x: Tensor) -> Tensor:
        """W-MSA or SW-MSA (section 3.2) of the normalised map.

        The map is zero-padded to whole windows (after the norm, as the reference pads) and cropped back.

        Args:
            x: ``(B, H, W, C)``, the output of ``norm1``.

        Returns:
            ``(B, H, W, C)``, attention within each (shifted) window, before the residual.
        """
        b, h, w, _ = x.shape
        window, shift = self.window, self.shift
        if min(h, w) <= window:  # the map fits one window: attend over all of it, nothing to shift
            window, shift = min(h, w), 0
        x = pad_to_multiple(x, window)  # (B, Hp, Wp, C)
        hp, wp = x.size(1), x.size(2)
        mask = self.attention_mask(hp, wp, window, shift, x)  # (nW or 1, heads, T, T), additive
        if fast.ENABLED:  # the same steps as one gather and one scatter, in groups of windows without gradients
            return fast.window_attention(self.attn, x, mask, window, shift, chunk_tokens=CHUNK_TOKENS)[:, :h, :w]
        x = torch.roll(x, shifts=(-shift, -shift), dims=(1, 2))  # cyclic shift towards the top left (figure 4)
        windows = window_partition(x, window)  # (B * nW, T, C), images major
        mask = mask.repeat(b, 1, 1, 1) if mask.size(0) > 1 else mask  # (B * nW or 1, heads, T, T)
        y = self.attn(windows, mask=mask)[0]  # (B * nW, T, C), eq. 4 in each window
        x = window_reverse(y, window, hp, wp)  # (B, Hp, Wp, C)
        x = torch.roll(x, shifts=(shift, shift), dims=(1, 2))  # roll back
        return x[:, :h, :w]  # (B, H, W, C)

    def attention_mask(self, height: int, width: int, window: int, shift: int, like: Tensor) -> Tensor:
        """The additive mask of each window's attention scores: the relative position bias B of eq. 4, and
        for SW-MSA ``-inf`` between patches that meet only because of the roll (figure 4).

        Args:
            height, width: the padded map, multiples of ``window``.
            window: M.
            shift: the cyclic shift s (0: W-MSA).
            like: a tensor of the map's dtype and device.

        Returns:
            ``(nW, heads, T, T)`` float, windows row-major, when shifted; ``(1, heads, T, T)`` (the bias alone,
            the same for every window) when not.
        """
        bias = self.relative_position(window)  # (1, heads, T, T), learned
        if not shift:
            return bias
        allowed = shifted_window_mask(height, width, window, shift, like.device)  # (nW, T, T)
        apart = like.new_zeros(allowed.shape).masked_fill_(~allowed, float("-inf"))  # (nW, T, T)
        return bias + apart[:, None]  # (nW, heads, T, T)

    def _residual(self, x: Tensor, keep: Tensor | None) -> Tensor:
        """Dropout, then stochastic depth: the whole branch dropped for a random share of the images."""
        x = self.dropout(x)
        return x if keep is None else x * keep


class SwinStage(nn.Module):
    """Patch merging (every stage but the first), then blocks alternating W-MSA and SW-MSA."""

    def __init__(self, cfg: SwinConfig, i: int, drop_paths: list[float]) -> None:
        super().__init__()
        d = cfg.dims[i]
        self.merge = PatchMerging(d // 2, eps=cfg.layer_norm_eps) if i > 0 else None
        self.blocks = nn.ModuleList(
            SwinBlock(d, cfg.n_heads[i], cfg.window_size, 0 if j % 2 == 0 else cfg.window_size // 2, cfg.mlp_ratio,
                      cfg.dropout, cfg.attention_dropout, drop_paths[j], cfg.layer_norm_eps)
            for j in range(cfg.n_layers[i])
        )

    def forward(self, x: Tensor) -> Tensor:  # (B, H, W, C/2 or C) -> (B, H', W', C)
        if self.merge is not None:
            x = self.merge(x)
        for block in self.blocks:
            x = block(x)
        return x


class Swin(PretrainedMixin, nn.Module):
    """Swin Transformer; ``forward(images)`` returns class logits ``(B, K)``."""

    def __init__(self, cfg: SwinConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.patch_embed = PatchEmbedding(cfg.in_channels, cfg.d_model, cfg.patch_size, norm=True,
                                          eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.dropout)
        total = sum(cfg.n_layers)
        rates = [cfg.drop_path * k / max(total - 1, 1) for k in range(total)]  # 0 ... drop_path, block by block
        starts = [sum(cfg.n_layers[:i]) for i in range(len(cfg.n_layers))]
        self.stages = nn.ModuleList(SwinStage(cfg, i, rates[s : s + n])
                                    for i, (s, n) in enumerate(zip(starts, cfg.n_layers)))
        self.norm = nn.LayerNorm(cfg.num_features, eps=cfg.layer_norm_eps)
        self.head = nn.Linear(cfg.num_features, cfg.num_classes) if cfg.num_classes else nn.Identity()
        self._init_weights()

    def _init_weights(self) -> None:
        # truncated N(0, 0.02) for matrices and the bias tables, zero biases, unit LayerNorm gains (the
        # reference code); the patch projection keeps PyTorch's conv initialisation, as there.
        for name, p in self.named_parameters():
            if name.startswith("patch_embed.proj"):
                continue
            if p.dim() > 1:
                nn.init.trunc_normal_(p, std=0.02)
            else:
                nn.init.ones_(p) if "norm" in name and name.endswith("weight") else nn.init.zeros_(p)

    def forward_features(self, images: Tensor) -> Tensor:
        """The final normalised map ``(B, H', W', C')``, ``H' = ceil(H / (patch_size * 2^(stages - 1)))``.

        Args:
            images: ``(B, in_channels, H, W)`` of any size (padded where the patches or windows need it).
        """
        x = self.dropout(self.patch_embed(images))  # (B, H/P, W/P, C)
        for stage in self.stages:
            x = stage(x)
        return self.norm(x)

    def pool(self, features: Tensor) -> Tensor:
        """``(B, H', W', C')`` -> ``(B, C')``: the average over the map."""
        return features.mean(dim=(1, 2))

    def forward(self, images: Tensor) -> Tensor:
        """Class logits ``(B, K)`` for ``(B, in_channels, H, W)`` images (pooled features ``(B, C')`` when
        ``num_classes=0``)."""
        return self.head(self.pool(self.forward_features(images)))

    def outputs(self, pixel_values: Tensor, labels: Tensor | None = None) -> ModelOutput:
        """``model(pixel_values=..., labels=...)`` as ``transformers``' image classifier (or, with ``num_classes=0``,
        its bare model) answers it: :func:`aiayn.models.outputs.image_outputs`."""
        return image_outputs(self, pixel_values, labels)


__all__ = ["CHUNK_TOKENS", "PRESETS", "Swin", "SwinBlock", "SwinConfig", "SwinStage"]
