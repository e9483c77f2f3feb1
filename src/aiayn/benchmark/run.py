"""``aiayn bench`` as a plain function: measure the machine, run the cases, write the results and the page."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from aiayn.benchmark import scaling
from aiayn.benchmark.apart import measure_apart
from aiayn.benchmark.cases import CASES
from aiayn.benchmark.harness import (
    MIN_ROUNDS,
    Settings,
    Unavailable,
    machine,
    matmul_peak,
    measure,
    verdict,
    write_result,
)
from aiayn.benchmark.report import write_report
from aiayn.models.config import suggest

NAMES = [*CASES, "scaling"]


def run_bench(names: list[str] | None = None, *, out: str | Path, rounds: int = MIN_ROUNDS,
              threads: int | None = None, quick: bool = False, docs: str | Path | None = None,
              device: str = "cpu", warmup: int = 1, apart: bool = True,
              echo: Callable[[str], None] | None = print) -> dict[str, Any]:
    """Run benchmark cases and write ``out/<case>.json`` for each, then regenerate ``docs`` if given.

    Args:
        names: cases to run (:data:`NAMES`); ``None`` runs them all.
        out: folder of the results files (and ``scaling.png``), made if needed; no default, so results land only
            where the caller says.
        rounds: timed units per side, alternating between the sides.
        threads: ``torch.set_num_threads`` for the run (restored after); ``None`` keeps the current setting.
        quick: toy sizes, for tests: checks that everything runs; the numbers mean nothing.
        docs: the markdown page regenerated from every results file in ``out`` after each case
            (:func:`~aiayn.benchmark.report.write_report`); ``None``, the default, writes no page.
        device: ``"cpu"`` or ``"cuda"``; float32 eager either way.
        warmup: untimed units per side before the rounds.
        apart: each side in a worker process of its own (:func:`~aiayn.benchmark.apart.measure_apart`: no two
            runtimes share a process); ``False`` times every side in this process
            (:func:`~aiayn.benchmark.harness.measure`).
        echo: where progress lines go (``None``: nowhere).

    Returns:
        ``{case: results}``, as written to the files; a case that cannot run here (its peer is not installed, or
        does not run on ``device``: :class:`~aiayn.benchmark.harness.Unavailable`) is skipped with a line
        saying why, and is not in it.
    """
    names = list(NAMES) if names is None else list(names)
    for name in names:
        if name not in NAMES:
            raise ValueError(f"unknown benchmark case {name!r}{suggest(name, NAMES)} (cases: {', '.join(NAMES)})")
    say = echo or (lambda line: None)
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        dev = torch.device(device)
        peak = matmul_peak(1024 if quick else 3072, repeats=3 if quick else 5, device=dev)
        settings = Settings(peak_flops=peak, rounds=rounds, warmup=warmup, device=dev, quick=quick)
        about = machine(dev)
        threads_used = f"{about['threads']} thread" + ("s" if about["threads"] != 1 else "")
        say(f"{about['cpu']}, {threads_used}, {about['device']}: matmul peak {peak / 1e9:,.0f} GFLOP/s")
        results = {}
        for name in names:
            torch.manual_seed(0)
            if name == "scaling":
                result = scaling.run(settings, out)
            else:
                try:
                    result = (measure_apart(name, settings, threads) if apart
                              else measure(CASES[name](quick, dev), settings))
                except Unavailable as e:  # a peer not installed, a device it does not run on
                    say(f"{name}: skipped: {e}")
                    continue
            result.update(quick=quick, machine=machine(dev), matmul_peak_flops=peak)
            path = write_result(result, out)
            results[name] = result
            say(summary(result) + f"  -> {path}")
            if docs is not None:
                write_report(out, docs)
        return results
    finally:
        torch.set_num_threads(before)


def summary(result: dict[str, Any]) -> str:
    """One line: ours' throughput, then the ratio against each peer and whether it meets the target."""
    if result["kind"] != "comparison":
        return f"{result['case']}: {len(result['attention']['points'])} + {len(result['transformer']['points'])} points"
    ours = result["sides"][result["ours"]]
    parts = [f"{result['case']}: ours {ours['throughput']:,.1f} {result['unit']}/s, MFU {ours['mfu']:.0%}"]
    for name, peer in result["peers"].items():
        said = verdict(peer["met"], result["rounds"])
        check = "" if peer["check"]["ok"] else ", OUTPUTS DIFFER"
        parts.append(f"{peer['ratio']:.2f}x {name}{'' if said is None else f', target {said}'}{check}")
    return "; ".join(parts)


__all__ = ["NAMES", "run_bench", "summary"]
