"""The training loop shared by every task: forward, loss, backward, clip, step, schedule."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

LossFn = Callable[[nn.Module, Any], tuple[Tensor, Tensor, int]]


def fit(
    model: nn.Module,
    batches: Iterator[Any],
    steps: int,
    optimizer: torch.optim.Optimizer,
    loss_fn: LossFn,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    clip: float | None = 1.0,
    progress: bool = True,
    desc: str = "train",
) -> list[dict[str, float]]:
    """Train ``model`` for ``steps`` updates on ``batches``.

    Args:
        loss_fn: ``loss_fn(model, batch) -> (loss_sum, nll_sum, n_tokens)``; the update minimises
            ``loss_sum / n_tokens``.
        clip: maximum gradient norm, or ``None``.

    Returns:
        One record per step: ``step``, ``loss`` and ``nll`` per token, ``lr``.

    Raises:
        FloatingPointError: the loss became NaN or infinite (the step is named).
    """
    model.train()
    history = []
    bar = tqdm(range(1, steps + 1), desc=desc, disable=not progress, dynamic_ncols=True, leave=False)
    for step in bar:
        loss_sum, nll_sum, n = loss_fn(model, next(batches))
        loss = loss_sum / max(n, 1)
        if not math.isfinite(loss.item()):
            raise FloatingPointError(f"loss is {loss.item()} at step {step}; stopping")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if clip is not None:
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        history.append({"step": step, "loss": loss.item(), "nll": nll_sum.item() / max(n, 1), "lr": lr})
        if step % 10 == 0 or step == steps:
            bar.set_postfix(loss=f"{loss.item():.3f}", lr=f"{lr:.2e}")
    bar.close()
    model.eval()
    return history
