"""Speed and memory against peers (``torch.nn.Transformer``, Hugging Face, CTranslate2, onnxruntime), side by side
in one process.

    from aiayn.benchmark import run_bench
    run_bench(["decode-greedy"], out="bench", docs="bench/benchmarks.md")
    # from the shell: aiayn bench decode-greedy --out bench --docs bench/benchmarks.md

Results go where ``out`` says, and a page only where ``docs`` says (nothing is written anywhere else). This
repository's own page and results files are regenerated, from its root, by

    aiayn bench --out benchmarks/results --docs docs/benchmarks.md                 # every case, 7 rounds each
    aiayn bench --report-only --out benchmarks/results --docs docs/benchmarks.md   # the page alone

:mod:`~aiayn.benchmark.harness` times and profiles, :mod:`~aiayn.benchmark.cases` holds the comparisons by name
(:data:`~aiayn.benchmark.cases.CASES`), :mod:`~aiayn.benchmark.peers` the models and engines they compare with,
:mod:`~aiayn.benchmark.scaling` sweeps sizes, :mod:`~aiayn.benchmark.report` writes the page, and
:mod:`~aiayn.benchmark.scripts` gives the scripts in the repository's ``benchmarks/`` their shared flags and
results files. A figure rests on at least :data:`~aiayn.benchmark.harness.MIN_ROUNDS` (7) rounds; a target is met
when the lower quartile of the per-round ratios clears it.
"""

from aiayn.benchmark.run import NAMES, run_bench

__all__ = ["NAMES", "run_bench"]
