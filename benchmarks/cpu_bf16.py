"""Whether bfloat16 weights pay for decoding on this CPU: GPT-2 124M (random weights) generating greedily at batch 1
in float32 and in bfloat16 (``model.to(torch.bfloat16)``, what ``dtype="bfloat16"`` does), eager and with the step
compiled, side by side in one process.

    python benchmarks/cpu_bf16.py                 # GPT-2, 16-token prompt, 128 new tokens, 7 rounds, 2 threads
    python benchmarks/cpu_bf16.py --quick         # gpt-tiny, a few tokens, one round, into a temporary folder

A decoding step at batch 1 reads every weight once, so half the bytes could take half the time, if the CPU
multiplies bfloat16 as fast as it streams it: CPUs with AMX (Intel Sapphire Rapids and later: ``amx_bf16`` in
``/proc/cpuinfo``) and AVX512-BF16 have instructions for it, others convert in software. After a warm call of
each (the compile, for the compiled ones), the four settings take their rounds in turn, the order rotating; the
ratio is float32's time over bfloat16's, round by round (> 1: bfloat16 pays). bfloat16 rounds otherwise, so its
tokens are compared with float32's, not required to equal. Writes ``benchmarks/results/cpu_bf16.json`` with the
CPU's flags.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

import aiayn

RESULTS = Path(__file__).parent / "results"
FLAGS = ("amx_bf16", "avx512_bf16", "avx512f", "avx2")
PROMPT = 16  # prompt tokens


def cpuinfo() -> str:
    """``/proc/cpuinfo``'s text; empty off Linux."""
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def cpu_flags() -> list[str]:
    """Which of :data:`FLAGS` ``/proc/cpuinfo`` lists."""
    words = set(cpuinfo().split())
    return [f for f in FLAGS if f in words]


def cpu_name() -> str:
    return next((line.split(":", 1)[1].strip() for line in cpuinfo().splitlines() if line.startswith("model name")),
                "unknown")


def quartiles(xs: list[float]) -> dict[str, float]:
    q1, median, q3 = statistics.quantiles(xs, n=4) if len(xs) > 1 else (xs[0],) * 3
    return {"median": round(median, 3), "q1": round(q1, 3), "q3": round(q3, 3)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--new", type=int, default=128, help="tokens generated per call")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="gpt-tiny, 8 tokens, one round, into a temporary folder")
    p.add_argument("--out", help="folder of the results file (default benchmarks/results; --quick: a temporary one)")
    args = p.parse_args(argv)
    preset, new, rounds = ("gpt-tiny", 8, 1) if args.quick else ("gpt2", args.new, args.rounds)
    out = Path(args.out or (tempfile.mkdtemp() if args.quick else RESULTS))
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    fp32 = aiayn.build(aiayn.preset(preset, eos_id=None)).eval()  # no end token: every call makes every token
    models = {"float32": fp32, "bfloat16": copy.deepcopy(fp32).to(torch.bfloat16)}  # the same weights, rounded
    prompt = torch.randint(4, 1000 if not args.quick else 60, (1, PROMPT))

    def generate(dtype: str, compile: bool) -> torch.Tensor:
        with torch.no_grad():
            return models[dtype].generate(prompt, max_new_tokens=new, do_sample=False, compile=compile)[:, PROMPT:]

    settings = [(d, c) for c in (False, True) for d in ("float32", "bfloat16")]
    tokens, first = {}, {}
    for d, c in settings:  # the warm call: the compile for a compiled setting
        start = time.perf_counter()
        tokens[d, c] = generate(d, c)
        first[f"{d}{' compiled' if c else ''}"] = round(time.perf_counter() - start, 2)
    times: dict[tuple[str, bool], list[float]] = {s: [] for s in settings}
    for r in range(rounds):
        turn = r % len(settings)  # the order rotates round by round
        for d, c in settings[turn:] + settings[:turn]:
            start = time.perf_counter()
            generate(d, c)
            times[d, c].append(time.perf_counter() - start)
    ratios = {way: [a / b for a, b in zip(times["float32", c], times["bfloat16", c])]
              for way, c in (("eager", False), ("compiled", True))}
    result = {
        "name": "cpu_bf16", "quick": args.quick, "preset": preset, "batch": 1, "prompt_tokens": PROMPT,
        "new_tokens": new, "rounds": rounds, "threads": args.threads,
        "machine": {"cpu": cpu_name(), "flags": cpu_flags(), "torch": torch.__version__,
                    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")},
        "first_call_s": first,
        "ms_per_token": {f"{d}{' compiled' if c else ''}": round(statistics.median(t) / new * 1e3, 2)
                         for (d, c), t in times.items()},
        "float32_over_bfloat16": {way: quartiles(r) for way, r in ratios.items()},
        "tokens_equal_to_float32": {way: round((tokens["bfloat16", c] == tokens["float32", c]).float().mean().item(), 3)
                                    for way, c in (("eager", False), ("compiled", True))},
        "compiled_equals_eager": {d: bool(torch.equal(tokens[d, True], tokens[d, False])) for d in models},
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "cpu_bf16.json").write_text(json.dumps(result, indent=2) + "\n")
    for way, q in result["float32_over_bfloat16"].items():
        print(f"{way}: bfloat16 {q['median']:.2f}x float32 ({q['q1']:.2f}-{q['q3']:.2f})")
    print(f"wrote {out / 'cpu_bf16.json'}")


if __name__ == "__main__":
    main()
