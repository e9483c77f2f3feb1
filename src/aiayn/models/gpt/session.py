"""A GPT's decode sessions (:mod:`aiayn.layers.session`): the model's own forward, step by step.

    GPTSession          a growing key/value cache (or none: every step recomputes the prefix)
    StaticGPTSession    static buffers, one step of fixed shapes, eager or compiled; a ring of W columns for a
                        sliding window W (Mistral), a table of rows for beam search
    PackedSlots         a server's rows joining and leaving a growing cache, packed side by side at each change
    SlotSession         a server's rows in static slots, each at its own column, one compiled step for life

Prompts of different lengths are padded on the left, so every row's next token is in the last column, and
positions count real tokens only (as Hugging Face's GPT-2 counts them):

    row 0:  .  .  The cat      ->  The cat sat ...
    row 1:  Once upon a time   ->  Once upon a time there ...

Shapes: B rows, P prompt length (padded), L positions (prompt + new tokens), H kv heads, D head dim, C d_model,
V vocabulary, S slots.
"""

from __future__ import annotations

import abc
from typing import Any

import torch
from torch import Tensor

from aiayn.layers import kernels
from aiayn.layers.kv_cache import DecoderCache, StaticKVCache, StaticLayer, buffers
from aiayn.layers.session import (
    SPARE,
    Session,
    StaticSession,
    bucket,
    check_cache,
    compiled_step,
    narrow,
    prepare_compiled,
)

GPT = Any  # the family's model (its module imports this one: not imported back)


def make_session(model: GPT, *, use_cache: bool = True, static: bool = False, compile: bool = False,
                 beams: bool = False) -> Session:
    """The session :meth:`GPT.session` describes."""
    check_cache(compile, use_cache)
    if static or compile:
        return StaticGPTSession(model, compile=compile, beams=beams)
    return GPTSession(model, use_cache=use_cache)


def _repeated(ids: Tensor, mask: Tensor | None, repeat: int) -> tuple[Tensor, Tensor | None]:
    if repeat == 1:
        return ids, mask
    return ids.repeat_interleave(repeat, dim=0), None if mask is None else mask.repeat_interleave(repeat, dim=0)


def _padded(mask: Tensor | None) -> bool:
    """Whether ``mask`` ``(B, P)`` hides any position (one read back from the device, at the prefill)."""
    return mask is not None and not bool(mask.bool().all())


class GPTSession(Session):
    """Decoding with the model's own :meth:`~aiayn.models.GPT.features` over a growing key/value cache
    (:class:`~aiayn.layers.DecoderCache`, allocated once for ``length`` positions), or without one.

    Beyond the protocol, speculative decoding feeds several tokens at once (:meth:`extend`) and forgets the
    rejected ones (:meth:`crop`)."""

    def __init__(self, model: GPT, use_cache: bool = True) -> None:
        self.model, self.use_cache = model, use_cache
        self.length = 0
        self.cache: DecoderCache | None = None
        self.ids: Tensor | None = None  # (B, L) without a cache: every token so far
        self.real: Tensor | None = None  # (B, L) True from each row's first prompt token on; None: no padding
        self.filled = 0  # positions fed so far

    def reserve(self, length: int) -> None:
        """Room for ``length`` positions (what :meth:`prefill` does first; speculative decoding calls it before
        its first :meth:`extend`)."""
        made = self.model.new_cache(length)  # refuses more positions than the model has, with the cache or without
        self.length, self.cache = length, made if self.use_cache else None

    def prefill(self, ids: Tensor, mask: Tensor | None = None, *, new_tokens: int, repeat: int = 1) -> Tensor:
        ids, mask = _repeated(ids, mask, repeat)
        b, p = ids.shape
        self.reserve(p + new_tokens)
        if _padded(mask):
            assert mask is not None
            self.real = torch.ones(b, self.length, dtype=torch.bool, device=ids.device)
            self.real[:, :p] = mask.bool()
        self.prefix, self.prefix_mask = ids, None if self.real is None else self.real[:, :p]
        self.rows = b
        return self.extend(ids)[:, -1]

    def extend(self, ids: Tensor, last: int = 1) -> Tensor:
        """Feed ``ids`` ``(B, t)``, each row's next ``t`` tokens; the logits ``(B, last, V)`` after each of the
        last ``last`` of them."""
        end = self.filled + ids.size(1)
        mask = None if self.real is None else self.real[:, :end]
        if self.cache is not None:
            hidden = self.model.features(ids, attention_mask=mask, cache=self.cache)  # (B, t, C)
        else:
            if self.ids is None:
                self.ids = ids.new_zeros(ids.size(0), self.length)
            self.ids[:, self.filled : end] = ids
            hidden = self.model.features(self.ids[:, :end], attention_mask=mask)  # (B, end, C)
        self.filled = end
        return self.model.lm_head(hidden[:, hidden.size(1) - last :])  # (B, last, V): not the prompt's positions

    def step(self, tokens: Tensor) -> Tensor:
        return self.extend(tokens[:, None])[:, -1]

    def crop(self, length: int) -> None:
        """Forget every position from ``length`` on (speculative decoding's rejected proposals)."""
        if self.cache is not None:
            self.cache.crop(length)
        self.filled = length

    def reorder(self, rows: Tensor) -> None:
        if self.cache is not None:
            self.cache.reorder(rows, cross=False)
        if self.ids is not None:
            self.ids = self.ids.index_select(0, rows)

    def keep(self, rows: Tensor) -> None:
        self.reorder(rows)
        if self.real is not None:
            self.real = self.real.index_select(0, rows)
        self.rows = rows.numel()


