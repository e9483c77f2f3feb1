"""Greedy decoding: at each step take the most probable next token.

The model only needs the small protocol every encoder-decoder here has: ``encode(src)``,
``decode(tgt, memory, src, cache)``, ``new_cache(max_len)`` and a ``cfg`` with ``bos_id``, ``eos_id``,
``pad_id``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


@torch.no_grad()
def greedy(model: nn.Module, src: Tensor, max_len: int | None = None, use_cache: bool = True) -> Tensor:
    """Decode ``(B, S)`` source ids greedily.

    Args:
        max_len: most tokens to produce; default ``S + 50`` (section 6.1).
        use_cache: reuse keys/values of earlier steps; ``False`` recomputes the whole prefix each step
            (same result, slower).

    Returns:
        ``(B, L)`` ids after ``<s>``, each row ending at its ``</s>`` and padded with ``pad_id`` after it.
    """
    cfg = model.cfg
    was_training = model.training
    model.eval()
    max_len = src.size(1) + 50 if max_len is None else max_len
    memory = model.encode(src)
    ys = torch.full((src.size(0), 1), cfg.bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    cache = model.new_cache(max_len) if use_cache else None
    for _ in range(max_len):
        logits = model.decode(ys[:, -1:] if use_cache else ys, memory, src, cache=cache)[:, -1]  # (B, V)
        logits[:, cfg.pad_id] = float("-inf")  # padding is never an output (it would read as the end of the row)
        nxt = logits.argmax(-1).masked_fill(done, cfg.pad_id)
        ys = torch.cat([ys, nxt[:, None]], dim=1)  # ids only; the cache itself is preallocated
        done |= nxt == cfg.eos_id
        if bool(done.all()):
            break
    model.train(was_training)
    return ys[:, 1:]
