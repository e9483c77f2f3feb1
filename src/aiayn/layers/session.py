"""A decode session: what every decoding loop calls on a model, and nothing else (gpt-fast's model that owns its
cache; ``transformers``' ``Cache`` behind one ``generate``).

A family's model makes its own (``model.session(length, ...)``): a GPT's, the paper's encoder-decoder's. The loops
(:mod:`aiayn.decoding.loops`: greedy decoding and sampling, beam search, speculative decoding; the server's
continuous batching) know this protocol only:

    logits = session.prefill(ids, mask, repeat=K)   (rows, V): the inputs read (a prompt; a source and the
                                                     start token), each giving K rows (beams, draws)
    logits = session.step(tokens)                   (rows, V): each row's next token fed, its next logits
    session.reorder(rows)                           beams: rows move among the rows of one input
    session.keep(rows)                              rows leave (or move between inputs): every per-row state

How the keys and values are kept is the session's: a growing cache (:class:`~aiayn.layers.kv_cache.KVCache`),
none (every step recomputes the prefix), or static buffers a compiled step writes at a column held in a tensor
(:class:`StaticSession`, with the cache kinds of :mod:`aiayn.layers.kv_cache`). ``compile`` is a property of the
session: the loops run the same calls either way.

Shapes: B rows of the buffers, A rows decoding (<= B), L columns (the prompt and the new tokens), V vocabulary.
"""

from __future__ import annotations

import abc
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from aiayn.layers import fast, kernels
from aiayn.layers.int8 import opaque
from aiayn.layers.kv_cache import StaticLayer


class Session(abc.ABC):
    """One generation's state in a model: its rows, their cache, and the step that extends them.

    Attributes set by :meth:`prefill`:
        rows: the rows decoding (inputs x ``repeat``, less those that left by :meth:`keep`).
        prefix: ``(rows, P)`` the ids the new tokens follow (a language model's prompt; an encoder-decoder's start
            token): what the logits processing reads before the new tokens, and what ``generate`` returns first.
        prefix_mask: ``(rows, P)`` bool, ``True`` for real tokens (a prompt padded on the left), or ``None``.
        never: token ids the model never outputs (an encoder-decoder's padding): the loops mask them out.
    """

    rows: int = 0
    prefix: Tensor
    prefix_mask: Tensor | None = None
    never: tuple[int, ...] = ()

    @abc.abstractmethod
    def prefill(self, ids: Tensor, mask: Tensor | None = None, *, new_tokens: int, repeat: int = 1) -> Tensor:
        """Read the inputs ``ids`` ``(B, T)`` (``mask`` ``(B, T)``, 1 for real tokens), each giving ``repeat``
        rows (rows ``i * repeat`` to ``i * repeat + repeat - 1`` are input ``i``'s), with room for ``new_tokens``
        more per row; the logits ``(B * repeat, V)`` of each row's first new token.

        Raises:
            ValueError: more positions than the model has."""

    @abc.abstractmethod
    def step(self, tokens: Tensor) -> Tensor:
        """Feed each row's next token ``(A,)``; the logits ``(A, V)`` of the token after it."""

    @abc.abstractmethod
    def reorder(self, rows: Tensor) -> None:
        """Rows ``rows`` ``(A,)`` of those decoding become the rows decoding, in that order; ``rows`` only moves
        rows among the rows of one input (beam search's survivors), so what depends on the input alone stays."""

    @abc.abstractmethod
    def keep(self, rows: Tensor) -> None:
        """Rows ``rows`` ``(A',)`` of those decoding become the rows decoding (others leave, or rows move between
        inputs): everything held per row follows."""


def check_cache(compile: bool, use_cache: bool) -> None:
    """Refuse ``compile=True`` with ``use_cache=False``: the compiled step decodes over a static cache."""
    if compile and not use_cache:
        raise ValueError("compile=True decodes over a static cache: it needs use_cache=True")


# A step attends over the columns written so far rounded up to BUCKET columns, a size the compiled step takes as
# dynamic (one compile), so its cost follows the generation, not the buffer; None: over the whole buffer.
BUCKET: int | None = 16

# Beam search reorders its hypotheses in a table of rows the step reads the buffers through (read_from), not by
# copying the buffers' rows every step; False: copied. Measured by benchmarks/compiled_step_switches.py.
BEAM_TABLE = True

# The buffers hold a column more than is ever attended: a width is then never the whole buffer, whose view (its
# strides matching its size) the compiled step would take as another case and compile again.
SPARE = 1


def narrow(columns: Tensor, width: int, dim: int = 0) -> Tensor:
    """The first ``width`` of ``columns`` along ``dim``, that size dynamic to ``torch.compile`` (not compiled
    again per width) unless BUCKET is None (the width is then always the buffers' L)."""
    columns = columns.narrow(dim, 0, width)
    if BUCKET is not None:
        torch._dynamo.maybe_mark_dynamic(columns, dim)
    return columns


