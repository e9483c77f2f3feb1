"""What every family's config shares: validation helpers and overrides with helpful errors."""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any


def check_positive(cfg: Any, *names: str) -> None:
    for name in names:
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name}={value!r} must be a positive integer")


def check_probability(cfg: Any, *names: str) -> None:
    for name in names:
        value = getattr(cfg, name)
        if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
            raise ValueError(f"{name}={value!r} must be a probability in [0, 1)")


def check_divisible(cfg: Any, name: str, by: str) -> None:
    if getattr(cfg, name) % getattr(cfg, by):
        raise ValueError(f"{name}={getattr(cfg, name)} must be divisible by {by}={getattr(cfg, by)}")


def check_choice(cfg: Any, name: str, choices: tuple[str, ...]) -> None:
    if getattr(cfg, name) not in choices:
        raise ValueError(f"{name}={getattr(cfg, name)!r} must be one of {choices}")


def suggest(name: str, choices) -> str:
    close = difflib.get_close_matches(name, list(choices), n=3, cutoff=0.5)
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def override(cfg: Any, **changes: Any) -> Any:
    """``dataclasses.replace`` that names an unknown field (and the closest known ones)."""
    fields = {f.name for f in dataclasses.fields(cfg)}
    for key in changes:
        if key not in fields:
            raise ValueError(
                f"{type(cfg).__name__} has no field {key!r}{suggest(key, fields)} (fields: {', '.join(sorted(fields))})"
            )
    return dataclasses.replace(cfg, **changes)
