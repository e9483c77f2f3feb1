"""Closed-form parameter and multiply-add counts of ViT, in :mod:`aiayn.models.formulas`' conventions
(one multiply-add per weight per position, attention scores over the full square)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from aiayn.models.formulas import NONE, Counts, conv, encoder_layer, layer_norm, linear


def count(cfg: Any, size: tuple[int, int]) -> Counts:
    """ViT (Dosovitskiy et al. 2021, section 3.1, eqs. 1-4) on a ``size = (height, width)`` image.

    The patch embedding is a P x P convolution of stride P: N = (H/P)(W/P) patches of Cin P^2 values, each
    mapped to C (N Cin P^2 C multiply-adds). The [CLS] token and the position table ((1 + g^2) C, g the grid
    at ``cfg.image_size``) are parameters without arithmetic. The encoder runs on 1 + N tokens, and the head
    C K on [CLS] alone. ViT-B/16 at 224: N = 196, 12 layers of 197 (4C^2 + 2 x 197 C + 2CF) = 17.45G, the
    patch embedding 0.12G: 17.6G multiply-adds.
    """
    (height, width), p, c = size, cfg.patch_size, cfg.d_model
    if height % p or width % p:
        raise ValueError(f"image size {height} x {width} must be a multiple of patch_size={p}")
    n = (height // p) * (width // p)
    embed = conv(height // p, width // p, cfg.in_channels, c, p, part="embeddings")
    embed += Counts({"embeddings": c + (1 + cfg.grid**2) * c})  # [CLS] and the position table
    layers = cfg.n_layers * encoder_layer(1 + n, c, cfg.d_ff)
    head = linear(1, c, cfg.num_classes) if cfg.num_classes else NONE
    return embed + layers + layer_norm(c) + head


def default_size(cfg: Any) -> tuple[int, int]:
    """The image when none is given: the config's square ``image_size``."""
    return (cfg.image_size, cfg.image_size)


def example(model: nn.Module, size: tuple[int, int], batch: int) -> Callable[[], Any]:
    """A forward pass on ``batch`` random images of ``size = (height, width)``."""
    cfg: Any = model.cfg
    images = torch.randn(batch, cfg.in_channels, *size)
    return lambda: model(images)


__all__ = ["count", "default_size", "example"]
