"""Closed-form parameter and multiply-add counts of BERT, in :mod:`aiayn.models.formulas`' conventions
(one multiply-add per weight per position, attention scores over the full square)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from aiayn.models.formulas import Counts, encoder_layer, layer_norm, linear, table


def count(cfg: Any, seq_len: int) -> Counts:
    """BERT (Devlin et al. 2019): token, position and segment tables with a LayerNorm, N post-norm encoder
    layers, the pooler (tanh of a C x C map of [CLS], one position), and the heads the config has:

        mlm             dense C x C, LayerNorm, the tied token table as the output (T C V) and a V bias
        nsp             C x 2 on the pooled [CLS]
        classification  C x K on the pooled [CLS]

    The multiply-adds are those of the encoder, the pooler and those heads on T = ``seq_len`` positions.
    """
    c = cfg.d_model
    embed = table(cfg.vocab_size, c) + table(cfg.max_len, c) + table(cfg.type_vocab_size, c) + layer_norm(c)
    layers = cfg.n_layers * encoder_layer(seq_len, c, cfg.d_ff)
    heads = linear(1, c, c)  # the pooler
    if cfg.head in ("pretraining", "mlm"):
        heads += linear(seq_len, c, c) + layer_norm(c) + linear(seq_len, c, cfg.vocab_size, weight=False)
    if cfg.head == "pretraining":
        heads += linear(1, c, 2)
    if cfg.head == "classification":
        heads += linear(1, c, cfg.num_labels)
    return embed + layers + heads


def default_size(cfg: Any) -> int:
    """Positions when none are given: the model's ``max_len``."""
    return cfg.max_len


def example(model: nn.Module, size: int, batch: int) -> Callable[[], Any]:
    """The encoder on ``batch`` rows of ``size`` ids (never ``pad_id``), then the pooler and the heads the
    config has, each once."""
    cfg: Any = model.cfg
    ids = torch.randint(1, cfg.vocab_size, (batch, size))
    bert: Any = model

    def forward() -> Any:
        hidden = bert(ids)
        pooled = bert.pooled(hidden)
        for head, x in ((bert.mlm, hidden), (bert.nsp, pooled), (bert.classifier, pooled)):
            if head is not None:
                head(x)
        return pooled

    return forward


__all__ = ["count", "default_size", "example"]
