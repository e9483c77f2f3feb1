"""The matrix products of a decoding step, shape by shape, against what this machine can do at best: each kernel's
time beside the memory-bandwidth bound (the weights' bytes over the measured copy bandwidth) and the FLOP bound
(2 N K O over the measured float32 matmul peak), so a profile's "matrix products" row says how far from the
machine's limits it is, and which kernel is closest (issue 58, ask 3).

    python benchmarks/product_bounds.py [--threads 2]      # the Marian-shaped and GPT-2 cases, about a minute
    python benchmarks/product_bounds.py --quick            # toy sizes, seconds, into a temporary folder

The shapes are recorded, not listed by hand: one eager greedy call of each case (``decode-greedy-ct2``'s
Marian-shaped Transformer, batch 16; ``gpt2-generate-ct2``'s GPT-2 124M, batch 1) runs with every product's
``(rows, K, O)`` counted, and the counts of the decoding steps (the prompt's pass left out) give products per step.
Each shape is then timed as :mod:`aiayn.layers.kernels` times it (weights cycled from memory, the fastest of five
interleaved rounds) for every kernel that applies. Reported per shape and in total per step: each kernel's
milliseconds, the kernel ``aiayn.layers.kernels`` keeps, and the two bounds; the larger bound is what no kernel
can beat. Writes ``<out>/product_bounds.json``.
"""

from __future__ import annotations

import argparse
import collections
from pathlib import Path
from typing import Any

import torch

import aiayn
from aiayn.benchmark.cases.common import small_transformer
from aiayn.benchmark.harness import machine, matmul_peak, memory_bandwidth
from aiayn.benchmark.scripts import script_args, write_results
from aiayn.layers import kernels

RESULTS = Path(__file__).parent / "results"
QUICK = {"quick_models": True}


def shapes_of(call, steps: int) -> dict[tuple[int, int, int, bool], float]:
    """``(rows, K, O, bias) -> products per decoding step`` of ``call()``, the prompt's products left out (the
    shapes whose rows are not a step's are the prompt's: only shapes seen ``steps`` times or more are kept)."""
    seen: collections.Counter = collections.Counter()
    choose = kernels.choose

    def record(x, weight, bias=None):
        seen[(x.numel() // x.size(-1), weight.size(1), weight.size(0), bias is not None)] += 1
        return choose(x, weight, bias)

    kernels.choose = record
    try:
        with torch.no_grad():
            call()
    finally:
        kernels.choose = choose
    return {shape: n / steps for shape, n in seen.items() if n >= steps}


def cases(quick: bool) -> dict[str, tuple[str, Any, int]]:
    """``name -> (what, call, decoding steps)``: the eager greedy calls of the two cases."""
    torch.manual_seed(0)
    new = 4 if quick else 64
    marian = aiayn.build(small_transformer(quick)).eval()
    marian.generator.bias.data[marian.cfg.eos_id] = -1e4  # every row decodes every step
    vocab = marian.cfg.src_vocab_size
    src = torch.randint(4, vocab, (16, 24))
    small = {"d_model": 64, "n_heads": 4, "n_layers": 2, "vocab_size": 1000, "max_len": 128} if quick else {}
    gpt2 = aiayn.build(aiayn.preset("gpt2", dropout=0.0, attention_dropout=0.0, eos_id=None, **small)).eval()
    prompt = torch.randint(0, gpt2.cfg.vocab_size, (1, 16))
    return {
        "marian-greedy": ("Marian-shaped Transformer (d 256, 3 + 3 layers, vocabulary 8,000), greedy, batch 16",
                          lambda: marian.generate(src, max_new_tokens=new), new - 1),
        "gpt2-b1": ("GPT-2 124M, greedy, batch 1", lambda: gpt2.generate(prompt, max_new_tokens=new, do_sample=False),
                    new - 1),
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--quick-models", action="store_true", help="toy sizes (what --quick uses)")
    args = script_args(p, argv, QUICK, "product-bounds", results=RESULTS)
    torch.set_num_threads(args.threads)
    peak = matmul_peak(1024 if args.quick_models else 3072)
    bandwidth = memory_bandwidth(64 if args.quick_models else 512)
    print(f"matmul peak {peak / 1e9:.0f} GFLOP/s, copy bandwidth {bandwidth / 1e9:.1f} GB/s", flush=True)
    found: dict[str, Any] = {}
    for name, (what, call, steps) in cases(args.quick_models).items():
        call()  # warm: every kernel choice made before the shapes are counted
        rows = []
        for (n, k, o, has_bias), per_step in sorted(shapes_of(call, steps).items()):
            weight = torch.empty(o, k)
            bias = torch.empty(o) if has_bias else None
            times = kernels.timings(n, weight, bias)
            with torch.no_grad():
                kept = kernels.choose(torch.empty(n, k), weight, bias)
            byte_bound = 4 * (o * k + n * k + n * o) / bandwidth
            flop_bound = 2 * n * k * o / peak
            rows.append({"rows": n, "k": k, "o": o, "bias": has_bias, "per_step": per_step,
                         "seconds": times, "kept": kept, "bandwidth_bound_s": byte_bound, "flop_bound_s": flop_bound})
            best = min(times, key=times.__getitem__)
            print(f"{name} {n} x {k} -> {o} (x{per_step:g}/step): "
                  + ", ".join(f"{kernel} {t * 1e6:.0f} us" for kernel, t in times.items())
                  + f"; kept {kept}; bounds: memory {byte_bound * 1e6:.0f} us, FLOPs {flop_bound * 1e6:.0f} us; "
                    f"best at {max(byte_bound, flop_bound) / times[best]:.0%} of the bound", flush=True)
        total = {
            "kept_ms": 1e3 * sum(r["per_step"] * r["seconds"][r["kept"]] for r in rows),
            "best_ms": 1e3 * sum(r["per_step"] * min(r["seconds"].values()) for r in rows),
            "bound_ms": 1e3 * sum(r["per_step"] * max(r["bandwidth_bound_s"], r["flop_bound_s"]) for r in rows),
            **{f"{kernel}_ms": 1e3 * sum(r["per_step"] * r["seconds"].get(kernel, r["seconds"]["linear"])
                                         for r in rows) for kernel in kernels.CANDIDATES},
        }
        print(f"{name}: products per step: kept {total['kept_ms']:.2f} ms, best {total['best_ms']:.2f} ms, "
              f"bound {total['bound_ms']:.2f} ms ({total['bound_ms'] / total['kept_ms']:.0%} of it reached)",
              flush=True)
        found[name] = {"what": what, "steps": steps, "shapes": rows, "per_step": total}
    write_results(args.out, "product_bounds", {"machine": machine(), "matmul_peak_flops": peak,
                                               "copy_bandwidth_bytes_per_s": bandwidth, "cases": found})


if __name__ == "__main__":
    main()
