"""What PyTorch already offers for CPU inference, against today's compiled decoding (issue 58, ask 2): inductor's
``freezing`` (weights folded in as constants, prepacked for oneDNN) and ``max_autotune`` with its C++ GEMM template
(``max_autotune_gemm_backends="CPP,ATEN"``: GEMM candidates timed per shape on the machine), on the decoding cases
of the CTranslate2 and llama.cpp comparisons.

    python benchmarks/inductor_options.py                   # every case and option, 2 passes (tens of minutes)
    python benchmarks/inductor_options.py --quick           # toy sizes, one pass, into a temporary folder

Each (case, option) is a fresh process of its own (one compile each; an empty inductor cache, so one option's
kernels are not another's), which builds the case's model (random weights, seed 0; the end token never chosen, so
every call makes every token), runs ``generate(..., compile=True)`` once (the compile, timed), then times
``--calls`` calls; the options are run in turn, twice over in alternating order, and each option's figure is the
median of its calls. Tokens are compared with today's (``default``): an option that changes them is reported.
Writes ``benchmarks/results/inductor_options.json`` with the machine (CPU, vector flags) and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from aiayn.benchmark.harness import machine
from aiayn.benchmark.scripts import script_args, write_results

RESULTS = Path(__file__).parent / "results"
QUICK = {"calls": 2, "passes": 1, "quick_models": True}

OPTIONS = {  # name -> inductor config set before the compile
    "default": {},
    "freezing": {"freezing": True},
    "max-autotune": {"max_autotune": True, "max_autotune_gemm_backends": "CPP,ATEN"},
    "cpp-wrapper": {"cpp_wrapper": True},  # the compiled graph's calls made from C++, not Python
    "freezing-cpp-wrapper": {"freezing": True, "cpp_wrapper": True},
}
CASES = {  # name -> (what, the probe's model and call)
    "marian-greedy": "Marian-shaped greedy translation, 16 x 24, 64 new",
    "marian-beam4": "the same, beam 4",
    "gpt2-b1": "GPT-2 124M greedy, batch 1, 128 new",
    "llama124m-b1": "Llama-shaped 124M greedy, batch 1, 128 new",
    "gpt2-b1-int8": "GPT-2 124M int8 (aiayn.layers.int8.quantize), greedy, batch 1, 128 new",
    "llama124m-b1-int8": "Llama-shaped 124M int8, greedy, batch 1, 128 new",
}

PROBE = """
import hashlib, json, statistics, time, torch, aiayn
import torch._inductor.config as inductor
from aiayn.benchmark.cases.common import small_transformer
from aiayn.benchmark.cases.generation import LLAMA_124M
for name, value in {options!r}.items():
    setattr(inductor, name, value)
torch.set_num_threads({threads})
torch.manual_seed(0)
case, quick, calls = {case!r}, {quick!r}, {calls}
tiny = dict(d_model=64, n_heads=4, n_layers=2, d_ff=128, vocab_size=1000, max_len=256)
if case.startswith("marian"):
    cfg = small_transformer(quick)
    model = aiayn.build(cfg).eval()
    model.generator.bias.data[cfg.eos_id] = -1e4  # no sentence ends: every call makes every token
    ids, kw = torch.randint(4, cfg.src_vocab_size, (16, 24)), dict(max_new_tokens=8 if quick else 64,
                                                                  num_beams=4 if case.endswith("beam4") else 1)
else:
    gpt = case.startswith("gpt2")
    cfg = aiayn.preset("gpt2", eos_id=None) if gpt else LLAMA_124M
    if quick:
        cfg = aiayn.preset("gpt-tiny" if gpt else "llama-tiny", eos_id=None, **tiny)
    import dataclasses
    model = aiayn.build(dataclasses.replace(cfg, eos_id=None)).eval()
    if case.endswith("int8"):
        from aiayn.layers.int8 import quantize
        model = quantize(model)
    ids, kw = torch.randint(4, 1000, (1, 16)), dict(max_new_tokens=8 if quick else 128)
with torch.no_grad():
    start = time.perf_counter()
    out = model.generate(ids, do_sample=False, compile=True, **kw)
    first = time.perf_counter() - start
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        model.generate(ids, do_sample=False, compile=True, **kw)
        times.append(time.perf_counter() - start)
tokens = out.numel() - ids.numel() if not case.startswith("marian") else out.numel()
print(json.dumps({{"first_s": first, "call_s": statistics.median(times), "calls_s": times,
                  "tokens": hashlib.sha1(out.numpy().tobytes()).hexdigest()[:16], "new_per_call": tokens}}))
"""


def probe(case: str, option: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "OMP_NUM_THREADS": str(args.threads)}
        code = PROBE.format(options=OPTIONS[option], threads=args.threads, case=case, quick=args.quick_models,
                            calls=args.calls)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=3600,
                             check=False)
    if out.returncode:
        return {"error": out.stderr.strip().splitlines()[-1][:300] if out.stderr.strip() else "failed"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    p.add_argument("--options", nargs="+", choices=list(OPTIONS), default=list(OPTIONS))
    p.add_argument("--calls", type=int, default=5, help="timed calls per process (default 5)")
    p.add_argument("--passes", type=int, default=2, help="times every option runs, in alternating order")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick-models", action="store_true", help="tiny models (what --quick uses)")
    args = script_args(p, argv, QUICK, "inductor-options", results=RESULTS)
    load = os.getloadavg()
    rows: dict[str, Any] = {}
    for case in args.cases:
        runs: dict[str, list[dict[str, Any]]] = {o: [] for o in args.options}
        for k in range(args.passes):
            for option in args.options if k % 2 == 0 else list(reversed(args.options)):
                runs[option].append(probe(case, option, args))
                print(f"{case} {option}: {runs[option][-1]}", flush=True)
        row: dict[str, Any] = {"what": CASES[case]}
        base = [r["call_s"] for r in runs.get("default", []) if "call_s" in r]
        for option, found in runs.items():
            ok = [r for r in found if "call_s" in r]
            if not ok:
                row[option] = {"error": found[0].get("error")}
                continue
            row[option] = {"call_s": round(statistics.median(r["call_s"] for r in ok), 4),
                           "compile_s": round(statistics.median(r["first_s"] - r["call_s"] for r in ok), 1),
                           "tokens": ok[0]["tokens"]}
            if base:
                row[option]["speedup_over_default"] = round(statistics.median(base) / row[option]["call_s"], 3)
        if "default" in row and "tokens" in row["default"]:
            for option in args.options:
                if "tokens" in row.get(option, {}):
                    row[option]["same_tokens_as_default"] = row[option]["tokens"] == row["default"]["tokens"]
        rows[case] = row
    result = {"what": __doc__.split("\n\n")[0], "machine": machine(), "load_average_before": list(load),
              "load_average_after": list(os.getloadavg()), "settings": {k: v for k, v in vars(args).items()
                                                                       if k != "out"}, "cases": rows}
    write_results(args.out, "inductor_options", result)


if __name__ == "__main__":
    main()
