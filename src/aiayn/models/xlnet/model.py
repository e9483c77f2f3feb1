"""XLNet (Yang et al., 2019): an autoregressive model that reads in both directions, by predicting the tokens of
a sequence in a random order (the permutation language model, section 2.2) on Transformer-XL's backbone.

    ids (B, T) -> embedding -> dropout -> h (content stream)         g = mask_emb at each target (query stream)
    N x [ h <- block(h, keys and values from [memory ; h], mask_h)
          g <- block(g, keys and values from [memory ; h], mask_g) ]   the same weights (one block, two streams)
    -> dropout(g if there are targets, else h) -> heads

Two-stream self-attention (section 2.3): to predict the token at position z_t of a factorisation order z, the
model may see the tokens before it in z and the position z_t, but not the token there. The content stream h_i
sees x_i itself and every token before it in z (``mask_h``); the query stream g_i sees the tokens strictly before
it in z and starts from a learned vector, so only its position (the relative distances) tells it where it is
(``mask_g``). ``perm_mask[b, i, j] = 1``: i may not see j (j comes after i in z); ``target_mapping[b, k, i] = 1``:
the k-th prediction is at position i (partial prediction, section 2.3: only the last 1/K of each order).

From Transformer-XL (section 2.4): the relative scores of :class:`~aiayn.layers.relative.RelativeScore` over a
segment memory (here in both directions, ``attn_type="bi"``), plus relative segment encodings (section 2.5):
whether two positions lie in the same segment, not which, so more than two segments could be read.

The blocks are the shared :class:`~aiayn.layers.EncoderBlock` (post-norm, no projection biases, GELU), each run
twice a layer; the memory is :class:`~aiayn.layers.kv_cache.SegmentMemory` of the content stream's inputs.

A query that may see nothing (every key hidden by the masks) gets zeros from its attention, as everywhere in
aiayn; ``transformers`` averages it over every key, hidden ones included. Such a row predicts nothing real.

Shapes: B batch, T segment length, M memory length, S = M + T keys, K predictions, C d_model, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.layers import EncoderBlock
from aiayn.layers.embedding import Embedding, check_ids
from aiayn.layers.kv_cache import SegmentMemory
from aiayn.layers.relative import RelativeScore
from aiayn.models.config import check_choice, check_divisible, check_positive, check_probability
from aiayn.models.outputs import (
    BaseModelOutput,
    CausalLMOutput,
    SequenceClassifierOutput,
    classification_loss,
    masked_lm_loss,
)
from aiayn.models.pretrained import PretrainedMixin

HEADS = ("none", "lm", "classification")


@dataclass(frozen=True)
class XLNetConfig:
    """XLNet; the defaults are ``xlnet-large-cased`` (24 layers of 1024, 360,268,800 parameters without a head).

    ``attn_type``: ``"bi"`` (every token may see every other unless a mask says no; pre-training and
    fine-tuning) or ``"uni"`` (causal, with ``same_length`` as Transformer-XL's). ``mem_len``: the memory's
    positions (``None``: all it is given, as ``transformers``); ``reuse_len``: of each segment only the first
    ``reuse_len`` positions join the memory (pre-training: the half the next segment continues); ``clamp_len``:
    distances encoded at most. ``head``: ``"none"`` (``XLNetModel``), ``"lm"`` (``XLNetLMHeadModel``: the
    tied embedding and a bias) or ``"classification"`` (``XLNetForSequenceClassification``: the last token's
    state through a tanh projection). The special ids are those of XLNet's SentencePiece vocabulary.
    """

    vocab_size: int = 32000
    d_model: int = 1024
    n_heads: int = 16
    n_layers: int = 24
    d_ff: int = 4096
    activation: str = "gelu"
    attn_type: str = "bi"
    mem_len: int | None = None
    reuse_len: int | None = None
    clamp_len: int | None = None
    same_length: bool = False
    dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    head: str = "none"
    num_labels: int = 2
    pad_id: int | None = 5
    bos_id: int | None = 1
    eos_id: int | None = 2
    cls_id: int | None = 3
    sep_id: int | None = 4
    mask_id: int | None = 6

    def __post_init__(self) -> None:
        check_positive(self, "vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "num_labels")
        check_divisible(self, "d_model", "n_heads")
        check_probability(self, "dropout")
        check_choice(self, "attn_type", ("bi", "uni"))
        check_choice(self, "head", HEADS)
        for name in ("mem_len", "reuse_len", "clamp_len"):
            value = getattr(self, name)
            if value is not None and value < (0 if name == "mem_len" else 1):
                raise ValueError(f"{name} must be {'>= 0' if name == 'mem_len' else '>= 1'} or None, got {value}")
        for name in ("pad_id", "bos_id", "eos_id", "cls_id", "sep_id", "mask_id"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < self.vocab_size:
                raise ValueError(f"{name}={value} must be a token id inside the vocabulary [0, {self.vocab_size})")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


PRESETS = {
    "xlnet-base-cased": XLNetConfig(d_model=768, n_heads=12, n_layers=12, d_ff=3072),  # 116,718,336 parameters
    "xlnet-large-cased": XLNetConfig(),  # 360,268,800
    # the size of bert-tiny, for the permutation-LM recipe on a laptop CPU; the vocabulary comes from the tokenizer
    "xlnet-tiny": XLNetConfig(vocab_size=1000, d_model=128, n_heads=4, n_layers=2, d_ff=512, mem_len=64, head="lm",
                              pad_id=0, bos_id=None, eos_id=None, cls_id=2, sep_id=3, mask_id=4),
}


class XLNet(PretrainedMixin, nn.Module):
    """XLNet; ``forward(ids, memory, ...)`` gives the last layer's states, the query stream's at the targets
    when ``target_mapping`` names them; :meth:`logits` and :meth:`classify` are the heads."""

    def __init__(self, cfg: XLNetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        c = cfg.d_model
        self.embed = Embedding(cfg.vocab_size, c, positional="none", dropout=cfg.dropout, scale=False)
        self.mask_emb = nn.Parameter(torch.zeros(c))  # the query stream's start, w in the paper
        self.layers = nn.ModuleList(
            EncoderBlock(c, cfg.n_heads, cfg.d_ff, cfg.dropout, cfg.dropout, activation_dropout=cfg.dropout,
                         activation=cfg.activation, norm_first=False, eps=cfg.layer_norm_eps, bias=False,
                         score=RelativeScore(c, cfg.n_heads, cfg.d_head, cfg.clamp_len, cfg.dropout,
                                             bidirectional=cfg.attn_type == "bi", segments=True))
            for _ in range(cfg.n_layers))
        self.dropout = nn.Dropout(cfg.dropout)
        if cfg.head == "lm":  # the output matrix is the embedding's (tied), with a bias of its own
            self.lm_head = nn.Linear(c, cfg.vocab_size)
            self.lm_head.weight = self.embed.tokens.weight
        elif cfg.head == "classification":  # transformers' sequence summary: the last token, tanh(W h + b)
            self.summary = nn.Linear(c, c)
            self.classifier = nn.Linear(c, cfg.num_labels)
        self._init_weights()

    def _init_weights(self) -> None:
        # N(0, 0.02) for tables, matrices, the biases u, v, b, the segment vectors and mask_emb (XLNet's
        # initializer_range); zero biases, unit LayerNorm gains
        for name, p in self.named_parameters():
            if p.dim() > 1 or name.endswith((".u", ".v", ".b", "mask_emb")):
                nn.init.normal_(p, std=0.02)
            else:
                nn.init.ones_(p) if "norm" in name and name.endswith("weight") else nn.init.zeros_(p)

    def new_memory(self, mem_len: int | None = None) -> SegmentMemory:
        """An empty memory of ``mem_len`` positions (default the config's; ``None`` keeps all)."""
        return SegmentMemory(len(self.layers), self.cfg.mem_len if mem_len is None else mem_len)

    def forward(self, ids: Tensor, memory: SegmentMemory | None = None, *, token_type_ids: Tensor | None = None,
                attention_mask: Tensor | None = None, perm_mask: Tensor | None = None,
                target_mapping: Tensor | None = None) -> Tensor:
        """The last layer's states (after dropout): ``(B, T, C)`` of the content stream, or ``(B, K, C)`` of
        the query stream at the ``K`` targets of ``target_mapping``.

        Args:
            ids: ``(B, T)`` token ids.
            memory: the states of the segments before (read, then moved on by this one's).
            token_type_ids: ``(B, T)`` the segment of each token (the memory's count as 0); ``None``: no
                segment term.
            attention_mask: ``(B, T)`` 1 for real tokens, 0 for padding (which no token may see).
            perm_mask: ``(B, T, T)`` 1 where token i may not see token j (a factorisation order's later
                tokens); a token's content stream always sees itself.
            target_mapping: ``(B, K, T)`` one-hot rows: the positions of the ``K`` predictions, which the query
                stream makes.
        """
        check_ids(ids, self.cfg.vocab_size, values=False)
        b, t = ids.shape
        for name, value, shape in (("token_type_ids", token_type_ids, (b, t)), ("attention_mask", attention_mask,
                                   (b, t)), ("perm_mask", perm_mask, (b, t, t))):
            if value is not None and tuple(value.shape) != shape:
                raise ValueError(f"{name} must have shape {shape} for ids of shape {(b, t)}, got {tuple(value.shape)}")
        if target_mapping is not None and (target_mapping.dim() != 3 or target_mapping.shape[::2] != (b, t)):
            raise ValueError(f"target_mapping must have shape (B={b}, K, T={t}), got {tuple(target_mapping.shape)}")
        if memory is not None and memory.length and memory[0].size(0) != b:
            raise ValueError(f"memory holds {memory[0].size(0)} rows, ids {b}: a memory follows its rows")
        m = 0 if memory is None else memory.length
        mask_h, mask_g = self.attention_masks(t, m, ids.device, attention_mask, perm_mask)
        segments = None
        if token_type_ids is not None:  # (B, T, S): query and key in different segments; the memory's are 0
            keys = F.pad(token_type_ids, (m, 0))
            segments = token_type_ids[:, :, None] != keys[:, None, :]
        inputs = None if segments is None else {"segments": segments}
        h = self.embed(ids)  # (B, T, C)
        g = None
        if target_mapping is not None:  # the query stream, at the targets' positions
            mapping = target_mapping.to(h.dtype)  # (B, K, T)
            g = self.embed.dropout(self.mask_emb.expand(b, mapping.size(1), -1))  # (B, K, C)
        states = []
        for i, layer in enumerate(self.layers):
            states.append(h)
            context = h if memory is None or not m else torch.cat([memory[i], h], dim=1)  # (B, S, C)
            if g is not None:  # the targets' queries at their positions, attended, and taken back: (B, K, C)
                g = layer(g, mask=mask_g, context=context, score_inputs=inputs, targets=mapping)
            h = layer(h, mask=mask_h, context=context, score_inputs=inputs)
        if memory is not None:
            memory.update([s[:, : self.cfg.reuse_len] for s in states])
        return self.dropout(h if g is None else g)

    def attention_masks(self, t: int, m: int, device: torch.device, attention_mask: Tensor | None = None,
                        perm_mask: Tensor | None = None) -> tuple[Tensor | None, Tensor | None]:
        """``(mask_h, mask_g)``, bool ``True`` = may attend, ``(B or 1, 1, T, M + T)`` (``None``: all may): the
        query stream's is ``attn_type``'s (causal for ``"uni"``) without padding keys and what ``perm_mask``
        hides; the content stream's is the same and the token itself."""
        keep = None
        if self.cfg.attn_type == "uni":
            i = torch.arange(t, device=device)[:, None]
            j = torch.arange(m + t, device=device)[None]
            keep = j <= i + m
            if self.cfg.same_length:
                keep = keep & (j >= i)
            keep = keep[None, None]  # (1, 1, T, S)
        hidden = None  # (B, T, S) True = hidden by the data
        if attention_mask is not None:
            hidden = ~attention_mask.bool()[:, None, :].expand(-1, t, -1)
        if perm_mask is not None:
            hidden = perm_mask.bool() if hidden is None else hidden | perm_mask.bool()
        if hidden is not None:
            visible = ~F.pad(hidden, (m, 0))[:, None]  # the memory is never hidden
            keep = visible if keep is None else keep & visible
        if keep is None:
            return None, None
        itself = torch.arange(m + t, device=device)[None] == torch.arange(m, m + t, device=device)[:, None]
        return keep | itself, keep

    def logits(self, hidden: Tensor) -> Tensor:
        """``(B, T or K, C)`` -> ``(B, T or K, V)``: the tied embedding and a bias (head ``lm``)."""
        if self.cfg.head != "lm":
            raise ValueError(f"this XLNet has head={self.cfg.head!r}; build it with head='lm'")
        return self.lm_head(hidden)

    def classify(self, hidden: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """``(B, T, C)`` -> ``(B, num_labels)`` from the last token's state (XLNet's tokenizer puts <cls> last and
        pads on the left); with ``attention_mask`` ``(B, T)``, each row's last real token's (rows padded on the
        right; head ``classification``)."""
        if self.cfg.head != "classification":
            raise ValueError(f"this XLNet has head={self.cfg.head!r}; build it with head='classification'")
        if attention_mask is None:
            last = hidden[:, -1]
        else:
            at = attention_mask.size(1) - 1 - attention_mask.flip(1).long().argmax(1)  # (B,): each row's last 1
            last = hidden[torch.arange(hidden.size(0), device=hidden.device), at]
        return self.classifier(self.dropout(torch.tanh(self.summary(last))))

    def outputs(self, input_ids: Tensor, attention_mask: Tensor | None = None, token_type_ids: Tensor | None = None,
                mems: SegmentMemory | None = None, perm_mask: Tensor | None = None,
                target_mapping: Tensor | None = None, labels: Tensor | None = None,
                use_mems: bool | None = None) -> BaseModelOutput | CausalLMOutput | SequenceClassifierOutput:
        """``model(input_ids=..., ...)`` as ``XLNetModel`` (head ``none``), ``XLNetLMHeadModel`` (``lm``) or
        ``XLNetForSequenceClassification`` (``classification``) answer it (:mod:`aiayn.models.outputs`). The
        memory is returned as ``past_key_values`` (``transformers``' ``mems``) when ``mems`` is given or
        ``use_mems`` (default: when not training, as ``use_mems_eval``); ``labels`` of the LM head are the
        targets at each position (or each of ``target_mapping``'s), not shifted; ``-100`` is ignored."""
        if self.cfg.head == "classification" and target_mapping is not None:
            raise ValueError("target_mapping: a classifier reads the content stream's last real token, not targets")
        keep = use_mems if use_mems is not None else (mems is not None or not self.training)
        memory = mems if mems is not None else (self.new_memory() if keep else None)
        hidden = self(input_ids, memory, token_type_ids=token_type_ids, attention_mask=attention_mask,
                      perm_mask=perm_mask, target_mapping=target_mapping)
        if self.cfg.head == "classification":
            logits = self.classify(hidden, attention_mask)  # each row's last real token, padded on either side
            return SequenceClassifierOutput(loss=classification_loss(logits, labels), logits=logits,
                                            last_hidden_state=hidden)
        if self.cfg.head == "none":
            if labels is not None:
                raise ValueError("labels: this model has head='none', so there is no loss")
            return BaseModelOutput(last_hidden_state=hidden)
        logits = self.logits(hidden)
        return CausalLMOutput(loss=masked_lm_loss(logits, labels), logits=logits, past_key_values=memory,
                              last_hidden_state=hidden)


__all__ = ["HEADS", "PRESETS", "XLNet", "XLNetConfig"]
