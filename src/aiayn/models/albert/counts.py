"""Closed-form parameter and multiply-add counts of ALBERT, in :mod:`aiayn.models.formulas`' conventions
(one multiply-add per weight per position, attention scores over the full square).

The shared layer is counted once for the parameters and N times for the multiply-adds (section 3.1): ALBERT
saves memory, not arithmetic. The made-up forward pass the counts describe is BERT's (:func:`example`).
"""

from __future__ import annotations

from typing import Any

from aiayn.models.bert.counts import default_size, example
from aiayn.models.formulas import Counts, encoder_layer, layer_norm, linear, table


def count(cfg: Any, seq_len: int) -> Counts:
    """ALBERT (Lan et al. 2020): token, position and segment tables of width E with a LayerNorm and the
    projection E -> H on every position (all "embeddings"), one post-norm encoder layer applied N times, the
    pooler (tanh of an H x H map of [CLS], one position), and the heads the config has:

        mlm             dense H x E, LayerNorm(E), the tied token table as the output (T E V) and a V bias
        nsp             H x 2 on the pooled [CLS] (sentence order)
        classification  H x K on the pooled [CLS]

    Args:
        cfg: an :class:`~aiayn.models.albert.AlbertConfig`.
        seq_len: T, the positions the multiply-adds are counted on.
    """
    e, h = cfg.embedding_size, cfg.d_model
    embed = table(cfg.vocab_size, e) + table(cfg.max_len, e) + table(cfg.type_vocab_size, e) + layer_norm(e)
    embed += linear(seq_len, e, h, part="embeddings")
    layer = encoder_layer(seq_len, h, cfg.d_ff)
    layers = Counts(layer.parameters, {part: cfg.n_layers * n for part, n in layer.macs.items()})  # shared
    heads = linear(1, h, h)  # the pooler
    if cfg.head in ("pretraining", "mlm"):
        heads += linear(seq_len, h, e) + layer_norm(e) + linear(seq_len, e, cfg.vocab_size, weight=False)
    if cfg.head == "pretraining":
        heads += linear(1, h, 2)
    if cfg.head == "classification":
        heads += linear(1, h, cfg.num_labels)
    return embed + layers + heads


__all__ = ["count", "default_size", "example"]
