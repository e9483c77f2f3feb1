"""Transformer-XL (Dai et al., 2019): a decoder-only language model that reads past its segment.

Two changes to the decoder (section 3):

    recurrence (3.2)    each layer attends over its own input states of the previous segment (the memory, kept
                        without gradient, up to mem_len positions) and the current segment's:
                            h~ = [SG(m_{n-1}) ; h_{n-1}]   keys and values from h~, queries from h_{n-1}
    relative positions  the scores see the distance i - j, never an absolute position: sinusoids of the distance
    (3.3)               projected per layer, and two global biases u, v (aiayn.layers.relative)

    ids (B, T) -> adaptive embedding x sqrt(C) -> dropout -> N x [relative attention over memory + segment,
    residual, LayerNorm; feed-forward, residual, LayerNorm] -> dropout -> adaptive log-softmax -> (B, T, V)

The blocks are the shared :class:`~aiayn.layers.EncoderBlock` (post-norm, no projection biases, ReLU) with
:class:`~aiayn.layers.relative.RelativeScore` as their scorer and a causal mask over ``(T, M + T)``; the memory is
:class:`~aiayn.layers.kv_cache.SegmentMemory`. ``same_length`` gives every query the same number of keys (the
WikiText-103 model evaluates so); ``clamp_len`` caps the distances encoded. The output is log-probabilities (the
adaptive softmax normalises them itself, :mod:`aiayn.layers.adaptive`), which a softmax leaves as they are.

Shapes: B batch, T segment length, M memory length, C d_model, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from aiayn.layers import EncoderBlock
from aiayn.layers.adaptive import AdaptiveEmbedding, AdaptiveLogSoftmax
from aiayn.layers.embedding import check_ids
from aiayn.layers.kv_cache import SegmentMemory
from aiayn.layers.relative import RelativeScore
from aiayn.layers.session import Session
from aiayn.models.config import check_divisible, check_positive, check_probability
from aiayn.models.outputs import CausalLMOutput, causal_lm_loss
from aiayn.models.pretrained import GenerationMixin, PretrainedMixin
from aiayn.models.transfo_xl.session import TransfoXLSession


@dataclass(frozen=True)
class TransfoXLConfig:
    """Transformer-XL; the defaults are the WikiText-103 model (Table 1's 18 layers, 257M in the paper's count;
    ``transfo-xl-wt103``: 285,205,322 parameters with its adaptive softmax's biases and cluster weights).

    ``d_embed``: the first cluster's embedding width (default ``d_model``); ``cutoffs``, ``div_val``: the adaptive
    embedding and softmax (:mod:`aiayn.layers.adaptive`; ``()`` is one plain table); ``tie_projs``: the softmax
    shares every cluster's projection but the first with the embedding. ``mem_len``: the memory's positions
    (training and evaluation may differ: section 4.2's longer evaluation memory); ``clamp_len``: distances encoded
    at most (``None``: all); ``same_length``: every query sees as many keys. ``eos_id``: the end-of-text token
    (WikiText-103's ``<eos>`` is 0), ``None`` for none.
    """

    vocab_size: int = 267735
    d_model: int = 1024
    n_heads: int = 16
    n_layers: int = 18
    d_ff: int = 4096
    d_embed: int | None = None
    cutoffs: tuple[int, ...] = (20000, 40000, 200000)
    div_val: int = 4
    tie_projs: bool = True
    mem_len: int = 1600
    clamp_len: int | None = 1000
    same_length: bool = True
    dropout: float = 0.1
    attention_dropout: float = 0.0
    norm_first: bool = False
    layer_norm_eps: float = 1e-5
    eos_id: int | None = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "cutoffs", tuple(self.cutoffs))
        check_positive(self, "vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "div_val")
        check_divisible(self, "d_model", "n_heads")
        check_probability(self, "dropout", "attention_dropout")
        if self.d_embed is not None and self.d_embed < 1:
            raise ValueError(f"d_embed must be >= 1 or None (= d_model), got {self.d_embed}")
        if list(self.cutoffs) != sorted(set(self.cutoffs)) or any(not 0 < c < self.vocab_size for c in self.cutoffs):
            raise ValueError(f"cutoffs={self.cutoffs} must increase strictly inside (0, vocab_size={self.vocab_size})")
        if (self.width // self.div_val ** len(self.cutoffs)) < 1:
            raise ValueError(f"d_embed={self.width} // div_val={self.div_val}^{len(self.cutoffs)} leaves the rarest "
                             f"cluster no width")
        if self.mem_len < 0:
            raise ValueError(f"mem_len must be >= 0, got {self.mem_len}")
        if self.clamp_len is not None and self.clamp_len < 1:
            raise ValueError(f"clamp_len must be >= 1 or None (no clamp), got {self.clamp_len}")
        if self.eos_id is not None and not 0 <= self.eos_id < self.vocab_size:
            raise ValueError(f"eos_id={self.eos_id} must be a token id inside the vocabulary [0, {self.vocab_size})")
        if not self.cutoffs or (self.div_val == 1 and self.width == self.d_model):  # no projection to share:
            object.__setattr__(self, "tie_projs", True)  # one spelling, so equal models have equal configs

    @property
    def width(self) -> int:
        """The first cluster's embedding width: ``d_embed``, or ``d_model``."""
        return self.d_model if self.d_embed is None else self.d_embed

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


PRESETS = {
    "transfo-xl-wt103": TransfoXLConfig(),
    # a character model on the scale of the shakespeare-char GPT (6 layers of 384), memory as long as its segment
    "transfo-xl-char": TransfoXLConfig(vocab_size=65, d_model=384, n_heads=6, n_layers=6, d_ff=1536, cutoffs=(),
                                       div_val=1, mem_len=256, clamp_len=None, same_length=False, dropout=0.2,
                                       eos_id=None),
}


class TransfoXL(GenerationMixin, PretrainedMixin, nn.Module):
    """Transformer-XL; ``forward(ids, memory)`` gives next-token log-probabilities ``(B, T, V)`` and moves
    ``memory`` on by the segment."""

    def __init__(self, cfg: TransfoXLConfig) -> None:
        super().__init__()
        self.cfg = cfg
        c = cfg.d_model
        self.embed = AdaptiveEmbedding(cfg.vocab_size, cfg.width, c, cfg.cutoffs, cfg.div_val)
        self.dropout = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList(
            EncoderBlock(c, cfg.n_heads, cfg.d_ff, cfg.dropout, cfg.attention_dropout, activation_dropout=cfg.dropout,
                         activation="relu", norm_first=cfg.norm_first, eps=cfg.layer_norm_eps, bias=False,
                         score=RelativeScore(c, cfg.n_heads, cfg.d_head, cfg.clamp_len, cfg.dropout))
            for _ in range(cfg.n_layers))
        shared = (False,) + (True,) * len(cfg.cutoffs) if cfg.tie_projs else ()
        self.softmax = AdaptiveLogSoftmax(cfg.vocab_size, cfg.width, c, cfg.cutoffs, cfg.div_val, embedding=self.embed,
                                          tie_projs=shared)
        self._init_weights()

    def _init_weights(self) -> None:
        # N(0, 0.02) for tables, matrices and the biases u, v (Transformer-XL's init_std); zero biases, unit gains
        for name, p in self.named_parameters():
            if p.dim() > 1 or name.endswith((".u", ".v")):
                nn.init.normal_(p, std=0.02)
            else:
                nn.init.ones_(p) if "norm" in name and name.endswith("weight") else nn.init.zeros_(p)

    def new_memory(self, mem_len: int | None = None) -> SegmentMemory:
        """An empty memory of ``mem_len`` positions (default the config's; evaluation may keep more)."""
        return SegmentMemory(len(self.layers), self.cfg.mem_len if mem_len is None else mem_len)

    def forward(self, ids: Tensor, memory: SegmentMemory | None = None) -> Tensor:
        """Log-probabilities ``(B, T, V)`` of the token after each of ``ids`` ``(B, T)``; the segment's states
        join ``memory`` (which the next segment of the same rows passes back)."""
        return self.softmax(self.features(ids, memory))

    def features(self, ids: Tensor, memory: SegmentMemory | None = None) -> Tensor:
        """The last layer's states ``(B, T, C)`` (after dropout), reading and then moving on ``memory``."""
        check_ids(ids, self.cfg.vocab_size, values=False)
        if memory is not None and memory.length and memory[0].size(0) != ids.size(0):
            raise ValueError(f"memory holds {memory[0].size(0)} rows, ids {ids.size(0)}: a memory follows its rows")
        m = 0 if memory is None else memory.length
        x = self.dropout(self.embed(ids))  # (B, T, C)
        mask = self.attention_mask(ids.size(1), m, ids.device)  # (T, M + T)
        states = []
        for i, layer in enumerate(self.layers):
            states.append(x)
            x = layer(x, mask=mask, mems=memory[i] if memory is not None and m else None)  # (B, T, C)
        if memory is not None:
            memory.update(states)
        return self.dropout(x)

    def attention_mask(self, t: int, m: int, device: torch.device) -> Tensor:
        """``(T, M + T)`` bool, ``True`` = may attend: query i (position M + i) sees keys j <= M + i; with
        ``same_length``, only the last ``mem_len + 1`` of them reachable from the segment's first query."""
        i = torch.arange(t, device=device)[:, None]
        j = torch.arange(m + t, device=device)[None]
        keep = j <= i + m
        if self.cfg.same_length:
            over = m + t - self.cfg.mem_len  # keys past the memory's length
            shift = t - over if over > 0 else t
            keep = keep & (j > i - shift)
        return keep

    def session(self, *, use_cache: bool = True, static: bool = False, compile: bool = False,
                beams: bool = False, mem_len: int | None = None) -> Session:
        """A decode session over the segment memory (:mod:`aiayn.models.transfo_xl.session`), the one way decoding
        runs this model; ``mem_len``: positions the memory keeps (default the config's). Eager only: no static
        buffers, no compiled step, and the memory is its cache (``use_cache=False`` is refused)."""
        for name, value in (("static", static), ("compile", compile)):
            if value:
                raise ValueError(f"{name}=True: Transformer-XL decodes eagerly over its segment memory")
        if not use_cache:
            raise ValueError("use_cache=False: Transformer-XL's memory is how it reads its context; keep it")
        return TransfoXLSession(self, mem_len)

    def outputs(self, input_ids: Tensor, labels: Tensor | None = None, mems: SegmentMemory | None = None,
                past_key_values: SegmentMemory | None = None) -> CausalLMOutput:
        """``model(input_ids=..., labels=..., mems=...)`` as ``TransfoXLLMHeadModel`` answers it, with the memory
        passed back as ``past_key_values`` (:mod:`aiayn.models.outputs`); the logits are log-probabilities.
        Without ``mems`` a memory starts empty (``TransfoXLLMHeadModel`` starts from ``mem_len`` zero states)."""
        memory = mems if mems is not None else past_key_values
        memory = memory if memory is not None else self.new_memory()
        hidden = self.features(input_ids, memory)
        log_probs = self.softmax(hidden)
        return CausalLMOutput(loss=causal_lm_loss(log_probs, labels), logits=log_probs, past_key_values=memory,
                              last_hidden_state=hidden)


__all__ = ["PRESETS", "TransfoXL", "TransfoXLConfig"]
