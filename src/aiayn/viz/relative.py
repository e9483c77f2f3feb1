"""How far back each head of a Transformer-XL looks: its mean attention weight at each relative distance.

A model with relative positions (Dai et al., 2019) scores a key by its distance from the query, so the natural
picture of what a head learned is the weight it gives, on average, to the key d positions back, for d from 0 to
the memory's and the segment's length: a head that reads the last few tokens falls fast, one that reads the
memory keeps its weight far out (the paper's Figure 2 to 4 in its appendix draw the same, averaged over heads).
The text is read segment by segment through the memory, as in evaluation; only segments that find the memory
full are counted, so every distance up to ``mem_len`` is seen by every query.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor


@torch.no_grad()
def attention_by_distance(model: Any, ids: Tensor, block: int) -> Tensor:
    """``(L, H, D)``: each layer's and head's mean attention weight at distances 0 .. D - 1 (D = the memory's
    length + ``block``), reading ``ids`` ``(1, N)`` in segments of ``block`` through ``model``'s memory.

    Raises:
        ValueError: ``ids`` too short to fill the memory and leave a segment after it.
    """
    from aiayn.layers.attention import record_attention

    model.eval()
    memory = model.new_memory()
    mem_len, n = memory.mem_len, ids.size(1)
    if mem_len is None or n < mem_len + block:
        raise ValueError(f"the text is {n} tokens: it must fill the memory ({mem_len}) and a segment ({block}) "
                         f"after it")
    layers, heads = len(model.layers), model.cfg.n_heads
    total = torch.zeros(layers, heads, mem_len + block, dtype=torch.float64)
    count = torch.zeros(mem_len + block, dtype=torch.float64)
    for at in range(0, n - block + 1, block):
        full = memory.length == mem_len
        with record_attention(model) as rec:
            model(ids[:, at : at + block], memory)
        if not full:
            continue
        t, s = block, mem_len + block
        distance = (torch.arange(t)[:, None] + mem_len - torch.arange(s)[None]).flatten()  # (T S,)
        seen = distance >= 0
        count += torch.bincount(distance[seen], minlength=s).double()
        for i, (_, calls) in enumerate(sorted(rec.items(), key=lambda kv: _index(kv[0]))):
            w = calls[0][0].double().flatten(1)  # (H, T S), row 0 of the batch
            for h in range(heads):
                total[i, h] += torch.bincount(distance[seen], weights=w[h, seen], minlength=s)
    if not count.any():
        raise ValueError("no segment found the memory full")
    return (total / count.clamp(min=1)).float()


def _index(name: str) -> int:
    """The layer number in a module name such as ``layers.3.self_attn``."""
    return int(name.split(".")[1])


def plot_relative(weights: Tensor, path: str | os.PathLike, title: str = "") -> Path:
    """One panel per layer: each head's mean weight against the distance back, log-scaled both ways."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers, heads, d = weights.shape
    cols = min(layers, 3)
    rows = -(-layers // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(max(6.0, 4.2 * cols), 3.2 * rows), squeeze=False, sharey=True)
    x = torch.arange(1, d + 1)  # distance + 1, so that 0 (the token itself) sits on a log axis
    for i in range(layers):
        ax = axes[i // cols][i % cols]
        for h in range(heads):
            ax.plot(x, weights[i, h].clamp(min=1e-6), lw=1, label=f"head {h}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"layer {i}")
        ax.set_xlabel("distance back + 1 (1 = the token itself)")
    for j in range(layers, rows * cols):
        axes[j // cols][j % cols].axis("off")
    axes[0][0].set_ylabel("mean attention weight")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title or "attention by relative distance", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


__all__ = ["attention_by_distance", "plot_relative"]
