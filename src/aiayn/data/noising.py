"""The five corruptions BART is pre-trained to undo (Lewis et al., 2020, section 2.2), as pure functions
on token id lists; ``rng`` is a ``numpy.random.Generator``, so a seed makes them repeatable.

    token masking          A B C D E      ->  A [M] C D [M]         random tokens -> [MASK]
    token deletion         A B C D E      ->  A C D                 random tokens removed
    text infilling         A B C D E      ->  A [M] E               spans (length ~ Poisson(3)) -> one [MASK];
                                              A [M] B C D E         a zero-length span inserts one
    sentence permutation   S1 S2 S3       ->  S3 S1 S2              sentences shuffled
    document rotation      A B C D E      ->  C D E A B             rotated to start at a random token

The model always reads the corrupted text and must write the original.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _budget(n: int, ratio: float) -> int:
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"ratio={ratio} must be in [0, 1]")
    return round(ratio * n)


def token_masking(ids: Sequence[int], mask_id: int, ratio: float, rng: np.random.Generator) -> list[int]:
    """Replace ``round(ratio * len(ids))`` tokens, chosen at random, by ``mask_id``."""
    out = list(ids)
    for i in rng.choice(len(out), _budget(len(out), ratio), replace=False):
        out[i] = mask_id
    return out


def token_deletion(ids: Sequence[int], ratio: float, rng: np.random.Generator) -> list[int]:
    """Delete ``round(ratio * len(ids))`` tokens chosen at random; the model must find where."""
    drop = set(rng.choice(len(ids), _budget(len(ids), ratio), replace=False).tolist())
    return [t for i, t in enumerate(ids) if i not in drop]


def text_infilling(ids: Sequence[int], mask_id: int, ratio: float, rng: np.random.Generator,
                   span_mean: float = 3.0) -> list[int]:
    """Replace spans of Poisson(``span_mean``) length by a single ``mask_id`` each until about ``ratio`` of
    the tokens are covered; a zero-length span inserts a ``mask_id`` (the model must learn how many
    tokens, if any, a mask stands for). Spans do not overlap; an insertion that a later span covers comes out
    as the span's mask followed by its own, as an insertion just after the span would."""
    n, budget = len(ids), _budget(len(ids), ratio)
    covered = np.zeros(n + 1, dtype=bool)
    starts: set[int] = set()
    inserts: set[int] = set()
    masked, tries = 0, 0
    while masked < budget and tries < 100 * (n + 1):
        tries += 1
        length, start = int(rng.poisson(span_mean)), int(rng.integers(0, n + 1))
        if length == 0:  # an insertion before token `start` (or at the end)
            if not covered[start] and start not in starts:
                inserts.add(start)
            continue
        length = min(length, budget - masked, n - start)  # never past the end or far past the budget
        if length <= 0 or covered[start : start + length].any() or start in inserts:
            continue
        covered[start : start + length] = True
        starts.add(start)
        masked += length
    out: list[int] = []
    for i in range(n + 1):
        if i in inserts or i in starts:
            out.append(mask_id)
        if i < n and not covered[i]:
            out.append(ids[i])
    return out


def sentence_permutation(sentences: Sequence[Sequence[int]], rng: np.random.Generator) -> list[int]:
    """The sentences (each a token list, its full stop included) in a random order, concatenated."""
    order = rng.permutation(len(sentences))
    return [t for i in order for t in sentences[i]]


def document_rotation(ids: Sequence[int], rng: np.random.Generator) -> list[int]:
    """The document rotated to start at a token chosen uniformly at random."""
    if not ids:
        return []
    k = int(rng.integers(0, len(ids)))
    return list(ids[k:]) + list(ids[:k])


NOISES = ("permute", "rotate", "mask", "delete", "infill")


def corrupt(sentences: Sequence[Sequence[int]], mask_id: int, rng: np.random.Generator,
            noise: Sequence[str] = ("permute", "infill"), ratio: float = 0.3) -> list[int]:
    """A document (its sentences as token lists) corrupted by the named ``noise`` functions, applied in
    the order of :data:`NOISES`: sentence-level first, then token-level. BART's best setting is
    ``("permute", "infill")`` with ``ratio=0.3`` (section 5.1)."""
    unknown = sorted(set(noise) - set(NOISES))
    if unknown:
        raise ValueError(f"noise={list(noise)}: unknown {unknown}; expected a subset of {list(NOISES)}")
    ids = sentence_permutation(sentences, rng) if "permute" in noise else [t for s in sentences for t in s]
    if "rotate" in noise:
        ids = document_rotation(ids, rng)
    if "mask" in noise:
        ids = token_masking(ids, mask_id, ratio, rng)
    if "delete" in noise:
        ids = token_deletion(ids, ratio, rng)
    if "infill" in noise:
        ids = text_infilling(ids, mask_id, ratio, rng)
    return ids


__all__ = ["NOISES", "corrupt", "document_rotation", "sentence_permutation", "text_infilling", "token_deletion",
           "token_masking"]
