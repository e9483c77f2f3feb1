"""Language-model data: a text as one stream of token ids, cut into blocks of the context length.

    tokens  t0 t1 t2 t3 t4 t5 t6 t7 t8 ...
    input      [t3 t4 t5 t6]              a block of ``block`` tokens at a random offset
    target        [t4 t5 t6 t7]           the same block shifted by one: the next token everywhere

Training batches take random offsets (as nanoGPT does); batch k is drawn from a generator seeded with
``(seed, k)``, so the order is deterministic and a resumed run skips ahead by arithmetic, not replay.
Validation uses consecutive blocks, each token predicted once.

A model with a memory of the segment before (Transformer-XL) trains on streams instead (:func:`lm_streams`): the
text cut into ``batch_size`` equal pieces, one per row, each read in order, so row b of batch k + 1 continues row b
of batch k and the memory a row carries is the text just before it:

    row 0   t0  t1  t2 | t3  t4  t5 | ...        batch 0 | batch 1 | ...   (block 3)
    row 1   tN  .. ..  | ..  ..  .. | ...        N = the piece's length
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import torch
from torch import Tensor


def _check(tokens: Tensor, block: int) -> None:
    if tokens.dim() != 1:
        raise ValueError(f"tokens must be a 1-D tensor of ids, got shape {tuple(tokens.shape)}")
    if block < 1 or tokens.numel() < block + 1:
        raise ValueError(f"a text of {tokens.numel()} tokens is too short for blocks of {block} (+1) tokens")


def lm_batches(tokens: Tensor, block: int, batch_size: int, seed: int = 0, start: int = 0
               ) -> Iterator[tuple[Tensor, Tensor]]:
    """Endless ``(inputs, targets)``, each ``(batch_size, block)``, at random offsets; ``start`` skips batches."""
    _check(tokens, block)
    k = start
    while True:
        gen = torch.Generator().manual_seed(seed * 1_000_003 + k)
        ix = torch.randint(tokens.numel() - block, (batch_size,), generator=gen)
        rows = torch.stack([tokens[i : i + block + 1] for i in ix.tolist()])  # (B, block + 1)
        yield rows[:, :-1], rows[:, 1:]
        k += 1


def lm_blocks(tokens: Tensor, block: int, batch_size: int, max_blocks: int | None = None
              ) -> list[tuple[Tensor, Tensor]]:
    """Consecutive non-overlapping blocks (at most ``max_blocks``), batched: validation data."""
    _check(tokens, block)
    n = (tokens.numel() - 1) // block
    n = n if max_blocks is None else min(n, max_blocks)
    x = tokens[: n * block].view(n, block)
    y = tokens[1 : n * block + 1].view(n, block)
    return [(x[i : i + batch_size], y[i : i + batch_size]) for i in range(0, n, batch_size)]


def lm_streams(tokens: Tensor, block: int, batch_size: int, start: int = 0) -> Iterator[tuple[Tensor, Tensor]]:
    """Endless ``(inputs, targets)``, each ``(batch_size, block)``, that read ``batch_size`` streams in order (the
    module's docstring; Transformer-XL's ordered iterator): row b of each batch continues row b of the one before,
    from the start of its piece again after its last whole block (an epoch). ``start`` skips batches."""
    _check(tokens, block)
    per_row = (tokens.numel() - 1) // batch_size  # each row's piece, its last target included
    if per_row < block:
        raise ValueError(f"a text of {tokens.numel()} tokens cut into {batch_size} streams leaves {per_row} tokens a "
                         f"stream, fewer than a block of {block}")
    x = tokens[: batch_size * per_row].view(batch_size, per_row)  # (B, N)
    y = tokens[1 : batch_size * per_row + 1].view(batch_size, per_row)
    blocks = per_row // block
    k = start
    while True:
        at = (k % blocks) * block
        yield x[:, at : at + block], y[:, at : at + block]
        k += 1


def lm_stream_pass(tokens: Tensor, block: int, batch_size: int, max_blocks: int | None = None
                   ) -> list[tuple[Tensor, Tensor]]:
    """One pass of :func:`lm_streams`, each row's segments in order (validation with a memory): at most
    ``batch_size`` rows (fewer when the text is too short to give each one a block), and as many segments a row
    as ``max_blocks`` blocks allow in all (at least one: a ``max_blocks`` below the rows reads one segment each)."""
    _check(tokens, block)
    rows = min(batch_size, (tokens.numel() - 1) // block)
    n = (tokens.numel() - 1) // rows // block  # segments a row reads
    if max_blocks is not None:
        n = max(1, min(n, max_blocks // rows))
    return list(itertools.islice(lm_streams(tokens, block, rows), n))


__all__ = ["lm_batches", "lm_blocks", "lm_stream_pass", "lm_streams"]
