"""A compiled CPU step's weights in 2 MiB pages (``aiayn.layers.fast.in_huge_pages``) against where the allocator
put them (4 KiB pages), in greedy generation through the compiled step: GPT-2 124M and the Llama-shaped 124M at
batch 1 (float32 and int8) and the Marian-shaped model at batch 16 (random weights).

    python benchmarks/huge_pages.py           # 7 rounds (about ten minutes on 2 cores)
    python benchmarks/huge_pages.py --quick   # gpt-tiny, llama-tiny and a small Transformer, 2 rounds, a temp folder

Per case two copies of one model decode the same prompts: ``pages_4k`` with :data:`~aiayn.layers.fast.HUGE_PAGES`
off (its weights stay where they were made), ``pages_2m`` with it on (the session moves them before the first
trace; the move is timed apart, ``move_ms``). The two run in turn in each round, one process (what else the
machine does weighs on both alike); each figure is the median round in milliseconds a token (a step at batch 16 for
the Marian-shaped model), ``ratio`` is ``pages_4k / pages_2m``, and the tokens of both are compared. The process's
``AnonHugePages`` (``/proc/self/smaps_rollup``) says whether the system gave huge pages. Writes
``benchmarks/results/huge_pages.json`` (the AMD EPYC with AVX-512's: ``--out benchmarks/results/amd-epyc-avx512``).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from aiayn.benchmark.cases.common import small_transformer
from aiayn.benchmark.cases.generation import LLAMA_124M
from aiayn.benchmark.harness import machine
from aiayn.benchmark.scripts import script_args, write_results
from aiayn.layers import fast, int8, kernels
from aiayn.models import build
from aiayn.models.gpt import PRESETS

RESULTS = Path(__file__).parent / "results"


def anon_huge_kb() -> int | None:
    """This process's anonymous memory in transparent huge pages, kB (Linux), else ``None``."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def cases(quick: bool) -> dict[str, tuple[nn.Module, Tensor, int]]:
    """``name -> (model, prompt ids, new tokens)``."""
    gpt2, llama = (PRESETS["gpt-tiny"], PRESETS["llama-tiny"]) if quick else (PRESETS["gpt2"], LLAMA_124M)
    new = 8 if quick else 64
    out: dict[str, tuple[nn.Module, Tensor, int]] = {}
    names = ("gpt-tiny", "llama-tiny") if quick else ("GPT-2 124M", "Llama-shaped 124M")
    for name, cfg in zip(names, (gpt2, llama)):
        f32 = build(dataclasses.replace(cfg, eos_id=None)).eval()
        prompt = torch.randint(4, cfg.vocab_size, (1, 16))
        out[f"{name}, float32, batch 1"] = (f32, prompt, new)
        out[f"{name}, int8, batch 1"] = (int8.quantize(f32), prompt, new)
    cfg = small_transformer(quick)
    marian = build(cfg).eval()
    marian.generator.bias.data[cfg.eos_id] = -1e4  # no sentence ends: every call makes every token
    sources = torch.randint(4, cfg.src_vocab_size, (16, 24))
    out[f"{'small ' if quick else ''}Marian-shaped, float32, batch 16"] = (marian, sources, new)
    return out


def compare(model: nn.Module, prompt: Tensor, new: int, rounds: int) -> dict[str, Any]:
    """Milliseconds a token of each way, median round, and whether their tokens agree."""
    models = {"pages_4k": model, "pages_2m": copy.deepcopy(model)}
    huge_before = anon_huge_kb()
    start = time.perf_counter()
    moved = fast.in_huge_pages(models["pages_2m"])  # what the session would do at its first compiled step
    move_ms = (time.perf_counter() - start) * 1e3
    huge_after = anon_huge_kb()
    seen: dict[str, list[float]] = {w: [] for w in models}
    tokens = {}
    for r in range(rounds + 1):  # the first round compiles
        for w in models if r % 2 == 0 else reversed(models):
            fast.HUGE_PAGES = w == "pages_2m"
            start = time.perf_counter()
            tokens[w] = models[w].generate(prompt, max_new_tokens=new, do_sample=False, compile=True)
            if r:
                seen[w].append((time.perf_counter() - start) / new * 1e3)
    fast.HUGE_PAGES = True
    out: dict[str, Any] = {w: round(statistics.median(t), 3) for w, t in seen.items()}
    out["ratio"] = round(out["pages_4k"] / out["pages_2m"], 3)
    out["lower_quartile_ratio"] = round(sorted(a / b for a, b in zip(seen["pages_4k"], seen["pages_2m"]))[
        len(seen["pages_4k"]) // 4], 3)
    out["same_tokens"] = bool(torch.equal(tokens["pages_4k"], tokens["pages_2m"]))
    out["moved_mb"] = round(moved / 2**20, 1)
    out["move_ms"] = round(move_ms, 1)
    if huge_before is not None and huge_after is not None:  # what the system gave: less than moved_mb, some 4 KiB
        out["huge_pages_given_mb"] = round((huge_after - huge_before) / 1024, 1)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cases", nargs="+", help="names starting with these (default: every case)")
    args = script_args(p, argv, {"rounds": 2}, "huge-pages", results=RESULTS)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    kernels.use("rules")  # the one-row product as the rules give it, on both sides (no timing inside a round)
    results: dict[str, Any] = {}
    before = anon_huge_kb()
    with torch.no_grad():
        for name, (model, prompt, new) in cases(args.quick).items():
            if args.cases and not any(name.startswith(c) for c in args.cases):
                continue
            if isinstance(model, nn.Module) and any(isinstance(m, int8.Int8Linear) for m in model.modules()):
                int8.opaque(model)  # its plain int8 rows exist before the copy, so both sides hold them
            results[name] = compare(model, prompt, new, args.rounds)
            print(name, results[name], flush=True)
    kernels.use(None)
    write_results(args.out, "huge_pages", {
        "what": __doc__.split("\n\n")[0], "machine": machine(), "available": fast.huge_pages_available(),
        "anon_huge_pages_kb": {"before": before, "after": anon_huge_kb()},
        "settings": {k: v for k, v in vars(args).items() if k != "out"}, "ms_per_token": results})


if __name__ == "__main__":
    main()
