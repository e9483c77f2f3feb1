"""Closed-form parameter and multiply-add counts of the encoder-decoder Transformer and BART, in
:mod:`aiayn.models.formulas`' conventions (one multiply-add per weight per position, attention scores over
the full square)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from aiayn.models.formulas import NONE, Counts, decoder_layer, encoder_layer, layer_norm, linear, scorer, table


def count(cfg: Any, src_len: int, tgt_len: int | None = None) -> Counts:
    """The encoder-decoder Transformer (Vaswani et al. 2017, section 3) and BART (Lewis et al. 2020), on
    ``src_len`` source and ``tgt_len`` (default ``src_len``) target positions.

    Parameters: the token tables (one if ``share_embeddings``), learned position tables on each side
    (``max_len + positional_offset`` rows; sinusoidal ones have none), the embedding LayerNorms (BART), the
    layers, final LayerNorms when pre-norm, and the pre-softmax projection C V (only its bias when tied,
    section 3.4), and a ``cross_scoring`` scorer's own weights (:func:`scorer`). Multiply-adds: the encoder on
    S = ``src_len`` positions, the decoder on T = ``tgt_len`` attending to S, and the projection T C V. With
    V = 37,000 the base model's projection, C V = 18.9M per target position, is nearly as much as its six
    decoder layers' weights, 6 (6C^2 + 2CF) = 22.0M.
    """
    c, tgt_len = cfg.d_model, tgt_len or src_len
    embed = table(cfg.src_vocab_size, c)
    if not cfg.share_embeddings:
        embed += table(cfg.tgt_vocab_size, c)
    if cfg.positional == "learned":
        embed += 2 * table(cfg.max_len + cfg.positional_offset, c)
    if cfg.embed_norm:
        embed += layer_norm(c, 2)
    final = layer_norm(c, 2) if cfg.norm_first else NONE
    encoder = cfg.n_encoder_layers * encoder_layer(src_len, c, cfg.d_ff)
    decoder = cfg.n_decoder_layers * (decoder_layer(tgt_len, src_len, c, cfg.d_ff)
                                      + scorer(tgt_len, src_len, c, cfg.d_head, cfg.cross_scoring))
    head = linear(tgt_len, c, cfg.tgt_vocab_size, bias=cfg.output_bias, weight=not cfg.tie_output)
    return embed + encoder + decoder + final + head


def default_size(cfg: Any) -> int:
    """Source and target positions when none are given: the model's ``max_len``."""
    return cfg.max_len


def example(model: nn.Module, size: int, batch: int) -> Callable[[], Any]:
    """A forward pass on ``batch`` source and target rows of ``size`` ids, never padding, BOS or EOS (0, 1, 2
    in every preset)."""
    cfg: Any = model.cfg
    src, tgt = (torch.randint(3, v, (batch, size)) for v in (cfg.src_vocab_size, cfg.tgt_vocab_size))
    return lambda: model(src, tgt)


__all__ = ["count", "default_size", "example"]
