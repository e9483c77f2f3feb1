"""Transformer-XL's evaluation speed claim (Dai et al., 2019, section 3.2 and Table 9: up to 1,874x faster than a
vanilla Transformer at attention length 3,800 on enwik8), measured on this CPU with the same weights.

The vanilla model predicts each token from a window of the L tokens before it, recomputed for every token (Al-Rfou
et al.'s evaluation: one forward of L positions per token). Transformer-XL reads a segment of L tokens at a time
over a memory of the L before (``mem_len = L``, ``same_length``: every query attends to exactly L keys, the same
attention length): one forward of L positions per L tokens. Both are the same
:class:`~aiayn.models.transfo_xl.TransfoXL` (random weights, ``transfo-xl-char``'s shape: 6 layers of 384, eval
mode), the vanilla one called without a memory.

    python benchmarks/transfo_xl_eval_speed.py                 # writes results/transfo_xl_eval_speed.json

Reported per attention length: tokens per second of each (the median of ``--rounds`` rounds, the two alternating in
one process; both run the same code, so neither disturbs the other's runtime), and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

RESULTS = Path(__file__).parent / "results"


def rates(length: int, tokens: int, rounds: int) -> dict[str, float]:
    import aiayn

    torch.manual_seed(0)
    model = aiayn.build("transfo-xl-char", dropout=0.0, mem_len=length, same_length=True).eval()
    ids = torch.randint(0, model.cfg.vocab_size, (1, length + tokens))

    def vanilla() -> None:  # every token from the L before it, recomputed
        for p in range(length, length + tokens):
            model(ids[:, p - length + 1 : p + 1])

    def xl() -> None:  # segments of L over a memory of the L before
        memory = model.new_memory()
        model(ids[:, :length], memory)
        for start in range(length, length + tokens, length):
            model(ids[:, start : start + length], memory)

    times: dict[str, list[float]] = {"vanilla": [], "transformer-xl": []}
    with torch.no_grad():
        vanilla(), xl()  # warm-up
        for _ in range(rounds):
            for name, run in (("vanilla", vanilla), ("transformer-xl", xl)):
                start = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - start)
    per_second = {name: tokens / statistics.median(t) for name, t in times.items()}
    return {"tokens": tokens, **{f"{k}_tokens_per_s": round(v, 1) for k, v in per_second.items()},
            "speedup": round(per_second["transformer-xl"] / per_second["vanilla"], 1)}


def main(argv: list[str] | None = None) -> None:
    from aiayn.benchmark.scripts import script_args, write_results

    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--lengths", default="64,128,256,512", help="attention lengths L, comma-separated")
    parser.add_argument("--tokens", type=int, default=512, help="tokens evaluated per round (a multiple of each L)")
    parser.add_argument("--rounds", type=int, default=3)
    args = script_args(parser, argv, {"lengths": "8,16", "tokens": 16, "rounds": 1}, "transfo_xl_eval_speed",
                       results=RESULTS)
    from aiayn.benchmark.harness import machine

    torch.set_num_threads(2)
    rows = {}
    for length in (int(x) for x in args.lengths.split(",")):
        rows[str(length)] = rates(length, args.tokens, args.rounds)
        print(f"L={length:5}: {rows[str(length)]}")
    write_results(args.out, "transfo_xl_eval_speed",
                  {"machine": machine(), "threads": 2, "model": "transfo-xl-char's shape, random weights",
                   "rounds": args.rounds, "lengths": rows})


if __name__ == "__main__":
    main()
