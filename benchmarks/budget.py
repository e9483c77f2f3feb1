"""Training for a fixed time instead of a fixed number of updates, with the schedule fitted to it.

The learning rate warms up linearly, then decays to ``floor`` times the peak at the last update the
budget allows. That last update is re-estimated every ``chunk`` updates from the speed of the chunk
before, so a slower or faster machine still ends on time, with the rate decayed. Only the updates count
against the budget; whatever ``on_chunk`` does (validation, samples) is timed apart.

``updates=N`` trains exactly N updates on the same schedule instead: the run a time budget chose,
repeated on any machine (busy or quiet, faster or slower) with the same result on that machine.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from aiayn.training import fit

RESULTS = Path(__file__).parent / "results"


def parse_args(p: argparse.ArgumentParser, argv: list[str] | None, quick: dict[str, Any], name: str
               ) -> argparse.Namespace:
    """Add ``--out`` and ``--quick`` to ``p`` and parse ``argv``. Under ``--quick`` the defaults become ``quick``
    (toy sizes; a flag given still wins) and ``--out`` a new temporary folder unless given, so toy numbers never
    replace measured ones; otherwise ``--out`` is ``benchmarks/results``."""
    p.add_argument("--out", help="folder for the results (default benchmarks/results; --quick: a new temporary one)")
    p.add_argument("--quick", action="store_true", help="toy sizes, seconds: checks that it runs, measures nothing")
    args = p.parse_args(argv)
    if args.quick:
        p.set_defaults(**quick)
        args = p.parse_args(argv)
    if args.out is None:
        args.out = tempfile.mkdtemp(prefix=f"{name}-quick-") if args.quick else str(RESULTS)
    return args


def write_results(out: str | Path, name: str, results: dict[str, Any]) -> Path:
    """``results`` as ``<out>/<name>.json`` (the folder made if needed); says where, returns the path."""
    path = Path(out) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {path}")
    return path


def train_for(
    model: nn.Module,
    batches: Iterator[Any],
    optimizer: torch.optim.Optimizer,
    loss_fn,
    minutes: float | None,
    warmup: int,
    shape: str = "cosine",
    floor: float = 0.0,
    chunk: int = 50,
    on_chunk: Callable[[int, list[dict], int], None] | None = None,
    updates: int | None = None,
    **fit_kwargs: Any,
) -> list[dict]:
    """Train ``model`` for ``minutes`` of update time, or for exactly ``updates`` updates when given;
    ``on_chunk(step, history, planned_total)`` runs after every chunk. Returns ``fit``'s history."""
    if (minutes is None) == (updates is None):
        raise ValueError(f"give minutes or updates, not both or neither (got minutes={minutes}, updates={updates})")
    plan = {"total": updates or 10**9}

    def multiplier(i: int) -> float:
        if i < warmup:
            return (i + 1) / warmup
        progress = min(1.0, (i - warmup) / max(1, plan["total"] - warmup))
        decay = 0.5 * (1 + math.cos(math.pi * progress)) if shape == "cosine" else 1 - progress
        return floor + (1 - floor) * decay

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, multiplier)
    budget, history, step = (minutes or 0) * 60, [], 0
    while step < plan["total"]:
        history = fit(model, batches, min(step + chunk, plan["total"]), optimizer, loss_fn, scheduler,
                      progress=False, start=step, history=history, **fit_kwargs)
        step, spent = len(history), history[-1]["seconds"]
        recent = (spent - history[-chunk - 1]["seconds"]) / chunk if len(history) > chunk else spent / step
        if updates is None:
            plan["total"] = max(step + int((budget - spent) / recent), step)
        if on_chunk is not None:
            on_chunk(step, history, plan["total"])
        model.train()
    return history