def gpt_step(model: Any, layers: list[StaticLayer], token: Tensor, index: Tensor, real: Tensor, positions: Tensor,
             held: Tensor, window: int, rows: Tensor | None = None) -> Tensor:
    """A GPT's logits ``(B, V)`` of ``token`` ``(B, 1)``, each row's at its column of ``index`` ``(B,)``: a
    function of tensors (and the constant ``window``), the same shapes at every step, so that ``torch.compile``
    compiles it once; it writes nothing but the key/value buffers. ``held`` ``(R,)``: the column each buffer
    column holds (itself, or in a sliding window's ring of R = W columns, the last column written there, the
    column written now included: :meth:`StaticGPTSession._inputs` writes it before the step); a key is seen if it
    is a real token, written, and within the last ``window`` columns. ``rows`` ``(B, R)``: the buffer row each
    column is read from (beam search), or ``None``: its own."""
    c = index[:, None]  # (B, 1)
    layers = [layer.within(held.size(0), rows) for layer in layers]  # the columns attended: held's
    seen = real.index_select(1, held) & (held <= c) & (held > c - window)  # (B, R)
    position_ids = positions.gather(1, c)  # (B, 1): positions count real tokens only
    hidden = model.hidden(token, position_ids=position_ids, mask=seen[:, None, None, :], is_causal=False,
                          caches=layers)  # (B, 1, C)
    return model.lm_head(hidden[:, -1])  # (B, V)


def _check_length(model: GPT, length: int) -> None:
    if length > model.cfg.max_len:
        raise ValueError(f"the prompt and the new tokens are {length} positions; the model has {model.cfg.max_len} "
                         f"(max_len)")


class StaticGPTSession(StaticSession):
    """A GPT's decoding over a static cache (:class:`~aiayn.layers.session.StaticSession`): the prefill runs the
    model's own path on the prompts with a growing cache and copies what it cached into the buffers; each step
    then runs :func:`gpt_step`, eager or compiled.

    With a sliding window W (Mistral's ``attention_window``) shorter than L, the buffers are a ring of W columns
    (column c at c mod W, the oldest overwritten), so a step costs W columns however long the generation.
    """

    def __init__(self, model: GPT, compile: bool = False, beams: bool = False) -> None:
        super().__init__(model, gpt_step, next(model.parameters()).device, compile, beams)

    def _table_allowed(self) -> bool:
        return self.held.numel() == self.length  # a ring's columns are written again: its buffers are copied

    def _inputs(self, width: int) -> tuple[Any, ...]:
        ring = self.held.numel()
        if ring < self.length:  # the column written now replaces a ring's oldest: here, not in the compiled step
            column = self.filled - 1
            self.held[column % ring] = column
            return self.real, self.positions, self.held, self.window  # a ring: all of it
        return self.real, self.positions, narrow(self.held, width), self.window

    def prefill(self, ids: Tensor, mask: Tensor | None = None, *, new_tokens: int, repeat: int = 1) -> Tensor:
        ids, mask = _repeated(ids, mask, repeat)
        model: Any = self.model
        b, p = ids.shape
        self._reserve(p + new_tokens)
        window = model.cfg.attention_window
        self.window = self.length + 1 if window is None else window  # every column, or the last W
        self.held = torch.arange(min(self.length, self.window), device=self.device)  # (R,) a ring when W < L
        _check_length(model, self.length)
        padded = _padded(mask)
        self.real = torch.ones(b, self.length, dtype=torch.bool, device=ids.device)  # (B, L)
        if padded:
            assert mask is not None
            self.real[:, :p] = mask.bool()
        self.positions = (self.real.long().cumsum(-1) - 1).clamp(min=0)  # (B, L)
        self.per_row = [self.real, self.positions]
        self.prefix, self.prefix_mask = ids, self.real[:, :p] if padded else None
        self._begin(b)
        cache = DecoderCache(len(model.decoder.layers), p)
        hidden = model.features(ids, attention_mask=self.prefix_mask, cache=cache)  # (B, P, C)
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
            self.layers.append(StaticLayer(StaticKVCache(kb, vb, self.index)))
        self.filled = p
        return model.lm_head(hidden[:, -1])


