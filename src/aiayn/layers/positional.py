"""Positional information (section 3.5): sinusoidal encodings and learned position embeddings.

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

``layout="interleaved"`` is that formula (sin on even dimensions, cos on odd);
``layout="concat"`` puts all the sines first, then all the cosines, as tensor2tensor computes them and
The Illustrated Transformer draws them. Both hold the same numbers in a different order.

Shapes: T positions, C model dim.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

LAYOUTS = ("interleaved", "concat")


def sinusoidal_encoding(n_positions: int, d_model: int, layout: str = "interleaved", start: int = 0) -> Tensor:
    """The ``(T, C)`` table of sinusoidal encodings for positions ``start .. start + T - 1``."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r} must be one of {LAYOUTS}")
    if d_model % 2:
        raise ValueError(f"d_model={d_model} must be even for sinusoidal encodings")
    pos = torch.arange(start, start + n_positions, dtype=torch.float64)[:, None]  # (T, 1)
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))  # (C/2,)
    angles = pos * inv_freq  # (T, C/2)
    if layout == "concat":
        table = torch.cat([angles.sin(), angles.cos()], dim=-1)
    else:
        table = torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)  # sin, cos, sin, cos ...
    return table.float()  # computed in float64 so far positions stay exact


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed encodings, no parameters; works for any length (the table grows on demand)."""

    def __init__(self, d_model: int, max_len: int = 1024, layout: str = "interleaved") -> None:
        super().__init__()
        self.d_model, self.layout = d_model, layout
        self.register_buffer("table", sinusoidal_encoding(max_len, d_model, layout), persistent=False)

    def forward(self, t: int, start: int = 0, position_ids: Tensor | None = None) -> Tensor:
        """Encodings ``(T, C)`` of positions ``start .. start + t - 1``, or ``(B, T, C)`` of ``position_ids``."""
        end = start + t if position_ids is None else int(position_ids.max()) + 1
        if end > self.table.size(0):  # past the longest length seen so far: extend, never refuse
            n = max(end, 2 * self.table.size(0))
            self.table = sinusoidal_encoding(n, self.d_model, self.layout).to(self.table.device)
        return self.table[start : start + t] if position_ids is None else self.table[position_ids]


class LearnedPositionalEmbedding(nn.Module):
    """One learned vector per position, the alternative of section 3.5 (and GPT, BERT, ViT)."""

    def __init__(self, max_len: int, d_model: int, offset: int = 0) -> None:
        super().__init__()
        self.max_len, self.offset = max_len, offset  # position p reads row p + offset (BART: offset 2)
        self.weight = nn.Parameter(torch.empty(max_len + offset, d_model))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, t: int, start: int = 0, position_ids: Tensor | None = None) -> Tensor:
        """Vectors ``(T, C)`` of positions ``start .. start + t - 1``, or ``(B, T, C)`` of ``position_ids``."""
        end = start + t if position_ids is None else int(position_ids.max()) + 1
        if end > self.max_len:
            raise ValueError(
                f"sequence of {end} positions is longer than the {self.max_len} learned positions "
                f"(max_len); use a shorter input or sinusoidal positions"
            )
        if position_ids is None:
            return self.weight[self.offset + start : self.offset + start + t]
        return self.weight[position_ids + self.offset]
