"""Key/value caches for decoding one token at a time.

Self-attention keys and values grow by one position per step; they are written into buffers
allocated once for the whole generation, so no tensor is concatenated per step:

    step t:   k_buf[:, :, :t]  = keys of tokens 0..t-1    (filled)
              k_buf[:, :, t]   <- key of the new token     (written in place)
              k_buf[:, :, t+1:]   not yet used

Cross-attention keys and values depend only on the encoder output, so they are projected once.
Beam search reorders the batch rows with :meth:`DecoderCache.reorder`: only the filled positions are
copied, into a second pair of buffers that then changes places with the first.

Shapes: B batch (x beams), H heads, L max length, D head dim.
"""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor


class KVCache:
    """Preallocated ``(B, H, L, D)`` key and value buffers for one self-attention layer."""

    def __init__(self, max_len: int) -> None:
        self.max_len, self.length = max_len, 0
        self.k: Tensor | None = None
        self.v: Tensor | None = None
        self._spare: tuple[Tensor, Tensor] | None = None  # what reorder writes into

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write ``(B, H, t, D)`` new keys/values; return views of everything cached so far."""
        b, h, t, d = k.shape
        if self.k is None:
            self.k = k.new_empty(b, h, self.max_len, d)
            self.v = v.new_empty(b, h, self.max_len, v.size(-1))
        assert self.v is not None  # set together with self.k
        if self.length + t > self.max_len:
            raise ValueError(f"KV cache holds {self.max_len} positions; cannot add {t} to {self.length}")
        self.k[:, :, self.length : self.length + t] = k
        self.v[:, :, self.length : self.length + t] = v
        self.length += t
        return self.k[:, :, : self.length], self.v[:, :, : self.length]

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index``; copies the filled positions only."""
        if self.k is None:
            return
        assert self.v is not None  # set together with self.k
        if index.numel() != self.k.size(0):  # the batch changes size: new buffers
            self.k, self.v, self._spare = self.k.index_select(0, index), self.v.index_select(0, index), None
            return
        if self._spare is None:
            self._spare = (torch.empty_like(self.k), torch.empty_like(self.v))
        k, v = self._spare
        n = self.length
        torch.index_select(self.k[:, :, :n], 0, index, out=k[:, :, :n])
        torch.index_select(self.v[:, :, :n], 0, index, out=v[:, :, :n])
        self._spare, self.k, self.v = (self.k, self.v), k, v


class LayerCache:
    """What one decoder layer keeps between steps: its self-attention cache and cross-attention k/v."""

    def __init__(self, max_len: int) -> None:
        self.self_attn = KVCache(max_len)
        self.cross: tuple[Tensor, Tensor] | None = None

    def cross_kv(self, attn, memory: Tensor) -> tuple[Tensor, Tensor]:
        if self.cross is None:
            self.cross = attn.project_kv(memory)
        return self.cross

    def reorder(self, index: Tensor, cross: bool = True) -> None:
        self.self_attn.reorder(index)
        if cross and self.cross is not None:
            self.cross = cast("tuple[Tensor, Tensor]", tuple(t.index_select(0, index) for t in self.cross))


class DecoderCache(list):
    """One :class:`LayerCache` per decoder layer; ``length`` is the number of positions decoded."""

    def __init__(self, n_layers: int, max_len: int) -> None:
        super().__init__(LayerCache(max_len) for _ in range(n_layers))

    @property
    def length(self) -> int:
        return self[0].self_attn.length

    def reorder(self, index: Tensor, cross: bool = True) -> None:
        """Keep batch rows ``index`` (beam search: the beams that survive a step). ``cross=False`` leaves
        the cross-attention keys/values alone, right when ``index`` only moves rows among rows that hold
        the same encoder output (the beams of one sentence)."""
        for layer in self:
            layer.reorder(index, cross)


__all__ = ["DecoderCache", "KVCache", "LayerCache"]
