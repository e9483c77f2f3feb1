"""Optimiser and learning-rate schedule of section 5.3.

    lrate = d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5)

linear warm-up for ``warmup_steps``, then decay with the inverse square root of the step; the peak,
at ``step == warmup_steps``, is ``d_model^-0.5 * warmup_steps^-0.5``.
"""

from __future__ import annotations

import torch
from torch import nn


def noam_lr(step: int, d_model: int, warmup: int = 4000, factor: float = 1.0) -> float:
    """The learning rate at (1-based) ``step``."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def noam_optimizer(
    model: nn.Module, d_model: int, warmup: int = 4000, factor: float = 1.0
) -> tuple[torch.optim.Adam, torch.optim.lr_scheduler.LambdaLR]:
    """Adam(beta1 0.9, beta2 0.98, eps 1e-9) with the warm-up schedule; call ``scheduler.step()`` after
    each ``optimizer.step()``. The first update uses the rate of step 1."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: noam_lr(i + 1, d_model, warmup, factor))
    return optimizer, scheduler
