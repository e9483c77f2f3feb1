"""DistilBERT (Sanh et al., 2019): BERT with half its layers, distilled from BERT-base.

Section 2, "Student architecture": DistilBERT has BERT's general architecture; "the token-type embeddings and
the pooler are removed while the number of layers is reduced by a factor of 2". It is pre-trained on masked
language modelling alone (no next-sentence prediction), with a distillation and a cosine loss beside it.

    ids -> token + learned position embeddings, LayerNorm, dropout         (no segment table)
        -> N x post-norm EncoderBlock (GELU)  -> hidden states (B, T, C)     (N = 6 in distilbert-base)
    heads:  mlm         Linear -> GELU -> LayerNorm -> Linear tied to the tokens, + bias        (BERT's head)
            classify    hidden[:, 0] -> pre_classifier Linear -> ReLU -> dropout -> Linear -> num_labels
            (no pooler, no next-sentence head)

A :class:`DistilBertConfig` is a :class:`~aiayn.models.bert.BertConfig` and a :class:`DistilBERT` a
:class:`~aiayn.models.bert.BERT` (the same embeddings, encoder blocks and masked-LM head, built by BERT's own
constructor), so what fine-tunes or embeds with a BERT (the textclass recipe, sentence embeddings) takes one.
What differs: ``type_vocab_size`` is 0, the classifier reads [CLS] through ``pre_classifier`` and a ReLU (Hugging
Face's ``DistilBertForSequenceClassification``) instead of BERT's tanh pooler, and there is no ``pretraining``
head.

Shapes: B batch, T length, C d_model, V vocabulary, K num_labels.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.models.bert.model import BERT, BertConfig
from aiayn.models.config import check_probability

HEADS = ("none", "mlm", "classification")


@dataclass(frozen=True)
class DistilBertConfig(BertConfig):
    """Sizes of DistilBERT; defaults are distilbert-base-uncased (section 2: BERT-base with 6 layers).

    ``head``: ``"none"`` (the encoder alone: DistilBERT has no pooler), ``"mlm"`` (masked LM) or
    ``"classification"`` (``num_labels`` classes from [CLS] through ``pre_classifier``); ``"pretraining"`` is
    refused (no next-sentence prediction). ``type_vocab_size`` must be 0 (no token-type embeddings).
    ``classifier_dropout`` is the dropout before the classifier (Hugging Face's ``seq_classif_dropout``).
    Every other field means what it means in :class:`~aiayn.models.bert.BertConfig`.
    """

    n_layers: int = 6
    type_vocab_size: int = 0
    classifier_dropout: float = 0.2

    def __post_init__(self) -> None:
        super().__post_init__()  # BertConfig's checks (type_vocab_size 0: no segment embeddings), then DistilBERT's
        if self.type_vocab_size != 0:
            raise ValueError(f"type_vocab_size={self.type_vocab_size}: DistilBERT has no token-type embeddings "
                             f"(Sanh et al., section 2); it must be 0")
        if self.head == "pretraining":
            raise ValueError(f"head='pretraining': DistilBERT has no next-sentence head (it is pre-trained on masked "
                             f"LM alone); expected one of {HEADS}")
        check_probability(self, "classifier_dropout")


PRESETS = {
    # distilbert-base-uncased: DistilBertModel has 66,362,880 parameters (no pooler)
    "distilbert-base": DistilBertConfig(),
    # For tests and small jobs on a laptop CPU, sized as bert-tiny; the vocabulary comes from the tokenizer, whose
    # specials follow aiayn's WordPiece order ([PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, [MASK] 4).
    "distilbert-tiny": DistilBertConfig(vocab_size=1000, max_len=128, d_model=128, n_heads=4, n_layers=2, d_ff=512,
                                        head="mlm", cls_id=2, sep_id=3, mask_id=4),
}


class DistilBERT(BERT):
    """DistilBERT; ``forward(ids, token_type_ids, attention_mask)`` returns hidden states ``(B, T, C)``.

    Built by BERT's constructor from a config without token types (so its embedding has no segment table),
    less BERT's pooler; a classifier has ``pre_classifier`` instead.
    """

    cfg: DistilBertConfig

    def __init__(self, cfg: DistilBertConfig) -> None:
        if not isinstance(cfg, DistilBertConfig):
            raise TypeError(f"cfg must be a DistilBertConfig, got {type(cfg).__name__}")
        super().__init__(cfg)  # embeddings (no segments: type_vocab_size 0), encoder, masked-LM head, classifier
        del self.pooler  # DistilBERT has none (section 2)
        classifier = cfg.head == "classification"
        self.pre_classifier = nn.Linear(cfg.d_model, cfg.d_model) if classifier else None
        self.classifier_dropout = nn.Dropout(cfg.classifier_dropout)
        self._init_weights()

    def forward(self, ids: Tensor, token_type_ids: Tensor | None = None,
                attention_mask: Tensor | None = None) -> Tensor:
        """Hidden states ``(B, T, C)``.

        Args:
            ids: ``(B, T)`` token ids.
            token_type_ids: ``(B, T)``, taken so that BERT's callers (a WordPiece tokenizer's batch, which gives
                zeros for single texts) run unchanged; it must be all 0 and is then ignored. A non-zero type (a
                sentence B) is refused: DistilBERT has no token-type embeddings to tell it apart. Checking reads
                one value back from the device.
            attention_mask: ``(B, T)`` 1/``True`` for real tokens; default: every token but ``pad_id``.

        Raises:
            ValueError: ``token_type_ids`` not shaped as ``ids``, or holding a non-zero type.
        """
        if token_type_ids is not None:
            if token_type_ids.shape != ids.shape:
                raise ValueError(f"token_type_ids must have the shape of ids {tuple(ids.shape)}, "
                                 f"got {tuple(token_type_ids.shape)}")
            if bool(token_type_ids.any()):
                raise ValueError("token_type_ids holds non-zero token types, but DistilBERT has no token-type "
                                 "embeddings: give None or zeros (a pair of sentences reads as one text)")
        return super().forward(ids, attention_mask=attention_mask)

    def pooled(self, hidden: Tensor) -> Tensor:
        """``(B, T, C)`` -> ``(B, C)``: ReLU of ``pre_classifier`` on the [CLS] state (head ``classification``)."""
        if self.pre_classifier is None:
            raise ValueError(f"this DistilBERT has head={self.cfg.head!r} and no pooler (DistilBERT has none); "
                             f"build it with head='classification' for pre_classifier")
        return F.relu(self.pre_classifier(hidden[:, 0]))

    def nsp_logits(self, hidden: Tensor) -> Tensor:
        """Refused: DistilBERT has no next-sentence head."""
        raise ValueError("DistilBERT has no next-sentence head (head='pretraining' is refused)")

    def classify(self, hidden: Tensor) -> Tensor:
        """``(B, T, C)`` -> ``(B, num_labels)``: ``classifier(dropout(pooled(hidden)))`` (head ``classification``)."""
        if self.classifier is None:
            raise ValueError(f"this DistilBERT has head={self.cfg.head!r}; build it with head='classification'")
        return self.classifier(self.classifier_dropout(self.pooled(hidden)))


__all__ = ["HEADS", "PRESETS", "DistilBERT", "DistilBertConfig"]
