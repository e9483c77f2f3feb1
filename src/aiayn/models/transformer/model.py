"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), section 3.

    src ids -> Embedding (x sqrt(C) + PE, dropout) -> N x EncoderBlock ------------------> memory
    tgt ids -> Embedding (x sqrt(C) + PE, dropout) -> N x DecoderBlock(memory) -> Linear -> logits

Shapes: B batch, S source length, T target length, C d_model, V target vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from aiayn.layers import DecoderBlock, DecoderCache, Embedding, EncoderBlock, Stack, padding_mask
from aiayn.layers.embedding import POSITIONAL
from aiayn.layers.feedforward import ACTIVATIONS
from aiayn.layers.linear import Linear
from aiayn.layers.scoring import SCORINGS, Scorer, make_scorer
from aiayn.layers.session import Session
from aiayn.models.config import check_choice, check_divisible, check_positive, check_probability
from aiayn.models.outputs import IGNORE, Seq2SeqLMOutput, masked_lm_loss
from aiayn.models.pretrained import GenerationMixin, PretrainedMixin
from aiayn.models.transformer.session import make_session


@dataclass(frozen=True)
class TransformerConfig:
    """Sizes and switches of the encoder-decoder Transformer; defaults are the base model (Table 3).

    ``share_embeddings`` uses one token table for source and target (a joint vocabulary);
    ``tie_output`` makes the pre-softmax projection share the target table's weights (section 3.4).
    ``dropout`` is P_drop on every sub-layer output and on the embedding sums (section 5.4);
    ``activation_dropout`` drops inside the feed-forward network (not in the paper; tensor2tensor's
    ``relu_dropout``) and ``attention_dropout`` the attention weights. ``scale_embedding`` multiplies
    token embeddings by sqrt(d_model) (section 3.4). ``bos_id`` may equal ``pad_id`` (Marian starts
    decoding with the pad token); ``eos_id`` must differ from both.

    ``cross_scoring`` scores the encoder-decoder attention only (self-attention keeps equation 1), one of
    :data:`aiayn.layers.scoring.SCORINGS`: ``"scaled_dot"`` (eq. 1 on the fused kernel, the paper), ``"dot"``,
    ``"additive"`` (Bahdanau), ``"bilinear"`` (Luong's "general"), or hard attention to one source position,
    ``"hard-argmax"`` (straight-through) or ``"hard-sample"`` (trained by REINFORCE: the translation recipe adds
    the estimator's term; argmax at evaluation). See :mod:`aiayn.layers.scoring`.
    """

    src_vocab_size: int = 37000
    tgt_vocab_size: int = 37000
    d_model: int = 512
    n_heads: int = 8
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    activation: str = "relu"
    positional: str = "sinusoidal"
    max_len: int = 1024
    norm_first: bool = False
    layer_norm_eps: float = 1e-5
    scale_embedding: bool = True
    embed_norm: bool = False
    positional_offset: int = 0
    output_bias: bool = True
    share_embeddings: bool = True
    tie_output: bool = True
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    cross_scoring: str = "scaled_dot"

    def __post_init__(self) -> None:
        check_positive(self, "src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "n_encoder_layers",
                       "n_decoder_layers", "d_ff", "max_len")
        check_divisible(self, "d_model", "n_heads")
        check_probability(self, "dropout", "attention_dropout", "activation_dropout")
        check_choice(self, "activation", tuple(ACTIVATIONS))
        check_choice(self, "positional", POSITIONAL)
        check_choice(self, "cross_scoring", SCORINGS)
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                f"share_embeddings=True needs src_vocab_size == tgt_vocab_size, got {self.src_vocab_size} and "
                f"{self.tgt_vocab_size}; pass share_embeddings=False for separate vocabularies"
            )
        for name in ("pad_id", "bos_id", "eos_id"):
            if not 0 <= getattr(self, name) < min(self.src_vocab_size, self.tgt_vocab_size):
                raise ValueError(f"{name}={getattr(self, name)} must be a token id inside both vocabularies")
        if self.eos_id == self.pad_id:
            raise ValueError(f"eos_id={self.eos_id} must differ from pad_id={self.pad_id}")
        if self.positional_offset < 0:
            raise ValueError(f"positional_offset={self.positional_offset} must be >= 0")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def is_encoder_decoder(self) -> bool:
        """``transformers``' name for what ``generate`` asks of a config: this one reads a source."""
        return True


