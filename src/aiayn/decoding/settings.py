"""Every generation setting checked once, in one place, with the same words at every door.

``generate`` and the samplers (Python), the pipelines, ``aiayn translate``/``generate`` (the command line) and
``aiayn serve`` (HTTP) all call :func:`check`; each door only says the setting's name its own way: Python raises
the :class:`SettingError` (a ``ValueError``) as it is, the command line exits 2 naming the flag (``--top-p``), the
server answers 400 naming the JSON field (``top_p``). A setting is refused when it is the wrong type (``True`` is
not an integer, ``"0.5"`` is not a number), not finite (NaN, infinities), or outside its range; the ceilings
(:data:`CEILINGS`) keep any one request to a bounded amount of work.

Ranges, and why:
- ``temperature``: 0 (greedy), or in [:data:`MIN_TEMPERATURE`, :data:`MAX_TEMPERATURE`] when sampling. Below
  0.01 the logits divided by it overflow float32 for ordinary logits (a NaN distribution) and the draw is greedy in
  all but name; above 100 it is uniform sampling in all but name.
- ``top_p``: (0, 1]; ``top_k``: >= 0 (0 or ``None``: every token); ``repetition_penalty``: (0, 100];
  ``length_penalty``: [-10, 10]; ``no_repeat_ngram_size``, ``min_new_tokens``: >= 0.
- ``num_beams`` <= 64 and ``max_new_tokens`` <= 8,192 (:data:`CEILINGS`), and a beam never wider than the
  vocabulary it searches (:func:`check_beams`).
"""

from __future__ import annotations

import math
from typing import Any

MIN_TEMPERATURE = 0.01
MAX_TEMPERATURE = 100.0
CEILINGS = {"num_beams": 64, "max_new_tokens": 8192, "num_return_sequences": 64}  # what one request may ask


class SettingError(ValueError):
    """A generation setting refused: ``name`` is the setting (``transformers``' name), ``reason`` what it must be
    and what it got; ``str()`` is ``"{name} {reason}"``. A door names the setting its own way
    (:meth:`for_door`)."""

    def __init__(self, name: str, reason: str) -> None:
        super().__init__(f"{name} {reason}")
        self.name, self.reason = name, reason

    def for_door(self, spelled: str) -> str:
        """The same words with the setting spelled as a door spells it (``--top-p``, ``max_tokens``)."""
        return f"{spelled} {self.reason}"


def _integer(name: str, value: Any, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or (not isinstance(value, int) and not _integral_tensor(value)):
        raise SettingError(name, f"must be an integer, got {value!r}")
    value = int(value)
    if value < lo or (hi is not None and value > hi):
        raise SettingError(name, f"must be an integer in [{lo}, {hi}], got {value}" if hi is not None
                           else f"must be an integer >= {lo}, got {value}")
    return value


def _integral_tensor(value: Any) -> bool:  # numpy and torch integer scalars are integers too
    return hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0 and "int" in str(value.dtype)


def _number(name: str, value: Any, lo: float, hi: float, open_lo: bool = False) -> float:
    if isinstance(value, bool) or (not isinstance(value, (int, float)) and not hasattr(value, "__float__")):
        raise SettingError(name, f"must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value):
        raise SettingError(name, f"must be a finite number, got {value}")
    if value > hi or value < lo or (open_lo and value == lo):
        raise SettingError(name, f"must be in {'(' if open_lo else '['}{lo:g}, {hi:g}], got {value:g}")
    return value


def check(*, do_sample: bool | None = None, temperature: Any = None, top_k: Any = None, top_p: Any = None,
          num_beams: Any = None, max_new_tokens: Any = None, num_return_sequences: Any = None,
          repetition_penalty: Any = None, length_penalty: Any = None, no_repeat_ngram_size: Any = None,
          min_new_tokens: Any = None, seed: Any = None) -> None:
    """Refuse the first bad setting of those given (``None``: not given). ``do_sample``: whether the draw is
    sampled (``None``: sampled when ``temperature > 0``, as a server or sampler takes it).

    Raises:
        SettingError: naming the setting, what it must be, and what it got.
    """
    if do_sample is not None and not isinstance(do_sample, bool):
        raise SettingError("do_sample", f"must be true or false, got {do_sample!r}")
    if temperature is not None:
        t = _number("temperature", temperature, 0.0, MAX_TEMPERATURE)
        sampling = t > 0 if do_sample is None else do_sample
        if sampling and t < MIN_TEMPERATURE:
            greedy = "do_sample=False is greedy" if do_sample else "0 is greedy"
            raise SettingError("temperature", f"must be in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}] when sampling "
                                              f"({greedy}), got {t:g}")
    if top_k is not None:
        _integer("top_k", top_k, 0)
    if top_p is not None:
        _number("top_p", top_p, 0.0, 1.0, open_lo=True)
    if num_beams is not None:
        _integer("num_beams", num_beams, 1, CEILINGS["num_beams"])
    if max_new_tokens is not None:
        _integer("max_new_tokens", max_new_tokens, 1, CEILINGS["max_new_tokens"])
    if num_return_sequences is not None:
        _integer("num_return_sequences", num_return_sequences, 1, CEILINGS["num_return_sequences"])
    if repetition_penalty is not None:
        _number("repetition_penalty", repetition_penalty, 0.0, 100.0, open_lo=True)
    if length_penalty is not None:
        _number("length_penalty", length_penalty, -10.0, 10.0)
    if no_repeat_ngram_size is not None:
        _integer("no_repeat_ngram_size", no_repeat_ngram_size, 0)
    if min_new_tokens is not None:
        _integer("min_new_tokens", min_new_tokens, 0)
    if seed is not None:
        _integer("seed", seed, -(2**63), 2**63 - 1)


def check_beams(num_beams: int, vocab_size: int | None) -> None:
    """A beam no wider than the vocabulary it searches (beyond it, every hypothesis past the vocabulary's count
    is a copy of another: the work grows and nothing is found)."""
    if vocab_size is not None and num_beams > vocab_size:
        raise SettingError("num_beams", f"must be at most the vocabulary's {vocab_size} tokens, got {num_beams}")


__all__ = ["CEILINGS", "MAX_TEMPERATURE", "MIN_TEMPERATURE", "SettingError", "check", "check_beams"]
