"""Closed-form parameter and multiply-add counts of DistilBERT, in :mod:`aiayn.models.formulas`' conventions
(one multiply-add per weight per position, attention scores over the full square)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from aiayn.models.formulas import Counts, encoder_layer, layer_norm, linear, table


def count(cfg: Any, seq_len: int) -> Counts:
    """DistilBERT (Sanh et al. 2019, section 2): token and position tables with a LayerNorm (no segment table),
    N post-norm encoder layers, no pooler, and the head the config has:

        mlm             dense C x C, LayerNorm, the tied token table as the output (T C V) and a V bias
        classification  pre_classifier C x C and the classifier C x K, on [CLS] (one position)

    distilbert-base: 30522 C + 512 C + 2C + 6 (12 C^2 + 13 C) = 66,362,880 at C = 768.
    The multiply-adds are those of the encoder and that head on T = ``seq_len`` positions.
    """
    c = cfg.d_model
    embed = table(cfg.vocab_size, c) + table(cfg.max_len, c) + layer_norm(c)
    layers = cfg.n_layers * encoder_layer(seq_len, c, cfg.d_ff)
    heads = Counts()
    if cfg.head == "mlm":
        heads += linear(seq_len, c, c) + layer_norm(c) + linear(seq_len, c, cfg.vocab_size, weight=False)
    if cfg.head == "classification":
        heads += linear(1, c, c) + linear(1, c, cfg.num_labels)
    return embed + layers + heads


def default_size(cfg: Any) -> int:
    """Positions when none are given: the model's ``max_len``."""
    return cfg.max_len


def example(model: nn.Module, size: int, batch: int) -> Callable[[], Any]:
    """The encoder on ``batch`` rows of ``size`` ids (never ``pad_id``), then the head the config has, once."""
    cfg: Any = model.cfg
    ids = torch.randint(1, cfg.vocab_size, (batch, size))
    distilbert: Any = model

    def forward() -> Any:
        hidden = distilbert(ids)
        if distilbert.mlm is not None:
            return distilbert.mlm(hidden)
        if distilbert.classifier is not None:
            return distilbert.classify(hidden)
        return hidden

    return forward


__all__ = ["count", "default_size", "example"]
