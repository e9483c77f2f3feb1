"""What one call of an op ``torch.compile`` keeps opaque costs, by how it is registered: ``aiayn.layers.fast.cpu_op``
(the kernel at the dispatcher's CPU key) against ``torch.library.custom_op`` (a Python wrapper per call: autograd,
aliasing checks), around the int8 product of a decode step and around nothing.

    python benchmarks/op_overhead.py            # 15 rounds (a minute on 2 cores)
    python benchmarks/op_overhead.py --quick    # 2 rounds, into a temporary folder

A compiled decode step calls one such op per product (``aiayn::int8_rows`` for every int8 product,
``aiayn::linear_onednn`` for one row by a large float32 matrix on AVX2): 61 a step for a 12-layer Llama. Each way
is called ``--calls`` times a round, the ways in turn (what else the machine does weighs on all alike); the figure
of each is the fastest round's time per call, in microseconds. ``int8 product`` is one row by a 768 x 3,072 matrix
through ``Int8Linear``'s own product (``_rows``, no op), then through each registration of the same kernel; ``no
work`` is an op that returns a copy of its 768-float input, against the Python function alone.
Writes ``benchmarks/results/op_overhead.json``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch import Tensor, nn

from aiayn.benchmark.harness import machine
from aiayn.benchmark.scripts import script_args, write_results
from aiayn.layers import int8

RESULTS = Path(__file__).parent / "results"


_LIB = torch.library.Library("aiayn_bench", "DEF")  # the same kernels, registered the other ways
_LIB.define("copy_at_cpu(Tensor x) -> Tensor")
_LIB.impl("copy_at_cpu", lambda x: x.clone(), "CPU")


@torch.library.custom_op("aiayn_bench::int8_rows", mutates_args=())
def _wrapped_int8_rows(x: Tensor, key: Tensor, start: int, stop: int) -> Tensor:
    return int8._int8_rows(x, key, start, stop)


@torch.library.custom_op("aiayn_bench::copy", mutates_args=())
def _wrapped_copy(x: Tensor) -> Tensor:
    return x.clone()


def _copy(x: Tensor) -> Tensor:
    return x.clone()


def ways(rows: int, k: int, o: int) -> dict[str, dict]:
    """``case -> {way: zero-argument call}``."""
    layer = int8.opaque(int8.Int8Linear(nn.Linear(k, o)))
    x, key = torch.randn(rows, k), layer.key
    return {
        f"int8 product, {rows} x {k} by {o} x {k}": {
            "kernel alone (Int8Linear._rows)": lambda: layer._rows(x, 0, o),
            "cpu_op (aiayn::int8_rows)": lambda: torch.ops.aiayn.int8_rows(x, key, 0, o),
            "torch.library.custom_op": lambda: torch.ops.aiayn_bench.int8_rows(x, key, 0, o)},
        f"no work, a copy of {k} floats": {
            "Python function": lambda: _copy(x),
            "cpu_op registration": lambda: torch.ops.aiayn_bench.copy_at_cpu(x),
            "torch.library.custom_op": lambda: torch.ops.aiayn_bench.copy(x)},
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--calls", type=int, default=300, help="calls of each way a round (default 300)")
    p.add_argument("--threads", type=int, default=2)
    args = script_args(p, argv, {"rounds": 2, "calls": 20}, "op-overhead", results=RESULTS)
    torch.set_num_threads(args.threads)
    cases = ways(1, 768, 3072)
    rows: dict[str, dict[str, float]] = {}
    with torch.no_grad():
        for case, calls in cases.items():
            best = {w: float("inf") for w in calls}
            for _ in range(args.rounds):
                for w, call in calls.items():
                    start = time.perf_counter()
                    for _ in range(args.calls):
                        call()
                    best[w] = min(best[w], (time.perf_counter() - start) / args.calls)
            rows[case] = {w: round(t * 1e6, 1) for w, t in best.items()}
            print(case, rows[case], flush=True)
    write_results(args.out, "op_overhead", {"what": __doc__.split("\n\n")[0], "machine": machine(),
                                            "settings": {k: v for k, v in vars(args).items() if k != "out"},
                                            "us_per_call": rows})


if __name__ == "__main__":
    main()
