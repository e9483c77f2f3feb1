"""Continuous batching for a language model: one batch of rows decoding a token per step, where a new request's
rows join at a step boundary and a finished (or abandoned) row leaves, so a short request is never held by a long
one (Yu et al. 2022, Orca's iteration-level scheduling).

This module schedules only: the rows join and leave the model's slots session (``model.slots(...)``,
:mod:`aiayn.models.gpt.session`), which owns the cache. Eager, the session packs the rows that decode into one
growing cache at each change (``PackedSlots``: a step computes only the rows decoding, and a row joins only if
the packed cache still fits the model's positions); with ``aiayn serve --compile`` it is a static cache of
``max_batch`` slots with one step compiled when the server starts (``SlotSession``: each row writes its own next
column, a row that leaves frees its slot, a row joins the lowest free slot, and a step computes the slots up to
the highest taken, free ones among them computed and not read).

A joining row is prefilled with the others that join with it, its first token chosen from that pass. Each row
chooses its own token from the step's logits: greedy rows by argmax, sampling rows with their own temperature,
top-k, top-p and seeded generator (:func:`aiayn.decoding.sampling.next_token`), so greedy rows give what
``pipeline.generate(..., do_sample=False)`` gives one by one. Before it chooses, a row with OpenAI's presence and
frequency penalties lowers the logit of each token it has made (``logit - count * frequency - (count > 0) *
presence``, counting the completion's tokens, not the prompt's); a row that reports log-probabilities records the
chosen token's and its ``logprobs`` most likely alternatives', from the model's own distribution (the log-softmax of
the logits before any penalty, temperature or filter, as vLLM reports them by default).

Shapes: B rows, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from aiayn.decoding.config import GenerationConfig
from aiayn.decoding.generate import sampling_options
from aiayn.decoding.sampling import check_prompts, next_token
from aiayn.defaults import HF_NEW_TOKENS
from aiayn.pipelines.lm import Text
from aiayn.serve.batching import Worker
from aiayn.serve.metrics import Metrics

Event = tuple[str, Any]  # ("piece", (text, [Logprob])), ("done", finish_reason), ("error", exception)
# a token, its log-probability (None: the first of a prompt, which nothing predicts), the likeliest (token, logprob)
Logprob = tuple[int, float | None, list[tuple[int, float]]]


@dataclass(eq=False)
class Row:
    """One prompt being continued: how, and what it has made so far.

    Args:
        prompt: its token ids (at least one).
        config: how to continue it (:class:`~aiayn.decoding.config.GenerationConfig`: ``max_new_tokens``, its
            budget (prompt + budget <= the model's ``max_len``); greedy decoding, or sampling with
            ``temperature``, ``top_k`` and ``top_p``), built once from the request.
        generator: seeded, or ``None``: torch's global one (sampling).
        text: its :class:`~aiayn.pipelines.lm.Text` (the tokenizer and the stop strings).
        send: called on the worker thread with each :data:`Event` of this row; a piece of text comes with the
            :data:`Logprob` of each token it took (when ``logprobs`` is set).
        logprobs: record each token's log-probability and this many likeliest alternatives (``None``: none).
        presence_penalty, frequency_penalty: OpenAI's, in [-2, 2] (0: none).
    """

    prompt: list[int]
    config: GenerationConfig
    generator: torch.Generator | None
    text: Text
    send: Callable[[Event], None]
    logprobs: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    counts: dict[int, int] = field(default_factory=dict)  # each token made so far: how often
    pending: list[Logprob] = field(default_factory=list)  # the log-probabilities of tokens not yet sent as text
    steps: int = 0  # tokens chosen for it, the end token included
    last: int = 0  # the token chosen at the last step, fed to the model at the next one
    finish: str | None = None  # "stop" or "length" once done
    cancelled: bool = False  # the client went away: the row leaves at the next boundary

    @property
    def done(self) -> bool:
        return self.finish is not None or self.cancelled

    @property
    def budget(self) -> int:
        """New tokens it may make: its config's ``max_new_tokens``."""
        return self.config.max_new_tokens or HF_NEW_TOKENS

    @property
    def cached(self) -> int:
        """Cache columns that hold this row's tokens: its prompt and each chosen token but the last."""
        return len(self.prompt) + self.steps - 1

    @property
    def left(self) -> int:
        """Steps it may still take."""
        return self.budget - self.steps

    @property
    def penalized(self) -> bool:
        return bool(self.counts) and (self.presence_penalty != 0 or self.frequency_penalty != 0)

    def take(self, token: int, ends: set[int], logprob: Logprob | None = None) -> None:
        """The token chosen for it (and its log-probabilities): an end token finishes it, else its text grows (a
        stop string finishes it)."""
        self.steps += 1
        if token in ends:
            return self._end("stop")
        self.last = token
        self.counts[token] = self.counts.get(token, 0) + 1
        if logprob is not None:
            self.pending.append(logprob)
        piece = self.text.add(token)
        if piece:
            self._send(piece)
        if self.text.stopped:
            self._end("stop")
        elif self.steps >= self.budget:
            self._end("length")

    def _send(self, piece: str) -> None:
        self.send(("piece", (piece, self.pending)))
        self.pending = []

    def _end(self, reason: str) -> None:
        rest = self.text.rest()
        if rest or (self.pending and not self.text.stopped):  # (the tokens of a stop string are not reported)
            self._send(rest)
        self.finish = reason
        self.send(("done", reason))


class Batch:
    """The rows decoding together, in the slots of the model's session (``model.slots``); changed only between
    steps. ``compile``: a static session of ``slots`` rows, each of ``length`` columns (default the model's
    ``max_len``), the step compiled by :meth:`warm`; else eager, packed."""

    def __init__(self, model: Any, ends: set[int], metrics: Metrics, slots: int, compile: bool = False,
                 length: int | None = None) -> None:
        self.model, self.ends, self.metrics = model, ends, metrics
        self.session = model.slots(slots, length, compile=compile)
        self.rows: list[Row] = []
        self.slot: dict[Row, int] = {}  # each decoding row's slot

    @property
    def active(self) -> int:
        return sum(not r.done for r in self.rows)

    def admits(self, joining: list[Row], row: Row) -> bool:
        """Whether ``row`` may join with ``joining`` at the next boundary (the session has room for both)."""
        return self.session.admits(len(row.prompt), row.budget, [(len(r.prompt), r.budget) for r in joining])

    @torch.no_grad()
    def warm(self) -> None:
        """Run a compiled session's step now, not at the first request: call it on the thread that will step."""
        self.session.warm()

    @torch.no_grad()
    def update(self, joining: list[Row]) -> None:
        """The step boundary: abandoned rows leave, ``joining`` rows are prefilled and join."""
        for r in self.rows:
            if r.done and r in self.slot:
                self.session.leave(self.slot.pop(r))
        self.rows = [r for r in self.rows if not r.done]
        if not joining:
            return
        check_prompts(self.model, [r.prompt for r in joining])
        slots, logits = self.session.join([r.prompt for r in joining], [r.budget for r in joining])  # (n, V)
        self.slot.update(zip(joining, slots))
        self.metrics.count_tokens(prompt=sum(len(r.prompt) for r in joining))
        self._choose(logits, joining)
        self.rows += [r for r in joining if not r.done]

    @torch.no_grad()
    def step(self) -> None:
        """One token for every row: each feeds the token it chose last."""
        logits = self.session.step([self.slot[r] for r in self.rows], [r.last for r in self.rows])  # (B, V)
        self._choose(logits, self.rows)
        self.metrics.batched(len(self.rows))

    def _choose(self, logits: Tensor, rows: list[Row]) -> None:
        """Each row's token from its row of ``logits`` (B, V): argmax for greedy rows, drawn for the others, after
        its penalties; with its log-probabilities where asked. A row that ends leaves its slot."""
        logp = logits.float().log_softmax(-1) if any(r.logprobs is not None for r in rows) else None  # (B, V)
        if any(r.penalized for r in rows):
            logits = logits.clone()
            for i, r in enumerate(rows):
                if r.penalized:
                    made = torch.tensor(list(r.counts), device=logits.device)
                    counts = torch.tensor(list(r.counts.values()), dtype=logits.dtype, device=logits.device)
                    logits[i, made] -= counts * r.frequency_penalty + r.presence_penalty
        tokens = logits.argmax(-1)  # (B,)
        for i, r in enumerate(rows):
            if r.config.do_sample:
                options = sampling_options(True, r.config.temperature, r.config.top_k, r.config.top_p)
                tokens[i] = next_token(logits[i : i + 1], generator=r.generator, **options)[0]
        for i, (r, token) in enumerate(zip(rows, tokens.tolist())):
            r.take(token, self.ends, None if logp is None or r.logprobs is None else _logprob(logp[i], token,
                                                                                            r.logprobs))
            if r.done:
                self.metrics.count_tokens(completion=r.steps)
                self.session.leave(self.slot.pop(r))

    def fail(self, error: BaseException) -> None:
        """Every row gets ``error`` and leaves (the model failed); the batch starts again empty."""
        for r in self.rows:
            if not r.done:
                r.finish = "error"
                r.send(("error", error))
        for slot in self.slot.values():
            self.session.leave(slot)
        self.rows, self.slot = [], {}


def _logprob(logp: Tensor, token: int, top: int) -> Logprob:
    """``token``'s log-probability in ``logp`` ``(V,)`` and the ``top`` likeliest tokens'."""
    best = logp.topk(top) if top else None
    pairs = [] if best is None else list(zip(best.indices.tolist(), best.values.tolist()))
    return token, float(logp[token]), pairs


def prompt_logprobs(model: Any, prompt: list[int], top: int) -> list[Logprob]:
    """The log-probability of each token of ``prompt`` given those before it, with the ``top`` likeliest
    alternatives (OpenAI's ``echo`` with ``logprobs``): ``None`` for the first, which nothing predicts. One
    forward pass over the prompt, on the caller's thread (reading the weights only, beside the worker's steps)."""
    ids = torch.tensor([prompt], device=next(model.parameters()).device)
    with torch.no_grad():
        logp = model(ids)[0].float().log_softmax(-1)  # (T, V)
    return [(prompt[0], None, []), *(_logprob(logp[t - 1], prompt[t], top) for t in range(1, len(prompt)))]


class ContinuousBatcher(Worker):
    """The worker thread of a language model: joins queued rows at step boundaries and steps the batch.

    Args:
        model: a GPT (its ``slots`` session; no sliding window).
        ends: the tokens that end a row (the tokenizer's end-of-text).
        max_batch: rows decoding together, at most.
        max_wait: seconds an idle worker waits after a first row for others to start with it.
        max_queue: rows that may wait to join.
        compile: decode over ``max_batch`` static slots with a compiled step (:class:`Batch`), each of
            ``length`` columns (default the model's ``max_len``).
    """

    def __init__(self, model: Any, ends: set[int], max_batch: int, max_wait: float, max_queue: int,
                 metrics: Metrics, compile: bool = False, length: int | None = None) -> None:
        super().__init__(max_batch, max_wait, max_queue, metrics)
        if getattr(model.cfg, "attention_window", None) is not None:
            raise ValueError("serve: continuous batching keeps every position a row wrote; a sliding-window model "
                             f"(attention_window={model.cfg.attention_window}) is not supported")
        self.batch = Batch(model, ends, metrics, max_batch, compile=compile, length=length)

    def prepare(self) -> None:
        """Warm the compiled step (if any) on this worker thread, the one that steps it."""
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


__all__ = ["Batch", "ContinuousBatcher", "Event", "Logprob", "Row", "prompt_logprobs"]
