"""The packed product in decoding itself (issue 58): the fixed rules with oneDNN's product over weights packed once
(``aiayn.layers.fast.linear_packed``, what the rules give the few rows of eager decoding on AVX2) against the same
rules without it (the swapped product there, as before), on the eager decoding cases of the CTranslate2 and serving
comparisons.

    python benchmarks/packed_in_decoding.py             # every case, 7 rounds (a few minutes on 2 cores)
    python benchmarks/packed_in_decoding.py --compile   # compiled steps: the swapped product against F.linear
    python benchmarks/packed_in_decoding.py --quick     # toy sizes, 2 rounds, into a temporary folder

A product timed alone is not a product inside a decoding step (the weights beside the caches, the copies around
it), so both ways run the same model, the same inputs and the same calls in one process, alternating call by
call (the order reversed every round, so what else the machine does weighs on both alike): ``packed`` is
``AIAYN_KERNELS=rules`` as it stands, ``swapped`` the same with :data:`aiayn.layers.fast.PACK_MIN` out of reach.
Each case's figure is the median of its calls and the lower quartile of the per-round ratios; the tokens of both
must be equal, and ``packed_weights`` counts the matrices packed (none off AVX2, where the rules pack nothing).
Writes ``benchmarks/results/packed_in_decoding.json`` with the machine (CPU, vector flags).

``--compile`` does the same for ``compile=True`` (each way compiled once, before the timing), where the packed
product does not go (it is made in Python per call): ``swapped`` is the rules as they stand (the swapped product
for 2 to :data:`aiayn.layers.fast.COMPILED_FEW_ROWS` rows on AVX2), ``F.linear`` the same without it (inductor's
own product, as before). Writes ``compiled_few_rows.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import statistics
import time
from pathlib import Path
from typing import Any

import torch

import aiayn
from aiayn.benchmark.cases.common import small_transformer
from aiayn.benchmark.harness import machine
from aiayn.benchmark.scripts import script_args, write_results
from aiayn.layers import fast, kernels

RESULTS = Path(__file__).parent / "results"
QUICK = {"rounds": 2, "quick_models": True}
CASES = {  # name -> what
    "marian-greedy": "Marian-shaped greedy translation, 16 x 24 sources, 64 new (16 rows a step)",
    "marian-beam4": "the same, beam 4 (64 rows a step)",
    "gpt2-b16": "GPT-2-shaped, the served model's 4,000-token vocabulary, batch 16, 12-token prompts, 32 new",
    "gpt2-b1": "GPT-2 124M, batch 1, 12-token prompt, 64 new (one row a step: only the prefill's 12 rows pack)",
}
TINY = {"d_model": 256, "n_heads": 4, "n_layers": 1, "d_ff": 2048, "max_len": 128}  # 256 x 2,048 = PACK_MIN


def case(name: str, quick: bool) -> tuple[torch.nn.Module, torch.Tensor, dict[str, Any]]:
    """The model (random weights, seed 0; the end token never chosen), its input ids and ``generate``'s keywords."""
    torch.manual_seed(0)
    if name.startswith("marian"):
        cfg = small_transformer()
        if quick:
            cfg = dataclasses.replace(cfg, n_encoder_layers=1, n_decoder_layers=1)  # the 8,000-token output: packed
        model = aiayn.build(cfg).eval()
        model.generator.bias.data[cfg.eos_id] = -1e4  # no sentence ends: every call makes every token
        ids = torch.randint(4, cfg.src_vocab_size, (16, 24))
        return model, ids, {"max_new_tokens": 8 if quick else 64, "num_beams": 4 if name == "marian-beam4" else 1}
    batch = 16 if name == "gpt2-b16" else 1
    cfg = aiayn.preset("gpt2", eos_id=None, vocab_size=4000 if batch > 1 else 50257)
    if quick:
        cfg = dataclasses.replace(cfg, vocab_size=1000, **TINY)
    model = aiayn.build(cfg).eval()
    ids = torch.randint(4, 1000, (batch, 12))
    return model, ids, {"max_new_tokens": 8 if quick else 32 if batch > 1 else 64}


