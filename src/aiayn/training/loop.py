"""The training loop shared by every task: forward, loss, backward, clip, step, schedule.

Gradient accumulation sums the losses of ``accum`` batches and divides the gradients by their total
number of target tokens, so accumulating k batches is the same update as one batch k times larger.
"""

from __future__ import annotations

import math
import time
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
    accum: int = 1,
    progress: bool = True,
    desc: str = "train",
    every: int = 0,
    callback: Callable[[int, list[dict[str, float]]], None] | None = None,
) -> list[dict[str, float]]:
    """Train ``model`` for ``steps`` updates on ``batches``.

    Args:
        loss_fn: ``loss_fn(model, batch) -> (loss_sum, nll_sum, n_tokens)``; each update minimises the
            loss summed over ``accum`` batches divided by their tokens.
        clip: maximum gradient norm, or ``None``.
        accum: batches per update (gradient accumulation).
        every, callback: ``callback(step, history)`` after every ``every``-th update and the last one
            (validation, checkpoints); the model is in training mode again after it.

    Returns:
        One record per update: ``step``, ``loss`` and ``nll`` per token, ``lr``, ``tokens``, ``seconds``.

    Raises:
        FloatingPointError: the loss became NaN or infinite (the step is named).
    """
    if accum < 1:
        raise ValueError(f"accum={accum} must be >= 1")
    model.train()
    history: list[dict[str, float]] = []
    params = [p for p in model.parameters() if p.requires_grad]
    bar = tqdm(range(1, steps + 1), desc=desc, disable=not progress, dynamic_ncols=True, leave=False)
    start = time.perf_counter()
    for step in bar:
        optimizer.zero_grad(set_to_none=True)
        loss_total, nll_total, n_total = 0.0, 0.0, 0
        for _ in range(accum):
            loss_sum, nll_sum, n = loss_fn(model, next(batches))
            loss_sum.backward()  # summed, not averaged: divided by all tokens of the update below
            loss_total, nll_total, n_total = loss_total + loss_sum.item(), nll_total + nll_sum.item(), n_total + n
        if not math.isfinite(loss_total):
            raise FloatingPointError(f"loss is {loss_total} at step {step}; stopping")
        for p in params:
            if p.grad is not None:
                p.grad.div_(max(n_total, 1))
        if clip is not None:
            nn.utils.clip_grad_norm_(params, clip)
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        seconds = time.perf_counter() - start
        record = {"step": step, "loss": loss_total / max(n_total, 1), "nll": nll_total / max(n_total, 1), "lr": lr,
                  "tokens": n_total, "seconds": round(seconds, 3)}
        history.append(record)
        if step % 10 == 0 or step == steps:
            tok_s = sum(r["tokens"] for r in history[-10:]) / max(seconds - history[-11]["seconds"], 1e-9) \
                if len(history) > 10 else sum(r["tokens"] for r in history) / max(seconds, 1e-9)
            bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{lr:.2e}", tok_s=f"{tok_s:,.0f}")
        if callback is not None and ((every and step % every == 0) or step == steps):
            callback(step, history)
            model.train()
    bar.close()
    model.eval()
    return history
