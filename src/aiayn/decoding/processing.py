"""What is done to the next-token logits before a token is chosen, with ``transformers``' names.

    repetition_penalty   (Keskar et al., 2019, CTRL, section 4.1): a token already in the sequence has its
                         logit divided by the penalty when positive, multiplied by it when negative
    no_repeat_ngram_size n: a token that would complete an n-gram already in the sequence is banned
    min_new_tokens       m: the end tokens are banned until m tokens have been made

Each reads the sequence so far, ``(B, L)``: a language model's prompt and what it has made (the prompt counts, as
in ``transformers``), an encoder-decoder's start token and what it has made. Left padding, marked by ``real``,
never counts (``transformers`` counts it: its padding token is penalised and makes n-grams). Decoding applies
them in this order, then temperature, top-k and top-p (:func:`aiayn.decoding.sampling.warp`); beam search
applies them to the log-probabilities, as ``transformers`` does.

Shapes: B rows, L tokens so far, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


def penalise_repeats(logits: Tensor, seqs: Tensor, penalty: float, real: Tensor | None = None) -> Tensor:
    """``logits`` ``(B, V)`` with every token that occurs in ``seqs`` ``(B, L)`` (where ``real``) made less likely:
    ``logit / penalty`` when positive, ``logit * penalty`` when not (CTRL's rule, ``penalty > 1`` discourages)."""
    weight = torch.ones_like(seqs) if real is None else real.long()
    seen = torch.zeros_like(logits, dtype=torch.long).scatter_add_(1, seqs, weight) > 0  # (B, V)
    punished = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(seen, punished, logits)


def ban_repeated_ngrams(logits: Tensor, seqs: Tensor, n: int, real: Tensor | None = None) -> Tensor:
    """``logits`` ``(B, V)`` with ``-inf`` for every token that would make the last ``n - 1`` tokens of ``seqs``
    ``(B, L)`` into an ``n``-gram that ``seqs`` already holds (n-grams touching padding do not count)."""
    if seqs.size(1) < n:  # no n-gram yet (with n = 1: every token seen is banned)
        return logits
    grams = seqs.unfold(1, n, 1)  # (B, L - n + 1, n)
    tail = seqs[:, seqs.size(1) - n + 1 :]  # (B, n - 1): what the next token would complete
    match = (grams[:, :, : n - 1] == tail[:, None]).all(-1)  # (B, L - n + 1)
    if real is not None:
        match &= real.unfold(1, n, 1).all(-1) & real[:, seqs.size(1) - n + 1 :].all(-1, keepdim=True)
    banned = torch.zeros_like(logits, dtype=torch.long).scatter_add_(1, grams[:, :, -1], match.long()) > 0
    return logits.masked_fill(banned, float("-inf"))


@dataclass(frozen=True)
class Processing:
    """The logits processing of one generation, ``transformers``' arguments of the same names (their defaults
    do nothing). Called as ``processing(logits, seqs, made, real)``: ``made`` tokens generated so far."""

    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    min_new_tokens: int = 0
    eos: tuple[int, ...] = ()  # what min_new_tokens holds back

    def __post_init__(self) -> None:
        if not self.repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be > 0 (1.0: none), got {self.repetition_penalty}")
        if self.no_repeat_ngram_size < 0:
            raise ValueError(f"no_repeat_ngram_size must be >= 0 (0: none), got {self.no_repeat_ngram_size}")
        if self.min_new_tokens < 0:
            raise ValueError(f"min_new_tokens must be >= 0, got {self.min_new_tokens}")

    @property
    def active(self) -> bool:
        """Whether it changes anything (decoding skips it otherwise)."""
        return self.repetition_penalty != 1.0 or self.no_repeat_ngram_size > 0 or (
            self.min_new_tokens > 0 and bool(self.eos))

    def __call__(self, logits: Tensor, seqs: Tensor, made: int, real: Tensor | None = None) -> Tensor:
        if self.repetition_penalty != 1.0:
            logits = penalise_repeats(logits, seqs, self.repetition_penalty, real)
        if self.no_repeat_ngram_size > 0:
            logits = ban_repeated_ngrams(logits, seqs, self.no_repeat_ngram_size, real)
        if made < self.min_new_tokens and self.eos:
            logits = logits.clone()
            logits[:, list(self.eos)] = float("-inf")
        return logits


__all__ = ["Processing", "ban_repeated_ngrams", "penalise_repeats"]
