"""Training for a fixed time: time the first updates, then fix how many updates fill the budget.

    timed = timing_updates(warmup)                       # the first updates, all inside the warm-up
    history = fit(model, batches, timed, optimizer, loss_fn, scheduler)
    total, per_update = updates_in(minutes, history)     # the run's updates, the timed ones among them
    history = fit(model, batches, total, optimizer, loss_fn, scheduler, start=timed, history=history)

The updates are timed inside the warm-up, whose rate does not depend on the total, so a schedule that decays to
the last update (``warmup_cosine(i, warmup, total)``) is fixed once ``total`` is known and never changes after.
A run repeated with ``total`` updates (``aiayn train --steps``, a benchmark's ``--updates``) runs the same schedule
on any machine, busy or quiet. The first timed update is left out of the speed: it also warms up the kernels (and
compiles, under ``torch.compile``). Whatever runs between updates inside ``fit`` (validation every ``every``
updates) counts as the updates' time.

The recipes' ``--minutes`` is this (:func:`aiayn.recipes.base.run`), and so are the repository's time-budget
benchmarks (``benchmarks/vision_mnist.py``, ``benchmarks/detection.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

TIMING_UPDATES = 20  # the most updates timed: enough for a steady speed, few enough to stay inside any warm-up


def timing_updates(warmup: int, most: int = TIMING_UPDATES) -> int:
    """How many first updates to time before fixing the total: all inside the warm-up, at most ``most``, at
    least 1.

    Args:
        warmup: the schedule's warm-up updates (its rate there does not depend on the total).
        most: the most updates timed.
    """
    return max(1, min(warmup, most))


def updates_in(minutes: float, history: Sequence[Mapping[str, float]]) -> tuple[int, float]:
    """The updates that fill ``minutes``, at the speed of the timed first updates.

    Args:
        minutes: the budget, for the whole run (the timed updates' time is part of it).
        history: the records of the timed updates, as :func:`aiayn.training.fit` returns them: ``"seconds"`` is
            the time since the first update began, after each update.

    Returns:
        ``(total, per_update)``: the run's updates, the timed ones counted, and at least one more than them
        (it validates, saves and ends the schedule); and the seconds an update took, from the second timed
        update on (from the first when only one was timed).

    Raises:
        ValueError: ``history`` is empty or ``minutes`` is not positive.
    """
    if not history:
        raise ValueError("updates_in needs the records of at least one timed update, got none")
    if not minutes > 0:
        raise ValueError(f"minutes must be positive, got {minutes}")
    timed, first, last = len(history), history[0]["seconds"], history[-1]["seconds"]
    per_update = (last - first) / (timed - 1) if timed > 1 else last  # the first update also warms up kernels
    per_update = max(per_update, 1e-6)  # updates faster than the clock's 1 ms records: no division by zero
    return max(timed + 1, timed + math.floor((minutes * 60 - last) / per_update)), per_update


__all__ = ["TIMING_UPDATES", "timing_updates", "updates_in"]
