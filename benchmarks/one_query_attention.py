"""Which path a compiled decoding step's attention takes on the CPU: PyTorch's fused kernel
(``F.scaled_dot_product_attention``) or equation 1 written out (two products and a softmax, which inductor fuses),
switched by ``aiayn.layers.functional.ONE_QUERY_EXPLICIT``.

    python benchmarks/one_query_attention.py [--threads 2] [--rounds 8]
    python benchmarks/one_query_attention.py --quick        # toy sizes, seconds, into a temporary folder

Each case is an ``aiayn bench`` case's own work with ``compile=True``: the Marian-shaped translation model (batch 16,
greedy and beam 4), llama-tiny (batch 1 and 16), GPT-2 124M at batch 1 and the Llama-shaped 124M at batch 16.
In one process, after two calls of each path (the compile, then a warm call), the two take their rounds in turn
(A B, then B A); the ratio is the fused path's time over the explicit one's, round by round (> 1: the explicit path
is faster), and both must decode the same tokens. Writes ``benchmarks/results/one_query_attention.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import torch
from torch import Tensor

import aiayn.layers.functional as functional
from aiayn.benchmark.cases import generation
from aiayn.benchmark.cases.decoding import decode, translation
from aiayn.benchmark.harness import machine
from aiayn.benchmark.scripts import script_args, write_results
from aiayn.decoding import sample
from aiayn.models.gpt import PRESETS

RESULTS = Path(__file__).parent / "results"  # a full run writes here unless --out says
CASES = ["translation-greedy-b16", "translation-beam4-b16", "llama-tiny-b1", "llama-tiny-b16", "gpt2-b1",
         "llama-124m-b16"]
QUICK_CASES = ["translation-greedy-b16", "translation-beam4-b16", "llama-tiny-b16"]


def work(case: str, quick: bool) -> Callable[[], Tensor]:
    """``case``'s compiled decoding as a call giving its tokens."""
    cpu = torch.device("cpu")
    if case.startswith("translation"):
        tr, beam = translation(quick, cpu), 4 if "beam4" in case else 1
        return lambda: decode(tr.ours, tr.src, beam, tr.new, 0.6, compile=True)
    if case == "gpt2-b1":
        g = generation.generation(quick, cpu)
    else:
        cfg = PRESETS["llama-tiny"] if case.startswith("llama-tiny") else generation.LLAMA_124M
        g = generation.llama_generation(cfg, int(case.rsplit("-b", 1)[1]), quick, cpu)
    return lambda: cast(Tensor, sample(g.ours, g.prompt, g.new, temperature=0, compile=True))


def timed(run: Callable[[], Tensor], explicit: bool) -> tuple[float, Tensor]:
    functional.ONE_QUERY_EXPLICIT = explicit
    start = time.perf_counter()
    ids = run()
    return time.perf_counter() - start, ids


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=8, help="timed rounds per path, alternating (default 8)")
    p.add_argument("--cases", nargs="+", choices=CASES, default=CASES)
    args = script_args(p, argv, {"rounds": 2, "cases": QUICK_CASES}, "one-query-attention", results=RESULTS)
    torch.set_num_threads(args.threads)
    rows = []
    with torch.no_grad():
        for case in args.cases:
            run = work(case, args.quick)
            for explicit in (False, True, False, True):  # each path compiled, then warm
                timed(run, explicit)
            seconds: dict[bool, list[float]] = {False: [], True: []}
            ids: dict[bool, Tensor] = {}
            for r in range(args.rounds):
                for explicit in (False, True) if r % 2 == 0 else (True, False):
                    t, ids[explicit] = timed(run, explicit)
                    seconds[explicit].append(t)
            ratios = [f / e for f, e in zip(seconds[False], seconds[True], strict=True)]
            q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
            row = {"case": case, "fused_s": round(statistics.median(seconds[False]), 4),
                   "explicit_s": round(statistics.median(seconds[True]), 4),
                   "fused_over_explicit": round(statistics.median(ratios), 3), "q1": round(q1, 3),
                   "q3": round(q3, 3), "same_tokens": bool(torch.equal(ids[False], ids[True]))}
            print("  ".join(f"{k} {v}" for k, v in row.items()), flush=True)
            rows.append(row)
    functional.ONE_QUERY_EXPLICIT = True
    write_results(args.out, "one_query_attention", {
        "what": "compiled decoding, fused attention kernel against the explicit path, one process, alternating",
        "threads": args.threads, "rounds": args.rounds, "quick": args.quick,
        "machine": machine(torch.device("cpu")), "rows": rows})


if __name__ == "__main__":
    main()
