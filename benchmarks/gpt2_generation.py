"""Greedy generation speed of ``gpt2`` (124M, random weights) with a KV cache: ours against Hugging Face.

    python benchmarks/gpt2_generation.py [--rounds 7] [--threads 2]
    python benchmarks/gpt2_generation.py --quick        # toy sizes, seconds, into a temporary folder

The case ``gpt2-generate`` of :mod:`aiayn.benchmark` (also ``aiayn bench gpt2-generate``): a 16-token prompt,
256 new tokens, batch 1; ours is converted from the Hugging Face model with ``aiayn.from_hf``, both run
alternately after a warm-up and must produce the same tokens. Also records the memory-bandwidth ceiling
(bytes of weights read per token against a measured copy bandwidth). Writes
``benchmarks/results/gpt2-generate.json`` and regenerates ``docs/benchmarks.md``; ``--quick`` writes both into
a new temporary folder unless ``--out`` and ``--docs`` say where, so toy numbers never replace measured ones.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from aiayn.benchmark import run_bench
from aiayn.benchmark.harness import MIN_ROUNDS

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=MIN_ROUNDS, help=f"timed units per side (default {MIN_ROUNDS})")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--quick", action="store_true", help="toy sizes: checks that it runs, measures nothing")
    p.add_argument("--out", help="folder of the results files (default benchmarks/results; --quick: a new "
                                 "temporary folder)")
    p.add_argument("--docs", help="the page regenerated from them (default docs/benchmarks.md; --quick: "
                                  "benchmarks.md in --out)")
    args = p.parse_args(argv)
    out = args.out or (tempfile.mkdtemp(prefix="gpt2-generation-quick-") if args.quick
                       else ROOT / "benchmarks" / "results")
    docs = args.docs or (Path(out) / "benchmarks.md" if args.quick else ROOT / "docs" / "benchmarks.md")
    run_bench(["gpt2-generate"], out=out, rounds=args.rounds, threads=args.threads, quick=args.quick, docs=docs)


if __name__ == "__main__":
    main()
