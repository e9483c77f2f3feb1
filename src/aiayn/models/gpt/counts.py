"""Closed-form parameter and multiply-add counts of GPT-2, GPT-3 and Llama, in
:mod:`aiayn.models.formulas`' conventions (one multiply-add per weight per position, attention scores over
the full square)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from aiayn.models.formulas import NONE, Counts, attention, feed_forward, layer_norm, linear, table


def count(cfg: Any, seq_len: int) -> Counts:
    """GPT-2 (Radford et al. 2019) and GPT-3 (Brown et al. 2020): token and learned position tables, N
    pre-norm decoder layers without cross-attention, a final LayerNorm, and the tied projection T C V.

    Per token: one multiply-add per entry of the layers' matrices (12C^2 per layer), 2TC per layer for the
    scores, and C V for the logits. GPT-3's "6N" training rule (Table D.1) is the first term as FLOPs (2 per
    multiply-add) times 3 (the backward pass costs twice the forward).

    Llama's switches: rotary positions have no table (and no matmul), RMSNorm C parameters, SwiGLU a third
    C x F matrix, grouped heads smaller W^K and W^V (:func:`attention`), no biases. A sliding window is counted
    over the full square, as the causal mask is. A classifier (``head="classification"``) adds C x K without a
    bias on the last token (GPT-2's ``score``).
    """
    c = cfg.d_model
    embed = table(cfg.vocab_size, c) + (table(cfg.max_len, c) if cfg.positional == "learned" else NONE)
    rms = cfg.norm == "rmsnorm"
    layer = (attention(seq_len, seq_len, c, bias=cfg.bias, kv=cfg.kv_heads * (c // cfg.n_heads))
             + feed_forward(seq_len, c, cfg.d_ff, bias=cfg.bias, gated=cfg.activation == "swiglu")
             + layer_norm(c, 2, rms=rms))
    score = linear(1, c, cfg.num_labels, bias=False) if cfg.head == "classification" else NONE
    return embed + cfg.n_layers * layer + layer_norm(c, rms=rms) + linear(seq_len, c, cfg.vocab_size, bias=False,
                                                                          weight=not cfg.tie_output) + score


def default_size(cfg: Any) -> int:
    """Positions when none are given: the model's context, ``max_len``."""
    return cfg.max_len


def example(model: nn.Module, size: int, batch: int) -> Callable[[], Any]:
    """A forward pass on ``batch`` rows of ``size`` ids; a classifier's head then runs on one position a row."""
    cfg: Any = model.cfg
    ids = torch.randint(0, cfg.vocab_size, (batch, size))
    score = getattr(model, "score", None)
    if score is None:
        return lambda: model(ids)

    def classifier() -> Any:  # the logits, then the class head on one (the last) position of each row
        logits = model(ids)
        score(logits.new_zeros(batch, cfg.d_model))
        return logits

    return classifier


__all__ = ["count", "default_size", "example"]