PRESETS = {
    # Table 3, "base": N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1; a shared 37,000-token BPE vocabulary (5.1).
    "transformer-base": TransformerConfig(),
    # Table 3, "big": N=6, d_model=1024, d_ff=4096, h=16, P_drop=0.3 (213M parameters).
    "transformer-big": TransformerConfig(d_model=1024, n_heads=16, d_ff=4096, dropout=0.3),
    # For the default job and tests on a laptop CPU.
    "transformer-tiny": TransformerConfig(
        src_vocab_size=64, tgt_vocab_size=64, d_model=128, n_heads=4, n_encoder_layers=2, n_decoder_layers=2,
        d_ff=512, max_len=256,
    ),
}


class Transformer(GenerationMixin, PretrainedMixin, nn.Module):
    """The encoder-decoder Transformer; ``forward(src_ids, tgt_ids)`` returns logits ``(B, T, V)``."""

    def __init__(self, cfg: TransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        emb: dict[str, Any] = {"d_model": cfg.d_model, "max_len": cfg.max_len, "positional": cfg.positional,
                               "dropout": cfg.dropout, "scale": cfg.scale_embedding, "padding_idx": cfg.pad_id,
                               "offset": cfg.positional_offset,
                               "norm_eps": cfg.layer_norm_eps if cfg.embed_norm else None}
        self.src_embed = Embedding(cfg.src_vocab_size, **emb)
        shared = self.src_embed.tokens if cfg.share_embeddings else None
        self.tgt_embed = Embedding(cfg.tgt_vocab_size, tokens=shared, **emb)
        block: dict[str, Any] = {"d_model": cfg.d_model, "n_heads": cfg.n_heads, "d_ff": cfg.d_ff,
                                 "dropout": cfg.dropout, "attention_dropout": cfg.attention_dropout,
                                 "activation_dropout": cfg.activation_dropout, "activation": cfg.activation,
                                 "norm_first": cfg.norm_first, "eps": cfg.layer_norm_eps}
        self.encoder = Stack([EncoderBlock(**block) for _ in range(cfg.n_encoder_layers)], cfg.d_model,
                             final_norm=cfg.norm_first, eps=cfg.layer_norm_eps)
        scoring = (cfg.cross_scoring, cfg.n_heads, cfg.d_head)  # None for eq. 1, else each layer its own scorer
        self.decoder = Stack([DecoderBlock(**block, cross_score=make_scorer(*scoring))
                              for _ in range(cfg.n_decoder_layers)], cfg.d_model,
                             final_norm=cfg.norm_first, eps=cfg.layer_norm_eps)
        self.generator = Linear(cfg.d_model, cfg.tgt_vocab_size, bias=cfg.output_bias)  # 3.4: linear, softmax
        self._init_weights()
        if cfg.tie_output:
            self.generator.weight = self.tgt_embed.tokens.weight

    def _init_weights(self) -> None:
        # Glorot-uniform matrices and zero biases, as tensor2tensor and The Annotated Transformer do;
        # token tables keep N(0, 1/C) from Embedding.
        for name, p in self.named_parameters():
            if "embed" in name:
                continue
            if p.dim() > 1:
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        for module in self.modules():  # a scorer's per-head weights keep their own initialisation
            if isinstance(module, Scorer):
                module.reset_parameters()

    def encode(self, src_ids: Tensor) -> Tensor:
        """``(B, S)`` source ids -> memory ``(B, S, C)``; padding (``pad_id``) is never attended to."""
        return self.encoder(self.src_embed(src_ids), mask=padding_mask(src_ids, self.cfg.pad_id))  # (B, S, C)

    def decode(self, tgt_ids: Tensor, memory: Tensor, src_ids: Tensor, cache: DecoderCache | None = None) -> Tensor:
        """Logits ``(B, T, V)`` for target ids ``(B, T)`` given the memory of ``src_ids``.

        With a ``cache`` (from :meth:`new_cache`), ``tgt_ids`` are only the new positions; earlier ones
        are read from the cache.
        """
        if memory.dim() != 3 or memory.shape[:2] != src_ids.shape or memory.size(-1) != self.cfg.d_model:
            raise ValueError(
                f"memory must be (B, S, d_model) = {(*src_ids.shape, self.cfg.d_model)} to match src_ids, "
                f"got {tuple(memory.shape)}"
            )
        start = 0 if cache is None else cache.length
        memory_mask = padding_mask(src_ids, self.cfg.pad_id)  # (B, 1, 1, S)
        # Targets are padded on the right, so the causal mask (section 3.2.3) already keeps every real
        # position from seeing padding; no target padding mask is needed. (Marian starts decoding with
        # the pad token itself, which a padding mask would wrongly hide.)
        return self.target(tgt_ids, memory=memory, memory_mask=memory_mask, start=start, caches=cache)

    def target(self, tgt_ids: Tensor, *, memory: Tensor | None, memory_mask: Tensor, start: int = 0,
               position_ids: Tensor | None = None, self_mask: Tensor | None = None, caches: Any = None) -> Tensor:
        """The decoder side on target ids ``(B, T)`` whose masks are already built (what :meth:`decode` builds; a
        decode session's step builds its own): logits ``(B, T, V)``.

        Args:
            memory: ``(B, S, C)``, or ``None`` where ``caches`` hold each layer's cross-attention keys and values.
            memory_mask: ``(B, 1, 1, S)`` bool, ``True`` = may attend (the source's real tokens).
            start, position_ids: the target positions, ``start ..`` or ``(B, T)``.
            self_mask: bool, ``True`` = may attend, over the cached and new positions; ``None``: causal.
            caches: one cache per block (a :class:`~aiayn.layers.DecoderCache` or a session's static layers).
        """
        positions = {} if position_ids is None else {"position_ids": position_ids}
        x = self.tgt_embed(tgt_ids, start=start, **positions)  # (B, T, C)
        x = self.decoder(x, memory=memory, self_mask=self_mask, memory_mask=memory_mask, is_causal=self_mask is None,
                         caches=caches)  # (B, T, C)
        return self.generator(x)

    def forward(self, src_ids: Tensor, tgt_ids: Tensor) -> Tensor:
        """Teacher forcing: ``(B, S)`` source, ``(B, T)`` shifted target -> logits ``(B, T, V)``."""
        if src_ids.dim() == 2 and tgt_ids.dim() == 2 and src_ids.size(0) != tgt_ids.size(0):
            raise ValueError(f"src_ids and tgt_ids must have the same batch size, got {src_ids.size(0)} and "
                             f"{tgt_ids.size(0)}")
        return self.decode(tgt_ids, self.encode(src_ids), src_ids)

    def outputs(self, input_ids: Tensor, attention_mask: Tensor | None = None,
                decoder_input_ids: Tensor | None = None, labels: Tensor | None = None) -> Seq2SeqLMOutput:
        """``model(input_ids=..., labels=...)`` as ``MarianMTModel`` / ``BartForConditionalGeneration`` answer it
        (:mod:`aiayn.models.outputs`).

        Args:
            input_ids: ``(B, S)`` source ids, padded with ``pad_id``.
            attention_mask: ``(B, S)``, 1 for real tokens; it must be 0 exactly at ``pad_id`` (the model reads the
                source's padding from the ids).
            decoder_input_ids: ``(B, T)`` target ids starting with ``bos_id``; default ``labels`` shifted right
                (``bos_id`` first, ``-100`` read as ``pad_id``), as ``transformers``' ``shift_tokens_right``.
            labels: ``(B, T)`` targets, ``-100`` for none.
        """
        if decoder_input_ids is None:
            if labels is None:
                raise ValueError("decoder_input_ids and labels are both None: an encoder-decoder needs the target "
                                 "side, as ids that start with bos_id or as labels to shift right")
            start = labels.new_full((labels.size(0), 1), self.cfg.bos_id)  # (B, 1)
            decoder_input_ids = torch.cat([start, labels[:, :-1].masked_fill(labels[:, :-1] == IGNORE,
                                                                            self.cfg.pad_id)], dim=1)  # (B, T)
        if attention_mask is not None and not torch.equal(attention_mask.bool(), input_ids != self.cfg.pad_id):
            raise ValueError(f"attention_mask must be 0 exactly where input_ids hold pad_id={self.cfg.pad_id}: this "
                             f"model reads the source's padding from the ids")
        memory = self.encode(input_ids)  # (B, S, C)
        logits = self.decode(decoder_input_ids, memory, input_ids)  # (B, T, V)
        return Seq2SeqLMOutput(loss=masked_lm_loss(logits, labels), logits=logits, encoder_last_hidden_state=memory)

    def new_cache(self, max_len: int) -> DecoderCache:
        """An empty key/value cache for decoding up to ``max_len`` target positions."""
        return DecoderCache(len(self.decoder.layers), max_len)

    def session(self, *, use_cache: bool = True, static: bool = False, compile: bool = False,
                beams: bool = False) -> Session:
        """A decode session (:mod:`aiayn.layers.session`): its ``prefill`` encodes the sources and feeds the start
        token; the one way decoding runs this model (:mod:`aiayn.models.transformer.session`). Arguments as
        :meth:`aiayn.models.GPT.session`'s."""
        return make_session(self, use_cache=use_cache, static=static, compile=compile, beams=beams)


__all__ = ["PRESETS", "Transformer", "TransformerConfig"]
