"""A run's training history as one picture: loss, learning rate, tokens/s and the validation numbers."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

from aiayn.viz.common import pyplot, save


def read_history(run: str | os.PathLike) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """``(history, validation)`` of a run folder: one record per update (``history.csv``) and one per
    validation (``validation.json``, empty if the run never validated)."""
    run = Path(run)
    file = run / "history.csv"
    if not file.is_file():
        raise FileNotFoundError(f"{run} holds no history.csv; is it a run folder written by `aiayn train`?")
    with file.open(newline="") as f:
        history = [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]
    if not history:
        raise ValueError(f"{file} holds no updates")
    val = run / "validation.json"
    return history, json.loads(val.read_text()) if val.is_file() else []


def plot_history(run: str | os.PathLike, path: str | os.PathLike | None = None, smooth: int = 20) -> Path:
    """Four panels over the updates of ``run``: training loss (and validation loss), learning rate,
    tokens (or examples) per second, and every other validation number. Written to ``path`` (default
    ``RUN/history.png``).

    Args:
        smooth: the training loss and speed are also drawn as a running mean over this many updates.
    """
    history, validation = read_history(run)
    plt = pyplot()
    steps = [r["step"] for r in history]
    fig, axes = plt.subplots(2, 2, figsize=(10, 6.5))
    (loss_ax, lr_ax), (speed_ax, val_ax) = axes

    loss = [r["loss"] for r in history]
    loss_ax.plot(steps, loss, color="0.75", lw=0.8, label="training (each update)")
    loss_ax.plot(steps, _running_mean(loss, smooth), color="C0", label=f"training (mean of {smooth})")
    if validation:
        loss_ax.plot([v["step"] for v in validation], [v["val_loss"] for v in validation], "o-", color="C3",
                     label="validation")
    loss_ax.set(xlabel="update", ylabel="loss per token", title="loss")
    loss_ax.legend(fontsize=8)

    lr_ax.plot(steps, [r["lr"] for r in history], color="C2")
    lr_ax.set(xlabel="update", ylabel="learning rate", title="learning rate")

    seconds = [r["seconds"] for r in history]
    rate = [r["tokens"] / max(seconds[i] - (seconds[i - 1] if i else 0.0), 1e-9) for i, r in enumerate(history)]
    speed_ax.plot(steps, _running_mean(rate, smooth), color="C1")
    speed_ax.set(xlabel="update", ylabel="per second", title=f"tokens (or examples) per second, mean of {smooth}")

    others = sorted({k for v in validation for k in v} - {"step", "val_loss"})
    for i, key in enumerate(others):
        val_ax.plot([v["step"] for v in validation if key in v], [v[key] for v in validation if key in v], "o-",
                    color=f"C{i}", label=key)
    val_ax.set(xlabel="update", title="validation")
    if others:
        val_ax.legend(fontsize=8)
    else:
        val_ax.text(0.5, 0.5, "no validation numbers beyond the loss", ha="center", va="center",
                    transform=val_ax.transAxes)
    fig.suptitle(f"{Path(run).name}: {len(history):,} updates")
    fig.tight_layout()
    return save(fig, Path(path) if path is not None else Path(run) / "history.png")


def _running_mean(values: list[float], n: int) -> list[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - n] if i >= n else 0.0)
        out.append(total / min(i + 1, n))
    return out
