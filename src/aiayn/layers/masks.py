"""Attention masks, one convention for the whole package.

A mask is a bool tensor, ``True`` = may attend, that broadcasts to ``(B, H, Tq, Tk)``, exactly what
``torch.nn.functional.scaled_dot_product_attention`` takes. Other conventions (Hugging Face's 1/0
``attention_mask``, additive float masks) are converted at the boundary, never inside a model.

Shapes: B batch, T query length, S key length.
"""

from __future__ import annotations

import torch
from torch import Tensor


def causal_mask(t: int, s: int | None = None, device: torch.device | str | None = None,
                window: int | None = None) -> Tensor:
    """The "sequence" mask of section 3.2.3: position i may attend to positions <= i.

    With ``s > t`` (queries are the last ``t`` of ``s`` positions, as when decoding with a cache)
    the diagonal is shifted so query i sits at absolute position ``s - t + i``. With ``window`` W (Mistral's
    sliding window) position i sees only the last W positions, i - W < j <= i::

        W = 3    j: 0 1 2 3 4
            i=3     . x x x .
            i=4     . . x x x

    Returns:
        ``(T, S)`` bool, ``True`` on and below the (shifted) diagonal (and within the window).
    """
    s = t if s is None else s
    mask = torch.ones(t, s, dtype=torch.bool, device=device).tril(diagonal=s - t)
    return mask if window is None else mask.triu(diagonal=s - t - window + 1)


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """Keys that are padding may not be attended to.

    Args:
        ids: ``(B, S)`` token ids.
        pad_id: the id that marks padding.

    Returns:
        ``(B, 1, 1, S)`` bool, ``False`` at padding.
    """
    return (ids != pad_id)[:, None, None, :]


def combine(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of the masks that are not ``None`` (broadcast); ``None`` if all are."""
    out = None
    for m in masks:
        if m is not None:
            out = m if out is None else out & m
    return out