def run(name: str, rounds: int, quick: bool, compile: bool = False) -> dict[str, Any]:
    model, ids, kw = case(name, quick)
    if compile:
        return run_compiled(name, model, ids, kw, rounds)
    pack_min = fast.PACK_MIN
    ways = {"packed": pack_min, "swapped": 1 << 62}
    calls: dict[str, list[float]] = {w: [] for w in ways}
    tokens = {}
    held = set(fast._packs)
    try:
        with torch.no_grad():
            for way, least in ways.items():  # warm-up: the packing, oneDNN's primitives, pages
                fast.PACK_MIN = least
                tokens[way] = hashlib.sha1(model.generate(ids, do_sample=False, **kw).numpy().tobytes()).hexdigest()
            for r in range(rounds):
                for way in ways if r % 2 == 0 else list(reversed(ways)):
                    fast.PACK_MIN = ways[way]
                    start = time.perf_counter()
                    model.generate(ids, do_sample=False, **kw)
                    calls[way].append(time.perf_counter() - start)
        packed = len(set(fast._packs) - held)
    finally:
        fast.PACK_MIN = pack_min
    ratios = sorted(s / p for s, p in zip(calls["swapped"], calls["packed"]))
    return {"what": CASES[name], "calls_s": {w: [round(t, 4) for t in ts] for w, ts in calls.items()},
            "median_s": {w: round(statistics.median(ts), 4) for w, ts in calls.items()},
            "speedup_median": round(statistics.median(calls["swapped"]) / statistics.median(calls["packed"]), 3),
            "speedup_lower_quartile": round(ratios[len(ratios) // 4], 3),
            "same_tokens": tokens["packed"] == tokens["swapped"], "packed_weights": packed}


def run_compiled(name: str, model: torch.nn.Module, ids: torch.Tensor, kw: dict[str, Any],
                 rounds: int) -> dict[str, Any]:
    """:func:`run` under ``compile=True``: the swapped product in the compiled step, or ``F.linear``."""
    import torch._dynamo

    ways = {"swapped": fast.COMPILED_FEW_ROWS, "F.linear": 0}
    calls: dict[str, list[float]] = {w: [] for w in ways}
    tokens = {}
    limit = torch._dynamo.config.cache_size_limit
    torch._dynamo.config.cache_size_limit = max(limit, 16)  # both ways' graphs kept: the switch is guarded on
    try:
        with torch.no_grad():
            for way, on in ways.items():  # the compiles, and a warm call
                fast.COMPILED_FEW_ROWS = on
                out = model.generate(ids, do_sample=False, compile=True, **kw)
                tokens[way] = hashlib.sha1(out.numpy().tobytes()).hexdigest()
            for r in range(rounds):
                for way in ways if r % 2 == 0 else list(reversed(ways)):
                    fast.COMPILED_FEW_ROWS = ways[way]
                    start = time.perf_counter()
                    model.generate(ids, do_sample=False, compile=True, **kw)
                    calls[way].append(time.perf_counter() - start)
    finally:
        fast.COMPILED_FEW_ROWS = ways["swapped"]
        torch._dynamo.config.cache_size_limit = limit
    ratios = sorted(f / s for f, s in zip(calls["F.linear"], calls["swapped"]))
    return {"what": CASES[name], "calls_s": {w: [round(t, 4) for t in ts] for w, ts in calls.items()},
            "median_s": {w: round(statistics.median(ts), 4) for w, ts in calls.items()},
            "speedup_median": round(statistics.median(calls["F.linear"]) / statistics.median(calls["swapped"]), 3),
            "speedup_lower_quartile": round(ratios[len(ratios) // 4], 3),
            "same_tokens": tokens["swapped"] == tokens["F.linear"]}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    p.add_argument("--rounds", type=int, default=7, help="calls of each way, alternating (default 7)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick-models", action="store_true", help="tiny models (what --quick uses)")
    p.add_argument("--compile", action="store_true", help="compiled steps: swapped against F.linear")
    args = script_args(p, argv, QUICK, "packed-in-decoding", results=RESULTS)
    torch.set_num_threads(args.threads)
    kernels.use("rules")
    rows = {}
    for name in args.cases:
        rows[name] = run(name, args.rounds, args.quick_models, args.compile)
        print(name, {k: v for k, v in rows[name].items() if k != "calls_s"}, flush=True)
    write_results(args.out, "compiled_few_rows" if args.compile else "packed_in_decoding", {
        "what": __doc__.split("\n\n")[0], "machine": machine(), "settings": {k: v for k, v in vars(args).items()
                                                                          if k != "out"},
        "rules": {"PACK_MIN": fast.PACK_MIN, "COMPILED_FEW_ROWS": fast.COMPILED_FEW_ROWS}, "cases": rows})


if __name__ == "__main__":
    main()
