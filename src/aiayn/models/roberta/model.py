"""RoBERTa (Liu et al., 2019): BERT's network, pre-trained longer on more text with the masked LM alone.

The paper keeps BERT's architecture (section 2.2) and changes how it is trained: masks drawn anew each time a
sequence is seen (section 4.1), no next-sentence prediction (section 4.2), bigger batches (section 4.3) and a
byte-level BPE of 50K tokens (section 4.4). Two things differ in the network that was released (fairseq's,
which Hugging Face reproduces), and they are all this module adds to :class:`~aiayn.models.bert.BERT`:

    ids -> token + learned position + segment embeddings, LayerNorm, dropout          (BERT's Embedding)
           a position counts the real tokens so far, from pad_id + 1 (fairseq's make_positions):

               right padding   ids   <s>  a   b  </s> <pad> <pad>      pad_id = 1
                               pos    2   3   4   5    1     1
               left padding    ids  <pad> <pad> <s>  a   b  </s>
                               pos    1     1    2   3   4   5        the same positions for the real tokens

        -> N x post-norm EncoderBlock (GELU) -> hidden states (B, T, C)                (BERT's Stack)
    heads:  pooler          tanh(Linear(hidden[:, 0]))                                 (RobertaModel's pooler)
            mlm             Linear -> GELU (erf, always) -> LayerNorm -> Linear tied to the tokens, + bias
                                                                                        (RobertaLMHead)
            classification  Linear(dropout(tanh(Linear(dropout(hidden[:, 0]))))) -> K
                            (RobertaClassificationHead: its dense is our pooler, its out_proj our classifier)

No ``"pretraining"`` head: there is no next-sentence prediction to train. Since real tokens start at
``pad_id + 1``, a model of ``max_len`` positions reads at most ``max_len - pad_id - 1`` tokens
(:attr:`RobertaConfig.max_tokens`: 512 of roberta-base's 514).

:class:`RobertaConfig` is a :class:`~aiayn.models.bert.BertConfig` and :class:`RoBERTa` a ``BERT``, so what
takes a BERT (sentence embeddings, text classification, fine-tuning) takes a RoBERTa.

Shapes: B batch, T length, C d_model, V vocabulary, K classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from aiayn.layers.embedding import check_ids
from aiayn.layers.feedforward import ACTIVATIONS
from aiayn.models.bert.model import BERT, BertConfig
from aiayn.models.config import check_choice

HEADS = ("none", "mlm", "classification")


@dataclass(frozen=True)
class RobertaConfig(BertConfig):
    """Sizes of RoBERTa; defaults are roberta-base (BERT-base's L=12, H=768, A=12 with RoBERTa's vocabulary).

    ``head``: ``"none"`` (encoder and pooler), ``"mlm"`` (masked LM) or ``"classification"`` (``num_labels``
    classes from the ``<s>`` state). The special ids are those of RoBERTa's BPE vocabulary: ``<s>`` 0 (our
    ``cls_id``), ``<pad>`` 1, ``</s>`` 2 (``sep_id``), ``<mask>`` 50264, the last.
    """

    vocab_size: int = 50265
    max_len: int = 514  # 512 tokens, from position pad_id + 1 = 2
    type_vocab_size: int = 1
    layer_norm_eps: float = 1e-5
    pad_id: int = 1
    cls_id: int = 0
    sep_id: int = 2
    mask_id: int = 50264

    def __post_init__(self) -> None:
        if self.head == "pretraining":
            raise ValueError(f"head='pretraining' is BERT's masked LM plus next-sentence prediction, which RoBERTa "
                             f"dropped (Liu et al. 2019, section 4.2); head must be one of {HEADS}")
        check_choice(self, "head", HEADS)
        super().__post_init__()
        if self.max_len < self.pad_id + 2:
            raise ValueError(f"max_len={self.max_len} must be at least pad_id + 2 = {self.pad_id + 2}: RoBERTa's "
                             f"first token sits at position pad_id + 1 = {self.pad_id + 1}")

    @property
    def max_tokens(self) -> int:
        """The longest input: ``max_len`` positions less the ``pad_id + 1`` below the first real token's."""
        return self.max_len - self.pad_id - 1


PRESETS = {
    "roberta-base": RobertaConfig(),  # 124,645,632 parameters with the pooler (RobertaModel's)
    # section 5: "the BERT_LARGE architecture (L = 24, H = 1024, A = 16, 355M parameters)"; 355,359,744
    "roberta-large": RobertaConfig(d_model=1024, n_heads=16, n_layers=24, d_ff=4096),
    # For tests and a laptop CPU; the special ids are aiayn's WordPiece order ([PAD] 0, [UNK] 1, [CLS] 2,
    # [SEP] 3, [MASK] 4) as bert-tiny's, so a WordPiece tokenizer trained here fits it; 129 tokens.
    "roberta-tiny": RobertaConfig(vocab_size=1000, max_len=130, d_model=128, n_heads=4, n_layers=2, d_ff=512,
                                  head="mlm", pad_id=0, cls_id=2, sep_id=3, mask_id=4),
}


