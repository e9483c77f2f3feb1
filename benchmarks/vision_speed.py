"""Forward speed of ``swin-t`` and ``vit-b16`` at 224 px (random weights, batch 8): ours against Hugging Face.

    python benchmarks/vision_speed.py [--rounds 5] [--threads 2] [--quick]

The cases ``swin-forward`` and ``vit-forward`` of :mod:`aiayn.benchmark` (also ``aiayn bench swin-forward
vit-forward``): each Hugging Face classifier (the preset's sizes) is converted with ``aiayn.from_hf``, both run
the same weights in eval mode without gradients, alternately after a warm-up, and their logits must agree.
Writes ``benchmarks/results/{swin,vit}-forward.json`` and regenerates ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from aiayn.benchmark import run_bench

ROOT = Path(__file__).resolve().parent.parent
CASES = ["swin-forward", "vit-forward"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", nargs="+", default=CASES, choices=CASES)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--quick", action="store_true", help="toy sizes: checks that it runs, measures nothing")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"), help="folder of the results files")
    p.add_argument("--docs", default=str(ROOT / "docs" / "benchmarks.md"), help="the page regenerated from them")
    args = p.parse_args()
    run_bench(args.cases, out=args.out, rounds=args.rounds, threads=args.threads, quick=args.quick,
              docs=args.docs)


if __name__ == "__main__":
    main()