class Slots(abc.ABC):
    """What a server's continuous batching calls (:mod:`aiayn.serve.generation`): rows join free slots
    (:meth:`join`: their prompts prefilled), every :meth:`step` feeds each decoding slot its next token, and a row
    that ends frees its slot (:meth:`leave`). ``slots`` rows decode together at most, each of at most ``length``
    positions (its prompt and its new tokens)."""

    def __init__(self, model: GPT, slots: int, length: int | None) -> None:
        length = model.cfg.max_len if length is None else length
        _check_length(model, length)
        if model.cfg.attention_window is not None:
            raise ValueError(f"slots decode without a sliding window (attention_window="
                             f"{model.cfg.attention_window}): each row keeps every position it wrote")
        if slots < 1 or length < 1:
            raise ValueError(f"slots={slots} and length={length} must be >= 1")
        self.model, self.slots, self.length = model, slots, length
        self.device = next(model.parameters()).device
        self.free = list(range(slots))[::-1]  # popped from the end: the lowest slot free first
        self.left: dict[int, int] = {}  # each decoding slot's steps left (its first token came from the prefill)
        self.cached: dict[int, int] = {}  # each decoding slot's positions fed: its prompt, then a token per step

    def admits(self, prompt: int, budget: int, joining: list[tuple[int, int]]) -> bool:
        """Whether a row of a ``prompt``-token prompt and ``budget`` new tokens may join with ``joining`` (the
        ``(prompt, budget)`` of the rows joining before it) at the next boundary."""
        return prompt + budget <= self.length and len(joining) < len(self.free)

    def join(self, prompts: list[list[int]], budgets: list[int]) -> tuple[list[int], Tensor]:
        """Prefill ``prompts`` into free slots, each row to make at most its ``budgets`` tokens (the first chosen
        from the logits returned here); the slots, and each prompt's last position's logits ``(n, V)``."""
        if len(prompts) > len(self.free):
            raise ValueError(f"{len(prompts)} rows cannot join: {len(self.free)} of {self.slots} slots are free")
        slots = [self.free.pop() for _ in prompts]
        for slot, prompt, budget in zip(slots, prompts, budgets):
            self.left[slot], self.cached[slot] = budget - 1, len(prompt)
        return slots, self._join(slots, prompts)

    def warm(self) -> None:
        """Do now what the first requests would wait for; call it on the thread that will step. An eager session
        compiles nothing, but under kernel measurement (``AIAYN_KERNELS=measure``, the default) each product's
        kernel is timed the first time its rows' bucket is met (:mod:`aiayn.layers.kernels`: up to seconds a
        shape, once per machine), which would stall the requests decoding then: a pass of the model over 1, 2, 4,
        ... 256 positions (at most ``length``) meets every bucket a step or a prefill will."""
        if kernels.mode() != "measure" or self.device.type != "cpu":
            return
        with torch.no_grad():
            for n in (1 << i for i in range(len(kernels.BUCKETS))):
                if n <= self.length:
                    self.model(torch.zeros(1, n, dtype=torch.long, device=self.device))

    def leave(self, slot: int) -> None:
        """The row in ``slot`` ended (or was abandoned): the slot is free."""
        del self.left[slot], self.cached[slot]
        self.free.append(slot)
        self.free.sort(reverse=True)  # (a static session computes its slots up to the highest taken)

    def step(self, slots: list[int], tokens: list[int]) -> Tensor:
        """Feed each of ``slots`` (every slot decoding, once) its token; their logits ``(n, V)``, in that order."""
        logits = self._step(slots, tokens)
        for slot in slots:
            self.left[slot] -= 1
            self.cached[slot] += 1
        return logits

    @abc.abstractmethod
    def _join(self, slots: list[int], prompts: list[list[int]]) -> Tensor:
        """Prefill ``prompts`` into ``slots`` (taken from :attr:`free`); their last positions' logits ``(n, V)``."""

    @abc.abstractmethod
    def _step(self, slots: list[int], tokens: list[int]) -> Tensor:
        """Feed ``slots`` their ``tokens``; their logits ``(n, V)``, in that order."""

    def _left_padded(self, prompts: list[list[int]]) -> tuple[Tensor, Tensor, bool]:
        """``prompts`` as one batch ``(n, P)`` padded on the left, its mask, and whether any row is padded."""
        width = max(len(p) for p in prompts)
        ids = torch.zeros(len(prompts), width, dtype=torch.long, device=self.device)  # (n, P)
        real = torch.zeros(len(prompts), width, dtype=torch.bool, device=self.device)
        for i, p in enumerate(prompts):
            ids[i, width - len(p) :] = torch.tensor(p, device=self.device)
            real[i, width - len(p) :] = True
        return ids, real, min(len(p) for p in prompts) < width


