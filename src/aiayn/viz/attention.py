"""Pictures of attention weights (matplotlib, written as PNG): every layer and head of a model, tokens on the axes.

An encoder-decoder has three kinds of attention (section 3.2.3): encoder self-attention (source over
source), masked decoder self-attention (target over the target so far) and encoder-decoder attention (target
over source); an encoder alone (BERT) has the first, a decoder alone (GPT) the second.
:func:`attention_weights` collects each kind, layer by layer, with :func:`aiayn.layers.record_attention`;
:func:`plot_model_attention` draws one grid per kind, :func:`plot_attention_grid` one grid.

:func:`plot_from_token` is the tutorials' picture (Tensor2Tensor's, The Illustrated Transformer's): the sentence
twice, side by side, and a line from one token on the left to every token on the right, as thick and as dark
as the weight, one panel per head::

      the           the
      animal   .==== animal      a thick line from "it" to "animal": "it" attends mostly to "animal",
      street  //     street      and thin ones to the rest
      it ====' ----- it

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
FROM_FILES = {kind: name.replace(".png", "-from.png") for kind, name in FILES.items()}  # plot_from_token's
# word-piece marks that are not part of the word: WordPiece's continuation, GPT-2's and SentencePiece's space
_MARKS = ("##", "\u0120", "\u2581")


def pick(n: int, chosen: int | None, argument: str, what: str) -> list[int]:
    """The indices ``[chosen]``, or all ``n`` when ``chosen`` is ``None``.

    Raises:
        ValueError: ``chosen`` is not in ``[0, n)``; the message names ``argument`` and says how many ``what``.
    """
    if chosen is None:
        return list(range(n))
    if not 0 <= chosen < n:
        raise ValueError(f"{argument} {chosen}: the model has {n} {what} (0 to {n - 1})")
    return [chosen]


def _bare(token: str) -> str:
    """``token`` without its word-piece marks and spaces, case-folded: what is compared with a word."""
    token = token.strip()
    for mark in _MARKS:
        if token.startswith(mark):
            token = token[len(mark):]
    return token.strip().casefold()


def find_token(tokens: Sequence[str], word: str, argument: str = "token") -> int:
    """The index of ``word`` among ``tokens``: its first occurrence as a whole word, compared without case and
    without word-piece marks (``##``, GPT-2's ``Ġ``, SentencePiece's ``▁``); a word cut into pieces
    (``un ##aff ##able``, or characters) gives its first piece.

    A run of tokens is a whole word when it neither starts inside a word (a ``##`` piece, or a letter or digit
    right after one with no space between) nor ends inside one. Tokens in BERT's style (``[CLS]`` or ``##``
    pieces) start a word at every piece without ``##``.

    Raises:
        ValueError: ``word`` is empty or not a word of ``tokens`` (the message names ``argument`` and lists them).
    """
    want = word.strip().casefold()
    if not want:
        raise ValueError(f"{argument} is empty: expected a word of the text")
    wordpiece = any(t.startswith("##") or t == "[CLS]" for t in tokens)
    bare = [_bare(t) for t in tokens]

    def joined(left: str, right: str) -> bool:  # right continues the word left ends
        if right.startswith("##"):
            return True
        if wordpiece or not left or not right or right[0].isspace() or right.startswith(_MARKS[1:]):
            return False
        return left[-1].isalnum() and right[0].isalnum()

    for i in range(len(tokens)):
        if not bare[i] or (i > 0 and joined(tokens[i - 1], tokens[i])) or tokens[i].startswith("##"):
            continue
        got = ""
        for j in range(i, len(tokens)):
            got += bare[j]
            if got == want and (j + 1 == len(tokens) or not joined(tokens[j], tokens[j + 1])):
                return i
            if not bare[j] or not want.startswith(got):
                break
    raise ValueError(f"{argument} {word!r} is not a word of the text; its tokens are {list(tokens)}")


def plot_attention_grid(
    weights: Sequence[Tensor],
    queries: Sequence[str],
    keys: Sequence[str],
    path: str | os.PathLike,
    title: str = "",
    row_label: str = "layer",
    *,
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
) -> Path:
    """One heat map per (layer, head): rows are layers, columns heads.

    Args:
        weights: per layer, ``(H, T, S)`` attention weights of one example.
        queries: the T query tokens (y axis); keys: the S key tokens (x axis).
        layers, heads: the layers (rows) and heads (columns) to draw, by index (default all); the titles keep
            the model's numbers.
    """
    plt = pyplot()
    rows = list(range(len(weights))) if layers is None else list(layers)
    cols = list(range(weights[0].size(0))) if heads is None else list(heads)
    t, s = len(queries), len(keys)
    fig, axes = plt.subplots(
        len(rows), len(cols), figsize=(1.0 + len(cols) * max(2.0, 0.22 * s), 0.6 + len(rows) * max(1.6, 0.25 * t)),
        squeeze=False,
    )
    for r, layer in enumerate(rows):
        for c, h in enumerate(cols):
            ax = axes[r][c]
            ax.imshow(weights[layer][h, :t, :s].float().cpu().numpy(), cmap="viridis", vmin=0.0, vmax=1.0,
                      aspect="auto")
            ax.set_xticks(range(s), [k if k.strip() else "␣" for k in keys], fontsize=6, rotation=90)
            ax.set_yticks(range(t), list(queries), fontsize=6)
            ax.set_title(f"{row_label} {layer} head {h}", fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return save(fig, path)


def draw_from_token(ax: Any, queries: Sequence[str], keys: Sequence[str], index: int, row: Tensor,
                    title: str = "") -> None:
    """Draw on ``ax`` the queries in a column on the left, the keys on the right, and a line from query ``index``
    to every key, its width and opacity the weight (the weights of one head, as the tutorials draw them).

    Args:
        ax: a matplotlib axes.
        queries: the T tokens on the left; ``keys``: the S tokens on the right.
        index: the query whose attention is drawn (highlighted).
        row: ``(S,)`` its weights over the keys (a softmax row: in [0, 1], summing to 1).
    """
    if row.shape != (len(keys),):
        raise ValueError(f"row {tuple(row.shape)} must be ({len(keys)},): one weight per key")
    if not 0 <= index < len(queries):
        raise ValueError(f"index {index} must be in [0, {len(queries)})")
    w = row.float().cpu().tolist()
    n = max(len(queries), len(keys))
    y_q = [n - 1 - i * (n - 1) / max(len(queries) - 1, 1) for i in range(len(queries))]  # top to bottom
    y_k = [n - 1 - j * (n - 1) / max(len(keys) - 1, 1) for j in range(len(keys))]
    for j, weight in enumerate(w):
        ax.plot([0.12, 0.88], [y_q[index], y_k[j]], color="#1f5fbf", solid_capstyle="round",
                linewidth=0.3 + 6.0 * weight, alpha=min(1.0, 0.08 + weight))
    for i, tok in enumerate(queries):
        ax.text(0.1, y_q[i], tok if tok.strip() else "␣", ha="right", va="center", fontsize=7,
                fontweight="bold" if i == index else "normal",
                bbox={"facecolor": "#ffe08a", "edgecolor": "none", "pad": 1.0} if i == index else None)
    for j, tok in enumerate(keys):
        ax.text(0.9, y_k[j], tok if tok.strip() else "␣", ha="left", va="center", fontsize=7,
                color=(0.0, 0.0, 0.0, min(1.0, 0.35 + w[j])))
    ax.set_xlim(-0.55, 1.55)
    ax.set_ylim(-0.8, n - 0.2)
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=8)


def plot_from_token(
    weights: Sequence[Tensor],
    queries: Sequence[str],
    keys: Sequence[str],
    index: int,
    path: str | os.PathLike,
    title: str = "",
    row_label: str = "layer",
    *,
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
    columns: int = 6,
) -> Path:
    """Where one token looks: :func:`draw_from_token` for query ``index``, one panel per (layer, head): each layer
    starts a row, its heads left to right, wrapped after ``columns`` panels (BERT-base's 12 heads are two rows of
    6, not a strip 30 panels wide).

    Args:
        weights: per layer, ``(H, T, S)`` attention weights of one example.
        queries, keys: the T and S tokens.
        index: the query token whose attention is drawn (:func:`find_token` finds it from a word).
        layers, heads: the layers and heads to draw, by index (default all).
        columns: the most panels in a row.

    Raises:
        ValueError: ``columns`` below 1.
    """
    if columns < 1:
        raise ValueError(f"columns must be >= 1, got {columns}")
    plt = pyplot()
    rows = list(range(len(weights))) if layers is None else list(layers)
    cols = list(range(weights[0].size(0))) if heads is None else list(heads)
    width = min(columns, len(cols))
    per_layer = -(-len(cols) // width)  # the rows one layer's heads take
    n = max(len(queries), len(keys))
    fig, axes = plt.subplots(len(rows) * per_layer, width, squeeze=False,
                             figsize=(0.4 + 2.4 * width, 0.5 + len(rows) * per_layer * (0.6 + 0.19 * n)))
    for ax in axes.flat:
        ax.axis("off")  # a last row a layer's heads do not fill stays blank
    for r, layer in enumerate(rows):
        for i, h in enumerate(cols):
            ax = axes[r * per_layer + i // width][i % width]
            draw_from_token(ax, queries, keys, index, weights[layer][h, index, : len(keys)],
                            title=f"{row_label} {layer} head {h}")
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


__all__ = ["FILES", "FROM_FILES", "KINDS", "attention_weights", "draw_from_token", "find_token", "pick",
           "plot_attention_grid", "plot_from_token", "plot_model_attention"]
