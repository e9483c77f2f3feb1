"""Decoding before and after a change to the decoding code, on this machine in one sitting: the same ``generate``
calls run from two source trees, each round a process of its own per tree, the trees alternating (so neither
runtime disturbs the other's threads, and a drift of the machine falls on both).

    git worktree add /tmp/before <commit>
    python benchmarks/session_speed.py --before /tmp/before/src --after src --out benchmarks/results/session_speed.json

Cases (random weights, float32, 2 threads, greedy unless named): GPT-2 124M at batch 1; Llama-tiny at batch 16;
the paper's base Transformer translating 16 sources, greedy and with 4 beams; then compiled (``compile=True``):
Llama-tiny at batch 16 and the base Transformer greedy. Reported per case: seconds per call of each tree (median
over rounds) and the ratio before / after per round, its lower quartile and median (>= 1: after is as fast).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

EAGER = ["gpt2-b1", "llama-tiny-b16", "transformer-base-greedy", "transformer-base-beam4"]
COMPILED = ["llama-tiny-b16-compiled", "transformer-base-greedy-compiled"]


def _case(name: str):  # -> (model, call)
    import torch

    import aiayn

    torch.manual_seed(0)
    if name.startswith("gpt2"):
        model = aiayn.build(aiayn.preset("gpt2", dropout=0.0, attention_dropout=0.0, eos_id=None)).eval()
        ids = torch.randint(0, 50257, (1, 16))
        return lambda: model.generate(ids, max_new_tokens=64, do_sample=False)
    if name.startswith("llama-tiny"):
        model = aiayn.build(aiayn.preset("llama-tiny", vocab_size=512, max_len=256, eos_id=None)).eval()
        ids = torch.randint(0, 512, (16, 24))
        compiled = name.endswith("compiled")
        return lambda: model.generate(ids, max_new_tokens=64, do_sample=False, compile=compiled)
    model = aiayn.build(aiayn.preset("transformer-base", src_vocab_size=8000, tgt_vocab_size=8000,
                                     dropout=0.0)).eval()
    model.generator.bias.data[model.cfg.eos_id] = -1e4  # no row ends early: every case decodes its whole length
    src = torch.randint(4, 8000, (16 if "greedy" in name else 2, 24))
    beams = 4 if "beam" in name else 1
    compiled = name.endswith("compiled")
    return lambda: model.generate(src, max_new_tokens=32, num_beams=beams, compile=compiled)


def worker(cases: list[str], reps: int) -> None:
    """Time each case ``reps`` times after a warm-up call (which compiles a compiled case); print JSON."""
    import torch

    torch.set_num_threads(2)
    out = {}
    with torch.no_grad():
        for name in cases:
            call = _case(name)
            call()
            times = []
            for _ in range(reps):
                start = time.perf_counter()
                call()
                times.append(time.perf_counter() - start)
            out[name] = times
    print(json.dumps(out))


def run(src: str, cases: list[str], reps: int) -> dict[str, list[float]]:
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve()), "OMP_NUM_THREADS": "2"}
    done = subprocess.run([sys.executable, __file__, "--worker", ",".join(cases), "--reps", str(reps)], env=env,
                          capture_output=True, text=True, check=True, timeout=1800)
    return json.loads(done.stdout.strip().splitlines()[-1])


def quartile(values: list[float]) -> float:
    return statistics.quantiles(values, n=4, method="inclusive")[0] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", help="the src folder of the tree before")
    parser.add_argument("--after", help="the src folder of the tree after")
    parser.add_argument("--out", help="the results file (JSON)")
    parser.add_argument("--rounds", type=int, default=7, help="eager rounds per tree (default 7)")
    parser.add_argument("--compiled-rounds", type=int, default=3, help="compiled rounds per tree (default 3)")
    parser.add_argument("--reps", type=int, default=3, help="timed calls per case in a round (default 3)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker.split(","), args.reps)
    trees = {"before": args.before, "after": args.after}
    times: dict[str, dict[str, list[float]]] = {case: {"before": [], "after": []} for case in EAGER + COMPILED}
    plan = [(EAGER, args.rounds), (COMPILED, args.compiled_rounds)]
    for cases, rounds in plan:
        for r in range(rounds):
            order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
            for side in order:
                got = run(trees[side], cases, args.reps)
                for case, t in got.items():
                    times[case][side].append(statistics.median(t))  # a round's figure: its calls' median
                print(f"round {r + 1}/{rounds} {side}: " + ", ".join(f"{c} {statistics.median(t):.3f}s"
                                                                     for c, t in got.items()), flush=True)
    cpu = platform.processor() or platform.machine()
    try:
        flags = Path("/proc/cpuinfo").read_text().split("flags")[1].split("\n")[0]
        model_name = Path("/proc/cpuinfo").read_text().split("model name")[1].split("\n")[0].strip(" :\t")
        cpu = model_name
        cpu_flags = {f: f in flags.split() for f in ("avx2", "avx512f", "amx_tile", "avx512_vnni", "avx_vnni")}
    except (OSError, IndexError):
        cpu_flags = {}
    result = {"cpu": cpu, "cpu_flags": cpu_flags, "threads": 2, "date": time.strftime("%Y-%m-%d"), "cases": {}}
    for case, sides in times.items():
        ratios = [b / a for b, a in zip(sides["before"], sides["after"])]  # > 1: after is faster
        result["cases"][case] = {
            "before_s": statistics.median(sides["before"]), "after_s": statistics.median(sides["after"]),
            "rounds": len(ratios), "ratio_lower_quartile": quartile(ratios), "ratio_median": statistics.median(ratios),
            "before_rounds_s": sides["before"], "after_rounds_s": sides["after"]}
        print(f"{case:36} before {result['cases'][case]['before_s']:.3f}s after {result['cases'][case]['after_s']:.3f}s"
              f"  before/after: lower quartile {result['cases'][case]['ratio_lower_quartile']:.3f}, median "
              f"{result['cases'][case]['ratio_median']:.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
