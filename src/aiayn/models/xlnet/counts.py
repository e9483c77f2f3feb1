"""Closed-form parameter and multiply-add counts of XLNet, in :mod:`aiayn.models.formulas`' conventions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from aiayn.models.formulas import Counts, attention, feed_forward, layer_norm, linear, table


def count(cfg: Any, seq_len: int) -> Counts:
    """XLNet (Yang et al. 2019) on ``seq_len`` positions, the content stream alone (fine-tuning and inference: no
    targets, no memory); pre-training's query stream at K targets adds its layers again at K positions.

    The token table and ``mask_emb`` (C); each layer: the attention's W^Q, W^K, W^V, W^O without biases, its
    W_kR (C^2) at the 2T - 1 distances of both directions, the biases u, v, b (3C) and the two segment vectors
    (2C); the scores are (q + u) k^T, (q + v) r^T and the weights times V, 3 T^2 C, the segment term 2TC; the
    feed-forward network and two LayerNorms. Heads: the LM's bias (the matrix is the tied table); the
    classifier's tanh projection (C^2 + C) and its output layer.
    """
    c, t = cfg.d_model, seq_len
    layer = (attention(t, t, c, bias=False) + linear(2 * t - 1, c, c, bias=False, part="attention")
             + Counts({"attention": 5 * c}, {"attention scores": t * t * c + 2 * t * c})
             + feed_forward(t, c, cfg.d_ff) + layer_norm(c, 2))
    total = table(cfg.vocab_size, c) + Counts({"embeddings": c}) + cfg.n_layers * layer
    if cfg.head == "lm":
        total = total + linear(t, c, cfg.vocab_size, bias=False, weight=False) + Counts({"output": cfg.vocab_size})
    elif cfg.head == "classification":
        total = total + linear(1, c, c, part="output") + linear(1, c, cfg.num_labels)
    return total


def default_size(cfg: Any) -> int:
    """Positions when none are given: XLNet's pre-training sequence, 512."""
    return 512


def example(model: nn.Module, size: int, batch: int) -> Callable[[], Any]:
    """A forward pass on ``batch`` rows of ``size`` ids (the content stream, no memory)."""
    cfg: Any = model.cfg
    ids = torch.randint(0, cfg.vocab_size, (batch, size))
    return lambda: model(ids)


__all__ = ["count", "default_size", "example"]