def _left_pad(x: Tensor, width: int, dim: int) -> Tensor:
    """``x`` with zeros (``False``) put before it along ``dim`` up to ``width``."""
    missing = width - x.size(dim)
    if missing == 0:
        return x
    shape = list(x.shape)
    shape[dim] = missing
    return torch.cat([x.new_zeros(shape), x], dim=dim)


class PackedSlots(Slots):
    """Slots over one growing cache with one length for every row (eager): each row right-aligned, padding, its
    prompt, then what it made, all rows ending at the same column. When rows join or leave, the rows that stay and
    the rows that join are laid into a new cache side by side (the shorter ones padded on the left), and columns
    that no row uses any more are cut:

        step 7: cache columns                      boundary: C leaves, D joins       step 8
        A  . . p p p p a a a a a              A  . p p p p a a a a a a          A  . p p p p a a a a a a a
        B  p p p p p p p b b b b              B  p p p p p p b b b b b          B  p p p p p p b b b b b b
        C  . . . . . p c c c c  (stop)        D  . . . . . p p p p p d          D  . . . . . p p p p p d d
                                                 (C's rows out, D prefilled      (one column per step for all)
                                                  alone, padded on the left;
                                                  the first column was unused)

    So a step computes only the rows decoding and the columns they use; a change of rows costs a copy of the
    cache. The rows' widest prompt and most steps left must fit the model's positions together (:meth:`admits`).
    """

    def __init__(self, model: GPT, slots: int, length: int | None = None) -> None:
        super().__init__(model, slots, length)
        self.order: list[int] = []  # the slot of each row of the cache
        self.cache: DecoderCache | None = None
        self.real = torch.zeros(0, 0, dtype=torch.bool, device=self.device)  # (B, W) True: a real token
        self.joined: list[tuple[DecoderCache, Tensor, list[int]]] = []  # prefilled, packed at the next step
        self.gone: set[int] = set()  # slots left since the last step: unpacked at the next

    def admits(self, prompt: int, budget: int, joining: list[tuple[int, int]]) -> bool:
        """As :meth:`Slots.admits`, and the packed cache (its widest row plus the most steps any row has left)
        fits the model's positions."""
        if not super().admits(prompt, budget, joining):
            return False
        width = max([*self.cached.values(), prompt, *(n for n, _ in joining)])
        left = max([*self.left.values(), budget - 1, *(b - 1 for _, b in joining)])
        return width + left <= self.length

    @torch.no_grad()
    def _join(self, slots: list[int], prompts: list[list[int]]) -> Tensor:
        ids, real, padded = self._left_padded(prompts)
        cache = self.model.new_cache(ids.size(1))
        hidden = self.model.features(ids, attention_mask=real if padded else None, cache=cache)  # (n, P, C)
        self.joined.append((cache, real, slots))
        return self.model.lm_head(hidden[:, -1])  # (n, V)

    def leave(self, slot: int) -> None:
        super().leave(slot)
        joined = [(c, r, s) for c, r, s in self.joined if slot in s]
        if joined:  # left before its first step: never packed
            cache, real, slots = joined[0]
            i = slots.index(slot)
            self.joined.remove(joined[0])
            if len(slots) > 1:
                keep = [j for j in range(len(slots)) if j != i]
                cache.reorder(torch.tensor(keep, device=self.device))
                self.joined.append((cache, real[keep], [slots[j] for j in keep]))
        else:
            self.gone.add(slot)

    @torch.no_grad()
    def _step(self, slots: list[int], tokens: list[int]) -> Tensor:
        if self.joined or self.gone:
            self._pack()
        at = {slot: i for i, slot in enumerate(self.order)}
        given = dict(zip(slots, tokens))
        ids = torch.tensor([[given[s]] for s in self.order], device=self.device)  # (B, 1)
        self.real = torch.cat([self.real, self.real.new_ones(len(self.order), 1)], dim=1)  # (B, W + 1)
        hidden = self.model.features(ids, attention_mask=self.real, cache=self.cache)  # (B, 1, C)
        logits = self.model.lm_head(hidden[:, -1])  # (B, V)
        return logits[torch.tensor([at[s] for s in slots], device=self.device)]

    def _pack(self) -> None:
        """Lay the rows that stay and those that joined side by side in one new cache, right-aligned, the columns
        no row uses cut, with room for the most steps any row has left (the picture in the class docstring)."""
        parts: list[tuple[DecoderCache, Tensor, list[int], list[int]]] = []
        staying = [i for i, s in enumerate(self.order) if s not in self.gone]
        if self.cache is not None and staying:
            parts.append((self.cache, self.real, staying, [self.order[i] for i in staying]))
        for cache, real, slots in self.joined:
            parts.append((cache, real, list(range(len(slots))), slots))
        self.joined, self.gone = [], set()
        self.order = [s for *_, slots in parts for s in slots]
        if not self.order:
            self.cache, self.real = None, self.real.new_zeros(0, 0)
            return
        width = max(real.size(1) for _, real, _, _ in parts)
        real = torch.cat([_left_pad(real[keep], width, 1) for _, real, keep, _ in parts])  # (B, W)
        first = int(real.any(0).int().argmax())  # the first column a row uses
        self.real = real[:, first:]
        self.cache = self.model.new_cache(self.real.size(1) + max(self.left[s] for s in self.order))
        for i, layer in enumerate(self.cache):
            keys, values = [], []
            for cache, _, keep, _ in parts:
                old = cache[i].self_attn
                assert old.k is not None and old.v is not None  # filled by the prefill or the steps
                index = torch.tensor(keep, device=self.device)
                keys.append(_left_pad(old.k[index, :, : old.length], width, 2))  # (b, H, W, D)
                values.append(_left_pad(old.v[index, :, : old.length], width, 2))
            layer.self_attn.append(torch.cat(keys)[:, :, first:], torch.cat(values)[:, :, first:])


