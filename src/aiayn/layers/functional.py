"""Equation 1 and what its two paths share, as functions of tensors: every attention module (multi-head attention,
the scorers of :mod:`aiayn.layers.scoring`) calls these, and none of them calls a module.

    scaled_dot_product_attention   softmax(q k^T / sqrt(D) + mask) v: the fused kernel, or explicitly with weights
                                   (and, inside a compiled decoding step on a CPU, explicitly: ONE_QUERY_EXPLICIT)
    masked_softmax                 the softmax over the keys a mask allows; rows with none attend nowhere
    repeat_kv                      grouped-query attention's kv heads, repeated for their query heads

Shapes: B batch, H heads, Hkv key/value heads, T query length, S key length, D head dim.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from aiayn.layers.masks import causal_mask
from aiayn.layers.positional import readable


def _safe(mask: Tensor, ask: bool) -> tuple[Tensor, Tensor | None]:
    """Rows of a bool mask with nothing to attend to would give softmax(-inf, ..., -inf) = NaN.

    Let such rows attend everywhere (so no NaN arises, forward or backward) and return which rows
    they were, so the caller sets their output to zero. ``ask``: first read back whether there are any,
    and return ``(mask, None)`` if not. On the CPU the answer is free and saves two operations; on an
    accelerator the read would stall every layer, so there the fix is always applied (a no-op where no
    row is empty). The mask keeps its shape: a key-only ``(B, 1, 1, S)`` mask stays one.
    """
    empty = ~mask.any(dim=-1, keepdim=True)  # (..., T, 1)
    if ask and not bool(empty.any()):
        return mask, None
    return mask | empty, empty


def repeat_kv(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """Grouped-query attention on an explicit path: each kv head of ``k``, ``v`` ``(B, Hkv, S, D)`` repeated for
    its group of ``q``'s H heads (Hugging Face's ``repeat_kv``); unchanged when Hkv = H."""
    if k.size(1) == q.size(1):
        return k, v
    group = q.size(1) // k.size(1)
    return k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)


# A compiled decoding step on a CPU (one query a row, under torch.compile) takes the explicit path, whose products
# and softmax inductor fuses with what is around them; the fused kernel stays an opaque call tiled for many queries.
# Measured by benchmarks/compiled_step_switches.py (benchmarks/results/compiled_step_attention.json). Eagerly the
# explicit path is five dispatched calls where the fused kernel is one, so only the compiled step switches.
ONE_QUERY_EXPLICIT = True


def _one_query(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """Equation 1 for one query a row (``q`` ``(B, H, 1, D)``), explicitly: a product of each head's query with
    its keys, the softmax, a product with the values. With grouped-query attention the query heads of a group
    are that kv head's rows (``(B, Hkv, H / Hkv, D)``), so no kv head is copied; ``mask`` already safe."""
    b, h, _, d = q.shape
    hkv = k.size(1)
    if hkv != h and mask is not None and mask.dim() > 2 and mask.size(-3) != 1:  # a per-head mask: heads one by one
        k, v = repeat_kv(q, k, v)
        hkv = h
    qg = q.reshape(b, hkv, h // hkv, d)  # (B, Hkv, G, D): one query, so a group's heads are rows; a mask
    # (1, S) or (..., 1 or H, 1, S) broadcasts over them (H only when G = 1)
    p, _ = masked_softmax((qg @ k.transpose(-2, -1)) / math.sqrt(d), mask)  # (B, Hkv, G, S)
    return (p @ v).reshape(b, h, 1, -1)  # (B, H, 1, Dv)


def masked_softmax(scores: Tensor, mask: Tensor | None = None,
                   is_causal: bool = False) -> tuple[Tensor, Tensor | None]:
    """``(p, empty)``: the softmax over keys of ``scores`` ``(B, H, T, S)`` where ``mask`` allows (bool, ``True`` =
    may attend; or a float tensor added to the scores; ``is_causal``: the causal mask, the queries being the last
    T of S positions). Rows with nothing to attend to are let attend everywhere (no NaN) and returned as
    ``empty`` (:func:`_safe`) for the caller to zero; ``None`` when there are none."""
    if is_causal:
        mask = causal_mask(scores.size(-2), scores.size(-1), device=scores.device)
    empty = None
    if mask is not None:
        if mask.dtype == torch.bool:
            mask, empty = _safe(mask, ask=readable(mask))
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask
    return scores.softmax(dim=-1), empty


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    need_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Equation 1, ``softmax(q k^T / sqrt(D) + mask) v``.

    Args:
        q: ``(B, H, T, D)`` queries.
        k: ``(B, H, S, D)`` keys, or ``(B, Hkv, S, D)`` with Hkv dividing H (grouped-query attention: query
            head h reads kv head ``h // (H / Hkv)``).
        v: ``(B, H or Hkv, S, Dv)`` values.
        mask: bool, ``True`` = may attend, broadcastable to ``(B, H, T, S)``; or a float tensor
            added to the scores (Swin's relative position bias plus its shift mask).
        dropout_p: dropout on the attention weights (training only; the caller passes 0 in eval).
        is_causal: apply the causal mask without materialising it (``mask`` must be ``None`` and T == S; the last
            T queries of S keys take ``mask=causal_mask(T, S)``).
        need_weights: take the explicit path and return the weights too.

    Returns:
        ``(out, weights)``: ``(B, H, T, Dv)`` and, if asked for, ``(B, H, T, S)``, else ``None``.
        A query row with nothing to attend to gets zeros, never NaN.

    Raises:
        ValueError: ``is_causal`` with a ``mask``, or with T != S (where the fused kernel and the explicit path
            would put the diagonal in different places).
    """
    if is_causal and (mask is not None or q.size(-2) != k.size(-2)):
        raise ValueError(f"is_causal=True takes no mask and as many queries as keys; got "
                         f"{'a mask and ' if mask is not None else ''}T={q.size(-2)}, S={k.size(-2)} (give "
                         f"mask=causal_mask(T, S), combined with yours, instead)")
    empty = None
    if mask is not None and mask.dtype == torch.bool:
        mask, empty = _safe(mask, ask=readable(mask))
    grouped = k.size(1) != q.size(1)  # grouped-query attention: fewer key/value heads than query heads
    if (ONE_QUERY_EXPLICIT and not need_weights and q.size(-2) == 1 and q.device.type == "cpu" and dropout_p == 0
            and torch.compiler.is_compiling()):
        out, weights = _one_query(q, k, v, mask), None
    elif not need_weights:  # the kernel reads each kv head for its group of query heads, without copying them
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal,
                                             enable_gqa=grouped)
        weights = None
    else:
        k, v = repeat_kv(q, k, v)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))  # (B, H, T, S)
        weights, _ = masked_softmax(scores, mask, is_causal)  # mask is already safe: empty is known
        if empty is not None:
            weights = weights.masked_fill(empty, 0.0)
        out = F.dropout(weights, dropout_p) @ v if dropout_p > 0 else weights @ v
    if empty is not None:
        out = out.masked_fill(empty, 0.0)
    return out, weights


__all__ = ["masked_softmax", "repeat_kv", "scaled_dot_product_attention"]
