"""Decoding before and after a change to the decoding code, on this machine in one sitting: the same ``generate``
calls run from two source trees, each round a process of its own per tree, the trees alternating (so neither
runtime disturbs the other's threads, and a drift of the machine falls on both).

    git worktree add /tmp/before <commit>
    python benchmarks/session_speed.py --before /tmp/before/src --after src     # writes results/session_speed.json

Cases (random weights, float32, 2 threads, greedy unless named): GPT-2 124M at batch 1; Llama-tiny at batch 16;
the paper's base Transformer translating 16 sources, greedy and with 4 beams; then compiled (``compile=True``):
Llama-tiny at batch 16 and the base Transformer greedy. A round's figure for a tree is the fastest of its timed calls
(what the code costs, less what other processes took from it on a shared machine; the median is kept too).
Reported per case: seconds per call of each tree (median over rounds) and the ratio before / after per round, its
lower quartile and median (>= 1: after is as fast); and the ratio of the two sides' own lower quartiles (each tree's
typical fast call: the pairs' noise does not widen it as it widens the per-round ratios' spread).

``--ops`` counts instead of timing (no noise): the Python function calls and the aten operators of one call of each
case, from each tree (``session_ops.json``): whether the two trees do the same work, whatever the clock says.

``--paired N`` times otherwise: one worker process per tree stays up (each warmed, a compiled case compiled once),
and the two take single calls in turn, N pairs per case, the order flipped every pair, with a pause between calls
for the idle side's threads to sleep. A pair's two calls are a few seconds apart, so a slow spell of a shared
machine (seconds to minutes: rounds of whole processes vary by 20% here) falls on both; the ratios are per pair.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"  # a full run writes here unless --out says
HERE = str(Path(__file__).resolve().parents[1] / "src")  # this checkout's package: both sides by default

EAGER = ["gpt2-b1", "llama-tiny-b16", "transformer-base-greedy", "transformer-base-beam4"]
COMPILED = ["llama-tiny-b16-compiled", "transformer-base-greedy-compiled"]


def _case(name: str):  # -> (model, call)
    import torch

    import aiayn

    torch.manual_seed(0)
    new = int(os.environ.get("SESSION_SPEED_NEW_TOKENS", "64"))  # --new-tokens, handed to the workers
    if name.startswith("gpt2"):
        model = aiayn.build(aiayn.preset("gpt2", dropout=0.0, attention_dropout=0.0, eos_id=None)).eval()
        ids = torch.randint(0, 50257, (1, 16))
        return lambda: model.generate(ids, max_new_tokens=new, do_sample=False)
    if name.startswith("llama-tiny"):
        model = aiayn.build(aiayn.preset("llama-tiny", vocab_size=512, max_len=256, eos_id=None)).eval()
        ids = torch.randint(0, 512, (16, 24))
        compiled = name.endswith("compiled")
        return lambda: model.generate(ids, max_new_tokens=new, do_sample=False, compile=compiled)
    model = aiayn.build(aiayn.preset("transformer-base", src_vocab_size=8000, tgt_vocab_size=8000,
                                     dropout=0.0)).eval()
    model.generator.bias.data[model.cfg.eos_id] = -1e4  # no row ends early: every case decodes its whole length
    src = torch.randint(4, 8000, (16 if "greedy" in name else 2, 24))
    beams = 4 if "beam" in name else 1
    compiled = name.endswith("compiled")
    return lambda: model.generate(src, max_new_tokens=new // 2, num_beams=beams, compile=compiled)


def warmed(cases: list[str]) -> dict:
    """``name -> call`` of each case on 2 threads, each called once (a warm-up, which compiles a compiled case).
    Case by case, so a case is warm when the next one is built."""
    import torch

    torch.set_num_threads(2)
    calls = {}
    with torch.no_grad():
        for name in cases:
            calls[name] = _case(name)
            calls[name]()
    return calls


def worker(cases: list[str], reps: int) -> None:
    """Time each case ``reps`` times after a warm-up call; print JSON."""
    import torch

    out = {}
    with torch.no_grad():
        for name, call in warmed(cases).items():
            times = []
            for _ in range(reps):
                start = time.perf_counter()
                call()
                times.append(time.perf_counter() - start)
            out[name] = times
    print(json.dumps(out))


def count_ops(cases: list[str]) -> None:
    """An ops worker: per case, the Python calls (cProfile) and aten operators (torch.profiler) of one call."""
    import cProfile
    import pstats

    import torch
    from torch.profiler import ProfilerActivity, profile

    out = {}
    with torch.no_grad():
        for name, call in warmed(cases).items():
            python = cProfile.Profile()
            python.runcall(call)
            with profile(activities=[ProfilerActivity.CPU]) as ops:
                call()
            out[name] = {"python_calls": pstats.Stats(python).total_calls,
                         "aten_ops": sum(e.count for e in ops.key_averages() if e.key.startswith("aten::"))}
    print(json.dumps(out))


def serve(cases: list[str]) -> None:
    """A paired worker: build and warm every case, say so, then time one call of each case named on stdin."""
    import torch

    calls = warmed(cases)
    with torch.no_grad():
        print("ready", flush=True)
        for line in sys.stdin:
            start = time.perf_counter()
            calls[line.strip()]()
            print(time.perf_counter() - start, flush=True)


def paired(trees: dict[str, str], cases: list[str], pairs: int, pause: float = 0.5) -> dict[str, dict]:
    """``case -> {side: [seconds per call]}`` from a worker per tree taking single calls in turn (module docstring)."""
    workers = {}
    try:
        for side, src in trees.items():  # one at a time: a warm-up (which compiles, or times kernels) runs alone
            env = {**os.environ, "PYTHONPATH": str(Path(src).resolve()), "OMP_NUM_THREADS": "2"}
            workers[side] = w = subprocess.Popen([sys.executable, __file__, "--serve", ",".join(cases)], env=env,
                                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert w.stdout is not None and w.stdout.readline().strip() == "ready"
        times: dict[str, dict[str, list[float]]] = {c: {side: [] for side in trees} for c in cases}
        for p in range(pairs):
            for case in cases:
                for side in (list(trees) if p % 2 == 0 else list(trees)[::-1]):
                    time.sleep(pause)  # the other side's threads stop spinning
                    w = workers[side]
                    assert w.stdin is not None and w.stdout is not None
                    w.stdin.write(case + "\n")
                    w.stdin.flush()
                    times[case][side].append(float(w.stdout.readline()))
            print(f"pair {p + 1}/{pairs}: " + ", ".join(f"{c} {t['before'][-1]:.3f}/{t['after'][-1]:.3f}s"
                                                      for c, t in times.items()), flush=True)
        return times
    finally:
        for w in workers.values():
            w.kill()


def run(src: str, cases: list[str], reps: int) -> dict[str, list[float]]:
    env = {**os.environ, "PYTHONPATH": str(Path(src).resolve()), "OMP_NUM_THREADS": "2"}
    done = subprocess.run([sys.executable, __file__, "--worker", ",".join(cases), "--reps", str(reps)], env=env,
                          capture_output=True, text=True, check=True, timeout=1800)
    return json.loads(done.stdout.strip().splitlines()[-1])


def quartile(values: list[float]) -> float:
    return statistics.quantiles(values, n=4, method="inclusive")[0] if len(values) > 1 else values[0]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default=HERE, help="the src folder of the tree before (default: this one)")
    parser.add_argument("--after", default=HERE, help="the src folder of the tree after (default: this one)")
    parser.add_argument("--rounds", type=int, default=7, help="eager rounds per tree (default 7)")
    parser.add_argument("--compiled-rounds", type=int, default=3, help="compiled rounds per tree (default 3)")
    parser.add_argument("--reps", type=int, default=3, help="timed calls per case in a round (default 3)")
    parser.add_argument("--cases", default=",".join(EAGER + COMPILED), help="the cases, comma-separated")
    parser.add_argument("--paired", type=int, default=0,
                        help="time N pairs of single calls from two workers that stay up, instead of rounds")
    parser.add_argument("--new-tokens", type=int, default=64,
                        help="tokens each LM case makes, half that each translation (default 64)")
    parser.add_argument("--ops", action="store_true", help="count each tree's Python calls and aten operators")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--count", help=argparse.SUPPRESS)
    if "--worker" in (sys.argv[1:] if argv is None else argv):
        args = parser.parse_args(argv)
        return worker(args.worker.split(","), args.reps)
    if "--serve" in (sys.argv[1:] if argv is None else argv):
        return serve(parser.parse_args(argv).serve.split(","))
    if "--count" in (sys.argv[1:] if argv is None else argv):
        return count_ops(parser.parse_args(argv).count.split(","))
    from aiayn.benchmark.scripts import script_args, write_results

    args = script_args(parser, argv, {"rounds": 1, "compiled_rounds": 0, "reps": 1, "cases": "llama-tiny-b16",
                                        "new_tokens": 8},
                       "session_speed", results=RESULTS)
    chosen = args.cases.split(",")
    trees = {"before": args.before, "after": args.after}
    os.environ["SESSION_SPEED_NEW_TOKENS"] = str(args.new_tokens)  # every worker's environment is made from this
    if args.ops:
        counted = {}
        for side, src in trees.items():
            env = {**os.environ, "PYTHONPATH": str(Path(src).resolve()), "OMP_NUM_THREADS": "2"}
            done = subprocess.run([sys.executable, __file__, "--count", ",".join(chosen)], env=env, check=True,
                                  capture_output=True, text=True, timeout=1800)
            counted[side] = json.loads(done.stdout.strip().splitlines()[-1])
        rows = {c: {side: counted[side][c] for side in trees} for c in chosen}
        for c, r in rows.items():
            print(f"{c:36} python calls {r['before']['python_calls']} -> {r['after']['python_calls']}, aten ops "
                  f"{r['before']['aten_ops']} -> {r['after']['aten_ops']}")
        from aiayn.benchmark.harness import machine

        write_results(args.out, "session_ops", {"machine": machine(), "before": args.before, "after": args.after,
                                                "new_tokens": args.new_tokens,
                                                "cases": rows})
        return None
    times: dict[str, dict[str, list[list[float]]]] = {case: {"before": [], "after": []} for case in chosen}
    plan = [([c for c in EAGER if c in chosen], args.rounds), ([c for c in COMPILED if c in chosen],
                                                                 args.compiled_rounds)]
    plan = [(cases, rounds) for cases, rounds in plan if cases and rounds]
    if args.paired:  # each call its own "round" of one: the ratios below are per pair
        plan = []
        for case, sides in paired(trees, chosen, args.paired).items():
            times[case] = {side: [[t] for t in ts] for side, ts in sides.items()}
    for cases, rounds in plan:
        for r in range(rounds):
            order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
            for side in order:
                got = run(trees[side], cases, args.reps)
                for case, t in got.items():
                    times[case][side].append(t)
                print(f"round {r + 1}/{rounds} {side}: " + ", ".join(f"{c} {statistics.median(t):.3f}s"
                                                                     for c, t in got.items()), flush=True)
    from aiayn.benchmark.harness import machine

    try:
        flags = Path("/proc/cpuinfo").read_text().split("flags")[1].split("\n")[0].split()
    except (OSError, IndexError):
        flags = []
    result: dict = {"machine": machine(), "threads": 2, "before": args.before, "after": args.after,
                    "new_tokens": args.new_tokens,
                    "method": f"{args.paired} pairs of single calls" if args.paired else
                    f"rounds of processes, the fastest of {args.reps} calls each",
                    "cpu_flags": {f: f in flags for f in ("avx2", "avx512f", "amx_tile", "avx512_vnni", "avx_vnni")},
                    "cases": {}}
    for case, sides in times.items():
        best = {side: [min(t) for t in rounds] for side, rounds in sides.items()}  # a round's figure: its fastest
        typical = {side: [statistics.median(t) for t in rounds] for side, rounds in sides.items()}
        ratios = [b / a for b, a in zip(best["before"], best["after"])]  # > 1: after is faster
        ratios_median = [b / a for b, a in zip(typical["before"], typical["after"])]
        result["cases"][case] = {
            "before_s": statistics.median(best["before"]), "after_s": statistics.median(best["after"]),
            "rounds": len(ratios), "ratio_lower_quartile": quartile(ratios), "ratio_median": statistics.median(ratios),
            "ratio_of_round_medians_lower_quartile": quartile(ratios_median),
            "lower_quartiles_ratio": quartile(best["before"]) / quartile(best["after"]),  # each side's own
            "before_calls_s": sides["before"], "after_calls_s": sides["after"]}
        print(f"{case:36} before {result['cases'][case]['before_s']:.3f}s after {result['cases'][case]['after_s']:.3f}s"
              f"  before/after: lower quartile {result['cases'][case]['ratio_lower_quartile']:.3f}, median "
              f"{result['cases'][case]['ratio_median']:.3f}")
    write_results(args.out, "session_speed", result)


if __name__ == "__main__":
    main()
