"""A static key/value cache and a decode step compiled once (gpt-fast's design), for a GPT and an encoder-decoder.

The growing cache (:mod:`aiayn.layers.kv_cache`) hands attention the filled positions only, so each step has
other shapes than the last and nothing can be compiled or captured. Here the buffers are allocated once for the
whole generation, the prompt and every new token, and every decode step has the same shapes: the new key and
value are written at a position held in a tensor (``index_copy_``), and the one new query attends over the whole
buffer, a mask hiding the columns not yet written (and each row's left padding):

    columns:   0 1 2 3 4 5 6 7 8 9            B rows, the prompts padded on the left to P = 4
    row 0      . p p p a a | . . .            p: prompt (written by the prefill, eager)
    row 1      p p p p b b | . . .            a, b: made so far; the step writes column 6 in every row
    mask       0 1 1 1 1 1 1 0 0 0  (row 0)   and attends over all 10, the mask hiding padding and the future

A GPT's prefill runs the model's own path on the prompt with the growing cache and copies what it cached into
the buffers (:class:`StaticGPT`). An encoder-decoder has no prefill: its first step is the start token at column
0, and each layer's cross-attention keys and values are projected from the encoder's output once, before the
first step (:class:`StaticSeq2Seq`). Then :meth:`Static.step` runs the one-token step, eager or through
``torch.compile`` (inductor's C++ on a CPU, ``mode="reduce-overhead"``, i.e. CUDA graphs, on a GPU). The step is
a function of tensors alone (the position is a tensor), so it is compiled once per batch size and buffer length
and reused by every later generation of that shape in the process. A step attends over the columns written so
far rounded up to :data:`BUCKET` (16), not the whole buffer: that width is a dynamic size of the one compiled
step, so the cost follows what is filled without a compile per width.

Beam search reorders rows without copying the buffers (:meth:`Static.reorder`): a table ``read_from`` ``(B, L)``
says which buffer row holds each hypothesis' column, and the step reads the keys and values through it. Column
c is written once, at step c, by every row, so no cell a hypothesis still reads is ever overwritten:

    step 3 wrote column 3; the survivors are rows 1 1 0 2      read_from    0 1 2 3 | 4
    hypothesis 0 continues row 1: its columns 0-3 are read      row 0       1 1 1 1 | 0   column 4: its own row
    from buffer row 1, its new column 4 written in row 0        row 1       1 1 1 1 | 1

When sentences finish, their rows leave the front of the batch and the step computes the rows behind them without
reading their logits (the batch never shrinks, so nothing is compiled again).

On a GPU the compiled step is replayed as a CUDA graph, which reads and writes its inputs at the addresses it was
recorded with. The only inputs the step writes are the key/value buffers: they come from a pool (:func:`buffers`)
that hands a generation of a given shape the memory the last one of that shape used, marked static
(``torch._dynamo.mark_static_address``, as Hugging Face's ``StaticCache`` does), so the graph replays over them
instead of being skipped ("mutated inputs") or recorded again. Everything else the step reads is written
eagerly, outside it (the column index, a ring's column table, the rows of a beam's table).

Shapes: B batch (x beams), A the rows still decoding (<= B), P prompt length (padded), L = P + new tokens,
S source length, H kv heads, D head dim, V vocabulary.
"""

from __future__ import annotations

import abc
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, cast

import torch
from torch import Tensor, nn

from aiayn.layers.int8 import opaque
from aiayn.layers.kv_cache import DecoderCache
from aiayn.layers.masks import padding_mask


