"""Closed-form parameter and multiply-add counts of Transformer-XL, in :mod:`aiayn.models.formulas`' conventions."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from aiayn.models.formulas import Counts, attention, feed_forward, layer_norm, linear, table


def _clusters(cfg: Any) -> list[tuple[int, int]]:
    """``(words, width)`` of each adaptive cluster (one table of ``vocab_size`` when ``div_val`` is 1)."""
    bounds = [0, *cfg.cutoffs, cfg.vocab_size]
    if cfg.div_val == 1:
        return [(cfg.vocab_size, cfg.width)]
    return [(hi - lo, cfg.width // cfg.div_val**i) for i, (lo, hi) in enumerate(itertools.pairwise(bounds))]


def count(cfg: Any, seq_len: int) -> Counts:
    """Transformer-XL (Dai et al. 2019) on a segment of ``seq_len`` positions with a full memory of ``mem_len``.

    Each layer: the attention's W^Q, W^K, W^V, W^O without biases, its own W_kR (C^2) and the biases u, v (2C);
    the queries are projected at the T new positions, keys and values at the S = M + T positions they read, W_kR
    at the S distances; the scores are (q + u) k^T, (q + v) r^T and the weights times V, 3 T S C. The adaptive
    embedding has a table per cluster (rows x width) and a projection to C where a width differs from C; the
    adaptive softmax shares the tables, adds a bias per word, a row and a bias per tail cluster, and the first
    cluster's projection unless it is one table of width C (every other projection is shared, ``tie_projs``).
    The softmax's multiply-adds are the forward's: every cluster's log-probabilities at every position.
    """
    c, t = cfg.d_model, seq_len
    s = t + cfg.mem_len
    clusters = _clusters(cfg)
    projected = cfg.div_val != 1 or cfg.width != c
    embed = sum((table(n, e) for n, e in clusters), Counts())
    if projected:
        embed = embed + sum((linear(t, e, c, bias=False, part="embeddings") for _, e in clusters), Counts())
    core = attention(t, s, c, bias=False)
    relative = linear(s, c, c, bias=False, part="attention") + Counts({"attention": 2 * c},
                                                                       {"attention scores": t * s * c})
    layer = core + relative + feed_forward(t, c, cfg.d_ff) + layer_norm(c, 2)
    tails = len(cfg.cutoffs)
    head = Counts({"output": cfg.vocab_size + tails * (cfg.width + 1)})  # word biases, tail clusters' rows and biases
    if projected:  # the softmax's projections: one per cluster (each of one table's slices with div_val 1)
        widths = [e for _, e in clusters] if cfg.div_val != 1 else [cfg.width] * (tails + 1)
        head = head + sum((linear(t, c, e, bias=False, weight=False) for e in widths), Counts())
        head = head + Counts({"output": sum(c * e for e in (widths[:1] if cfg.tie_projs else widths))})
    logits = sum((linear(t, e, n + (tails if i == 0 else 0), bias=False, weight=False)
                  for i, (n, e) in enumerate(clusters)), Counts())
    return embed + cfg.n_layers * layer + head + logits


def default_size(cfg: Any) -> int:
    """Positions when none are given: a segment as long as the memory (the paper trains so), at least 1."""
    return max(cfg.mem_len, 1)


def example(model: nn.Module, size: int, batch: int) -> Callable[[], Any]:
    """A forward pass on ``batch`` rows of ``size`` ids after a memory of ``mem_len`` positions (its own states)."""
    cfg: Any = model.cfg
    ids = torch.randint(0, cfg.vocab_size, (batch, size))
    memory = model.new_memory()  # type: ignore[operator]
    if cfg.mem_len:
        with torch.no_grad():
            model(torch.randint(0, cfg.vocab_size, (batch, cfg.mem_len)), memory)
    return lambda: model(ids, _frozen(memory))


def _frozen(memory: Any) -> Any:
    """A copy of ``memory`` that the call moves on, so every call sees the same memory."""
    copy = type(memory)(len(memory), memory.mem_len)
    copy[:] = list(memory)
    return copy


__all__ = ["count", "default_size", "example"]
