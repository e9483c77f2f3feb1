"""Key/value caches for decoding one token at a time.

Self-attention keys and values grow by one position per step; they are written into buffers
allocated once for the whole generation, so no tensor is concatenated per step:

    step t:   k_buf[:, :, :t]  = keys of tokens 0..t-1    (filled)
              k_buf[:, :, t]   <- key of the new token     (written in place)
              k_buf[:, :, t+1:]   not yet used

With a sliding window W (Mistral's ``attention_window``) no new position sees further back than W - 1
positions, so the cache keeps only those (Mistral's rolling buffer): when the buffer is full, the last W - 1
positions move to its front and the older ones are dropped, so it holds at most 2W positions however long the
generation, and the keys stay in order (``start`` is the position at index 0; masks then cover positions
``start`` onwards, :meth:`KVCache.first_visible`). A copy of W - 1 positions every W or so steps costs about one
position's write per step.

Cross-attention keys and values depend only on the encoder output, so they are projected once.
Beam search reorders the batch rows with :meth:`DecoderCache.reorder`: only the filled positions are
copied, into a second pair of buffers that then changes places with the first. Speculative decoding forgets the
positions of the draft tokens the model rejected with :meth:`DecoderCache.crop`: the length goes back, and the next
append writes over them.

The static kinds (:class:`StaticKVCache`) keep every shape fixed for a compiled step (gpt-fast's design): the
buffers hold the whole generation from the start, and the new key and value are written at a column held in a
tensor; a sliding window's buffers are a ring of W columns (column c at c mod W); beam search reads them through
a table of rows (``rows``) instead of copying them; a server's slots write each row at its own column
(``apart``). Their buffers come from a pool (:func:`buffers`), so a CUDA graph recorded over one generation
replays over the next of the same shapes.

Shapes: B batch (x beams), H heads, L max length, D head dim.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, cast

import torch
from torch import Tensor, nn


class KVCache:
    """Preallocated ``(B, H, L, D)`` key and value buffers for one self-attention layer; with ``window``, a rolling
    buffer of about ``2 * window`` positions instead of ``max_len``."""

    def __init__(self, max_len: int, window: int | None = None) -> None:
        if window is not None and not window > 0:
            raise ValueError(f"window={window!r} must be positive (the positions a new one sees) or None")
        self.max_len, self.window = max_len, window
        self.length = 0  # positions appended so far
        self.start = 0  # the position held at index 0 of the buffers (> 0 once a window has rolled)
        self.capacity = max_len if window is None else min(max_len, 2 * window)
        self.k: Tensor | None = None
        self.v: Tensor | None = None
        self._spare: tuple[Tensor, Tensor] | None = None  # what reorder writes into

    def first_visible(self, t: int) -> int:
        """The first position of the keys that the next :meth:`append` of ``t`` positions returns (0 unless a
        window rolls): the masks of that step cover positions ``first_visible(t)`` to ``length + t - 1``."""
        filled = self.length - self.start
        if self.window is None or filled + t <= self.capacity:
            return self.start
        return self.length - min(filled, self.window - 1)  # all that a new position may still see

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write ``(B, H, t, D)`` new keys/values; return views of everything cached from
        :meth:`first_visible` on, in order."""
        t = k.size(2)
        if self.length + t > self.max_len:
            raise ValueError(f"KV cache holds {self.max_len} positions; cannot add {t} to {self.length}")
        if self.k is not None and k.shape[:2] != self.k.shape[:2]:
            raise ValueError(f"this KV cache holds a batch of {self.k.size(0)} rows x {self.k.size(1)} heads; the "
                             f"input has {k.size(0)} x {k.size(1)} (a new batch takes a new cache: new_cache)")
        start = self.first_visible(t)
        keep, frm = self.length - start, start - self.start  # positions kept, and where they are now
        if self.k is None or self.v is None or keep + t > self.capacity:  # new buffers, large enough
            self.capacity = max(self.capacity, keep + t)  # only a window's long prompt asks for more
            new_k = k.new_empty(k.size(0), k.size(1), self.capacity, k.size(-1))
            new_v = v.new_empty(v.size(0), v.size(1), self.capacity, v.size(-1))
            if self.k is not None and self.v is not None:
                new_k[:, :, :keep], new_v[:, :, :keep] = self.k[:, :, frm : frm + keep], self.v[:, :, frm : frm + keep]
            self.k, self.v, self._spare = new_k, new_v, None
        elif frm:  # the window rolls: the kept positions move to the front (the two ranges may overlap)
            self.k[:, :, :keep] = self.k[:, :, frm : frm + keep].clone()
            self.v[:, :, :keep] = self.v[:, :, frm : frm + keep].clone()
        self.start = start
        self.k[:, :, keep : keep + t] = k
        self.v[:, :, keep : keep + t] = v
        self.length += t
        return self.k[:, :, : keep + t], self.v[:, :, : keep + t]

    def crop(self, length: int) -> None:
        """Keep the first ``length`` positions only (``transformers``' ``DynamicCache.crop``); nothing is copied.

        Raises:
            ValueError: ``length`` outside ``[0, self.length]``, or a sliding window's cache that has rolled
                (``start > 0``): the positions a shorter sequence would see again are gone.
        """
        if not 0 <= length <= self.length:
            raise ValueError(f"length={length}: a cache of {self.length} positions keeps 0 to {self.length} of them")
        if self.start > 0:
            raise ValueError(f"cannot crop a sliding window's cache that has rolled (its positions before "
                             f"{self.start} are dropped)")
        self.length = length

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
        n = self.length - self.start
        torch.index_select(self.k[:, :, :n], 0, index, out=k[:, :, :n])
        torch.index_select(self.v[:, :, :n], 0, index, out=v[:, :, :n])
        self._spare, self.k, self.v = (self.k, self.v), k, v


