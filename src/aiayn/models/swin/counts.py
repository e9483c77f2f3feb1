"""Closed-form parameter and multiply-add counts of the Swin Transformer, in :mod:`aiayn.models.formulas`' conventions
(one multiply-add per weight per position, attention scores over the full square)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from aiayn.models.formulas import (
    NONE,
    Counts,
    conv,
    feed_forward,
    layer_norm,
    linear,
    table,
    window_attention,
)


def count(cfg: Any, size: tuple[int, int]) -> Counts:
    """Swin Transformer (Liu et al. 2021, section 3) on a ``size = (height, width)`` image.

        patch embedding   P x P conv, stride P, and a LayerNorm: (H/P)(W/P) Cin P^2 C
        each block        W-MSA or SW-MSA (:func:`window_attention`, on the map padded to a multiple of M;
                          a map no larger than M is one window) + the relative position bias, (2M-1)^2 h
                          parameters + an MLP of ratio 4 on the h w patches
        patch merging     2 x 2 patches concatenated (4C), LayerNorm, Linear 4C -> 2C without bias:
                          (h/2)(w/2) 8C^2 multiply-adds
        head              LayerNorm, average, Linear C_last -> K

    Swin-T at 224 (maps 56, 28, 14, 7; C = 96, 192, 384, 768): 4.5G multiply-adds, Table 1's "4.5G FLOPs".
    """
    (height, width), p, m = size, cfg.patch_size, cfg.window_size
    h, w = math.ceil(height / p), math.ceil(width / p)
    c0 = cfg.d_model
    total = conv(h, w, cfg.in_channels, c0, p, part="embeddings") + layer_norm(c0)
    for i, (depth, heads) in enumerate(zip(cfg.n_layers, cfg.n_heads)):
        c = cfg.dims[i]
        if i > 0:  # patch merging of the previous stage's C/2 channels: LayerNorm(2C), Linear(2C -> C)
            h, w = math.ceil(h / 2), math.ceil(w / 2)
            total += layer_norm(2 * c) + linear(h * w, 2 * c, c, bias=False, part="embeddings")
        window = min(m, h, w)
        hp, wp = math.ceil(h / window) * window, math.ceil(w / window) * window
        f = int(cfg.mlp_ratio * c)
        block = (window_attention(hp, wp, c, window) + Counts({"attention": 4 * c * c + 4 * c})
                 + table((2 * m - 1) ** 2, heads, part="attention") + feed_forward(h * w, c, f) + layer_norm(c, 2))
        total += depth * block
    head = linear(1, cfg.num_features, cfg.num_classes) if cfg.num_classes else NONE
    return total + layer_norm(cfg.num_features) + head


def default_size(cfg: Any) -> tuple[int, int]:
    """The image when none is given: the config's square ``image_size``."""
    return (cfg.image_size, cfg.image_size)


def example(model: nn.Module, size: tuple[int, int], batch: int) -> Callable[[], Any]:
    """A forward pass on ``batch`` random images of ``size = (height, width)``."""
    cfg: Any = model.cfg
    images = torch.randn(batch, cfg.in_channels, *size)
    return lambda: model(images)


__all__ = ["count", "default_size", "example"]
