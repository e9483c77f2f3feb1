"""Which float32 product ``aiayn.layers.fast`` takes on the CPU, timed: ``F.linear``, the swapped product
``(W x^T)^T`` (``fast.linear_few_rows``) and oneDNN's inner product (``fast.linear_onednn``).

    python benchmarks/linear_kernels.py [--threads 1] [--rounds 7]
    python benchmarks/linear_kernels.py --quick          # small sizes, seconds, into a temporary folder

Products of 1 to 1,024 rows (decoding's one row per sequence, up to a prompt's or an encoder's many) by the
matrices of small and GPT-2/Llama-124M-sized models, with a bias, no gradient; the three take their rounds in
turn. Which is fastest depends on the CPU's instructions (``torch.backends.cpu.get_cpu_capability()``, recorded
with the machine): on AVX2 the swapped product beat ``F.linear`` for few rows, on AVX-512 oneDNN's product wins
for matrices of a million weights or more, which is how ``fast.SWAP_FEW_ROWS`` and ``fast.ONEDNN_MIN`` route
them. Writes ``benchmarks/results/linear_kernels.json``: each product's median microseconds and ``F.linear``'s
time over each other's.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import torch.nn.functional as F

from aiayn.benchmark.harness import machine
from aiayn.benchmark.scripts import median_times, script_args, write_results
from aiayn.layers import fast

RESULTS = Path(__file__).parent / "results"  # a full run writes here unless --out says
MATRICES = [(384, 128), (128, 512), (768, 768), (1280, 768), (2048, 768), (768, 2048), (32000, 768)]  # (out, in)
ROWS = [1, 4, 16, 64, 256, 1024]
MOST = 1024 * 2048 * 768  # multiply-adds: larger products are left out (seconds each, and nothing new)
QUICK = [(1, 32, 48), (4, 64, 48)]  # (rows, out, in)


def products(rows: int, o: int, k: int) -> dict:
    """``name -> zero-argument call`` computing ``x W^T + b`` for a random ``x (rows, k)``, ``W (o, k)``."""
    x, w, b = torch.randn(rows, k), torch.randn(o, k), torch.randn(o)
    calls = {"F.linear": lambda: F.linear(x, w, b), "swapped": lambda: fast.linear_few_rows(x, w, b)}
    if fast._ONEDNN:
        calls["oneDNN"] = lambda: fast.linear_onednn(x, w, b)
    return calls


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=7, help="rounds per product, alternating (default 7)")
    args = script_args(p, argv, {}, "linear-kernels", results=RESULTS)
    torch.set_num_threads(args.threads)
    sizes = QUICK if args.quick else [(n, o, k) for o, k in MATRICES for n in ROWS if n * o * k <= MOST]
    rows = []
    with torch.no_grad():
        for n, o, k in sizes:
            per_round = 1 if args.quick else max(1, min(50, 20_000_000 // (n * o * k)))
            times = median_times(products(n, o, k), args.rounds, per_round)
            row = {"rows": n, "out": o, "in": k, **times,
                   **{f"F.linear / {name}": round(times["F.linear"] / t, 2) for name, t in times.items()
                      if name != "F.linear"}}
            print("  ".join(f"{key} {value}" for key, value in row.items()), flush=True)
            rows.append(row)
    write_results(args.out, "linear_kernels", {"name": "linear_kernels", "quick": args.quick, "threads": args.threads,
                                          "unit": "microseconds, median", "machine": machine(), "products": rows})


if __name__ == "__main__":
    main()