class SlotSession(Slots):
    """Slots over a static cache of ``slots`` rows (eager or compiled): a row joins a free slot (its prompt
    prefilled eagerly, copied into the slot's first columns), every step writes each slot at its own next
    column, and a row that ends frees its slot; nothing moves, so one compiled step serves every mix of rows for
    the life of the process:

        columns    0 1 2 3 4 5 6 7             each row from column 0, its own length: no padding
        slot 0     p p p a a | . .             the step writes column 5 of slot 0, 3 of slot 1,
        slot 1     p p b | . . . .             and computes the free slot 2 without reading it
        slot 2     (free)

    A step attends over the columns of the longest row rounded up to a bucket, and (but on a GPU) computes the slots
    up to the highest taken (a row joins the lowest free slot): two dynamic sizes, so one compile serves every width
    and every number of slots from 2 (one slot is a graph of its own), and a server with one client computes one
    row. On a GPU it computes every slot (a CUDA graph is recorded for each shape; a few rows more cost little).
    """

    def __init__(self, model: GPT, slots: int, length: int | None = None, compile: bool = False) -> None:
        super().__init__(model, slots, length)
        length, device = self.length, self.device
        self.index = torch.zeros(slots, dtype=torch.long, device=device)  # (S,) each slot's next column
        self.live = torch.zeros(slots, dtype=torch.long, device=device)  # (S,) 1 where a row decodes
        self.next = [0] * slots  # the same on the host: the width a step attends over
        self.real = torch.ones(slots, length + SPARE, dtype=torch.bool, device=device)  # (S, L+1): no padding
        self.columns = torch.arange(length + SPARE, device=device)  # (L+1,)
        self.positions = self.columns.expand(slots, length + SPARE)  # (S, L+1): a slot's column is its position
        self.layers: list[StaticLayer] = []
        attn = model.decoder.layers[0].self_attn
        shape = (slots, attn.n_kv_heads, length + SPARE, attn.d_model // attn.n_heads)  # (S, H, L+1, D)
        blocks = len(model.decoder.layers)
        made = buffers(self, [shape] * (2 * blocks), next(model.parameters()).dtype, device)
        for i in range(blocks):
            self.layers.append(StaticLayer(StaticKVCache(made[2 * i], made[2 * i + 1], self.index, apart=True)))
        self.run = compiled_step(device, gpt_step) if compile else gpt_step
        self.window = length + 1  # every column a row wrote
        if compile:
            prepare_compiled(model, device)

    @torch.no_grad()
    def _join(self, slots: list[int], prompts: list[list[int]]) -> Tensor:
        ids, real, padded = self._left_padded(prompts)
        width = ids.size(1)
        cache = DecoderCache(len(self.model.decoder.layers), width)
        hidden = self.model.features(ids, attention_mask=real if padded else None, cache=cache)  # (n, P, C)
        for layer, filled in zip(self.layers, cache):
            for buffer, new in ((layer.self_attn.k, filled.self_attn.k), (layer.self_attn.v, filled.self_attn.v)):
                assert new is not None  # the prefill filled it
                for i, (slot, p) in enumerate(zip(slots, prompts)):
                    buffer[slot, :, : len(p)] = new[i, :, width - len(p) :]
        for slot, p in zip(slots, prompts):
            self.index[slot], self.live[slot], self.next[slot] = len(p), 1, len(p)
        return self.model.lm_head(hidden[:, -1])

    def leave(self, slot: int) -> None:
        super().leave(slot)
        self.index[slot], self.live[slot], self.next[slot] = 0, 0, 0

    def warm(self) -> None:
        """Run the step once (compiled now, not at the first request), after the eager prefill's kernels are
        measured (:meth:`Slots.warm`): call it on the thread that will step."""
        super().warm()
        with torch.no_grad():
            for n in sorted({self.slots} if self.device.type == "cuda" else {1, self.slots}):  # one slot, the rest
                self._run(torch.zeros(n, dtype=torch.long, device=self.device), 1)

    def _run(self, tokens: Tensor, width: int) -> Tensor:
        """The step over the first ``n`` slots, ``tokens`` ``(n,)`` (``n`` a dynamic size, as the ``width``)."""
        n = tokens.size(0)
        held = narrow(self.columns, bucket(width, self.length))
        token, index, real, positions = (t[:n] for t in (tokens.contiguous()[:, None], self.index, self.real,
                                                          self.positions))
        for t in (token, index, real, positions):
            torch._dynamo.maybe_mark_dynamic(t, 0)
        logits = self.run(self.model, self.layers, token, index, real, positions, held, self.window)
        return logits.clone() if logits.is_cuda else logits

    @torch.no_grad()
    def _step(self, slots: list[int], tokens: list[int]) -> Tensor:
        where = torch.tensor(slots, device=self.device)
        # (n,) free slots fed any id; on a GPU every slot, one CUDA graph a width (not one a width and a number)
        n = self.slots if self.device.type == "cuda" else max(slots) + 1
        fed = torch.zeros(n, dtype=torch.long, device=self.device)
        fed[where] = torch.tensor(tokens, device=self.device)
        logits = self._run(fed, max(self.next) + 1)  # (n, V)
        self.index += self.live  # the next column of each row decoding
        for slot in slots:
            self.next[slot] += 1
        return logits[where]


__all__ = ["GPTSession", "PackedSlots", "SlotSession", "Slots", "StaticGPTSession", "gpt_step", "make_session"]
