"""Ending a row at a string of text, as ``transformers``' ``stop_strings`` (``StopStringCriteria``) does.

A row ends at the step whose token completes one of the stop strings: the string is in the row's text (prompt and
new tokens) and overlaps the last token, so a string that lies wholly in earlier tokens never ends a row again.
The token that completes it is kept; the row pads after it, as after an end token.

    "las" "topper"  with "stop": ends (the string ends inside the last token)
    "stop" "at"     with "stop": does not (it lies wholly before the last token)

Only the tail of each row is read: the last ``longest + 1`` tokens, enough for any string of ``longest``
characters when every token has at least one (a token that reads as no text, such as a special one skipped in
decoding, shortens the reach). Each step reads the rows back to the host and decodes two short tails per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor


class StopStrings:
    """``stop(seqs, real) -> (A,) bool``: which rows the token just written to ``seqs`` ``(A, L)`` completes a stop
    string in (``real`` ``(A, L)`` marks the tokens that are not padding, ``None``: all are).

    Args:
        tokenizer: anything with ``decode(ids: list[int]) -> str`` (ours, or ``transformers``').
        strings: one stop string or several, none empty.
    """

    def __init__(self, tokenizer: Any, strings: str | Sequence[str]) -> None:
        if tokenizer is None or not callable(getattr(tokenizer, "decode", None)):
            raise ValueError("stop_strings needs the model's tokenizer to read the text: pass tokenizer= to generate "
                             "(an object with decode(ids))")
        self.tokenizer = tokenizer
        self.strings = [strings] if isinstance(strings, str) else list(strings)
        self.reach = max(len(s) for s in self.strings) + 1  # tokens read from the end of each row

    def completes(self, ids: list[int]) -> bool:
        """Whether the last of ``ids`` completes a stop string: one is in their text and not in the text before it."""
        text, before = self.tokenizer.decode(ids), self.tokenizer.decode(ids[:-1])
        if text.startswith(before):  # the last token's text starts at len(before): a string must end past it
            return any(text.rfind(s) + len(s) > len(before) for s in self.strings if s in text)
        return any(s in text and s not in before for s in self.strings)  # (a decoder that rewrites the text)

    def __call__(self, seqs: Tensor, real: Tensor | None) -> Tensor:
        tail = seqs[:, -self.reach:].tolist()
        keep = None if real is None else real[:, -self.reach:].tolist()
        hit = [self.completes([t for j, t in enumerate(row) if keep is None or keep[i][j]])
               for i, row in enumerate(tail)]
        return torch.tensor(hit, dtype=torch.bool, device=seqs.device)


__all__ = ["StopStrings"]