def bucket(filled: int, length: int) -> int:
    """The columns a step attends over when ``filled`` of ``length`` are written: rounded up to :data:`BUCKET`."""
    return length if BUCKET is None else min(length, -(-filled // BUCKET) * BUCKET)


_compiled: dict[tuple[str, str, str], Any] = {}  # torch.compile of a step, by step and device type: once per process

ANNOUNCE = True  # compile=True says on standard error when it compiles a decode step, and how long it took


class Announced:
    """A compiled step that says when a call compiles it, and how long that took: the first call says it is
    compiling before it starts (the wait is tens of seconds on a laptop CPU), and any call that compiled a graph
    (the first; a new batch size) says after it how long it took and whether inductor's on-disk cache served it
    (a second process reuses the first's kernels). Whether a call compiled is read from dynamo's graph counter;
    :data:`ANNOUNCE` ``= False`` silences it."""

    def __init__(self, compiled: Callable[..., Tensor], name: str) -> None:
        self.compiled, self.name, self.calls = compiled, name, 0

    def __call__(self, *args: Any) -> Tensor:
        from torch._dynamo.utils import counters

        graphs, hits = counters["stats"]["unique_graphs"], counters["inductor"]["fxgraph_cache_hit"]
        if self.calls == 0:
            _say(f"aiayn: compiling the decode step of {self.name} (torch.compile; the first call of each batch "
                 f"size waits for it)")
        self.calls += 1
        start = time.perf_counter()
        out = self.compiled(*args)
        if counters["stats"]["unique_graphs"] > graphs:
            cached = counters["inductor"]["fxgraph_cache_hit"] > hits
            _say(f"aiayn: compiled the decode step of {self.name} for batch {args[2].size(0)} in "
                 f"{time.perf_counter() - start:.1f} s" + (" (kernels from inductor's on-disk cache)" if cached
                                                           else ""))
        return out


def _say(line: str) -> None:
    if ANNOUNCE:
        print(line, file=sys.stderr, flush=True)


def compiled_step(device: torch.device, step: Callable[..., Tensor]) -> Any:
    """``torch.compile(step)`` for ``device``: inductor's default mode on a CPU (its defaults: small kernels kept on
    one thread measured 0.97-1.03x, ``benchmarks/results/compiled_step_min_chunk.json``), CUDA graphs on a GPU;
    :class:`Announced`, so the user sees the wait."""
    key = (step.__module__, step.__qualname__, device.type)
    if key not in _compiled:
        mode = "reduce-overhead" if device.type == "cuda" else None
        _compiled[key] = Announced(torch.compile(step, mode=mode, dynamic=False),
                                   step.__module__.removeprefix("aiayn.models.").split(".")[0])
    return _compiled[key]


def prepare_compiled(model: nn.Module, device: torch.device) -> None:
    """What a compiled step of ``model`` needs before its first trace: on the CPU, whether one row takes inductor's
    multiply-and-sum (:func:`aiayn.layers.kernels.prepare_compiled`, chosen on this machine); then each int8 product
    one operation of the graph (:func:`aiayn.layers.int8.opaque`); then, on the CPU, the weights in huge pages
    (:func:`aiayn.layers.fast.in_huge_pages`, where :data:`~aiayn.layers.fast.HUGE_PAGES`)."""
    if device.type == "cpu":
        kernels.prepare_compiled()
    opaque(model)
    if device.type == "cpu" and fast.ENABLED and fast.HUGE_PAGES:
        fast.in_huge_pages(model)


class StaticSession(Session):
    """A session over static buffers (gpt-fast's design): every step has the same shapes, so it runs eagerly or
    through ``torch.compile`` (``compile=True``; CUDA graphs on a GPU), the same tokens either way.

    The new key and value are written at a column held in a tensor (``index_copy_``), and the one new query
    attends over the buffer, a mask hiding the columns not yet written (and each row's left padding):

        columns:   0 1 2 3 4 5 6 7 8 9            B rows, the prompts padded on the left to P = 4
        row 0      . p p p a a | . . .            p: prompt (written by the prefill, eager)
        row 1      p p p p b b | . . .            a, b: made so far; the step writes column 6 in every row
        mask       0 1 1 1 1 1 1 0 0 0  (row 0)   and attends over all 10, the mask hiding padding and the future

    A step attends over the columns written so far rounded up to :data:`BUCKET`: that width is a dynamic size of
    the one compiled step, so the cost follows what is filled without a compile per width.

    Beam search reorders rows without copying the buffers: a table ``read_from`` ``(B, L)`` says which buffer row
    holds each hypothesis' column, and the step reads the keys and values through it. Column c is written once,
    at step c, by every row, so no cell a hypothesis still reads is ever overwritten:

        step 3 wrote column 3; the survivors are rows 1 1 0 2      read_from    0 1 2 3 | 4
        hypothesis 0 continues row 1: its columns 0-3 are read      row 0       1 1 1 1 | 0   column 4: its own row
        from buffer row 1, its new column 4 written in row 0        row 1       1 1 1 1 | 1

    When rows leave (:meth:`keep`), they leave the front of the batch and the step computes the rows behind them
    without reading their logits (the batch never shrinks, so nothing is compiled again).

    A family's subclass fills :attr:`layers` in :meth:`prefill`, lists the per-row tensors (:attr:`per_row`) and
    says what its step reads besides the buffers (:meth:`_inputs`); its step is a function of tensors alone,
    ``step(model, layers, token (B, 1), index (B,), *inputs, read_from) -> (B, V)``, that writes nothing but the
    key/value buffers (so a CUDA graph replays it: everything else is written eagerly, outside it).

    Args:
        model: the family's model.
        step: the family's one-token step.
        device: where the buffers live.
        compile: run ``step`` through :func:`compiled_step`.
        beams: reorder beams in a table the step reads the buffers through (:data:`BEAM_TABLE`).
    """

    def __init__(self, model: nn.Module, step: Callable[..., Tensor], device: torch.device, compile: bool,
                 beams: bool) -> None:
        self.model, self.device, self.beams = model, device, beams
        self.length = 0  # L, the columns of the buffers: every position the generation reaches (:meth:`_reserve`)
        self.columns = torch.arange(0, device=device)  # (L,)
        self.index = torch.zeros(0, dtype=torch.long, device=device)  # (B,) the column each row writes next
        self.layers: list[StaticLayer] = []
        self.per_row: list[Tensor] = []  # (B, ...) tensors besides the buffers, reordered with them
        self.batch = 0  # buffer rows; the first ``rows`` of them are decoding
        self.filled = 0  # the columns written so far
        self.read_from: Tensor | None = None  # (B, L+1) beam search's: the buffer row each row's column is in
        self.run = compiled_step(device, step) if compile else step
        self.compiled = compile
        if compile:
            prepare_compiled(model, device)

    def _reserve(self, length: int) -> None:
        """``length`` columns (at the prefill, once the prompt's length is known)."""
        self.length = length
        self.columns = torch.arange(length, device=self.device)

    def _begin(self, batch: int) -> None:
        """A batch of ``batch`` rows starts: its column index, and (beams) the table of rows each reads."""
        self.index = torch.zeros(batch, dtype=torch.long, device=self.device)
        self.batch = self.rows = batch
        if self.beams and BEAM_TABLE and self._table_allowed():
            rows = torch.arange(batch, device=self.device)
            self.read_from = rows[:, None].repeat(1, self.length + SPARE)  # (B, L + 1), a spare column too

    def _table_allowed(self) -> bool:
        """Whether beams may read through a table (a ring's columns are written again: no)."""
        return True

    @abc.abstractmethod
    def _inputs(self, width: int) -> tuple[Any, ...]:
        """What the step reads besides the token, the column and the buffers (each family its own), attending
        over the first ``width`` columns."""

    def step(self, tokens: Tensor) -> Tensor:
        if not self.layers:
            raise RuntimeError("prefill the session first")
        if tokens.size(0) != self.rows:
            raise ValueError(f"tokens must hold one id for each of the {self.rows} rows decoding, got "
                             f"{tokens.size(0)}")
        column = self.filled
        if column >= self.length:
            raise ValueError(f"the session holds {self.length} columns; all are written")
        self.index.fill_(column)
        self.filled = column + 1
        if self.rows < self.batch:  # rows that left: computed, not read
            tokens = torch.cat([tokens, tokens.new_zeros(self.batch - self.rows)])
        tokens = tokens.contiguous()[:, None]  # (B, 1), the same strides at every step (a column of ids has others)
        width = bucket(column + 1, self.length)
        read_from = None if self.read_from is None else narrow(self.read_from, width, dim=1)
        logits = self.run(self.model, self.layers, tokens, self.index, *self._inputs(width), read_from)  # (B, V)
        logits = logits[: self.rows]
        return logits.clone() if logits.is_cuda else logits  # CUDA graphs write their outputs again next step

    def reorder(self, rows: Tensor) -> None:
        self._move(rows, fewer=False)

    def keep(self, rows: Tensor) -> None:
        self._move(rows, fewer=True)

    def _move(self, index: Tensor, fewer: bool) -> None:
        """Make the rows decoding the rows ``index`` ``(A',)`` of those decoding now, in the first ``A'`` rows of
        the buffers; ``fewer=False``: only the self-attention keys and values move (the rows of one input).

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


__all__ = ["BEAM_TABLE", "BUCKET", "SPARE", "Session", "StaticSession", "bucket", "check_cache", "compiled_step",
           "narrow", "prepare_compiled"]
