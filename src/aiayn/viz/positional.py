"""Pictures of the sinusoidal positional encodings (Vaswani et al. 2017, section 3.5).

    PE(pos, 2i) = sin(pos / 10000^(2i/C)),   PE(pos, 2i+1) = cos(pos / 10000^(2i/C))

Each pair of dimensions is a rotation at frequency w_i = 10000^(-2i/C), so the dot product of two encodings
depends on their offset k alone:

    PE(p) . PE(p + k) = sum_i sin(w_i p) sin(w_i (p+k)) + cos(w_i p) cos(w_i (p+k)) = sum_i cos(w_i k)

C/2 at k = 0, falling (not monotonically) as positions move apart: the "attend by relative position" the
section hopes a linear map can learn. Both layouts (``sinusoidal``: sin and cos interleaved, the formula;
``sinusoidal-concat``: all sines then all cosines, as tensor2tensor) hold the same numbers, so the same dot
products.

Shapes: T positions, C d_model.
"""

from __future__ import annotations

import os
from pathlib import Path

from torch import Tensor

from aiayn.layers.positional import sinusoidal_encoding
from aiayn.viz.common import pyplot, save


def encoding_similarity(n_positions: int, d_model: int, layout: str = "interleaved") -> Tensor:
    """``(T, T)`` dot products ``PE(p) . PE(q)`` of the first ``n_positions`` encodings; ``sum_i cos(w_i (q - p))``."""
    pe = sinusoidal_encoding(n_positions, d_model, layout).double()  # (T, C)
    return pe @ pe.T  # (T, T)


def plot_positional(path: str | os.PathLike, d_model: int = 128, n_positions: int = 100) -> Path:
    """Four panels: the encodings of the first ``n_positions`` positions by dimension in both layouts, the
    dot product of every pair of positions, and the dot product against the offset from a few positions.

    Args:
        path: the PNG to write.
        d_model: C, even.
        n_positions: T.
    """
    if n_positions < 2:
        raise ValueError(f"n_positions={n_positions} must be at least 2")
    plt = pyplot()
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    for ax, layout, name in ((axes[0][0], "interleaved", "sinusoidal"), (axes[0][1], "concat", "sinusoidal-concat")):
        pe = sinusoidal_encoding(n_positions, d_model, layout)  # (T, C)
        im = ax.imshow(pe.numpy(), cmap="RdBu", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
        ax.set_title(f"positional={name!r} ({layout}): PE(pos, dim)", fontsize=9)
        ax.set_xlabel("dimension")
        ax.set_ylabel("position")
        fig.colorbar(im, ax=ax, fraction=0.046)
    sim = encoding_similarity(n_positions, d_model)  # (T, T)
    im = axes[1][0].imshow(sim.numpy(), cmap="viridis", aspect="auto", interpolation="nearest")
    axes[1][0].set_title("PE(p) . PE(q): a function of q - p alone (both layouts)", fontsize=9)
    axes[1][0].set_xlabel("position q")
    axes[1][0].set_ylabel("position p")
    fig.colorbar(im, ax=axes[1][0], fraction=0.046)
    ax = axes[1][1]
    for p in sorted({0, n_positions // 4, n_positions // 2}):
        ks = range(n_positions - p)
        ax.plot(list(ks), [float(sim[p, p + k]) / (d_model / 2) for k in ks], label=f"from position {p}", lw=1.2)
    ax.set_title("PE(p) . PE(p + k) / (C/2) as positions move apart", fontsize=9)
    ax.set_xlabel("offset k")
    ax.set_ylabel("normalised dot product")
    ax.axhline(0, color="grey", lw=0.5)
    ax.legend(fontsize=8)
    fig.suptitle(f"Sinusoidal positional encodings (section 3.5), d_model={d_model}", fontsize=11)
    fig.tight_layout()
    return save(fig, path)


__all__ = ["encoding_similarity", "plot_positional"]
