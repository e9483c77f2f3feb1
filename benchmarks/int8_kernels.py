"""Which int8 product ``aiayn.layers.int8`` uses: the kernels PyTorch ships, timed on decoding-sized products.

    python benchmarks/int8_kernels.py [--threads 2] [--rounds 7]
    python benchmarks/int8_kernels.py --quick          # small sizes, seconds, into a temporary folder

For a few rows by a GPT-2- or Marian-sized matrix, the median time of: float32 ``F.linear``; fbgemm's dynamic
int8 product (``quantized::linear_dynamic``, what ``torch.ao.quantization.quantize_dynamic`` installs and
``Int8Linear`` calls); oneDNN's int8 product (``onednn::qlinear_pointwise``, the input quantized per tensor
first); ``aten._weight_int8pack_mm`` (int8 weights, float inputs); and gpt-fast's weight-only int8 product
(``F.linear(x, q.to(x.dtype)) * scale``) compiled by ``torch.compile``, for the compiled decoding step (its compile
is paid before the timing). The kernels run their rounds in turn.
Writes ``benchmarks/results/int8_kernels.json``.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

from aiayn.benchmark.harness import machine
from aiayn.benchmark.scripts import median_times, script_args, write_results
from aiayn.layers.int8 import quantize_rows

RESULTS = Path(__file__).parent / "results"  # a full run writes here unless --out says
SIZES = [(1, 768, 3072), (1, 768, 2304), (1, 3072, 768), (1, 768, 50257), (16, 256, 1024), (64, 256, 8000)]
QUICK_SIZES = [(1, 64, 96), (4, 32, 48)]


def kernels(rows: int, k: int, o: int) -> dict:
    """``name -> zero-argument call`` computing ``x W^T + b`` for a random ``x (rows, k)``, ``W (o, k)``."""
    x, w, b = torch.randn(rows, k), torch.randn(o, k), torch.randn(o)
    q, scale = quantize_rows(w)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*")
        qw = torch._make_per_channel_quantized_tensor(q, scale.double(), torch.zeros(o, dtype=torch.long), 0)
    fbgemm = torch.ops.quantized.linear_prepack(qw, b)
    onednn = torch.ops.onednn.qlinear_prepack(q, None)
    zeros = torch.zeros(o, dtype=torch.long)

    def qlinear():
        lo, hi = min(float(x.min()), 0.0), max(float(x.max()), 0.0)
        step = (hi - lo) / 255 or 1.0
        zp = round(-lo / step)
        xq = torch.clamp(torch.round(x / step) + zp, 0, 255).to(torch.uint8)
        return torch.ops.onednn.qlinear_pointwise(xq, step, zp, onednn, scale, zeros, b, 1.0, 0, torch.float32,
                                                  "none", [], "")

    woq = torch.compile(lambda x: F.linear(x, q.to(x.dtype)) * scale + b, dynamic=False)  # gpt-fast's int8
    woq(x)  # the compile, before the timing

    return {"float32 F.linear": lambda: F.linear(x, w, b),
            "fbgemm quantized::linear_dynamic": lambda: torch.ops.quantized.linear_dynamic(x, fbgemm, True),
            "oneDNN qlinear_pointwise": qlinear,
            "aten._weight_int8pack_mm": lambda: torch.ops.aten._weight_int8pack_mm(x, q, scale) + b,
            "weight-only int8, compiled": lambda: woq(x)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7, help="rounds per kernel, alternating (default 7)")
    p.add_argument("--calls", type=int, default=20, help="calls per round (default 20)")
    args = script_args(p, argv, {}, "int8-kernels", results=RESULTS)  # --quick: the small sizes
    torch.set_num_threads(args.threads)
    rows = []
    for n, k, o in QUICK_SIZES if args.quick else SIZES:
        row = {"rows": n, "in": k, "out": o, **median_times(kernels(n, k, o), args.rounds, args.calls)}
        print("  ".join(f"{key} {value}" for key, value in row.items()))
        rows.append(row)
    write_results(args.out, "int8_kernels", {"name": "int8_kernels", "quick": args.quick,
                                             "unit": "microseconds, median", "threads": args.threads,
                                             "machine": machine(), "products": rows})


if __name__ == "__main__":
    main()