class StaticKVCache:
    """One self-attention layer's ``(B, H, L, D)`` key and value buffers; :meth:`append` writes each row's new
    key and value ``(B, H, 1, D)`` at its column of ``index`` (a ``(B,)`` tensor shared by every layer) and returns
    the whole buffers. Every row writes the same column (``index_copy_`` of one column: inductor writes it in
    place), unless ``apart``: each row its own (:class:`StaticSlots`; indexed by row and column, not a scatter,
    which inductor runs 3x slower). Within a step (:meth:`within`) it returns the first ``width`` columns, and
    with ``rows`` ``(B, width)`` row b's column c is read from buffer row ``rows[b, c]`` (beam search's
    hypotheses, reordered in that table instead of in the buffers)."""

    def __init__(self, k: Tensor, v: Tensor, index: Tensor, apart: bool = False, width: int | None = None,
                 rows: Tensor | None = None) -> None:
        self.k, self.v, self.index, self.apart, self.width, self.rows = k, v, index, apart, width, rows

    def within(self, width: int, rows: Tensor | None = None) -> StaticKVCache:
        """The same buffers, :meth:`append` returning their first ``width`` columns only (those written so far,
        rounded up to a :data:`BUCKET`): what a step attends over; read through ``rows`` if given."""
        return StaticKVCache(self.k, self.v, self.index, self.apart, width, rows)

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if self.apart:  # row b's column index[b] (B, H, D): an index_put_, which inductor writes in place
            rows = torch.arange(k.size(0), device=k.device)
            self.k[rows, :, self.index] = k[:, :, 0]
            self.v[rows, :, self.index] = v[:, :, 0]
        else:  # a sliding window's buffers are a ring of W columns: column c is written at c mod W
            at = self.index[:1] % self.k.size(2)
            self.k.index_copy_(2, at, k)
            self.v.index_copy_(2, at, v)
        if self.width is None:
            return self.k, self.v
        k, v = self.k[:, :, : self.width], self.v[:, :, : self.width]  # (a view of all of them at full width)
        if self.rows is None:
            return k, v
        columns = torch.arange(self.width, device=k.device)  # each hypothesis' column c from row rows[b, c]
        return k[self.rows, :, columns].transpose(1, 2), v[self.rows, :, columns].transpose(1, 2)  # (B, H, W, D)


class _Layer:
    """What a decoder block reads of its cache: ``self_attn``, and an encoder-decoder's cross-attention keys and
    values, projected once."""

    def __init__(self, self_attn: StaticKVCache, cross: tuple[Tensor, Tensor] | None = None) -> None:
        self.self_attn, self.cross = self_attn, cross

    def cross_kv(self, attn: nn.Module, memory: Tensor | None) -> tuple[Tensor, Tensor]:
        assert self.cross is not None  # projected by StaticSeq2Seq before the first step
        return self.cross

    def within(self, width: int, rows: Tensor | None) -> _Layer:
        return _Layer(self.self_attn.within(width, rows), self.cross)


def _gpt_step(model: Any, layers: list[_Layer], token: Tensor, index: Tensor, real: Tensor, positions: Tensor,
              held: Tensor, window: int, rows: Tensor | None = None) -> Tensor:
    """A GPT's logits ``(B, V)`` of ``token`` ``(B, 1)``, each row's at its column of ``index`` ``(B,)``: a
    function of tensors (and the constant ``window``), the same shapes at every step, so that ``torch.compile``
    compiles it once; it writes nothing but the key/value buffers. ``held`` ``(R,)``: the column each buffer
    column holds (itself, or in a sliding window's ring of R = W columns, the last column written there, the
    column written now included: :meth:`StaticGPT._inputs` writes it before the step); a key is seen if it is
    a real token, written, and within the last ``window`` columns. ``rows`` ``(B, R)``: the buffer row each
    column is read from (beam search), or ``None``: its own."""
    c = index[:, None]  # (B, 1)
    layers = [layer.within(held.size(0), rows) for layer in layers]  # the columns attended: held's
    seen = real.index_select(1, held) & (held <= c) & (held > c - window)  # (B, R)
    mask = seen[:, None, None, :]  # (B, 1, 1, R)
    position_ids = positions.gather(1, c)  # (B, 1): positions count real tokens only
    x = model.embed(token, position_ids=position_ids)  # (B, 1, C)
    rotary = None if model.rotary is None else model.rotary(1, 0, position_ids)
    hidden = model.decoder(x, self_mask=mask, is_causal=False, caches=layers, rotary=rotary)  # (B, 1, C)
    return model.lm_head(hidden[:, -1])  # (B, V)


def _seq2seq_step(model: Any, layers: list[_Layer], token: Tensor, index: Tensor, memory_mask: Tensor,
                  columns: Tensor, rows: Tensor | None = None) -> Tensor:
    """An encoder-decoder's logits ``(B, V)`` of target ``token`` ``(B, 1)`` at position ``index`` ``(B,)``, its
    cross-attention reading the keys and values in ``layers`` (``memory_mask`` ``(B, 1, 1, S)``), over the
    ``columns`` ``(L',)`` written so far (``rows`` as :func:`_gpt_step`'s)."""
    mask = (columns <= index[:, None])[:, None, None, :]  # (B, 1, 1, L'): the columns written so far
    layers = [layer.within(columns.size(0), rows) for layer in layers]  # attending over the first L' <= L columns
    x = model.tgt_embed(token, position_ids=index[:, None])  # (B, 1, C)
    hidden = model.decoder(x, memory=None, self_mask=mask, memory_mask=memory_mask, is_causal=False,
                           caches=layers)  # (B, 1, C)
    return model.generator(hidden[:, -1])  # (B, V)


