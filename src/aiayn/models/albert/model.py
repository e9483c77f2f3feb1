"""ALBERT (Lan et al., 2020): BERT with a factorised embedding and one encoder layer shared by all N.

    ids, segments -> token + learned position + segment embeddings of width E, LayerNorm, dropout
                  -> Linear E -> H                                    (section 3.1, factorised embedding)
                  -> one post-norm EncoderBlock, applied N times      (section 3.1, cross-layer sharing)
                  -> hidden states (B, T, H)
    heads:  pooler      tanh(Linear(hidden[:, 0]))                                  (as BERT's)
            mlm         Linear H -> E -> GELU -> LayerNorm(E) -> the token table (E -> V), tied, + bias
            sop         Linear(dropout(pooled)) -> 2     (are A and B in their order (0) or swapped (1)?)
            classify    Linear(dropout(pooled)) -> num_labels                       (fine-tuning)

        the N layers of BERT:        ALBERT's:
            [block 1]                    [block] <-+
            [block 2]                       |      |  N times, the same weights
              ...                           +------+
            [block N]

The embedding tables cost V x E + E x H instead of V x H (E = 128 against H = 768 in ALBERT-base), and the
encoder one layer's parameters instead of N: ALBERT-base has 11,683,584 parameters with the pooler, BERT-base
109,482,240. The multiply-adds are not shared: the one layer does its work N times, as BERT's N layers do.

:class:`ALBERT` is a :class:`~aiayn.models.bert.BERT` (the fine-tuning recipe, sentence embedding and the heads'
methods take it as one) whose parts are sized and shared otherwise. The encoder block is the Transformer's own
:class:`~aiayn.layers.EncoderBlock`, held once in the state dict. The sentence-order head (section 3.1,
"Inter-sentence coherence loss") has the shape of BERT's next-sentence head and sits where it does (``nsp``,
head ``"pretraining"``), with ALBERT's dropout before it.

Shapes: B batch, T length, E embedding width, H d_model, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from aiayn.layers import Embedding, EncoderBlock, Stack
from aiayn.layers.feedforward import ACTIVATIONS
from aiayn.models.bert.model import BERT, BertConfig, MaskedLMHead
from aiayn.models.config import check_positive, check_probability


@dataclass(frozen=True)
class AlbertConfig(BertConfig):
    """Sizes of ALBERT; defaults are ALBERT-base (Table 1: L=12, H=768, E=128, parameters shared), as released
    (albert-base-v2: GELU in its tanh form, no dropout in the encoder, 30,000 SentencePiece tokens).

    ``embedding_size`` is E, the width of the token, position and segment tables. ``classifier_dropout`` is
    the dropout before the classifier and the sentence-order head (ALBERT's ``classifier_dropout_prob``).
    ``head`` is BERT's: ``"none"``, ``"pretraining"`` (masked LM and sentence order), ``"mlm"`` or
    ``"classification"``. The special ids are those of ALBERT's vocabulary, ``<pad>`` 0, ``[CLS]`` 2,
    ``[SEP]`` 3, ``[MASK]`` 4, which are also those of aiayn's WordPiece tokenizers.
    """

    vocab_size: int = 30000
    dropout: float = 0.0
    attention_dropout: float = 0.0
    activation: str = "gelu_tanh"
    cls_id: int = 2
    sep_id: int = 3
    mask_id: int = 4
    embedding_size: int = 128
    classifier_dropout: float = 0.1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self, "embedding_size")
        check_probability(self, "classifier_dropout")


PRESETS = {
    "albert-base": AlbertConfig(),  # albert-base-v2: 11,683,584 parameters with the pooler (Table 1: 12M)
    "albert-large": AlbertConfig(d_model=1024, n_heads=16, n_layers=24, d_ff=4096),  # albert-large-v2 (18M)
    # For tests and a laptop CPU; the vocabulary comes from the tokenizer, the specials are WordPiece's.
    "albert-tiny": AlbertConfig(vocab_size=1000, max_len=128, embedding_size=64, d_model=128, n_heads=4, n_layers=2,
                                d_ff=512, head="mlm"),
}


class FactorizedEmbedding(Embedding):
    """BERT's embedding (tokens + positions + segments, LayerNorm, dropout) at width E, projected to H by one
    linear map (section 3.1): V x E + E x H parameters instead of V x H."""

    def __init__(self, cfg: AlbertConfig) -> None:
        super().__init__(cfg.vocab_size, cfg.embedding_size, max_len=cfg.max_len, positional="learned",
                         dropout=cfg.dropout, scale=False, padding_idx=cfg.pad_id, segments=cfg.type_vocab_size,
                         norm_eps=cfg.layer_norm_eps)
        self.project = nn.Linear(cfg.embedding_size, cfg.d_model)

    def forward(self, ids: Tensor, start: int = 0, position_ids: Tensor | None = None,
                segment_ids: Tensor | None = None) -> Tensor:
        """``(B, T)`` ids (and segments) -> ``(B, T, H)``: :meth:`Embedding.forward` ``(B, T, E)``, projected."""
        return self.project(super().forward(ids, start, position_ids, segment_ids))


class SharedStack(Stack):
    """One block applied ``n_layers`` times (section 3.1, "Cross-layer parameter sharing"): a :class:`Stack`
    whose ``layers`` hold the block once, so the state dict, a saved file and ``count_parameters`` hold it once,
    while the forward pass and :meth:`Stack.layer_outputs` go through all N applications."""

    def __init__(self, block: nn.Module, n_layers: int, d_model: int) -> None:
        super().__init__([block], d_model, final_norm=False)
        self.n_layers = n_layers

    def _outputs(self, x: Tensor, caches, block_kwargs: dict[str, Any]) -> Iterator[Tensor]:
        if caches is not None:
            raise ValueError("caches: an encoder whose layers are shared keeps no key/value cache")
        for _ in range(self.n_layers):
            x = self.layers[0](x, **block_kwargs)  # (B, T, H) -> (B, T, H), the same weights each time
            yield x


class AlbertMLMHead(MaskedLMHead):
    """BERT's masked-LM head narrowed to the embedding width: dense H -> E, GELU, LayerNorm(E), then the tied
    token table (E -> V) and a per-token bias. Its ``forward`` is BERT's: ``(B, T, H)`` -> ``(B, T, V)``."""

    def __init__(self, cfg: AlbertConfig, tokens: nn.Embedding) -> None:
        nn.Module.__init__(self)  # BERT's constructor sizes the transform H -> H; this one is H -> E
        self.dense = nn.Linear(cfg.d_model, cfg.embedding_size)
        self.activation = ACTIVATIONS[cfg.activation]
        self.norm = nn.LayerNorm(cfg.embedding_size, eps=cfg.layer_norm_eps)
        self.tokens = tokens  # tied: the output matrix is the input embedding (not a new parameter)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))


class ALBERT(BERT):
    """ALBERT; ``forward(ids, token_type_ids, attention_mask)`` returns hidden states ``(B, T, H)``, as BERT's.

    Its parts keep BERT's names (``embed``, ``encoder``, ``pooler``, ``mlm``, ``nsp``, ``classifier``) and
    BERT's methods (``forward``, ``pooled``, ``mlm_logits``, ``nsp_logits``) run on them unchanged.
    """

    cfg: AlbertConfig

    def __init__(self, cfg: AlbertConfig) -> None:
        if not isinstance(cfg, AlbertConfig):
            raise TypeError(f"cfg must be an AlbertConfig, got {type(cfg).__name__}")
        nn.Module.__init__(self)  # not BERT's constructor, which would build N full-width layers
        self.cfg = cfg
        self.embed = FactorizedEmbedding(cfg)
        layer = EncoderBlock(cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.dropout, cfg.attention_dropout,
                             activation=cfg.activation, norm_first=False, eps=cfg.layer_norm_eps)
        self.encoder = SharedStack(layer, cfg.n_layers, cfg.d_model)
        self.pooler = nn.Linear(cfg.d_model, cfg.d_model)
        self.mlm = AlbertMLMHead(cfg, self.embed.tokens) if cfg.head in ("pretraining", "mlm") else None
        self.nsp = nn.Linear(cfg.d_model, 2) if cfg.head == "pretraining" else None
        self.classifier = nn.Linear(cfg.d_model, cfg.num_labels) if cfg.head == "classification" else None
        self.head_dropout = nn.Dropout(cfg.classifier_dropout)
        self._init_weights()

    def nsp_logits(self, hidden: Tensor) -> Tensor:
        """``(B, T, H)`` -> ``(B, 2)``: the sentence-order head on the pooled [CLS] (head ``pretraining``); are
        the segments in their order (index 0) or swapped (1), as ALBERT was trained (section 3.1)."""
        if self.nsp is None:
            raise ValueError(f"this ALBERT has head={self.cfg.head!r}; build it with head='pretraining'")
        return self.nsp(self.head_dropout(self.pooled(hidden)))

    def classify(self, hidden: Tensor) -> Tensor:
        """``(B, T, H)`` -> ``(B, num_labels)`` (head ``classification``)."""
        if self.classifier is None:
            raise ValueError(f"this ALBERT has head={self.cfg.head!r}; build it with head='classification'")
        return self.classifier(self.head_dropout(self.pooled(hidden)))


__all__ = ["ALBERT", "PRESETS", "AlbertConfig", "AlbertMLMHead", "FactorizedEmbedding", "SharedStack"]