class LayerCache:
    """What one decoder layer keeps between steps: its self-attention cache and cross-attention k/v."""

    def __init__(self, max_len: int, window: int | None = None) -> None:
        self.self_attn = KVCache(max_len, window)
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
    """One :class:`LayerCache` per decoder layer; ``length`` is the number of positions decoded; ``window``: a
    sliding window's rolling buffers."""

    def __init__(self, n_layers: int, max_len: int, window: int | None = None) -> None:
        super().__init__(LayerCache(max_len, window) for _ in range(n_layers))

    @property
    def length(self) -> int:
        return self[0].self_attn.length

    def first_visible(self, t: int) -> int:
        """:meth:`KVCache.first_visible`, the same in every layer."""
        return self[0].self_attn.first_visible(t)

    def crop(self, length: int) -> None:
        """Keep the first ``length`` positions of every layer's self-attention (:meth:`KVCache.crop`; the
        cross-attention keys/values depend on the source only)."""
        for layer in self:  # every layer holds as many positions: the first refuses before any is cropped
            layer.self_attn.crop(length)

    def reorder(self, index: Tensor, cross: bool = True) -> None:
        """Keep batch rows ``index`` (beam search: the beams that survive a step). ``cross=False`` leaves
        the cross-attention keys/values alone, right when ``index`` only moves rows among rows that hold
        the same encoder output (the beams of one sentence)."""
        for layer in self:
            layer.reorder(index, cross)


class StaticKVCache:
    """One self-attention layer's ``(B, H, L, D)`` key and value buffers; :meth:`append` writes each row's new
    key and value ``(B, H, 1, D)`` at its column of ``index`` (a ``(B,)`` tensor shared by every layer) and returns
    the whole buffers. Every row writes the same column (``index_copy_`` of one column: inductor writes it in
    place), unless ``apart``: each row its own (a server's slots; indexed by row and column, not a scatter,
    which inductor runs 3x slower). Within a step (:meth:`within`) it returns the first ``width`` columns, and
    with ``rows`` ``(B, width)`` row b's column c is read from buffer row ``rows[b, c]`` (beam search's
    hypotheses, reordered in that table instead of in the buffers)."""

    def __init__(self, k: Tensor, v: Tensor, index: Tensor, apart: bool = False, width: int | None = None,
                 rows: Tensor | None = None) -> None:
        self.k, self.v, self.index, self.apart, self.width, self.rows = k, v, index, apart, width, rows

    def within(self, width: int, rows: Tensor | None = None) -> StaticKVCache:
        """The same buffers, :meth:`append` returning their first ``width`` columns only (those written so far,
        rounded up to a bucket): what a step attends over; read through ``rows`` if given."""
        return StaticKVCache(self.k, self.v, self.index, self.apart, width, rows)

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        rows = k.size(0)  # the first rows of the buffers (a server's slots up to the highest taken), or all
        if self.apart:  # row b's column index[b] (B, H, D): an index_put_, which inductor writes in place
            self.k[torch.arange(rows, device=k.device), :, self.index[:rows]] = k[:, :, 0]
            self.v[torch.arange(rows, device=k.device), :, self.index[:rows]] = v[:, :, 0]
        else:  # a sliding window's buffers are a ring of W columns: column c is written at c mod W
            at = self.index[:1] % self.k.size(2)
            self.k.index_copy_(2, at, k)
            self.v.index_copy_(2, at, v)
        if self.width is None:
            return self.k[:rows], self.v[:rows]
        k, v = self.k[:rows, :, : self.width], self.v[:rows, :, : self.width]  # (a view at full width)
        if self.rows is None:
            return k, v
        columns = torch.arange(self.width, device=k.device)  # each hypothesis' column c from row rows[b, c]
        return k[self.rows, :, columns].transpose(1, 2), v[self.rows, :, columns].transpose(1, 2)  # (B, H, W, D)