def check_cache(compile: bool, use_cache: bool) -> None:
    """Refuse ``compile=True`` with ``use_cache=False``: the compiled step decodes over a static cache."""
    if compile and not use_cache:
        raise ValueError("compile=True decodes over a static cache: it needs use_cache=True")


# A step attends over the columns written so far rounded up to BUCKET columns, a size the compiled step takes as
# dynamic (one compile), so its cost follows the generation, not the buffer; None: over the whole buffer.
BUCKET: int | None = 16


# Beam search reorders its hypotheses in a table of rows the step reads the buffers through (Static.read_from),
# not by copying the buffers' rows every step; False: copied. Measured by benchmarks/compiled_step_switches.py.
BEAM_TABLE = True

# The buffers hold a column more than is ever attended: a width is then never the whole buffer, whose view (its
# strides matching its size) the compiled step would take as another case and compile again.
SPARE = 1


def _narrow(columns: Tensor, width: int, dim: int = 0) -> Tensor:
    """The first ``width`` of ``columns`` along ``dim``, that size dynamic to ``torch.compile`` (not compiled
    again per width) unless BUCKET is None (the width is then always the buffers' L)."""
    columns = columns.narrow(dim, 0, width)
    if BUCKET is not None:
        torch._dynamo.maybe_mark_dynamic(columns, dim)
    return columns


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


_compiled: dict[tuple[str, str], Any] = {}  # torch.compile of a step, by step and device type: once per process


def compiled_step(device: torch.device, step: Callable[..., Tensor] = _gpt_step) -> Any:
    """``torch.compile(step)`` for ``device``: inductor's default mode on a CPU (its defaults: small kernels kept on
    one thread measured 0.97-1.03x, ``benchmarks/results/compiled_step_min_chunk.json``), CUDA graphs on a GPU."""
    key = (step.__name__, device.type)
    if key not in _compiled:
        mode = "reduce-overhead" if device.type == "cuda" else None
        _compiled[key] = torch.compile(step, mode=mode, dynamic=False)
    return _compiled[key]


