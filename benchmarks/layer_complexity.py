"""Table 1 of Vaswani et al. 2017, measured: one layer of each kind as the sequence grows, forward + backward.

    python benchmarks/layer_complexity.py            # n = 64 .. 4096, d = 256: the JSON, the PNG, the table
    python benchmarks/layer_complexity.py --quick    # toy sizes, seconds, into a temporary folder

Layers (:func:`aiayn.analysis.complexity.layer_costs`): ``nn.LSTM(d, d)``, ``nn.Conv1d(d, d, k=3,
padding="same")``, our ``MultiHeadAttention`` over all n positions on its explicit path (the scores held)
and on its default fused path (``F.scaled_dot_product_attention``), and the same restricted to a band of
r = 64 neighbours (computed in blocks, O(n r d)); batch 1, 4 heads, one thread. At each n the four layers run
in turn, round after round, and the median of 7 rounds is kept, so a burst of load from the other processes
on this shared machine falls on all of them: read the ratios between the layers and where their curves cross,
not the seconds. Memory is the peak of the bytes held by the tensors the step creates (any device). There is
no training here, so nothing is chosen on a validation split: every number is a measurement of the fixed
layers on random inputs.

Writes ``benchmarks/results/layer_complexity.{json,png}`` (``--out`` elsewhere; ``--quick``: a new temporary
folder) and prints the Markdown table of the README.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from pathlib import Path

import torch

from aiayn.analysis.complexity import LAYERS, crossing, layer_costs
from aiayn.io import write_text
from aiayn.viz.complexity import plot_layer_complexity

ROOT = Path(__file__).resolve().parent.parent


def table(rows: list[dict]) -> str:
    """The README's Markdown table: milliseconds and peak MiB per layer kind, and attention / LSTM."""
    head = ("| n | attention ms | fused attention ms | LSTM ms | conv ms | restricted ms | attention / LSTM time "
            "| attention MiB | fused MiB | LSTM MiB | conv MiB | restricted MiB |")
    lines = [head, "|---:" * 12 + "|"]
    for r in rows:
        ms = [f"{1e3 * r[f'{k}_seconds']:.2f}" for k in LAYERS]
        mib = [f"{r[f'{k}_bytes'] / 2**20:.1f}" if f"{k}_bytes" in r else "" for k in LAYERS]
        ratio = r["self-attention_seconds"] / r["recurrent_seconds"]
        lines.append(f"| {r['n']} | {' | '.join(ms)} | {ratio:.2f} | {' | '.join(mib)} |")
    return "\n".join(lines)


def summary(rows: list[dict]) -> dict:
    """Where self-attention's cost meets the LSTM's: by the formulas and measured (time, memory)."""
    ns = [r["n"] for r in rows]
    d = rows[0]["d_model"]
    out: dict = {"formula_crossing_n": 2 * d}
    for attention in ("self-attention", "fused-attention"):
        for what in ("seconds", "bytes"):
            if f"{attention}_{what}" in rows[0]:
                out[f"measured_{what}_crossing_n_{attention}_vs_lstm"] = crossing(
                    ns, [r[f"{attention}_{what}"] for r in rows], [r[f"recurrent_{what}"] for r in rows])
    # achieved multiply-adds per second (3 x forward for forward + backward), at every n
    out["gmacs_per_second"] = {k: [round(3 * r[f"{k}_macs"] / r[f"{k}_seconds"] / 1e9, 2) for r in rows]
                               for k in LAYERS}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=None, help="n (default 64 .. 4096, doubling)")
    p.add_argument("--d-model", type=int, default=None, help="d (default 256)")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kernel", type=int, default=3)
    p.add_argument("--r", type=int, default=None, help="the restricted attention's neighbourhood (default 64)")
    p.add_argument("--repeats", type=int, default=None, help="timed rounds per n (default 7)")
    p.add_argument("--quick", action="store_true", help="toy sizes: checks that it runs, measures nothing")
    p.add_argument("--out", help="folder of the results (default benchmarks/results; --quick: a new temporary "
                                 "folder)")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    if args.quick:
        lengths, d, r, repeats = args.lengths or [16, 32, 64], args.d_model or 32, args.r or 8, args.repeats or 1
    else:
        lengths = args.lengths or [64, 128, 256, 512, 1024, 2048, 4096]
        d, r, repeats = args.d_model or 256, args.r or 64, args.repeats or 7
    out = Path(args.out or (tempfile.mkdtemp(prefix="layer-complexity-quick-") if args.quick
                            else ROOT / "benchmarks" / "results"))
    rows = layer_costs(lengths, d, args.heads, args.kernel, r, batch=1, repeats=repeats, threads=1)
    result = {"config": {"lengths": lengths, "d_model": d, "heads": args.heads, "kernel": args.kernel, "r": r,
                         "batch": 1, "repeats": repeats, "threads": 1, "quick": args.quick,
                         "torch": torch.__version__, "machine": platform.machine()},
              "summary": summary(rows), "rows": rows}
    path = write_text(out / "layer_complexity.json", json.dumps(result, indent=1) + "\n")
    png = plot_layer_complexity(rows, out / "layer_complexity.png")
    print(table(rows))
    print(json.dumps(result["summary"], indent=1))
    print(f"wrote {path} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
