"""Transformer-XL's decode session: the segment memory is its cache (:class:`~aiayn.layers.kv_cache.SegmentMemory`).

The prompt is the first segment; every new token is a segment of one, reading the states of the last ``mem_len``
positions (the memory) through the model's own :meth:`~aiayn.models.transfo_xl.TransfoXL.forward`, as the paper
evaluates (section 3.2: "during evaluation, at each step ... the representations from the previous segments can be
reused"). The memory holds states, so it is the whole per-row state: beams and rows leaving reorder it.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from aiayn.layers.kv_cache import SegmentMemory
from aiayn.layers.session import Session


class TransfoXLSession(Session):
    """Decoding over the segment memory of ``model`` (a :class:`~aiayn.models.transfo_xl.TransfoXL`);
    ``mem_len``: the positions it keeps (default the model's; evaluation may keep more than training did, section
    4.2)."""

    def __init__(self, model: Any, mem_len: int | None = None) -> None:
        self.model, self.mem_len = model, mem_len
        self.memory: SegmentMemory | None = None

    def prefill(self, ids: Tensor, mask: Tensor | None = None, *, new_tokens: int, repeat: int = 1) -> Tensor:
        if mask is not None and not bool(mask.bool().all()):
            raise ValueError("attention_mask: Transformer-XL reads unpadded prompts (padding would enter its "
                             "memory); generate each length on its own")
        ids = ids.repeat_interleave(repeat, dim=0) if repeat > 1 else ids
        self.memory = self.model.new_memory(self.mem_len)
        self.prefix, self.prefix_mask, self.rows = ids, None, ids.size(0)
        return self.model(ids, self.memory)[:, -1]  # (B, V) log-probabilities: logits up to a constant

    def step(self, tokens: Tensor) -> Tensor:
        return self.model(tokens[:, None], self.memory)[:, -1]

    def reorder(self, rows: Tensor) -> None:
        assert self.memory is not None  # made by prefill
        self.memory.reorder(rows)

    def keep(self, rows: Tensor) -> None:
        self.reorder(rows)
        self.rows = rows.numel()


__all__ = ["TransfoXLSession"]
