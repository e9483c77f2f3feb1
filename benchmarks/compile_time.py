"""What ``compile=True`` costs before it pays: the first call's compile time, in a fresh process with an empty
inductor cache (cold) and in a second fresh process reading the cache the first wrote (warm: inductor's FX graph
cache, on by default), and the break-even, the tokens after which the compiled decoding has won its compile time
back.

    python benchmarks/compile_time.py            # llama-tiny and transformer-tiny, about two minutes on 2 cores
    python benchmarks/compile_time.py --quick    # fewer tokens, into a temporary folder

Each measurement is its own ``python -c`` process (one thread, random weights, greedy decoding; beam search for the
translation model) that times, in order: the compiled call (compile + decode), the compiled call again (decode
only), and the eager call, each generating ``--new`` tokens for a batch of ``--batch``. The break-even is
``compile_s / (eager_s - compiled_s) * tokens``: the tokens of this shape a process must generate before
``compile=True`` has paid (in one process: the step is compiled once per batch shape and reused by every later call).
Each row also keeps what the process said on standard error when it compiled (``compile=True`` announces the
compile and its time, and whether inductor's on-disk cache served the kernels). The machine (CPU, vector
instructions, cores) and its load average before and after the run are recorded: compile times are CPU-bound and
a busy machine stretches them. Writes ``benchmarks/results/compile_time.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from aiayn.benchmark.harness import machine

RESULTS = Path(__file__).parent / "results"

# One process: build, then time compiled (first), compiled (again) and eager calls; print the three as JSON.
PROBE = """
import json, time, torch, aiayn
torch.set_num_threads(1)
torch.manual_seed(0)
preset, batch, new, beams = {preset!r}, {batch}, {new}, {beams}
seq2seq = preset.startswith("transformer")
model = aiayn.build(aiayn.preset(preset) if seq2seq else aiayn.preset(preset, eos_id=None)).eval()
if seq2seq:  # no sentence ends: every call makes every token
    model.generator.bias.data[model.cfg.eos_id] = -1e4
ids = torch.randint(4, 60, (batch, 16))
def run(compile):
    start = time.perf_counter()
    model.generate(ids, max_new_tokens=new, num_beams=beams, do_sample=False, compile=compile)
    return time.perf_counter() - start
first = run(True)
again = min(run(True) for _ in range(3))
eager = min(run(False) for _ in range(3))
print(json.dumps({{"first_s": first, "compiled_s": again, "eager_s": eager}}))
"""

CASES = [("llama-tiny", 1, 1), ("llama-tiny", 16, 1), ("transformer-tiny", 16, 4)]  # preset, batch, beams


def probe(preset: str, batch: int, beams: int, new: int, cache: str) -> dict[str, Any]:
    """One fresh process's timings, its inductor cache in ``cache``, and its compile announcements."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "OMP_NUM_THREADS": "1"}
    code = PROBE.format(preset=preset, batch=batch, new=new, beams=beams)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         timeout=900)
    said = [line for line in out.stderr.splitlines() if line.startswith("aiayn: compiled")]
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "said": said}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--new", type=int, default=128, help="new tokens per row")
    parser.add_argument("--quick", action="store_true", help="16 new tokens; results into a temporary folder")
    args = parser.parse_args()
    new = 16 if args.quick else args.new
    load_before = os.getloadavg()
    rows = []
    for preset, batch, beams in CASES:
        with tempfile.TemporaryDirectory() as cache:
            cold, warm = probe(preset, batch, beams, new, cache), probe(preset, batch, beams, new, cache)
        tokens = batch * new
        saved = cold["eager_s"] - cold["compiled_s"]  # per call of this shape
        row = {"preset": preset, "batch": batch, "beams": beams, "new_tokens": new,
               "compile_cold_s": round(cold["first_s"] - cold["compiled_s"], 2),
               "compile_warm_s": round(warm["first_s"] - warm["compiled_s"], 2),
               "eager_s": round(cold["eager_s"], 4), "compiled_s": round(cold["compiled_s"], 4),
               "speedup": round(cold["eager_s"] / cold["compiled_s"], 2),
               "said_cold": cold["said"], "said_warm": warm["said"]}
        for kind in ("cold", "warm"):  # tokens of this shape before the compile has paid
            row[f"break_even_tokens_{kind}"] = (round(row[f"compile_{kind}_s"] / saved * tokens) if saved > 0
                                                else None)
        print(json.dumps(row))
        rows.append(row)
    out = Path(tempfile.mkdtemp()) if args.quick else RESULTS
    load = {"load_average_1_5_15_before": [round(x, 2) for x in load_before],
            "load_average_1_5_15_after": [round(x, 2) for x in os.getloadavg()]}
    result = {"what": __doc__.split("\n\n")[0], "machine": machine(), **load, "rows": rows}
    (out / "compile_time.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out / 'compile_time.json'}")


if __name__ == "__main__":
    main()
