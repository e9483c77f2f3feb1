"""The encoder-decoder's decode sessions (:mod:`aiayn.layers.session`): the paper's Transformer, BART, Marian.

The prefill encodes the sources once (each row repeated for its beams or draws) and feeds the start token; each
step feeds one target token. Cross-attention keys and values depend only on the encoder's output, so each layer
projects them once and the session holds them:

    Seq2SeqSession          the model's own :meth:`~aiayn.models.Transformer.decode` over a growing cache (or
                            none: every step recomputes the target prefix)
    StaticSeq2SeqSession    static buffers from the start token on, every step the same shapes (eager or
                            compiled; a table of rows for beam search)

Padding is never an output here (it would read as the end of a row): :attr:`Session.never`.

Shapes: B rows, S source length, L target positions, H kv heads, D head dim, C d_model, V target vocabulary.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from aiayn.layers.kv_cache import DecoderCache, StaticKVCache, StaticLayer, buffers
from aiayn.layers.masks import padding_mask
from aiayn.layers.session import SPARE, Session, StaticSession, check_cache, narrow

Transformer = Any  # the family's model (its module imports this one: not imported back)


def make_session(model: Transformer, *, use_cache: bool = True, static: bool = False, compile: bool = False,
                 beams: bool = False) -> Session:
    """The session :meth:`Transformer.session` describes."""
    check_cache(compile, use_cache)
    if static or compile:
        return StaticSeq2SeqSession(model, compile=compile, beams=beams)
    return Seq2SeqSession(model, use_cache=use_cache)


def _encoded(model: Transformer, src: Tensor, repeat: int) -> tuple[Tensor, Tensor]:
    """The sources ``(B * repeat, S)`` and their memory ``(B * repeat, S, C)``, each encoded once."""
    memory = model.encode(src)  # (B, S, C)
    if repeat == 1:
        return src, memory
    return src.repeat_interleave(repeat, dim=0), memory.repeat_interleave(repeat, dim=0)


class Seq2SeqSession(Session):
    """Decoding with the model's own :meth:`~aiayn.models.Transformer.decode`, over a growing cache of ``new_tokens``
    target positions (the start token's included), or without one."""

    def __init__(self, model: Transformer, use_cache: bool = True) -> None:
        self.model, self.use_cache = model, use_cache
        self.never = (model.cfg.pad_id,)
        self.cache: DecoderCache | None = None
        self.ys: Tensor | None = None  # (B, t) without a cache: the target prefix

    def prefill(self, ids: Tensor, mask: Tensor | None = None, *, new_tokens: int, repeat: int = 1) -> Tensor:
        self.src, self.memory = _encoded(self.model, ids, repeat)
        b = self.src.size(0)
        self.rows = b
        self.cache = self.model.new_cache(new_tokens) if self.use_cache else None
        self.prefix = torch.full((b, 1), self.model.cfg.bos_id, dtype=torch.long, device=ids.device)  # (B, 1)
        if self.cache is None:
            self.ys = self.prefix
        return self.model.decode(self.prefix, self.memory, self.src, cache=self.cache)[:, -1]  # (B, V)

    def step(self, tokens: Tensor) -> Tensor:
        if self.cache is not None:
            return self.model.decode(tokens[:, None], self.memory, self.src, cache=self.cache)[:, -1]
        assert self.ys is not None  # set by the prefill
        self.ys = torch.cat([self.ys, tokens[:, None]], dim=1)  # (B, t + 1)
        return self.model.decode(self.ys, self.memory, self.src)[:, -1]

    def reorder(self, rows: Tensor) -> None:
        if self.cache is not None:  # the rows of one source: their cross-attention keys and values are alike
            self.cache.reorder(rows, cross=False)
        if self.ys is not None:
            self.ys = self.ys.index_select(0, rows)

    def keep(self, rows: Tensor) -> None:
        if self.cache is not None:
            self.cache.reorder(rows)
        if self.ys is not None:
            self.ys = self.ys.index_select(0, rows)
        self.memory, self.src = self.memory.index_select(0, rows), self.src.index_select(0, rows)
        self.rows = rows.numel()


def seq2seq_step(model: Any, layers: list[StaticLayer], token: Tensor, index: Tensor, memory_mask: Tensor,
                 columns: Tensor, rows: Tensor | None = None) -> Tensor:
    """An encoder-decoder's logits ``(B, V)`` of target ``token`` ``(B, 1)`` at position ``index`` ``(B,)``, its
    cross-attention reading the keys and values in ``layers`` (``memory_mask`` ``(B, 1, 1, S)``), over the
    ``columns`` ``(L',)`` written so far (``rows`` as :func:`aiayn.models.gpt.session.gpt_step`'s)."""
    mask = (columns <= index[:, None])[:, None, None, :]  # (B, 1, 1, L'): the columns written so far
    layers = [layer.within(columns.size(0), rows) for layer in layers]  # attending over the first L' <= L columns
    logits = model.target(token, memory=None, memory_mask=memory_mask, position_ids=index[:, None], self_mask=mask,
                          caches=layers)  # (B, 1, V)
    return logits[:, -1]  # (B, V)


class StaticSeq2SeqSession(StaticSession):
    """An encoder-decoder's decoding over a static cache (:class:`~aiayn.layers.session.StaticSession`): from the
    start token on, every step :func:`seq2seq_step`, eager or compiled."""

    def __init__(self, model: Transformer, compile: bool = False, beams: bool = False) -> None:
        super().__init__(model, seq2seq_step, next(model.parameters()).device, compile, beams)
        self.never = (model.cfg.pad_id,)

    def prefill(self, ids: Tensor, mask: Tensor | None = None, *, new_tokens: int, repeat: int = 1) -> Tensor:
        net: Any = self.model
        src, memory = _encoded(net, ids, repeat)
        self._reserve(new_tokens)
        if net.tgt_embed.positions is not None:  # sinusoidal tables grow for long targets: now, not in the graph
            net.tgt_embed.positions(1, new_tokens - 1)
        self.memory_mask = padding_mask(src, net.cfg.pad_id).clone()  # (B, 1, 1, S)
        self.per_row = [self.memory_mask]
        b = src.size(0)
        self._begin(b)
        attn = net.decoder.layers[0].self_attn
        shape = (b, attn.n_kv_heads, self.length + SPARE, attn.d_model // attn.n_heads)  # (B, H, L+1, D)
        made = buffers(self, [shape] * (2 * len(net.decoder.layers)), memory.dtype, memory.device)
        for i, block in enumerate(net.decoder.layers):
            self.layers.append(StaticLayer(StaticKVCache(made[2 * i], made[2 * i + 1], self.index),
                                           block.cross_attn.project_kv(memory)))  # (B, H, S, D) each
        self.prefix = torch.full((b, 1), net.cfg.bos_id, dtype=torch.long, device=ids.device)  # (B, 1)
        return self.step(self.prefix[:, 0])

    def _inputs(self, width: int) -> tuple[Tensor, ...]:
        return self.memory_mask, narrow(self.columns, width)


__all__ = ["Seq2SeqSession", "StaticSeq2SeqSession", "make_session", "seq2seq_step"]
