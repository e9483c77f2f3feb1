"""BERT (Devlin et al., 2019): the Transformer's encoder alone, bidirectional, pre-trained by masking.

    ids, segments -> token + learned position + segment embeddings, LayerNorm, dropout
                  -> N x post-norm EncoderBlock (GELU) -> hidden states (B, T, C)
    heads:  pooler      tanh(Linear(hidden[:, 0]))                       ([CLS], section 3)
            mlm         Linear -> GELU -> LayerNorm -> Linear tied to the tokens, + bias
            nsp         Linear(pooled) -> 2    (is B the sentence after A?)
            classify    Linear(dropout(pooled)) -> num_labels             (fine-tuning)

The encoder blocks are the Transformer's own :class:`~aiayn.layers.EncoderBlock`. Which heads the model
has is a config field, so ``count_parameters`` of ``bert-base`` is BERT's encoder with pooler, as
published (109,482,240), and a checkpoint rebuilds whatever heads it was saved with.

Shapes: B batch, T length, C d_model, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.layers import Embedding, EncoderBlock, Stack, padding_mask, tied_linear
from aiayn.layers.embedding import check_ids
from aiayn.layers.feedforward import ACTIVATIONS
from aiayn.models.config import check_choice, check_divisible, check_positive, check_probability
from aiayn.models.outputs import (
    BaseModelOutput,
    MaskedLMOutput,
    ModelOutput,
    PreTrainingOutput,
    SequenceClassifierOutput,
    classification_loss,
    masked_lm_loss,
)
from aiayn.models.pretrained import PretrainedMixin

HEADS = ("none", "pretraining", "mlm", "classification")


@dataclass(frozen=True)
class BertConfig:
    """Sizes of BERT; defaults are BERT-base (Table/section 3: L=12, H=768, A=12).

    ``head``: ``"none"`` (encoder and pooler), ``"pretraining"`` (masked LM and next sentence),
    ``"mlm"`` (masked LM only) or ``"classification"`` (``num_labels`` classes from the pooled [CLS]).
    The special ids are those of BERT's uncased WordPiece vocabulary.
    """

    vocab_size: int = 30522
    max_len: int = 512
    type_vocab_size: int = 2
    d_model: int = 768
    n_heads: int = 12
    n_layers: int = 12
    d_ff: int = 3072
    dropout: float = 0.1
    attention_dropout: float = 0.1
    activation: str = "gelu"
    layer_norm_eps: float = 1e-12
    head: str = "none"
    num_labels: int = 2
    pad_id: int = 0
    cls_id: int = 101
    sep_id: int = 102
    mask_id: int = 103

    def __post_init__(self) -> None:
        check_positive(self, "vocab_size", "max_len", "d_model", "n_heads", "n_layers", "d_ff", "num_labels")
        if self.type_vocab_size < 0:  # 0: no segment embeddings (DistilBERT)
            raise ValueError(f"type_vocab_size must be >= 0, got {self.type_vocab_size}")
        check_divisible(self, "d_model", "n_heads")
        check_probability(self, "dropout", "attention_dropout")
        check_choice(self, "activation", tuple(ACTIVATIONS))
        check_choice(self, "head", HEADS)
        for name in ("pad_id", "cls_id", "sep_id", "mask_id"):
            if not 0 <= getattr(self, name) < self.vocab_size:
                raise ValueError(f"{name}={getattr(self, name)} must be a token id inside the vocabulary "
                                 f"[0, {self.vocab_size})")

    @property
    def max_tokens(self) -> int:
        """The longest input, in tokens: one per position (a RoBERTa reads fewer, its positions starting above
        ``pad_id``)."""
        return self.max_len


PRESETS = {
    "bert-base": BertConfig(),  # 109,482,240 parameters with the pooler
    "bert-large": BertConfig(d_model=1024, n_heads=16, n_layers=24, d_ff=4096),  # 335,141,888
    # For tests and the default MLM job on a laptop CPU; the vocabulary comes from the tokenizer.
    "bert-tiny": BertConfig(vocab_size=1000, max_len=128, d_model=128, n_heads=4, n_layers=2, d_ff=512,
                            head="pretraining", cls_id=2, sep_id=3, mask_id=4),
}


class MaskedLMHead(nn.Module):
    """Transform (dense, GELU, LayerNorm), then the tied token embedding and a per-token bias."""

    def __init__(self, cfg: BertConfig, tokens: nn.Embedding) -> None:
        super().__init__()
        self.dense = nn.Linear(cfg.d_model, cfg.d_model)
        self.activation = ACTIVATIONS[cfg.activation]
        self.norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.tokens = tokens  # tied: the output matrix is the input embedding (not a new parameter)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def forward(self, hidden: Tensor) -> Tensor:  # (B, T, C) -> (B, T, V)
        return tied_linear(self.norm(self.activation(self.dense(hidden))), self.tokens, self.bias)


class BERT(PretrainedMixin, nn.Module):
    """BERT; ``forward(ids, token_type_ids, attention_mask)`` returns hidden states ``(B, T, C)``."""

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = Embedding(cfg.vocab_size, cfg.d_model, max_len=cfg.max_len, positional="learned",
                               dropout=cfg.dropout, scale=False, padding_idx=cfg.pad_id,
                               segments=cfg.type_vocab_size, norm_eps=cfg.layer_norm_eps)
        self.encoder = Stack(
            [EncoderBlock(cfg.d_model, cfg.n_heads, cfg.d_ff, cfg.dropout, cfg.attention_dropout,
                          activation=cfg.activation, norm_first=False, eps=cfg.layer_norm_eps)
             for _ in range(cfg.n_layers)],
            cfg.d_model, final_norm=False,
        )
        self.pooler = nn.Linear(cfg.d_model, cfg.d_model)
        self.mlm = MaskedLMHead(cfg, self.embed.tokens) if cfg.head in ("pretraining", "mlm") else None
        self.nsp = nn.Linear(cfg.d_model, 2) if cfg.head == "pretraining" else None
        self.classifier = nn.Linear(cfg.d_model, cfg.num_labels) if cfg.head == "classification" else None
        self._init_weights()

    def _init_weights(self) -> None:
        # N(0, 0.02) for every matrix and table, zero biases, unit LayerNorm gains (BERT's initializer_range).
        for name, p in self.named_parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)
            else:
                nn.init.ones_(p) if "norm" in name and name.endswith("weight") else nn.init.zeros_(p)

    def forward(self, ids: Tensor, token_type_ids: Tensor | None = None,
                attention_mask: Tensor | None = None) -> Tensor:
        """Hidden states ``(B, T, C)``.

        Args:
            ids: ``(B, T)`` token ids.
            token_type_ids: ``(B, T)`` segment of each token (0 for A, 1 for B); default all 0.
            attention_mask: ``(B, T)`` 1/``True`` for real tokens; default: every token but ``pad_id``.
        """
        check_ids(ids, self.cfg.vocab_size, values=False)  # the range: in the embedding, on the CPU only
        if token_type_ids is not None and token_type_ids.shape != ids.shape:
            raise ValueError(f"token_type_ids must have the shape of ids {tuple(ids.shape)}, "
                             f"got {tuple(token_type_ids.shape)}")
        return self.encoder(self.embed(ids, segment_ids=token_type_ids), mask=self.key_mask(ids, attention_mask))

    def key_mask(self, ids: Tensor, attention_mask: Tensor | None) -> Tensor:
        """``(B, 1, 1, T)`` bool, ``True`` = may attend, from ``attention_mask`` or from ``pad_id``."""
        if attention_mask is None:
            return padding_mask(ids, self.cfg.pad_id)
        if attention_mask.shape != ids.shape:
            raise ValueError(f"attention_mask must have the shape of ids {tuple(ids.shape)}, "
                             f"got {tuple(attention_mask.shape)}")
        return attention_mask.bool()[:, None, None, :]

    def pooled(self, hidden: Tensor) -> Tensor:
        """``(B, T, C)`` -> ``(B, C)``: tanh of a linear map of the [CLS] state."""
        return torch.tanh(self.pooler(hidden[:, 0]))

    def mlm_logits(self, hidden: Tensor) -> Tensor:
        """``(B, T, C)`` -> ``(B, T, V)`` masked-token logits (heads ``pretraining`` and ``mlm``)."""
        if self.mlm is None:
            raise ValueError(f"this BERT has head={self.cfg.head!r}; build it with head='mlm' or 'pretraining'")
        return self.mlm(hidden)

    def nsp_logits(self, hidden: Tensor) -> Tensor:
        """``(B, T, C)`` -> ``(B, 2)``: is segment B the sentence after A (index 0) or random (1)?"""
        if self.nsp is None:
            raise ValueError(f"this BERT has head={self.cfg.head!r}; build it with head='pretraining'")
        return self.nsp(self.pooled(hidden))

    def classify(self, hidden: Tensor) -> Tensor:
        """``(B, T, C)`` -> ``(B, num_labels)`` (head ``classification``)."""
        if self.classifier is None:
            raise ValueError(f"this BERT has head={self.cfg.head!r}; build it with head='classification'")
        return self.classifier(self.embed.dropout(self.pooled(hidden)))


    def outputs(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                labels: Tensor | None = None, next_sentence_label: Tensor | None = None,
                sentence_order_label: Tensor | None = None) -> ModelOutput:
        """``model(**tokenizer(texts, return_tensors="pt"))`` as ``transformers``' class for the head answers it
        (:mod:`aiayn.models.outputs`): head ``none`` as ``BertModel`` (``last_hidden_state``, ``pooler_output``),
        ``mlm`` as ``BertForMaskedLM``, ``pretraining`` as ``BertForPreTraining``, ``classification`` as
        ``BertForSequenceClassification``; the same for RoBERTa, ALBERT and DistilBERT.

        Args:
            input_ids, attention_mask, token_type_ids: as :meth:`forward` takes them.
            labels: ``(B, T)`` masked-token targets (``-100`` where none) for the masked-LM heads; ``(B,)`` classes
                (or ``(B, num_labels)`` floats, several labels each) with head ``classification``.
            next_sentence_label: ``(B,)`` 0 (B follows A) or 1 with head ``pretraining``; ALBERT's
                ``sentence_order_label`` is the same argument.
        """
        hidden = self(input_ids, token_type_ids, attention_mask)  # (B, T, C)
        head = self.cfg.head
        if head == "none":
            if labels is not None:
                raise ValueError("labels: this model has head='none', so there is no loss")
            pooled = self.pooled(hidden) if getattr(self, "pooler", None) is not None else None  # DistilBERT: none
            return BaseModelOutput(last_hidden_state=hidden, pooler_output=pooled)
        if head == "classification":
            logits = self.classify(hidden)  # (B, num_labels)
            return SequenceClassifierOutput(loss=classification_loss(logits, labels), logits=logits,
                                            last_hidden_state=hidden)
        logits = self.mlm_logits(hidden)  # (B, T, V)
        loss = masked_lm_loss(logits, labels)
        if head == "mlm":
            return MaskedLMOutput(loss=loss, logits=logits, last_hidden_state=hidden)
        order = next_sentence_label if next_sentence_label is not None else sentence_order_label
        pair = self.nsp_logits(hidden)  # (B, 2)
        if loss is not None and order is not None:
            loss = loss + F.cross_entropy(pair.float(), order.reshape(-1))
        return PreTrainingOutput(loss=loss, prediction_logits=logits, seq_relationship_logits=pair,
                                 last_hidden_state=hidden)


def mean_pool(hidden: Tensor, attention_mask: Tensor, normalize: bool = True) -> Tensor:
    """Sentence embeddings ``(B, C)``: the mean of the real tokens' states, L2-normalised (Sentence-BERT)."""
    weights = attention_mask.to(hidden.dtype)[..., None]  # (B, T, 1)
    pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
    return F.normalize(pooled, dim=-1) if normalize else pooled


__all__ = ["BERT", "HEADS", "PRESETS", "BertConfig", "mean_pool"]
