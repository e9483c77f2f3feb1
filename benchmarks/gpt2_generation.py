"""Greedy generation speed of ``gpt2`` (124M, random weights) with a KV cache: ours against Hugging Face.

    python benchmarks/gpt2_generation.py [--rounds 3] [--threads 2] [--quick]

The case ``gpt2-generate`` of :mod:`aiayn.benchmark` (also ``aiayn bench gpt2-generate``): a 16-token prompt,
256 new tokens, batch 1; ours is converted from the Hugging Face model with ``aiayn.from_hf``, both run
alternately after a warm-up and must produce the same tokens. Also records the memory-bandwidth ceiling
(bytes of weights read per token against a measured copy bandwidth). Writes
``benchmarks/results/gpt2-generate.json`` and regenerates ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from aiayn.benchmark import run_bench

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--quick", action="store_true", help="toy sizes: checks that it runs, measures nothing")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="folder of the results files")
    p.add_argument("--docs", default=str(ROOT / "docs" / "benchmarks.md"), help="the page regenerated from them")
    args = p.parse_args()
    run_bench(["gpt2-generate"], out=args.out, rounds=args.rounds, threads=args.threads, quick=args.quick,
              docs=args.docs)


if __name__ == "__main__":
    main()
