"""Forward speed of ``swin-t`` and ``vit-b16`` at 224 px (random weights, batch 8): ours against Hugging Face.

    python benchmarks/vision_speed.py [--rounds 7] [--threads 2]
    python benchmarks/vision_speed.py --quick           # toy sizes, seconds, into a temporary folder

The cases ``swin-forward`` and ``vit-forward`` of :mod:`aiayn.benchmark` (also ``aiayn bench swin-forward
vit-forward``): each Hugging Face classifier (the preset's sizes) is converted with ``aiayn.from_hf``, both run
the same weights in eval mode without gradients, alternately after a warm-up, and their logits must agree.
Writes ``benchmarks/results/{swin,vit}-forward.json`` and regenerates ``docs/benchmarks.md``; ``--quick`` writes
both into a new temporary folder unless ``--out`` and ``--docs`` say where, so toy numbers never replace
measured ones.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from aiayn.benchmark import run_bench
from aiayn.benchmark.harness import MIN_ROUNDS

ROOT = Path(__file__).resolve().parent.parent
CASES = ["swin-forward", "vit-forward"]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", nargs="+", default=CASES, choices=CASES)
    p.add_argument("--rounds", type=int, default=MIN_ROUNDS, help=f"timed units per side (default {MIN_ROUNDS})")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--quick", action="store_true", help="toy sizes: checks that it runs, measures nothing")
    p.add_argument("--out", help="folder of the results files (default benchmarks/results; --quick: a new "
                                 "temporary folder)")
    p.add_argument("--docs", help="the page regenerated from them (default docs/benchmarks.md; --quick: "
                                  "benchmarks.md in --out)")
    args = p.parse_args(argv)
    out = args.out or (tempfile.mkdtemp(prefix="vision-speed-quick-") if args.quick
                       else ROOT / "benchmarks" / "results")
    docs = args.docs or (Path(out) / "benchmarks.md" if args.quick else ROOT / "docs" / "benchmarks.md")
    run_bench(args.cases, out=out, rounds=args.rounds, threads=args.threads, quick=args.quick, docs=docs)


if __name__ == "__main__":
    main()
