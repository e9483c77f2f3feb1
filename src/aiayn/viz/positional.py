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


def _ticks(n: int, most: int = 10) -> list[int]:
    """Tick positions 0 .. n - 1: every one when few, else about ``most`` round steps and the last."""
    if n <= 2 * most:
        return list(range(n))
    step = next(s for s in (2, 4, 5, 8, 10, 16, 20, 25, 32, 50, 64, 100, 128, 200, 256, 500, 512, 1000, n)
                if s >= n / most)
    return sorted(set(range(0, n, step)) | {n - 1})


def plot_positional(path: str | os.PathLike, d_model: int = 512, n_positions: int = 20) -> Path:
    """The tutorials' picture on top: the encodings of positions 0 .. T-1 over dimensions 0 .. C-1 in the
    ``sinusoidal-concat`` layout (tensor2tensor's), the sines in the left half and the cosines in the right,
    the halves marked. Below: the ``sinusoidal`` (interleaved, the formula's) layout, the dot product of
    every pair of positions, and the dot product against the offset from a few positions.

    Args:
        path: the PNG to write.
        d_model: C, even (the tutorials' 512).
        n_positions: T, at least 2 (the tutorials' 20).
    """
    if n_positions < 2:
        raise ValueError(f"n_positions={n_positions} must be at least 2")
    if d_model < 2 or d_model % 2:
        raise ValueError(f"d_model={d_model} must be even and positive")
    plt = pyplot()
    fig = plt.figure(figsize=(15, 9))
    grid = fig.add_gridspec(2, 3, height_ratios=(1.1, 1))
    half = d_model // 2

    ax = fig.add_subplot(grid[0, :])
    pe = sinusoidal_encoding(n_positions, d_model, "concat")  # (T, C): [sin | cos]
    im = ax.imshow(pe.numpy(), cmap="RdBu", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    ax.axvline(half - 0.5, color="k", lw=1.5)
    for x, text in ((half / 2, f"sin(pos / 10000^(2i/{d_model})): dimensions 0-{half - 1}"),
                    (half + half / 2, f"cos(pos / 10000^(2i/{d_model})): dimensions {half}-{d_model - 1}")):
        ax.text(x, -0.6, text, ha="center", va="bottom", fontsize=9)
    ax.set_xticks(_ticks(d_model))
    ax.set_yticks(_ticks(n_positions))
    ax.set_xlabel(f"dimension (0-{d_model - 1})")
    ax.set_ylabel(f"position (0-{n_positions - 1})")
    ax.set_title(f"positional='sinusoidal-concat': {n_positions} positions x {d_model} dimensions, sine half | "
                 "cosine half", fontsize=10, pad=18)
    fig.colorbar(im, ax=ax, fraction=0.02, pad=0.01)

    ax = fig.add_subplot(grid[1, 0])
    pe = sinusoidal_encoding(n_positions, d_model, "interleaved")  # (T, C): sin, cos, sin, cos ...
    im = ax.imshow(pe.numpy(), cmap="RdBu", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    ax.set_yticks(_ticks(n_positions, 5))
    ax.set_title("positional='sinusoidal' (interleaved: PE(pos, 2i) = sin, PE(pos, 2i+1) = cos)", fontsize=8)
    ax.set_xlabel("dimension")
    ax.set_ylabel("position")
    fig.colorbar(im, ax=ax, fraction=0.046)
    sim = encoding_similarity(n_positions, d_model)  # (T, T)
    ax = fig.add_subplot(grid[1, 1])
    im = ax.imshow(sim.numpy(), cmap="viridis", aspect="auto", interpolation="nearest")
    ax.set_xticks(_ticks(n_positions, 5))
    ax.set_yticks(_ticks(n_positions, 5))
    ax.set_title("PE(p) . PE(q): a function of q - p alone (both layouts)", fontsize=8)
    ax.set_xlabel("position q")
    ax.set_ylabel("position p")
    fig.colorbar(im, ax=ax, fraction=0.046)
    ax = fig.add_subplot(grid[1, 2])
    for p in sorted({0, n_positions // 4, n_positions // 2}):
        ks = range(n_positions - p)
        ax.plot(list(ks), [float(sim[p, p + k]) / (d_model / 2) for k in ks], label=f"from position {p}", lw=1.2)
    ax.set_title("PE(p) . PE(p + k) / (C/2) as positions move apart", fontsize=8)
    ax.set_xlabel("offset k")
    ax.set_ylabel("normalised dot product")
    ax.axhline(0, color="grey", lw=0.5)
    ax.legend(fontsize=8)
    fig.suptitle(f"Sinusoidal positional encodings (section 3.5), d_model={d_model}", fontsize=11)
    fig.tight_layout()
    return save(fig, path)


__all__ = ["encoding_similarity", "plot_positional"]
