"""Closed-form parameter and multiply-add counts of DETR, in :mod:`aiayn.models.formulas`' conventions
(one multiply-add per weight per position, attention scores over the full square)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from aiayn.models.formulas import (
    NONE,
    Counts,
    conv,
    decoder_layer,
    encoder_layer,
    layer_norm,
    linear,
    resnet,
    table,
)

# DETR has no image_size field; its FLOPs are quoted for COCO images resized to a shorter side of 800
# (800 x 1066 for COCO's usual 3:4 images).
DETR_IMAGE_SIZE = (800, 1066)


def count(cfg: Any, size: tuple[int, int]) -> Counts:
    """DETR (Carion et al. 2020, section 3.2) on a ``size = (height, width)`` image.

        backbone          :func:`resnet`: a feature map of h x w = H/32 x W/32 positions, 2048 channels
        input projection  1 x 1 conv 2048 -> C on S = h w positions
        encoder           N layers on S positions (positions added to queries and keys: no extra matmul)
        decoder           M layers of Q object queries (a Q x C table), self-attention over Q and
                          cross-attention over S
        heads             class Linear C -> K+1 and box MLP C -> C -> C -> 4, on the output of every decoder
                          layer (the auxiliary losses; the last is the prediction): M Q (C(K+1) + 2C^2 + 4C)

    DETR-R50 at 800 x 1066 (S = 25 x 34 = 850): the backbone is ~70G of its ~81G multiply-adds.
    """
    (height, width), c, q, f = size, cfg.d_model, cfg.num_queries, cfg.d_ff
    backbone, (h, w) = resnet(cfg.in_channels, cfg.backbone_stem, cfg.backbone_widths, cfg.backbone_depths,
                              cfg.backbone_block, height, width)
    s = h * w
    embed = conv(h, w, cfg.backbone_widths[-1], c, 1, part="embeddings") + table(q, c)
    encoder = cfg.n_encoder_layers * encoder_layer(s, c, f) + (layer_norm(c) if cfg.norm_first else NONE)
    decoder = cfg.n_decoder_layers * decoder_layer(q, s, c, f) + layer_norm(c)
    rows = cfg.n_decoder_layers * q  # every layer's output goes through the heads
    heads = linear(rows, c, cfg.num_classes + 1) + linear(rows, c, c) + linear(rows, c, c) + linear(rows, c, 4)
    return backbone + embed + encoder + decoder + heads


def default_size(cfg: Any) -> tuple[int, int]:
    """The image when none is given: COCO's usual 800 x 1066 (:data:`DETR_IMAGE_SIZE`)."""
    return DETR_IMAGE_SIZE


def example(model: nn.Module, size: tuple[int, int], batch: int) -> Callable[[], Any]:
    """A forward pass on ``batch`` random images of ``size = (height, width)``."""
    cfg: Any = model.cfg
    images = torch.randn(batch, cfg.in_channels, *size)
    return lambda: model(images)


__all__ = ["DETR_IMAGE_SIZE", "count", "default_size", "example"]
