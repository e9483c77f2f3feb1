"""Optimisers and learning-rate schedules: the paper's (section 5.3), and GPT's AdamW with cosine decay.

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

linear warm-up for ``warmup_steps``, then decay with the inverse square root of the step; the peak,
at ``step == warmup_steps``, is ``d_model^-0.5 * warmup_steps^-0.5``.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def noam_lr(step: int, d_model: int, warmup: int = 4000, factor: float = 1.0) -> float:
    """The learning rate at (1-based) ``step``."""
    if not warmup >= 1:
        raise ValueError(f"warmup={warmup!r} must be at least 1 step")
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def noam_optimizer(
    model: nn.Module, d_model: int, warmup: int = 4000, factor: float = 1.0
) -> tuple[torch.optim.Adam, torch.optim.lr_scheduler.LambdaLR]:
    """Adam(beta1 0.9, beta2 0.98, eps 1e-9) with the warm-up schedule; call ``scheduler.step()`` after
    each ``optimizer.step()``. The first update uses the rate of step 1."""
    noam_lr(1, d_model, warmup, factor)  # refuses a bad warmup now, not at the first update
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: noam_lr(i + 1, d_model, warmup, factor))
    return optimizer, scheduler


def decay_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW parameter groups: weight decay on matrices (and embedding tables) only, never on biases
    or LayerNorm gains, as GPT-2 and nanoGPT train. Tied weights appear once."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def warmup_cosine(step: int, warmup: int, total: int, min_ratio: float = 0.1) -> float:
    """The multiplier of the peak rate at (0-based) ``step``: linear warm-up over ``warmup`` steps, then
    a cosine from 1 down to ``min_ratio`` at ``total``, flat after it."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def adamw_cosine(
    model: nn.Module, lr: float, total: int, warmup: int = 100, weight_decay: float = 0.1,
    betas: tuple[float, float] = (0.9, 0.95), min_ratio: float = 0.1,
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW (decay on matrices only) with warm-up then cosine decay to ``min_ratio * lr`` at ``total``."""
    optimizer = torch.optim.AdamW(decay_groups(model, weight_decay), lr=lr, betas=betas)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: warmup_cosine(i, warmup, total, min_ratio))
    return optimizer, scheduler
