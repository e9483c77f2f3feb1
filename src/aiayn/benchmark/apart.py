"""The harness's sides each in a process of its own: what :func:`~aiayn.benchmark.harness.measure` does, with no two
runtimes in one process.

In one process, a peer's runtime can slow ours (and ours it) through what they share: the OpenMP runtime whose
symbols a later library binds to (CTranslate2 did, 3-7x: ``benchmarks/ct2_interference.py``), thread pools that
spin on after a call, the allocator. Fixing each such case leaves the class of them. So :func:`measure_apart` starts
one worker process per side (:func:`worker`), one after the other, each building the case
(:data:`~aiayn.benchmark.cases.CASES`: the same seed, the same random weights, the same correctness checks) and
warming its own side alone; then the rounds alternate the sides as :func:`~aiayn.benchmark.harness.measure` does
(each round starting one side later), each unit timed inside its worker, with a pause before each call so the
threads of the side that ran last have gone to sleep. Peak memory is profiled in each worker; FLOPs are counted
in ours'. The results have :func:`~aiayn.benchmark.harness.measure`'s shape, with ``"apart": true`` and each
side's process id.

Every worker builds every side (the checks need them all), but runs only its own: an idle runtime's library is
loaded in the others, and never called there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import IO, Any

import torch

from aiayn.benchmark.harness import Settings, count_flops, peak_memory, summarize, timed

PAUSE = 0.2  # seconds before each timed unit: the last side's spinning threads (onnxruntime's, OpenMP's) stop


def measure_apart(name: str, settings: Settings, threads: int | None = None) -> dict[str, Any]:
    """Time case ``name`` of :data:`~aiayn.benchmark.cases.CASES` with each side in a worker process of its own.

    Args:
        name: the case.
        settings: rounds, warm-up, device and the matmul peak (its ``clock`` is not used: each worker times with
            ``time.perf_counter``).
        threads: the workers' torch threads (``None``: this process's).

    Returns:
        :func:`~aiayn.benchmark.harness.measure`'s dictionary, plus ``"apart": True`` and ``"processes"``, each
        side's worker's process id.

    Raises:
        :class:`~aiayn.benchmark.harness.Unavailable`: the case cannot run here (a peer not installed), as the
            first worker found.
    """
    threads = threads or torch.get_num_threads()
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    args = [sys.executable, "-c", "from aiayn.benchmark.apart import worker; worker()", name,
            "--device", str(settings.device), "--threads", str(threads), "--warmup", str(settings.warmup),
            *(["--quick"] if settings.quick else [])]
    workers: dict[str, subprocess.Popen] = {}
    try:
        first = _start(args + ["--side", "0"], env)  # ours: it also counts the FLOPs and says the sides
        about = _answer(first, name)
        sides = about["sides"]
        workers[sides[0]] = first
        for i, side in enumerate(sides[1:], 1):  # one at a time: each warms up alone
            workers[side] = w = _start(args + ["--side", str(i)], env)
            _answer(w, name)
        seconds: dict[str, list[float]] = {s: [] for s in sides}
        n = len(sides)
        for r in range(settings.rounds):
            for side in sides[r % n:] + sides[: r % n]:  # A B, B A, ...: each side follows each other alike
                seconds[side].append(_ask(workers[side], "time", name))
        memory = {s: int(_ask(workers[s], "memory", name)) for s in sides}
    finally:
        for w in workers.values():
            w.kill()
            w.wait()
    result = summarize(about["case"], about["flops"], seconds, memory, settings)
    return {**result, "apart": True, "processes": {s: w.pid for s, w in workers.items()}}


def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(args, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _answer(worker: subprocess.Popen, name: str) -> Any:
    """The worker's next JSON line; its failure (an exception's last line, or an unavailable peer) raised here."""
    from aiayn.benchmark.harness import Unavailable

    assert worker.stdout is not None
    line = worker.stdout.readline()
    if not line:
        code = worker.wait()
        raise RuntimeError(f"benchmark case {name!r}: a side's worker process exited ({code}) without answering")
    said = json.loads(line)
    if "unavailable" in said:
        raise Unavailable(said["unavailable"])
    if "error" in said:
        raise RuntimeError(f"benchmark case {name!r}, in a side's worker process: {said['error']}")
    return said


def _ask(worker: subprocess.Popen, what: str, name: str) -> float:
    assert worker.stdin is not None
    worker.stdin.write(what + "\n")
    worker.stdin.flush()
    return float(_answer(worker, name)["value"])


def _say(out: IO[str], said: dict[str, Any]) -> None:
    out.write(json.dumps(said) + "\n")
    out.flush()


def worker(argv: list[str] | None = None) -> None:
    """One side's process: build the case, warm the side, say what it is; then answer ``time`` (seconds of one
    unit, after :data:`PAUSE`) and ``memory`` (peak bytes of one unit) from stdin, one JSON line each."""
    from aiayn.benchmark.cases import CASES
    from aiayn.benchmark.harness import Unavailable

    p = argparse.ArgumentParser(prog="aiayn.benchmark.apart.worker")
    p.add_argument("case", choices=sorted(CASES))
    p.add_argument("--side", type=int, required=True, help="the side's index (0: ours)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    out, sys.stdout = sys.stdout, sys.stderr  # a case's own prints stay off the answers' channel
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    try:
        torch.manual_seed(0)  # as run_bench seeds each case
        case = CASES[args.case](args.quick, device)
        side = case.sides[args.side]
        flops = (case.flops if case.flops is not None else count_flops(side.run)) if args.side == 0 else None
        for _ in range(args.warmup):
            side.run()
    except Unavailable as e:
        return _say(out, {"unavailable": str(e)})
    except Exception as e:  # said to the parent, which raises it with the case's name
        return _say(out, {"error": f"{type(e).__name__}: {e}"})
    _say(out, {"sides": [s.name for s in case.sides], "flops": flops, "case": case.about()})
    for line in sys.stdin:
        if line.strip() == "time":
            time.sleep(PAUSE)
            _say(out, {"value": timed(side.run, device)})
        elif line.strip() == "memory":
            _say(out, {"value": peak_memory(side.run, device)})

