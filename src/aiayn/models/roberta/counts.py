"""Closed-form parameter and multiply-add counts of RoBERTa, in :mod:`aiayn.models.formulas`' conventions
(one multiply-add per weight per position, attention scores over the full square)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from aiayn.models.formulas import Counts, encoder_layer, layer_norm, linear, table


def count(cfg: Any, seq_len: int) -> Counts:
    """RoBERTa (Liu et al. 2019), BERT's network: token, position (``max_len`` rows, the first ``pad_id + 1``
    unused by real tokens) and segment tables with a LayerNorm, N post-norm encoder layers, the pooler (tanh
    of a C x C map of ``<s>``, one position: RobertaClassificationHead's dense with a classifier), and the
    head the config has:

        mlm             dense C x C, LayerNorm, the tied token table as the output (T C V) and a V bias
        classification  C x K on the pooled ``<s>``

    The multiply-adds are those of the encoder, the pooler and that head on T = ``seq_len`` positions.
    """
    c = cfg.d_model
    embed = table(cfg.vocab_size, c) + table(cfg.max_len, c) + table(cfg.type_vocab_size, c) + layer_norm(c)
    layers = cfg.n_layers * encoder_layer(seq_len, c, cfg.d_ff)
    heads = linear(1, c, c)  # the pooler
    if cfg.head == "mlm":
        heads += linear(seq_len, c, c) + layer_norm(c) + linear(seq_len, c, cfg.vocab_size, weight=False)
    if cfg.head == "classification":
        heads += linear(1, c, cfg.num_labels)
    return embed + layers + heads


def default_size(cfg: Any) -> int:
    """Positions when none are given: the longest input, ``max_len - pad_id - 1`` (roberta-base: 512)."""
    return cfg.max_tokens


def example(model: nn.Module, size: int, batch: int) -> Callable[[], Any]:
    """The encoder on ``batch`` rows of ``size`` ids (never ``pad_id``), then the pooler and the head the config
    has, each once."""
    cfg: Any = model.cfg
    ids = torch.randint(0, cfg.vocab_size - 1, (batch, size))
    ids += (ids >= cfg.pad_id).long()  # every id but pad_id
    roberta: Any = model

    def forward() -> Any:
        hidden = roberta(ids)
        pooled = roberta.pooled(hidden)
        if roberta.mlm is not None:
            roberta.mlm(hidden)
        if roberta.classifier is not None:
            roberta.classifier(pooled)
        return pooled

    return forward


__all__ = ["count", "default_size", "example"]
