"""Pictures of attention's cost: global against window attention (Swin), and one layer of each kind of Table 1
of Vaswani et al. 2017 (self-attention, recurrent, convolutional, restricted), measured beside the formulas.

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


_LAYER_STYLE = {"self-attention": ("tab:red", "self-attention, explicit: 4nd^2 + 2n^2 d"),
                "fused-attention": ("tab:orange", "self-attention, fused SDPA: the same"),
                "recurrent": ("tab:green", "recurrent (LSTM): 8nd^2, n steps in sequence"),
                "convolutional": ("tab:purple", "convolutional: k n d^2"),
                "restricted": ("tab:blue", "restricted self-attention: 4nd^2 + 2nrd")}


def plot_layer_complexity(rows: Sequence[dict[str, float]], path: str | os.PathLike) -> Path:
    """Three log-log panels over the sequence length n for one layer of each kind: forward + backward seconds
    (dots, measured) with the formulas' multiply-adds turned into seconds by one rate (dashed); peak bytes;
    and the multiply-adds per second each layer achieves. Dotted verticals: where the formulas say
    self-attention and the recurrence cost the same (n = 2d, grey) and where the measured times (and peak
    bytes) of the explicit self-attention and the LSTM cross (black).

    The rate is the best any layer achieved at the largest n: a layer above its dashed line runs slower than
    its arithmetic would at that rate (small matmuls in sequence, memory traffic, Python overhead).

    Args:
        rows: from :func:`aiayn.analysis.complexity.layer_costs` (with ``memory=True``).
        path: the PNG to write.
    """
    from aiayn.analysis.complexity import LAYERS, crossing

    if not rows:
        raise ValueError("rows is empty: measure at least one sequence length")
    plt = pyplot()
    ns = [r["n"] for r in rows]
    d, k, r, h = rows[0]["d_model"], rows[0]["kernel"], rows[0]["r"], rows[0]["heads"]
    top = rows[-1]
    kinds = [kind for kind in LAYERS if f"{kind}_seconds" in top]
    rate = max(3 * top[f"{kind}_macs"] / top[f"{kind}_seconds"] for kind in kinds)  # forward + backward ~ 3 fwd
    fig, (ax_t, ax_m, ax_r) = plt.subplots(1, 3, figsize=(18, 5.6))
    for kind in kinds:
        color, label = _LAYER_STYLE[kind]
        ax_t.plot(ns, [row[f"{kind}_seconds"] for row in rows], "o-", color=color, label=f"{label}", lw=1.2)
        ax_t.plot(ns, [3 * row[f"{kind}_macs"] / rate for row in rows], "--", color=color, lw=0.9, alpha=0.7)
        if f"{kind}_bytes" in rows[0]:
            ax_m.plot(ns, [row[f"{kind}_bytes"] for row in rows], "o-", color=color, label=kind, lw=1.2)
        ax_r.plot(ns, [3 * row[f"{kind}_macs"] / row[f"{kind}_seconds"] / 1e9 for row in rows], "o-", color=color,
                  label=kind, lw=1.2)
    formula_n = 2 * d  # 4nd^2 + 2n^2 d = 8nd^2
    measured_n = crossing(ns, [row["self-attention_seconds"] for row in rows],
                          [row["recurrent_seconds"] for row in rows])
    for ax in (ax_t, ax_m, ax_r):
        ax.axvline(formula_n, color="grey", ls=":", lw=1)
    notes = [f"grey: formulas, attention = LSTM at n = 2d = {formula_n:g}"]
    if measured_n is not None:
        ax_t.axvline(measured_n, color="k", ls=":", lw=1)
        notes.append(f"black: measured, explicit attention = LSTM at n = {measured_n:.0f}")
    ax_t.text(0.02, 0.98, "\n".join(notes), transform=ax_t.transAxes, fontsize=7, va="top")
    if "self-attention_bytes" in rows[0]:
        mem_n = crossing(ns, [row["self-attention_bytes"] for row in rows], [row["recurrent_bytes"] for row in rows])
        if mem_n is not None:
            ax_m.axvline(mem_n, color="k", ls=":", lw=1)
            ax_m.text(0.02, 0.98, f"black: explicit attention = LSTM at n = {mem_n:.0f}", transform=ax_m.transAxes,
                      fontsize=7, va="top")
    ax_t.set_title(f"forward + backward time; dashed: 3 x forward MACs at {rate / 1e9:.1f} GMAC/s (the best rate)",
                   fontsize=9)
    ax_t.set_ylabel("seconds (median)")
    ax_m.set_title("peak bytes of the tensors created (forward + backward)", fontsize=9)
    ax_m.set_ylabel("bytes")
    ax_r.set_title("multiply-adds per second achieved (3 x forward MACs / time)", fontsize=9)
    ax_r.set_ylabel("GMAC/s")
    for ax in (ax_t, ax_m, ax_r):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ns, [f"{n:g}" for n in ns])
        ax.set_xlabel("sequence length n")
    ax_t.legend(fontsize=7, loc="lower right")
    ax_m.legend(fontsize=7, loc="lower right")
    ax_r.legend(fontsize=7, loc="best")
    fig.suptitle(f"One layer of each kind, d = {d:g}, {h:g} heads, k = {k:g}, r = {r:g}, batch {rows[0]['batch']:g} "
                 "(Vaswani et al. 2017, Table 1)", fontsize=11)
    fig.tight_layout()
    return save(fig, path)


__all__ = ["fitted_rate", "plot_complexity", "plot_layer_complexity"]