class StaticLayer:
    """What a decoder block reads of a static cache: ``self_attn``, and an encoder-decoder's cross-attention keys
    and values, projected once (before the first step)."""

    def __init__(self, self_attn: StaticKVCache, cross: tuple[Tensor, Tensor] | None = None) -> None:
        self.self_attn, self.cross = self_attn, cross

    def cross_kv(self, attn: nn.Module, memory: Tensor | None) -> tuple[Tensor, Tensor]:
        assert self.cross is not None  # projected when the session began
        return self.cross

    def within(self, width: int, rows: Tensor | None) -> StaticLayer:
        return StaticLayer(self.self_attn.within(width, rows), self.cross)


# At most this many sets of freed buffers are kept for reuse (the most recently freed), whatever their shapes.
KEEP = 4
_kept: OrderedDict[tuple[Any, ...], list[list[Tensor]]] = OrderedDict()  # freed sets by their shapes, oldest first
_kept_lock = threading.RLock()  # sessions are made and freed on a server's worker threads too; reentrant: a
# collection while the lock is held may free a session, whose finalizer gives its set back on the same thread


def buffers(owner: object, shapes: Sequence[tuple[int, ...]], dtype: torch.dtype,
            device: torch.device) -> list[Tensor]:
    """Zeroed key/value buffers of ``shapes`` for ``owner`` (a session), marked as static addresses, and taken
    back for the next session of the same shapes when ``owner`` is collected (at most :data:`KEEP` sets kept).

    A CUDA graph of the compiled step writes these at the addresses it was recorded with: a new generation of a
    shape seen before gets the same memory and replays the graph (new memory would make it record again). Made
    outside inference mode, so that a set made by a server's thread can be written by a plain ``no_grad`` call."""
    key = (tuple(tuple(s) for s in shapes), dtype, torch.device(device))
    with _kept_lock:
        sets = _kept.get(key)
        got = sets.pop() if sets else None
        if sets is not None and not sets:
            del _kept[key]
    if got is None:
        with torch.inference_mode(False):
            got = [torch.zeros(s, dtype=dtype, device=device) for s in shapes]
        for t in got:
            torch._dynamo.mark_static_address(t, guard=False)  # not compiled again (nor kept alive) for another
    else:
        for t in got:
            t.zero_()  # columns never written are masked out, but a NaN there would still reach the sum
    weakref.finalize(owner, _give_back, key, got)
    return got


def _give_back(key: tuple[Any, ...], got: list[Tensor]) -> None:
    with _kept_lock:
        _kept.setdefault(key, []).append(got)
        _kept.move_to_end(key)
        while sum(len(v) for v in _kept.values()) > KEEP:
            oldest = next(iter(_kept))
            _kept[oldest].pop(0)
            if not _kept[oldest]:
                del _kept[oldest]


class SegmentMemory(list):
    """Transformer-XL's memory (Dai et al., 2019, section 3.2): per layer, the states that entered it over the
    last ``mem_len`` positions ``(B, M, C)``, kept without gradient (``SG(h_{n-1})``); the next segment's
    self-attention reads them as keys and values before its own (:meth:`aiayn.layers.EncoderBlock.forward`'s
    ``mems``). Unlike a key/value cache it holds states, not projections: while training, the next segment
    projects them with the weights of its own step.

    Args:
        n_layers: one entry per layer (``None`` until the first segment).
        mem_len: the positions kept; 0 keeps none (each segment alone), ``None`` all (XLNet's default).
    """

    def __init__(self, n_layers: int, mem_len: int | None) -> None:
        if mem_len is not None and mem_len < 0:
            raise ValueError(f"mem_len must be >= 0 or None (all), got {mem_len}")
        super().__init__([None] * n_layers)
        self.mem_len = mem_len

    @property
    def length(self) -> int:
        """Positions held (the same in every layer)."""
        return 0 if self[0] is None else self[0].size(1)

    def update(self, states: list[Tensor]) -> None:
        """Append each layer's input states ``(B, T, C)`` of the segment just run and keep the last ``mem_len``."""
        if len(states) != len(self):
            raise ValueError(f"states must hold one tensor per layer ({len(self)}), got {len(states)}")
        with torch.no_grad():
            for i, h in enumerate(states):
                both = h if self[i] is None else torch.cat([self[i], h], dim=1)  # (B, M + T, C)
                keep = both.size(1) if self.mem_len is None else self.mem_len
                self[i] = both[:, max(0, both.size(1) - keep):].detach()

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (a beam search's survivors, rows leaving)."""
        for i, m in enumerate(self):
            if m is not None:
                self[i] = m.index_select(0, index)


__all__ = ["DecoderCache", "KVCache", "LayerCache", "SegmentMemory", "StaticKVCache", "StaticLayer", "buffers"]
