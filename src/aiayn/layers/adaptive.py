"""Adaptive input embeddings (Baevski & Auli, 2019) and the adaptive softmax (Grave et al., 2017): a large
vocabulary split by frequency into clusters, the rarer words given narrower vectors (Transformer-XL on WikiText-103).

    cutoffs (20000, 40000, 200000), V = 267735:  ids [0, 20000) | [20000, 40000) | [40000, 200000) | [200000, V)
    div_val 4:  cluster i's vectors are d_embed / 4^i wide, each projected to d_proj (its own matrix)

The softmax's head scores the first cluster's words and one entry per other cluster; a word of cluster i > 0 has
``log p = log p_head(cluster i) + log p_i(word)``. With no cutoffs both are the plain table and softmax; with
``div_val = 1`` every cluster is a slice of one table. Tied as Transformer-XL ties them: each cluster's output
weights are its input table, and each projection but the first cluster's is shared (``tie_projs``).

Shapes: N positions, V vocabulary, E d_embed, P d_proj (the model's width), E_i cluster i's width.
"""

from __future__ import annotations

import itertools
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _bounds(vocab_size: int, cutoffs: tuple[int, ...]) -> list[int]:
    if list(cutoffs) != sorted(set(cutoffs)) or (cutoffs and not 0 < cutoffs[0] <= cutoffs[-1] < vocab_size):
        raise ValueError(f"cutoffs={cutoffs} must increase strictly inside (0, vocab_size={vocab_size})")
    return [0, *cutoffs, vocab_size]


class AdaptiveEmbedding(nn.Module):
    """Ids ``(B, T)`` -> ``(B, T, P)``: each cluster's table (``emb_layers``), projected by ``emb_projs`` where its
    width is not P, times sqrt(P) (Transformer-XL's scale)."""

    def __init__(self, vocab_size: int, d_embed: int, d_proj: int, cutoffs: tuple[int, ...] = (),
                 div_val: int = 1) -> None:
        super().__init__()
        self.bounds, self.div_val, self.d_proj = _bounds(vocab_size, cutoffs), div_val, d_proj
        widths = [d_embed] if div_val == 1 else [d_embed // div_val**i for i in range(len(self.bounds) - 1)]
        sizes = [vocab_size] if div_val == 1 else [r - lo for lo, r in itertools.pairwise(self.bounds)]
        self.emb_layers = nn.ModuleList(nn.Embedding(n, e) for n, e in zip(sizes, widths))
        self.emb_projs = nn.ParameterList(nn.Parameter(torch.empty(d_proj, e)) for e in widths
                                          if div_val != 1 or e != d_proj)
        for p in self.emb_projs:
            nn.init.normal_(p, std=0.02)

    def forward(self, ids: Tensor) -> Tensor:
        if self.div_val == 1:
            x = self.emb_layers[0](ids)  # (B, T, E)
            x = F.linear(x, self.emb_projs[0]) if len(self.emb_projs) else x  # (B, T, P)
        else:
            x = ids.new_zeros(*ids.shape, self.d_proj, dtype=self.emb_projs[0].dtype)  # (B, T, P)
            for i, (lo, hi) in enumerate(itertools.pairwise(self.bounds)):
                inside = (ids >= lo) & (ids < hi)  # (B, T)
                x[inside] = F.linear(self.emb_layers[i](ids[inside] - lo), self.emb_projs[i])  # (n_i, P)
        return x * self.d_proj**0.5


class AdaptiveLogSoftmax(nn.Module):
    """Hidden states ``(..., P)`` -> log-probabilities ``(..., V)`` over the clusters of the module's docstring.

    Args:
        embedding: the :class:`AdaptiveEmbedding` whose tables the output layers share (``tie_output``); its
            projections are shared where ``tie_projs[i]`` (Transformer-XL shares all but the first cluster's).
    """

    def __init__(self, vocab_size: int, d_embed: int, d_proj: int, cutoffs: tuple[int, ...] = (), div_val: int = 1,
                 embedding: AdaptiveEmbedding | None = None, tie_projs: tuple[bool, ...] = ()) -> None:
        super().__init__()
        self.bounds, self.div_val = _bounds(vocab_size, cutoffs), div_val
        clusters = len(self.bounds) - 1
        widths = [d_embed] * clusters if div_val == 1 else [d_embed // div_val**i for i in range(clusters)]
        sizes = [vocab_size] if div_val == 1 else [r - lo for lo, r in itertools.pairwise(self.bounds)]
        self.out_layers = nn.ModuleList(nn.Linear(e, n) for n, e in zip(sizes, widths))
        if embedding is not None:
            for layer, table in zip(self.out_layers, embedding.emb_layers):
                layer.weight = table.weight
        self.cluster_weight = nn.Parameter(torch.zeros(clusters - 1, d_embed)) if clusters > 1 else None
        self.cluster_bias = nn.Parameter(torch.zeros(clusters - 1)) if clusters > 1 else None
        self.out_projs = nn.ParameterList()
        if div_val != 1 or d_embed != d_proj:
            for i, e in enumerate(widths):
                shared = embedding is not None and i < len(tie_projs) and tie_projs[i]
                self.out_projs.append(embedding.emb_projs[0 if div_val == 1 else i] if shared  # type: ignore[union-attr]
                                      else nn.Parameter(torch.randn(d_proj, e) * 0.02))

    def _logits(self, hidden: Tensor, i: int, weight: Tensor, bias: Tensor) -> Tensor:
        if len(self.out_projs):
            hidden = hidden @ self.out_projs[i]  # (..., P) -> (..., E_i)
        return F.linear(hidden, weight, bias)

    def _cluster(self, i: int) -> tuple[Tensor, Tensor]:
        """Cluster ``i``'s output weights and bias: its own layer, or its rows of the one table (``div_val=1``)."""
        layer = cast(nn.Linear, self.out_layers[0 if self.div_val == 1 else i])
        if self.div_val == 1:
            lo, hi = self.bounds[i], self.bounds[i + 1]
            return layer.weight[lo:hi], layer.bias[lo:hi]
        return layer.weight, layer.bias

    def forward(self, hidden: Tensor) -> Tensor:  # (..., P) -> (..., V) log-probabilities
        weight, bias = self._cluster(0)
        if self.cluster_weight is None:
            return F.log_softmax(self._logits(hidden, 0, weight, bias).float(), dim=-1)
        assert self.cluster_bias is not None  # set with cluster_weight
        head = F.log_softmax(self._logits(hidden, 0, torch.cat([weight, self.cluster_weight]),
                                          torch.cat([bias, self.cluster_bias])).float(), dim=-1)
        shortlist = self.bounds[1]
        parts = [head[..., :shortlist]]  # the first cluster's words
        for i in range(1, len(self.bounds) - 1):
            tail = F.log_softmax(self._logits(hidden, i, *self._cluster(i)).float(), dim=-1)  # (..., V_i)
            parts.append(head[..., shortlist + i - 1, None] + tail)  # log p(cluster i) + log p(word | cluster i)
        return torch.cat(parts, dim=-1)


__all__ = ["AdaptiveEmbedding", "AdaptiveLogSoftmax"]
