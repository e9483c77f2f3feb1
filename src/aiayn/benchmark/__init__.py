"""Speed and memory against peers (``torch.nn.Transformer``, Hugging Face), side by side in one process.

    from aiayn.benchmark import run_bench
    run_bench(["decode-greedy"], out="benchmarks/results", rounds=7)   # also: aiayn bench decode-greedy

:mod:`~aiayn.benchmark.harness` times and profiles, :mod:`~aiayn.benchmark.cases` builds the comparisons,
:mod:`~aiayn.benchmark.scaling` sweeps sizes, :mod:`~aiayn.benchmark.report` writes ``docs/benchmarks.md``.
A figure rests on at least :data:`~aiayn.benchmark.harness.MIN_ROUNDS` (7) rounds; a target is met when the lower
quartile of the per-round ratios clears it.
"""

from aiayn.benchmark.run import NAMES, run_bench

__all__ = ["NAMES", "run_bench"]
