"""Turning text pairs into padded tensors for teacher forcing, batched by token count.

    source          x_1 .. x_S </s>
    decoder input   <s> y_1 .. y_T        (the target shifted right)
    decoder output  y_1 .. y_T </s>       (what each position must predict)

Batches hold pairs of similar length, so little of each batch is padding, and are sized by tokens
(padded length x pairs <= ``max_tokens``) rather than by pairs, as fairseq does.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

Pair = tuple[list[int], list[int]]


def pad(seqs: Sequence[Sequence[int]], pad_id: int) -> Tensor:
    """``(B, max_len)`` long tensor, right-padded with ``pad_id``."""
    width = max(len(s) for s in seqs)
    # One tensor from padded lists: a copy per row costs more than the model on short sentences.
    return torch.tensor([list(s) + [pad_id] * (width - len(s)) for s in seqs], dtype=torch.long)


def encode_pairs(pairs: Sequence[tuple[str, str]], src_tok, tgt_tok) -> list[Pair]:
    """Token ids of each pair: source with ``</s>``, target without specials."""
    return [(src_tok.encode(s) + [src_tok.eos_id], tgt_tok.encode(t)) for s, t in pairs]


def collate(pairs: Sequence[Pair], pad_id: int, bos_id: int, eos_id: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(src, tgt_in, tgt_out)``: ``(B, S)``, ``(B, T)``, ``(B, T)``."""
    return (
        pad([s for s, _ in pairs], pad_id),
        pad([[bos_id] + t for _, t in pairs], pad_id),
        pad([t + [eos_id] for _, t in pairs], pad_id),
    )


def seq2seq_batch(pairs: Sequence[tuple[str, str]], src_tok, tgt_tok) -> tuple[Tensor, Tensor, Tensor]:
    """``(src, tgt_in, tgt_out)`` for ``pairs`` of (source text, target text)."""
    return collate(encode_pairs(pairs, src_tok, tgt_tok), tgt_tok.pad_id, tgt_tok.bos_id, tgt_tok.eos_id)


def length_batches(lengths: Sequence[int], max_tokens: int, rng: random.Random, pool: int = 50) -> list[list[int]]:
    """One epoch of batches (lists of indices) of similar length, at most ``max_tokens`` padded tokens each.

    The examples are shuffled, cut into pools of about ``pool`` batches, each pool sorted by length
    and cut into batches; the batches are then shuffled. An example longer than ``max_tokens`` gets
    a batch of its own.
    """
    if max_tokens <= 0:
        raise ValueError(f"max_tokens={max_tokens} must be positive")
    order = list(range(len(lengths)))
    rng.shuffle(order)
    mean = max(1, sum(lengths) // max(len(lengths), 1))
    size = max(1, pool * max_tokens // mean)
    batches: list[list[int]] = []
    for p in range(0, len(order), size):
        chunk = sorted(order[p : p + size], key=lambda i: lengths[i])
        batch: list[int] = []
        longest = 0
        for i in chunk:
            longest_if = max(longest, lengths[i])
            if batch and longest_if * (len(batch) + 1) > max_tokens:
                batches.append(batch)
                batch, longest_if = [], lengths[i]
            batch.append(i)
            longest = longest_if
        if batch:
            batches.append(batch)
    rng.shuffle(batches)
    return batches


def token_batches(
    pairs: Sequence[Pair], max_tokens: int, pad_id: int, bos_id: int, eos_id: int, seed: int = 0, start: int = 0
) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
    """Endless ``(src, tgt_in, tgt_out)`` batches of at most ``max_tokens`` padded tokens (the longer of
    source and target), regrouped every epoch, deterministic under ``seed``.

    ``start`` skips that many batches without building them: a resumed run continues the same order.
    """
    rng = random.Random(seed)
    lengths = [max(len(s), len(t) + 1) for s, t in pairs]
    n = 0
    while True:
        for idx in length_batches(lengths, max_tokens, rng):
            n += 1
            if n > start:
                yield collate([pairs[i] for i in idx], pad_id, bos_id, eos_id)
