"""Parameter counts by part: embeddings, attention, feed-forward, norms, output.

Counted on the meta device when built from a config, so no weights are allocated and the biggest
presets count on a laptop. A parameter shared by two modules (tied embeddings) is counted once,
under the first part that owns it.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from aiayn.layers import Embedding, FeedForward, MultiHeadAttention

PARTS = ("embeddings", "attention", "feed-forward", "norms", "output")


def count_parameters(model: nn.Module) -> int:
    """Every parameter counted once (tied weights once)."""
    return sum(p.numel() for p in model.parameters())


def _part(module: nn.Module) -> str | None:
    if isinstance(module, (Embedding, nn.Embedding)):
        return "embeddings"
    if isinstance(module, MultiHeadAttention):
        return "attention"
    if isinstance(module, FeedForward):
        return "feed-forward"
    if isinstance(module, nn.LayerNorm):
        return "norms"
    return None


def parameter_table(model_or_cfg: Any) -> dict[str, int]:
    """Parameters per part of a model (or of a config, counted on the meta device), plus ``total``."""
    if isinstance(model_or_cfg, nn.Module):
        model = model_or_cfg
    else:
        from aiayn.models import build

        with torch.device("meta"):
            model = build(model_or_cfg)
    counts = dict.fromkeys(PARTS, 0)
    seen: set[int] = set()
    owners = [(name, m) for name, m in model.named_modules() if _part(m) is not None]
    for _, module in owners:
        for p in module.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                counts[_part(module)] += p.numel()
    counts["output"] = sum(p.numel() for p in model.parameters() if id(p) not in seen)
    counts["total"] = count_parameters(model)
    return counts
