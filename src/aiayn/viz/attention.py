"""Pictures of attention weights (matplotlib, written as PNG): every layer and head of a model, tokens on the axes.

An encoder-decoder has three kinds of attention (section 3.2.3): encoder self-attention (source over
source), masked decoder self-attention (target over the target so far) and encoder-decoder attention (target
over source). :func:`attention_weights` collects each kind, layer by layer, with
:func:`aiayn.layers.record_attention`; :func:`plot_model_attention` draws one grid per kind.

Shapes: H heads, T target (query) tokens, S source (key) tokens.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from aiayn.layers import DecoderBlock, EncoderBlock, record_attention
from aiayn.viz.common import pyplot, save

KINDS = ("encoder self-attention", "decoder self-attention", "encoder-decoder attention")
FILES = {"encoder self-attention": "attention-encoder.png", "decoder self-attention": "attention-decoder.png",
         "encoder-decoder attention": "attention-cross.png"}


def plot_attention_grid(
    weights: Sequence[Tensor],
    queries: Sequence[str],
    keys: Sequence[str],
    path: str | os.PathLike,
    title: str = "",
    row_label: str = "layer",
) -> Path:
    """One heat map per (layer, head): rows are layers, columns heads.

    Args:
        weights: per layer, ``(H, T, S)`` attention weights of one example.
        queries: the T query tokens (y axis); keys: the S key tokens (x axis).
    """
    plt = pyplot()
    n_rows, n_heads = len(weights), weights[0].size(0)
    t, s = len(queries), len(keys)
    fig, axes = plt.subplots(
        n_rows, n_heads, figsize=(1.0 + n_heads * max(2.0, 0.22 * s), 0.6 + n_rows * max(1.6, 0.25 * t)), squeeze=False
    )
    for r, layer in enumerate(weights):
        for h in range(n_heads):
            ax = axes[r][h]
            ax.imshow(layer[h, :t, :s].float().cpu().numpy(), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
            ax.set_xticks(range(s), [k if k.strip() else "␣" for k in keys], fontsize=6, rotation=90)
            ax.set_yticks(range(t), list(queries), fontsize=6)
            ax.set_title(f"{row_label} {r} head {h}", fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return save(fig, path)


def attention_weights(model: nn.Module, forward: Callable[[], Any], example: int = 0) -> dict[str, list[Tensor]]:
    """The attention weights of every layer of ``model`` while ``forward()`` runs, by kind.

    Args:
        model: a model built of :class:`~aiayn.layers.EncoderBlock` and :class:`~aiayn.layers.DecoderBlock`
            (the Transformer, BART, GPT, BERT).
        forward: runs ``model`` once (e.g. ``lambda: model(src, tgt)``).
        example: which example of the batch to keep.

    Returns:
        ``{kind: [(H, T, S) per layer]}`` for the kinds of :data:`KINDS` the model has, layers in order.
    """
    kinds: dict[str, list[str]] = {k: [] for k in KINDS}
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        if isinstance(module, EncoderBlock):
            kinds["encoder self-attention"].append(prefix + "self_attn")
        elif isinstance(module, DecoderBlock):
            kinds["decoder self-attention"].append(prefix + "self_attn")
            if module.cross_attn is not None:
                kinds["encoder-decoder attention"].append(prefix + "cross_attn")
    with torch.no_grad(), record_attention(model) as rec:
        forward()
    return {kind: [rec[n][0][example] for n in names] for kind, names in kinds.items() if names}


def plot_model_attention(model: nn.Module, src_ids: Tensor, tgt_ids: Tensor, src_tokens: Sequence[str],
                         tgt_tokens: Sequence[str], out_dir: str | os.PathLike, title: str = "") -> list[Path]:
    """Every layer and head of an encoder-decoder's three kinds of attention for one sentence pair, one PNG
    per kind (:data:`FILES`) in ``out_dir``.

    Args:
        model: a Transformer or BART (``model(src_ids, tgt_ids)``).
        src_ids: ``(1, S)`` source ids; ``tgt_ids``: ``(1, T)`` decoder input ids (starting with bos).
        src_tokens: the S source tokens (keys of the encoder and of encoder-decoder attention).
        tgt_tokens: the T decoder input tokens (queries of the decoder).
    """
    if src_ids.shape != (1, len(src_tokens)) or tgt_ids.shape != (1, len(tgt_tokens)):
        raise ValueError(f"src_ids {tuple(src_ids.shape)} and tgt_ids {tuple(tgt_ids.shape)} must be (1, tokens) "
                         f"for {len(src_tokens)} source and {len(tgt_tokens)} target tokens")
    weights = attention_weights(model, lambda: model(src_ids, tgt_ids))
    axes = {"encoder self-attention": (src_tokens, src_tokens, "encoder layer"),
            "decoder self-attention": (tgt_tokens, tgt_tokens, "decoder layer"),
            "encoder-decoder attention": (tgt_tokens, src_tokens, "decoder layer")}
    paths = []
    for kind, layers in weights.items():
        queries, keys, row_label = axes[kind]
        paths.append(plot_attention_grid(layers, queries, keys, Path(out_dir) / FILES[kind],
                                         title=f"{kind}{': ' + title if title else ''}", row_label=row_label))
    return paths