class Static(abc.ABC):
    """Decoding over static buffers: :meth:`step` one token at a time for the first :attr:`rows` rows of the
    batch, :meth:`reorder` the rows in place (beam search); a subclass fills :attr:`layers` and says what the
    step reads besides them (:meth:`_inputs`) and which tensors hold a row each (:attr:`per_row`)."""

    def __init__(self, model: nn.Module, step: Callable[..., Tensor], batch: int, length: int, device: torch.device,
                 compile: bool) -> None:
        self.model, self.length = model, length
        self.columns = torch.arange(length, device=device)  # (L,)
        self.index = torch.zeros(batch, dtype=torch.long, device=device)  # (B,) the column each row writes next
        self.layers: list[_Layer] = []
        self.per_row: list[Tensor] = []  # (B, ...) tensors besides the buffers, reordered with them
        self.batch = self.rows = 0  # buffer rows; the first ``rows`` of them are decoding
        self.filled = 0  # the columns written so far
        self.read_from: Tensor | None = None  # (B, L+1) beam search's: the buffer row each row's column is in
        self.run = compiled_step(device, step) if compile else step
        if compile:
            opaque(model)  # int8 products: one operation each in the graph

    def _read_through_a_table(self) -> None:
        """Reorder beams in :attr:`read_from`, each row reading its own buffer row to begin with."""
        rows = torch.arange(self.index.numel(), device=self.index.device)
        self.read_from = rows[:, None].repeat(1, self.length + SPARE)  # (B, L + 1), a column spare as the buffers

    @abc.abstractmethod
    def _inputs(self, width: int) -> tuple[Tensor, ...]:
        """What the step reads besides the token, the column and the buffers (each kind of model its own),
        attending over the first ``width`` columns."""

    def step(self, token: Tensor, column: int) -> Tensor:
        """The logits ``(A, V)`` of the rows decoding after their ``token`` ``(A,)``, written at ``column``."""
        if not self.layers:
            raise RuntimeError("prefill the prompts first")
        if token.size(0) != self.rows:
            raise ValueError(f"token must hold one id for each of the {self.rows} rows decoding, got {token.size(0)}")
        if not 0 <= column < self.length:
            raise ValueError(f"column {column} is outside the {self.length} columns of the buffers")
        self.index.fill_(column)
        self.filled = column + 1
        if self.rows < self.batch:  # rows that left: computed, not read
            token = torch.cat([token, token.new_zeros(self.batch - self.rows)])
        token = token.contiguous()[:, None]  # (B, 1), the same strides at every step (a column of ids has others)
        width = self.length if BUCKET is None else min(self.length, -(-(column + 1) // BUCKET) * BUCKET)
        read_from = None if self.read_from is None else _narrow(self.read_from, width, dim=1)
        logits = self.run(self.model, self.layers, token, self.index, *self._inputs(width), read_from)  # (B, V)
        logits = logits[: self.rows]
        return logits.clone() if logits.is_cuda else logits  # CUDA graphs write their outputs again next step

    def reorder(self, index: Tensor, fewer: bool = True) -> None:
        """Make the rows decoding the rows ``index`` ``(A',)`` of those decoding now (beam search's survivors),
        in the first ``A'`` rows of the buffers. ``fewer=False``: ``index`` only moves rows among the beams of
        one input, whose other per-row tensors are alike, so only the self-attention buffers are copied.

        With :attr:`read_from` nothing of the buffers is copied: the table's rows move instead (B x L ids, not
        B x H x L x D floats in every layer). No cell is written twice (column c is written once, at step c, by
        every row), so a cell that some hypothesis still reads is never overwritten; the columns not yet written
        keep their own row."""
        n = index.numel()
        if self.read_from is not None:
            self.read_from[:n, : self.filled] = self.read_from[:, : self.filled].index_select(0, index)
        for layer in self.layers if self.read_from is None else ():
            for buffer in (layer.self_attn.k, layer.self_attn.v):
                filled = min(self.filled, buffer.size(2))  # the buffers' other columns are not read
                buffer[:n, :, :filled] = buffer[:, :, :filled].index_select(0, index)
        for layer in self.layers:
            if fewer and layer.cross is not None:
                for t in layer.cross:
                    t[:n] = t.index_select(0, index)
        if fewer:
            for t in self.per_row:
                t[:n] = t.index_select(0, index)
        self.rows = n


def _check_gpt(model: nn.Module, length: int) -> None:
    """Refuse what a GPT's static cache of ``length`` columns does not decode."""
    cfg: Any = getattr(model, "cfg", None)
    if not hasattr(model, "new_cache") or hasattr(model, "encode") or cfg is None:
        raise ValueError(f"a static cache decodes a GPT, not a {type(model).__name__}")
    if length > cfg.max_len:
        raise ValueError(f"the prompt and the new tokens are {length} positions; the model has {cfg.max_len} "
                         f"(max_len)")


class StaticGPT(Static):
    """A GPT's decoding over a static cache: :meth:`prefill` the prompts, then :meth:`step` one token at a time.

    With a sliding window W (Mistral's ``attention_window``) shorter than L, the buffers are a ring of W columns
    (column c at c mod W, the oldest overwritten), so a step costs W columns however long the generation.

    Args:
        model: a :class:`aiayn.models.GPT`.
        real: ``(B, L)`` bool, ``True`` from each row's first prompt token on (prompts padded on the left), over
            the prompt and every new token.
        compile: run :meth:`step` through ``torch.compile`` (:func:`compiled_step`); ``False``: the same step
            eagerly (what the compiled one is tested equal to).
        beams: :meth:`reorder` moves the rows of a table the step reads the buffers through, not the buffers
            (:attr:`Static.read_from`; a ring's buffers are copied: its columns are written again).
    """

    def __init__(self, model: nn.Module, real: Tensor, compile: bool = False, beams: bool = False) -> None:
        _check_gpt(model, real.size(1))
        super().__init__(model, _gpt_step, real.size(0), real.size(1), real.device, compile)
        self.real = real.clone()
        self.positions = (real.long().cumsum(-1) - 1).clamp(min=0)  # (B, L)
        self.per_row = [self.real, self.positions]
        window = cast(Any, model).cfg.attention_window
        self.window = self.length + 1 if window is None else window  # every column, or the last W
        self.held = torch.arange(min(self.length, self.window), device=real.device)  # (R,) a ring when W < L
        if beams and BEAM_TABLE and self.held.numel() == self.length:
            self._read_through_a_table()

    def _inputs(self, width: int) -> tuple[Any, ...]:
        ring = self.held.numel()
        if ring < self.length:  # the column written now replaces a ring's oldest: here, not in the compiled step
            column = self.filled - 1
            self.held[column % ring] = column
            return self.real, self.positions, self.held, self.window  # a ring: all of it
        return self.real, self.positions, _narrow(self.held, width), self.window

    def prefill(self, ids: Tensor, attention_mask: Tensor | None) -> Tensor:
        """The logits ``(B, V)`` of the last prompt position; ``ids`` ``(B, P)``, the prompts (eager, the
        model's own path, with the growing cache whose keys and values then fill the buffers)."""
        model: Any = self.model
        b, p = ids.shape
        cache = DecoderCache(len(model.decoder.layers), p)
        hidden = model.features(ids, attention_mask=attention_mask, cache=cache)  # (B, P, C)
        ring = self.held.numel()
        width = ring if ring < self.length else ring + SPARE  # a ring's buffers: its W columns
        kept = torch.arange(max(0, p - ring), p, device=ids.device)  # the prompt's columns a step may still see
        self.held.index_copy_(0, kept % ring, kept)
        first = cache[0].self_attn.k
        assert first is not None  # the prefill filled it
        shape = (b, first.size(1), width, first.size(3))  # (B, H, W or L + 1, D)
        made = buffers(self, [shape] * (2 * len(cache)), first.dtype, first.device)
        for i, layer in enumerate(cache):
            k, v = layer.self_attn.k, layer.self_attn.v  # (B, H, P, D)
            assert k is not None and v is not None  # the prefill filled them
            kb, vb = made[2 * i], made[2 * i + 1]
            kb.index_copy_(2, kept % ring, k[:, :, kept])
            vb.index_copy_(2, kept % ring, v[:, :, kept])
            self.layers.append(_Layer(StaticKVCache(kb, vb, self.index)))
        self.filled = p
        self.batch = self.rows = b
        return model.lm_head(hidden[:, -1])


class StaticSeq2Seq(Static):
    """An encoder-decoder's decoding over a static cache (the paper's Transformer, BART, Marian): :meth:`step`
    from the start token on, every step the same shapes.

    Args:
        model: a :class:`aiayn.models.Transformer`.
        memory: ``(B, S, C)``, the encoder's output (each row repeated for its beams).
        src: ``(B, S)`` the source ids (their padding is masked out of cross-attention).
        length: the most target positions decoded, the start token's included.
        compile, beams: as :class:`StaticGPT`'s.
    """

    def __init__(self, model: nn.Module, memory: Tensor, src: Tensor, length: int, compile: bool = False,
                 beams: bool = False) -> None:
        net: Any = model
        if not hasattr(net, "encode"):
            raise ValueError(f"StaticSeq2Seq decodes an encoder-decoder, not a {type(model).__name__}")
        super().__init__(model, _seq2seq_step, src.size(0), length, src.device, compile)
        if net.tgt_embed.positions is not None:  # sinusoidal tables grow for long targets: now, not in the graph
            net.tgt_embed.positions(1, length - 1)
        self.memory_mask = padding_mask(src, net.cfg.pad_id).clone()  # (B, 1, 1, S)
        self.per_row = [self.memory_mask]
        b = src.size(0)
        if beams and BEAM_TABLE:
            self._read_through_a_table()
        attn = net.decoder.layers[0].self_attn
        shape = (b, attn.n_kv_heads, length + SPARE, attn.d_model // attn.n_heads)  # (B, H, L+1, D)
        made = buffers(self, [shape] * (2 * len(net.decoder.layers)), memory.dtype, memory.device)
        for i, block in enumerate(net.decoder.layers):
            self.layers.append(_Layer(StaticKVCache(made[2 * i], made[2 * i + 1], self.index),
                                      block.cross_attn.project_kv(memory)))  # (B, H, S, D) each
        self.batch = self.rows = b

    def _inputs(self, width: int) -> tuple[Tensor, ...]:
        return self.memory_mask, _narrow(self.columns, width)


class StaticSlots:
    """A GPT's static cache of ``slots`` rows for continuous batching (:mod:`aiayn.serve`): a request's row
    joins a free slot (:meth:`join`: its prompt prefilled eagerly, copied into the slot's first columns), every
    :meth:`step` writes each slot at its own next column, and a row that ends frees its slot (:meth:`free`); nothing
    moves, so one compiled step serves every mix of rows for the life of the process:

        columns    0 1 2 3 4 5 6 7             each row from column 0, its own length: no padding
        slot 0     p p p a a | . .             the step writes column 5 of slot 0, 3 of slot 1,
        slot 1     p p b | . . . .             and computes the free slot 2 without reading it
        slot 2     (free)

    Args:
        model: a :class:`aiayn.models.GPT` without a sliding window.
        slots: rows decoding together, at most.
        length: columns of each slot: a row's prompt and new tokens, at most (default the model's ``max_len``).
        compile: the step through ``torch.compile`` (:func:`compiled_step`).
    """

    def __init__(self, model: nn.Module, slots: int, length: int | None = None, compile: bool = False) -> None:
        cfg: Any = getattr(model, "cfg", None)
        length = cfg.max_len if length is None and cfg is not None else length
        _check_gpt(model, length or 0)
        if cfg.attention_window is not None:
            raise ValueError("slots decode without a sliding window (attention_window): each row has its own column")
        if slots < 1 or not length or length < 1:
            raise ValueError(f"slots={slots} and length={length} must be >= 1")
        device = next(model.parameters()).device
        self.model, self.slots, self.length = model, slots, length
        self.index = torch.zeros(slots, dtype=torch.long, device=device)  # (S,) each slot's next column
        self.live = torch.zeros(slots, dtype=torch.long, device=device)  # (S,) 1 where a row decodes
        self.real = torch.ones(slots, length, dtype=torch.bool, device=device)  # (S, L): no padding in a slot
        self.columns = torch.arange(length, device=device)  # (L,)
        self.positions = self.columns.expand(slots, length)  # (S, L): a slot's column is its position
        self.layers: list[_Layer] = []
        blocks = cast(Any, model).decoder.layers
        attn = blocks[0].self_attn
        shape = (slots, attn.n_kv_heads, length, attn.d_model // attn.n_heads)  # (S, H, L, D)
        made = buffers(self, [shape] * (2 * len(blocks)), next(model.parameters()).dtype, device)
        for i in range(len(blocks)):
            self.layers.append(_Layer(StaticKVCache(made[2 * i], made[2 * i + 1], self.index, apart=True)))
        self.run = compiled_step(device) if compile else _gpt_step
        self.window = length + 1  # every column a row wrote
        if compile:
            opaque(model)

    @torch.no_grad()
    def join(self, slots: list[int], prompts: list[list[int]]) -> Tensor:
        """Prefill ``prompts`` (one batch, left-padded) into the free ``slots``; their last positions' logits
        ``(n, V)``."""
        model: Any = self.model
        width = max(len(p) for p in prompts)
        if width > self.length:
            raise ValueError(f"a prompt of {width} tokens does not fit a slot of {self.length} columns")
        device = self.index.device
        ids = torch.zeros(len(prompts), width, dtype=torch.long, device=device)  # (n, P)
        real = torch.zeros(len(prompts), width, dtype=torch.bool, device=device)
        for i, p in enumerate(prompts):
            ids[i, width - len(p):] = torch.tensor(p, device=device)
            real[i, width - len(p):] = True
        cache = DecoderCache(len(model.decoder.layers), width)
        padded = bool((~real).any())
        hidden = model.features(ids, attention_mask=real if padded else None, cache=cache)  # (n, P, C)
        for layer, filled in zip(self.layers, cache):
            for buffer, new in ((layer.self_attn.k, filled.self_attn.k), (layer.self_attn.v, filled.self_attn.v)):
                assert new is not None  # the prefill filled it
                for i, (slot, p) in enumerate(zip(slots, prompts)):
                    buffer[slot, :, : len(p)] = new[i, :, width - len(p) :]
        for slot, p in zip(slots, prompts):
            self.index[slot], self.live[slot] = len(p), 1
        return model.lm_head(hidden[:, -1])

    def free(self, slot: int) -> None:
        """The row in ``slot`` left: the slot is computed, not read, until a row joins it."""
        self.index[slot], self.live[slot] = 0, 0

    def step(self, tokens: Tensor) -> Tensor:
        """The logits ``(S, V)`` after each slot's token ``tokens`` ``(S,)`` (any id in a free slot)."""
        logits = self.run(self.model, self.layers, tokens.contiguous()[:, None], self.index, self.real,
                          self.positions, self.columns, self.window)
        self.index += self.live  # the next column of each row decoding
        return logits.clone() if logits.is_cuda else logits


__all__ = ["Static", "StaticGPT", "StaticKVCache", "StaticSeq2Seq", "StaticSlots", "buffers", "check_cache",
           "compiled_step"]
