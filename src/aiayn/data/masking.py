"""BERT's masked-language-model corruption (section 3.1, "Task #1"):

choose 15% of the tokens that are not special ([CLS], [SEP], [PAD]); of the chosen, replace 80% by
[MASK], 10% by a random token and leave 10% unchanged; the model must predict the original token at
every chosen position, and only there (labels elsewhere are ``ignore``, -100 as PyTorch's losses skip).

Shapes: B batch, T length.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

IGNORE = -100


def mask_tokens(
    ids: Tensor,
    mask_id: int,
    vocab_size: int,
    special_ids: Iterable[int],
    ratio: float = 0.15,
    generator: torch.Generator | None = None,
    first_normal_id: int = 0,
) -> tuple[Tensor, Tensor]:
    """``(inputs, labels)`` for masked-LM training from ``(B, T)`` ``ids``.

    Args:
        special_ids: ids never chosen (padding, [CLS], [SEP], ...).
        ratio: share of the other tokens chosen (0.15 in BERT).
        first_normal_id: random replacements are drawn from ``[first_normal_id, vocab_size)``, so they
            are never special tokens when the specials come first (as in our WordPiece vocabularies).

    Returns:
        ``inputs`` with the chosen positions corrupted, and ``labels`` holding the original id at the
        chosen positions and ``IGNORE`` elsewhere.
    """
    if not 0.0 < ratio < 1.0:
        raise ValueError(f"ratio={ratio} must be in (0, 1)")
    if not 0 <= first_normal_id < vocab_size:
        raise ValueError(f"first_normal_id={first_normal_id} must lie in [0, vocab_size={vocab_size}): random "
                         f"replacements are drawn from it up")
    special = torch.zeros_like(ids, dtype=torch.bool)
    for s in special_ids:
        special |= ids == s
    u = torch.rand(ids.shape, generator=generator)
    chosen = (u < ratio) & ~special  # (B, T)
    labels = ids.masked_fill(~chosen, IGNORE)
    # Split the chosen by a second draw: < 0.8 -> [MASK], 0.8..0.9 -> random token, >= 0.9 -> unchanged.
    v = torch.rand(ids.shape, generator=generator)
    inputs = ids.masked_fill(chosen & (v < 0.8), mask_id)
    random_tokens = torch.randint(first_normal_id, vocab_size, ids.shape, generator=generator)
    swap = chosen & (v >= 0.8) & (v < 0.9)
    inputs = torch.where(swap, random_tokens, inputs)
    return inputs, labels


__all__ = ["IGNORE", "mask_tokens"]
