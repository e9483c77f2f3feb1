"""Picture of global against window attention: measured time and memory beside the formulas' curves.

The formulas (:mod:`aiayn.analysis.complexity`) give multiply-adds, not seconds; the time panel turns them into
seconds with one rate fitted to all the measured points (on the log scale of the picture), the same rate for
both kinds of attention, so the curves test the formulas' slopes, not their constant. The memory panel draws
the score matrices' bytes as they are, unfitted.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

from aiayn.viz.common import pyplot, save


def fitted_rate(rows: Sequence[dict[str, float]]) -> float:
    """Multiply-adds per second that best turn the formulas into the measured times on a log scale: the
    geometric mean of multiply-adds / seconds over every point."""
    logs = [math.log(r[f"{k}_macs"] / max(r[f"{k}_seconds"], 1e-12)) for r in rows for k in ("global", "window")]
    return math.exp(sum(logs) / len(logs))


def plot_complexity(rows: Sequence[dict[str, float]], path: str | os.PathLike) -> Path:
    """Two log-log panels over the number of patches: seconds and peak bytes, measured (dots) and by formula.

    Args:
        rows: from :func:`aiayn.analysis.complexity.attention_costs`.
        path: the PNG to write.
    """
    if not rows:
        raise ValueError("rows is empty: measure at least one map size")
    plt = pyplot()
    tokens = [r["tokens"] for r in rows]
    m, c, h = rows[0]["window"], rows[0]["channels"], rows[0]["heads"]
    rate = fitted_rate(rows)
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(12, 4.8))
    colors = {"global": "tab:red", "window": "tab:blue"}
    labels = {"global": "global MSA: 4hwC^2 + 2(hw)^2 C", "window": f"W-MSA (M={m}): 4hwC^2 + 2M^2 hwC"}
    for kind in ("global", "window"):
        ax_t.plot(tokens, [r[f"{kind}_seconds"] for r in rows], "o", color=colors[kind], label=f"{kind}, measured")
        ax_t.plot(tokens, [r[f"{kind}_macs"] / rate for r in rows], "-", color=colors[kind], label=labels[kind])
        ax_m.plot(tokens, [r[f"{kind}_bytes"] for r in rows], "o", color=colors[kind], label=f"{kind}, measured peak")
        ax_m.plot(tokens, [r[f"{kind}_score_bytes"] for r in rows], "-", color=colors[kind],
                  label=f"{kind}: scores, 4 bytes x {'H (hw)^2' if kind == 'global' else 'H hw M^2'}")
    ax_t.set_title(f"time of one attention layer (C={c}, {h} heads); formulas / {rate / 1e9:.2f} GMAC/s fitted",
                   fontsize=9)
    ax_t.set_ylabel("seconds")
    ax_m.set_title("memory: peak bytes of the tensors created, and the score matrices", fontsize=9)
    ax_m.set_ylabel("bytes")
    for ax in (ax_t, ax_m):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("patches hw")
        ax.legend(fontsize=7)
    fig.suptitle("Global vs window attention as the map grows (Swin, section 3.2)", fontsize=11)
    fig.tight_layout()
    return save(fig, path)


__all__ = ["fitted_rate", "plot_complexity"]
