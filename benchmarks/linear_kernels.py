"""Which float32 product ``aiayn.layers.fast`` takes on the CPU, timed: ``F.linear``, the swapped product
``(W x^T)^T`` (``fast.linear_few_rows``), oneDNN's inner product (``fast.linear_onednn``) and the same over the
weight packed once into oneDNN's blocked layout (``fast.linear_packed``).

    python benchmarks/linear_kernels.py [--threads 1] [--rounds 7]
    python benchmarks/linear_kernels.py --quick          # small sizes, seconds, into a temporary folder
    python benchmarks/linear_kernels.py --streamed --threads 2   # a decoding step's products, weights streamed

Products of 1 to 1,024 rows (decoding's one row per sequence, up to a prompt's or an encoder's many) by the
matrices of small and GPT-2/Llama-124M-sized models, with a bias, no gradient; the three take their rounds in
turn. Which is fastest depends on the CPU's instructions (``torch.backends.cpu.get_cpu_capability()``, recorded
with the machine): on AVX2 the swapped product beat ``F.linear`` for few rows, on AVX-512 oneDNN's product wins
for matrices of a million weights or more, which is how ``fast.SWAP_FEW_ROWS`` and ``fast.ONEDNN_MIN`` route
them. Writes ``benchmarks/results/linear_kernels.json``: each product's median microseconds and ``F.linear``'s
time over each other's.

Each product above runs again and again on one matrix, which a large cache then holds; a decoding step reads
every matrix once, from memory. ``--streamed`` times that: the products of one GPT-2 step (12 layers of 768 x
2304, 768 x 768, 768 x 3072 and 3072 x 768, then the 50,257-token output layer; 472 MiB) in turn, by
``F.linear``, the swapped product, oneDNN's and oneDNN's over weights packed once (``fast.linear_packed``), for
1 to 64 rows, and the bandwidth each reaches (bytes of weights over the time). This is what
``fast.ONEDNN_MIN_ROWS`` and ``fast.PACK_MIN`` follow. ``--step marian`` times the Marian-shaped translation
model's decoder step instead (3 layers of 256 x 768, three 256 x 256, 256 x 1,024 and 1,024 x 256, then the
8,000-token output layer), copies of it cycled so that the weights come from memory as they do beside the
encoder's and the caches. Writes ``linear_kernels_streamed.json`` (``..._marian.json``).
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
GPT2_STEP = [(2304, 768), (768, 768), (3072, 768), (768, 3072)] * 12 + [(50257, 768)]  # (out, in), in order
MARIAN_STEP = [(768, 256), (256, 256), (256, 256), (256, 256), (1024, 256), (256, 1024)] * 3 + [(8000, 256)]
STREAMED_ROWS = [1, 2, 3, 4, 16, 64]


def products(rows: int, o: int, k: int) -> dict:
    """``name -> zero-argument call`` computing ``x W^T + b`` for a random ``x (rows, k)``, ``W (o, k)``."""
    x, w, b = torch.randn(rows, k), torch.randn(o, k), torch.randn(o)
    calls = {"F.linear": lambda: F.linear(x, w, b), "swapped": lambda: fast.linear_few_rows(x, w, b)}
    if fast._ONEDNN:
        calls["oneDNN"] = lambda: fast.linear_onednn(x, w, b)
    if fast._PACKABLE:
        calls["packed"] = lambda: fast.linear_packed(x, w, b)
    return calls


def streamed(quick: bool, rounds: int, step: str = "gpt2") -> list[dict]:
    """Per row count, each kernel's median time over a decoding step's products (:data:`GPT2_STEP` or
    :data:`MARIAN_STEP`, as many copies as make 256 MiB; two small matrices under ``quick``) and the bandwidth it
    reaches."""
    shapes = [(64, 48), (48, 64)] if quick else GPT2_STEP if step == "gpt2" else MARIAN_STEP
    copies = 1 if quick else max(1, (256 << 20) // (4 * sum(o * k for o, k in shapes)))
    weights = [(torch.randn(o, k), torch.randn(o)) for o, k in shapes * copies]
    nbytes = sum(w.numel() * w.element_size() for w, _ in weights) // copies
    kernels = {"F.linear": F.linear, "swapped": fast.linear_few_rows}
    if fast._ONEDNN:
        kernels["oneDNN"] = fast.linear_onednn
    if fast._PACKABLE:
        kernels["packed"] = fast.linear_packed
    rows = []
    for n in STREAMED_ROWS[:2] if quick else STREAMED_ROWS:
        inputs = {k: torch.randn(n, k) for k in {k for _, k in shapes}}

        def run(kernel, inputs=inputs):
            return lambda: [kernel(inputs[w.size(1)], w, b) for w, b in weights]

        times = {name: round(t / copies, 1) for name, t in
                 median_times({name: run(kernel) for name, kernel in kernels.items()}, rounds, 1).items()}
        row = {"rows": n, "weight_bytes": nbytes, **times,
               **{f"{name} GB/s": round(nbytes / t / 1e3, 1) for name, t in times.items()},
               **{f"F.linear / {name}": round(times["F.linear"] / t, 2) for name, t in times.items()
                  if name != "F.linear"}}
        print("  ".join(f"{key} {value}" for key, value in row.items()), flush=True)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=7, help="rounds per product, alternating (default 7)")
    p.add_argument("--streamed", action="store_true", help="a decoding step's products, weights read from memory")
    p.add_argument("--step", choices=["gpt2", "marian"], default="gpt2", help="--streamed's model (default gpt2)")
    args = script_args(p, argv, {}, "linear-kernels", results=RESULTS)
    torch.set_num_threads(args.threads)
    if args.streamed:
        with torch.no_grad():
            steps = streamed(args.quick, args.rounds, args.step)
        name = "linear_kernels_streamed" + ("_marian" if args.step == "marian" else "")
        write_results(args.out, name, {
            "name": name, "step": args.step, "quick": args.quick, "threads": args.threads,
            "unit": "microseconds a step, median", "machine": machine(), "steps": steps})
        return
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
