"""Pictures of the training recipe: the learning-rate schedule and the label-smoothed target.

Section 5.3:  lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), rising linearly for ``warmup``
              steps to a peak of (d_model * warmup)^-0.5, then falling as step^-0.5
              (:func:`aiayn.training.schedule.noam_lr`).
Section 5.4:  label smoothing, epsilon_ls = 0.1: the target puts 1 - eps on the right token and spreads eps
              over the others; as :func:`aiayn.training.label_smoothed_loss` computes it, over the V - 2
              tokens that are neither the target nor padding (padding gets nothing).

Shapes: V vocabulary.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from aiayn.training.schedule import noam_lr
from aiayn.viz.common import pyplot, save

SCHEDULES = ((512, 4000), (512, 8000), (256, 4000), (1024, 4000))


def plot_schedule(path: str | os.PathLike, settings: Sequence[tuple[int, int]] = SCHEDULES,
                  steps: int = 30_000) -> Path:
    """The learning rate of section 5.3 over ``steps`` for each ``(d_model, warmup)`` of ``settings``."""
    if steps < 2:
        raise ValueError(f"steps={steps} must be at least 2")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    xs = range(1, steps + 1, max(1, steps // 2000))
    for d_model, warmup in settings:
        ax.plot(list(xs), [noam_lr(s, d_model, warmup) for s in xs], label=f"d_model={d_model}, warmup={warmup}")
        ax.plot([warmup], [noam_lr(warmup, d_model, warmup)], "k.", ms=4)
    ax.set_xlabel("step")
    ax.set_ylabel("learning rate")
    ax.set_title("lrate = d_model^-0.5 min(step^-0.5, step warmup^-1.5)  (section 5.3; dots: the peaks)", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return save(fig, path)


def smoothed_target(vocab_size: int, target: int, pad_id: int, epsilon: float = 0.1) -> Tensor:
    """``(V,)`` the label-smoothed target distribution: 1 - eps on ``target``, 0 on ``pad_id``, eps / (V - 2)
    on every other token."""
    if vocab_size < 3:
        raise ValueError(f"vocab_size={vocab_size} must be at least 3 (a target, padding and another token)")
    for name, value in (("target", target), ("pad_id", pad_id)):
        if not 0 <= value < vocab_size:
            raise ValueError(f"{name}={value} must be a token id in [0, {vocab_size})")
    if target == pad_id:
        raise ValueError(f"target={target} is padding (pad_id={pad_id}); padding positions are ignored")
    q = torch.full((vocab_size,), epsilon / (vocab_size - 2))
    q[pad_id] = 0.0
    q[target] = 1.0 - epsilon
    return q


def plot_label_smoothing(path: str | os.PathLike, vocab_size: int = 12, target: int = 4, pad_id: int = 0,
                         epsilons: Sequence[float] = (0.0, 0.1, 0.3)) -> Path:
    """The target distribution over a small vocabulary for each smoothing ``epsilon`` (section 5.4)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(epsilons), figsize=(4 * len(epsilons), 3.6), squeeze=False)
    for ax, eps in zip(axes[0], epsilons):
        q = smoothed_target(vocab_size, target, pad_id, eps)
        colors = ["tab:red" if i == target else "lightgrey" if i == pad_id else "tab:blue" for i in range(vocab_size)]
        ax.bar(range(vocab_size), q.tolist(), color=colors)
        ax.set_ylim(0, 1.05)
        ax.set_title(f"epsilon = {eps}: {1 - eps:.2f} on the target, {eps / (vocab_size - 2):.3f} on each other",
                     fontsize=8)
        ax.set_xlabel(f"token id (red: target {target}; padding {pad_id} gets nothing)", fontsize=8)
    axes[0][0].set_ylabel("target probability")
    fig.suptitle("Label smoothing (section 5.4)", fontsize=11)
    fig.tight_layout()
    return save(fig, path)


__all__ = ["SCHEDULES", "plot_label_smoothing", "plot_schedule", "smoothed_target"]
