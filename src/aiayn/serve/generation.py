"""Continuous batching for a language model: one batch of rows decoding a token per step, where a new request's
rows join at a step boundary and a finished (or abandoned) row leaves at the next, so a short request is never
held by a long one (Yu et al. 2022, Orca's iteration-level scheduling).

The KV cache has one length for the whole batch (:class:`~aiayn.layers.kv_cache.DecoderCache`), and the GPT reads
prompts padded on the left with a mask whose positions count real tokens only (``model.features(ids,
attention_mask=..., cache=...)``). So every row is right-aligned: padding, then its prompt, then what it made,
and all rows end at the same column. At each boundary the rows that stay and the rows that join are laid into a
new cache side by side (the shorter ones padded on the left), and columns that no row uses any more are cut:

    step 7: cache columns                      boundary: C leaves, D joins       step 8
    A  . . p p p p a a a a a              A  . p p p p a a a a a a          A  . p p p p a a a a a a a
    B  p p p p p p p b b b b              B  p p p p p p b b b b b          B  p p p p p p b b b b b b
    C  . . . . . p c c c c  (stop)        D  . . . . . p p p p p d          D  . . . . . p p p p p d d
                                             (C's rows out, D prefilled      (one column per step for all)
                                              alone, padded on the left;
                                              the first column was unused)

A joining row is prefilled with the others that join with it (a batch of left-padded prompts, as
:func:`aiayn.decoding.sampling.stream` prefills), its first token chosen from that pass; the cache it filled is
then packed beside the running rows'. Each row chooses its own token from the step's logits: greedy rows by argmax,
sampling rows with their own temperature, top-k, top-p and seeded generator
(:func:`aiayn.decoding.sampling.next_token`), so greedy rows give what ``pipeline.generate(..., do_sample=False)``
gives one by one. A row joins only if the packed cache still fits the model's positions (``max_len``); otherwise it
waits for rows to leave.

Packing changes the cache's shape at every boundary, so that step cannot be compiled. ``aiayn serve --compile``
decodes over a static cache of ``max_batch`` slots instead (:class:`SlotBatch`, on
:class:`~aiayn.decoding.static.StaticSlots`): a joining row is prefilled into a free slot, each row writes its own
next column, a row that leaves frees its slot, and one step compiled when the server starts serves every mix of
rows (free slots are computed and not read: the price of a fixed shape).

Shapes: B rows, W cache columns, H heads, D head dim, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from aiayn.decoding.sampling import check_prompts, next_token
from aiayn.decoding.static import StaticSlots
from aiayn.layers.kv_cache import DecoderCache
from aiayn.pipelines.lm import Text
from aiayn.serve.batching import Worker
from aiayn.serve.metrics import Metrics

Event = tuple[str, Any]  # ("piece", text), ("done", finish_reason), ("error", exception)


@dataclass(eq=False)
class Row:
    """One prompt being continued: how, and what it has made so far.

    Args:
        prompt: its token ids (at least one).
        budget: new tokens it may make (prompt + budget <= the model's ``max_len``).
        temperature: 0 for greedy decoding; else sampling, with ``top_k`` (``None``: all) and ``top_p``
            (``None``: all) and ``generator`` (seeded, or ``None``: torch's global one).
        text: its :class:`~aiayn.pipelines.lm.Text` (the tokenizer and the stop strings).
        send: called on the worker thread with each :data:`Event` of this row.
    """

    prompt: list[int]
    budget: int
    temperature: float
    top_k: int | None
    top_p: float | None
    generator: torch.Generator | None
    text: Text
    send: Callable[[Event], None]
    steps: int = 0  # tokens chosen for it, the end token included
    last: int = 0  # the token chosen at the last step, fed to the model at the next one
    finish: str | None = None  # "stop" or "length" once done
    cancelled: bool = False  # the client went away: the row leaves at the next boundary

    @property
    def done(self) -> bool:
        return self.finish is not None or self.cancelled

    @property
    def cached(self) -> int:
        """Cache columns that hold this row's tokens: its prompt and each chosen token but the last."""
        return len(self.prompt) + self.steps - 1

    @property
    def left(self) -> int:
        """Steps it may still take."""
        return self.budget - self.steps

    def take(self, token: int, ends: set[int]) -> None:
        """The token chosen for it: an end token finishes it, else its text grows (a stop string finishes it)."""
        self.steps += 1
        if token in ends:
            return self._end("stop")
        self.last = token
        piece = self.text.add(token)
        if piece:
            self.send(("piece", piece))
        if self.text.stopped:
            self._end("stop")
        elif self.steps >= self.budget:
            self._end("length")

    def _end(self, reason: str) -> None:
        rest = self.text.rest()
        if rest:
            self.send(("piece", rest))
        self.finish = reason
        self.send(("done", reason))


def _left_pad(x: Tensor, width: int, dim: int) -> Tensor:
    """``x`` with zeros (``False``) put before it along ``dim`` up to ``width``."""
    missing = width - x.size(dim)
    if missing == 0:
        return x
    shape = list(x.shape)
    shape[dim] = missing
    return torch.cat([x.new_zeros(shape), x], dim=dim)


class Batch:
    """The rows decoding together, their cache and which of its columns are real; changed only between steps."""

    def __init__(self, model: Any, ends: set[int], metrics: Metrics) -> None:
        self.model, self.ends, self.metrics = model, ends, metrics
        self.device = next(model.parameters()).device
        self.rows: list[Row] = []
        self.cache: DecoderCache | None = None
        self.real = torch.zeros(0, 0, dtype=torch.bool, device=self.device)  # (B, W) True: a real token

    @property
    def active(self) -> int:
        return sum(not r.done for r in self.rows)

    def admits(self, joining: list[Row], row: Row) -> bool:
        """Whether ``row`` may join with ``joining``: the packed cache, its widest row plus the most steps any row
        has left, fits the model's positions."""
        staying = [r for r in self.rows if not r.done]
        new = joining + [row]
        width = max([r.cached for r in staying] + [len(r.prompt) for r in new])
        left = max([r.left for r in staying] + [r.budget - 1 for r in new])
        return width + left <= self.model.cfg.max_len

    def update(self, joining: list[Row]) -> None:
        """The step boundary: finished and abandoned rows leave, ``joining`` rows are prefilled and join."""
        parts: list[tuple[DecoderCache, Tensor, list[int], list[Row]]] = []
        staying = [i for i, r in enumerate(self.rows) if not r.done]
        if self.cache is not None and staying:
            parts.append((self.cache, self.real, staying, [self.rows[i] for i in staying]))
        if joining:
            cache, real = self._prefill(joining)
            kept = [i for i, r in enumerate(joining) if not r.done]
            if kept:
                parts.append((cache, real, kept, [joining[i] for i in kept]))
        if joining or len(staying) < len(self.rows):
            self._pack(parts)

    @torch.no_grad()
    def _prefill(self, rows: list[Row]) -> tuple[DecoderCache, Tensor]:
        """Run the prompts of ``rows`` (left-padded together) into a new cache; choose each row's first token."""
        check_prompts(self.model, [r.prompt for r in rows])
        lengths = [len(r.prompt) for r in rows]
        width = max(lengths)
        ids = torch.zeros(len(rows), width, dtype=torch.long, device=self.device)  # (B, W)
        real = torch.zeros(len(rows), width, dtype=torch.bool, device=self.device)
        for i, r in enumerate(rows):
            ids[i, width - len(r.prompt):] = torch.tensor(r.prompt, device=self.device)
            real[i, width - len(r.prompt):] = True
        cache = self.model.new_cache(width)
        padded = min(lengths) < width
        hidden = self.model.features(ids, attention_mask=real if padded else None, cache=cache)  # (B, W, C)
        self._choose(self.model.lm_head(hidden[:, -1]), rows)  # (B, V)
        self.metrics.count_tokens(prompt=sum(lengths))
        return cache, real

    @torch.no_grad()
    def step(self) -> None:
        """One token for every row: each feeds the token it chose last."""
        ids = torch.tensor([[r.last] for r in self.rows], device=self.device)  # (B, 1)
        self.real = torch.cat([self.real, self.real.new_ones(len(self.rows), 1)], dim=1)  # (B, W + 1)
        hidden = self.model.features(ids, attention_mask=self.real, cache=self.cache)  # (B, 1, C)
        self._choose(self.model.lm_head(hidden[:, -1]), self.rows)  # (B, V)
        self.metrics.batched(len(self.rows))

    def _choose(self, logits: Tensor, rows: list[Row]) -> None:
        """Each row's token from its row of ``logits`` (B, V): argmax for greedy rows, drawn for the others."""
        tokens = logits.argmax(-1)  # (B,)
        for i, r in enumerate(rows):
            if r.temperature > 0:
                tokens[i] = next_token(logits[i : i + 1], r.temperature, r.top_k, r.top_p, r.generator)[0]
        for r, token in zip(rows, tokens.tolist()):
            r.take(token, self.ends)
            if r.done:
                self.metrics.count_tokens(completion=r.steps)

    def _pack(self, parts: list[tuple[DecoderCache, Tensor, list[int], list[Row]]]) -> None:
        """Lay the kept rows of each part side by side in one new cache, right-aligned, the columns no row uses
        cut, with room for the most steps any row has left (the picture in the module's docstring)."""
        self.rows = [r for *_, rows in parts for r in rows]
        if not self.rows:
            self.cache, self.real = None, self.real.new_zeros(0, 0)
            return
        width = max(real.size(1) for _, real, _, _ in parts)
        real = torch.cat([_left_pad(real[keep], width, 1) for _, real, keep, _ in parts])  # (B, W)
        first = int(real.any(0).int().argmax())  # the first column a row uses
        self.real = real[:, first:]
        self.cache = self.model.new_cache(self.real.size(1) + max(r.left for r in self.rows))
        for i, layer in enumerate(self.cache):
            keys, values = [], []
            for cache, _, keep, _ in parts:
                old = cache[i].self_attn
                assert old.k is not None and old.v is not None  # filled by the prefill or the steps
                index = torch.tensor(keep, device=self.device)
                keys.append(_left_pad(old.k[index, :, : old.length], width, 2))  # (b, H, W, D)
                values.append(_left_pad(old.v[index, :, : old.length], width, 2))
            layer.self_attn.append(torch.cat(keys)[:, :, first:], torch.cat(values)[:, :, first:])

    def fail(self, error: BaseException) -> None:
        """Every row gets ``error`` and leaves (the model failed); the batch starts again empty."""
        for r in self.rows:
            if not r.done:
                r.finish = "error"
                r.send(("error", error))
        self.rows, self.cache, self.real = [], None, self.real.new_zeros(0, 0)


class SlotBatch(Batch):
    """The rows decoding together over a static cache of ``slots`` rows with a compiled step
    (:class:`~aiayn.decoding.static.StaticSlots`): the same rows join and leave, the same tokens are chosen, and
    nothing is packed. The step is compiled and run once by :meth:`warm`, on the thread that will step it."""

    def __init__(self, model: Any, ends: set[int], metrics: Metrics, slots: int, length: int | None = None) -> None:
        super().__init__(model, ends, metrics)
        self.static = StaticSlots(model, slots, length, compile=True)
        self.slot: dict[Row, int] = {}  # each decoding row's slot
        self.free = list(range(slots))[::-1]

    @torch.no_grad()
    def warm(self) -> None:
        """Compile the step now, not at the first request: call it on the thread that will step the batch."""
        self.static.step(torch.zeros(self.static.slots, dtype=torch.long, device=self.device))

    def admits(self, joining: list[Row], row: Row) -> bool:
        """Any row the server accepted fits a slot (prompt and budget within the slots' length, which the server
        checks); the worker takes no more rows than there are free slots."""
        return True

    def update(self, joining: list[Row]) -> None:
        """Rows that ended free their slots; ``joining`` rows are prefilled into free ones."""
        for r in self.rows:
            if r.done:
                self.static.free(self.slot[r])
                self.free.append(self.slot.pop(r))
        self.rows = [r for r in self.rows if not r.done]
        if not joining:
            return
        check_prompts(self.model, [r.prompt for r in joining])
        slots = [self.free.pop() for _ in joining]
        self._choose(self.static.join(slots, [r.prompt for r in joining]), joining)  # (n, V)
        self.metrics.count_tokens(prompt=sum(len(r.prompt) for r in joining))
        for r, slot in zip(joining, slots):
            if r.done:  # ended at its first token
                self.static.free(slot)
                self.free.append(slot)
            else:
                self.slot[r] = slot
                self.rows.append(r)

    @torch.no_grad()
    def step(self) -> None:
        """One token for every row, each slot at its own column."""
        slots = torch.tensor([self.slot[r] for r in self.rows], device=self.device)  # (B,)
        tokens = torch.zeros(self.static.slots, dtype=torch.long, device=self.device)  # (S,) free slots: any id
        tokens[slots] = torch.tensor([r.last for r in self.rows], device=self.device)
        self._choose(self.static.step(tokens)[slots], self.rows)  # (B, V)
        self.metrics.batched(len(self.rows))

    def fail(self, error: BaseException) -> None:
        super().fail(error)
        for slot in self.slot.values():
            self.static.free(slot)
        self.free, self.slot = list(range(self.static.slots))[::-1], {}


class ContinuousBatcher(Worker):
    """The worker thread of a language model: joins queued rows at step boundaries and steps the batch.

    Args:
        model: a GPT (``new_cache``, ``features``, ``lm_head``; no sliding window).
        ends: the tokens that end a row (the tokenizer's end-of-text).
        max_batch: rows decoding together, at most.
        max_wait: seconds an idle worker waits after a first row for others to start with it.
        max_queue: rows that may wait to join.
        compile: decode over ``max_batch`` static slots with a compiled step (:class:`SlotBatch`), each of
            ``length`` columns (default the model's ``max_len``).
    """

    def __init__(self, model: Any, ends: set[int], max_batch: int, max_wait: float, max_queue: int,
                 metrics: Metrics, compile: bool = False, length: int | None = None) -> None:
        super().__init__(max_batch, max_wait, max_queue, metrics)
        if getattr(model.cfg, "attention_window", None) is not None:
            raise ValueError("serve: continuous batching packs whole caches; a sliding-window model "
                             f"(attention_window={model.cfg.attention_window}) is not supported")
        self.batch = SlotBatch(model, ends, metrics, max_batch, length) if compile else Batch(model, ends, metrics)

    def prepare(self) -> None:
        """Warm the compiled step (if any) on this worker thread, the one that steps it."""
        if isinstance(self.batch, SlotBatch):
            self.batch.warm()

    def submit(self, rows: list[Row]) -> bool:
        """Queue a request's rows together; ``False`` when the queue is full (answer 503)."""
        ok = self.waiting.offer([(r, 1) for r in rows])
        self.metrics.gauges(len(self.waiting), self.batch.active)
        return ok

    def loop(self) -> None:
        batch = self.batch
        while True:
            if batch.rows and not batch.active:  # the last rows ended or were abandoned: free their cache now
                batch.update([])
            idle = not batch.active
            joining = self.waiting.take(self.max_batch - batch.active, block=idle,
                                        gather=self.max_wait if idle else 0.0, admit=batch.admits)
            if joining is None:  # closed, drained, nothing running
                return
            try:
                batch.update([r for r in joining if not r.cancelled])
                if batch.rows:
                    batch.step()
            except Exception as e:  # the model failed: these rows get a 500, the server goes on
                for r in joining:
                    if r not in batch.rows and not r.done:
                        r.send(("error", e))
                batch.fail(e)
            self.metrics.gauges(len(self.waiting), batch.active)


__all__ = ["Batch", "ContinuousBatcher", "Event", "Row", "SlotBatch"]