class RoBERTa(BERT):
    """RoBERTa; ``forward(ids, token_type_ids, attention_mask)`` returns hidden states ``(B, T, C)``.

    BERT's modules and weights under BERT's names; only the position ids (:meth:`position_ids`), the masked-LM
    head's activation and the classification head's extra dropout differ.
    """

    cfg: RobertaConfig

    def __init__(self, cfg: RobertaConfig) -> None:
        if not isinstance(cfg, RobertaConfig):
            raise TypeError(f"cfg must be a RobertaConfig, got {type(cfg).__name__}")
        super().__init__(cfg)
        if self.mlm is not None:  # RobertaLMHead applies the erf GELU whatever hidden_act says
            self.mlm.activation = ACTIVATIONS["gelu"]

    def forward(self, ids: Tensor, token_type_ids: Tensor | None = None,
                attention_mask: Tensor | None = None) -> Tensor:
        """Hidden states ``(B, T, C)``.

        Args:
            ids: ``(B, T)`` token ids, padded with ``pad_id`` on either side.
            token_type_ids: ``(B, T)`` segment of each token; default all 0 (RoBERTa has one segment).
            attention_mask: ``(B, T)`` 1/``True`` for real tokens; default: every token but ``pad_id``. The
                positions are counted from the ids' padding, as Hugging Face counts them, whatever the mask.

        Raises:
            ValueError: a row of more than ``max_tokens`` real tokens (checked on the CPU), or a mask or
                segments not shaped as ``ids``.
        """
        check_ids(ids, self.cfg.vocab_size, values=False)  # the range: in the embedding, on the CPU only
        if token_type_ids is not None and token_type_ids.shape != ids.shape:
            raise ValueError(f"token_type_ids must have the shape of ids {tuple(ids.shape)}, "
                             f"got {tuple(token_type_ids.shape)}")
        x = self.embed(ids, position_ids=self.position_ids(ids), segment_ids=token_type_ids)  # (B, T, C)
        return self.encoder(x, mask=self.key_mask(ids, attention_mask))  # (B, T, C)

    def position_ids(self, ids: Tensor) -> Tensor:
        """``(B, T)`` positions: ``pad_id + k`` for the k-th real token of its row (k = 1, 2, ...), ``pad_id``
        for padding (Hugging Face's ``create_position_ids_from_input_ids``, fairseq's ``make_positions``)."""
        real = (ids != self.cfg.pad_id).long()  # (B, T)
        positions = real.cumsum(1) * real + self.cfg.pad_id  # (B, T)
        if ids.device.type == "cpu":  # reading the longest row back would stall an accelerator every forward
            longest = int(real.sum(1).max())
            if longest > self.cfg.max_tokens:
                raise ValueError(f"ids holds a row of {longest} tokens; this RoBERTa reads at most max_len - "
                                 f"pad_id - 1 = {self.cfg.max_tokens} (its positions start at pad_id + 1)")
        return positions

    def classify(self, hidden: Tensor) -> Tensor:
        """``(B, T, C)`` -> ``(B, num_labels)`` (head ``classification``): RobertaClassificationHead, whose
        dropout also falls on the ``<s>`` state before its dense layer (the pooler here)."""
        if self.classifier is None:
            raise ValueError(f"this RoBERTa has head={self.cfg.head!r}; build it with head='classification'")
        first = self.embed.dropout(hidden[:, 0])  # (B, C)
        return self.classifier(self.embed.dropout(torch.tanh(self.pooler(first))))

    def mlm_logits(self, hidden: Tensor) -> Tensor:
        """``(B, T, C)`` -> ``(B, T, V)`` masked-token logits (head ``mlm``)."""
        if self.mlm is None:
            raise ValueError(f"this RoBERTa has head={self.cfg.head!r}; build it with head='mlm'")
        return self.mlm(hidden)

    def nsp_logits(self, hidden: Tensor) -> Tensor:
        """Refused: RoBERTa has no next-sentence head (section 4.2)."""
        raise ValueError("RoBERTa has no next-sentence prediction head (Liu et al. 2019, section 4.2); "
                         "head='pretraining' is BERT's")


__all__ = ["HEADS", "PRESETS", "RoBERTa", "RobertaConfig"]
