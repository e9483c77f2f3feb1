"""The packed product in decoding itself (issue 58): the fixed rules with oneDNN's product over weights packed once
(``aiayn.layers.fast.linear_packed``, what the rules give the few rows of eager decoding on AVX2) against the same
rules without it (the swapped product there, as before), on the eager decoding cases of the CTranslate2 and serving
comparisons.

    python benchmarks/packed_in_decoding.py             # every case, 7 rounds (a few minutes on 2 cores)
    python benchmarks/packed_in_decoding.py --quick     # toy sizes, 2 rounds, into a temporary folder

A product timed alone is not a product inside a decoding step (the weights beside the caches, the copies around
it), so both ways run the same model, the same inputs and the same calls in one process, alternating call by
call (the order reversed every round, so what else the machine does weighs on both alike): ``packed`` is
``AIAYN_KERNELS=rules`` as it stands, ``swapped`` the same with :data:`aiayn.layers.fast.PACK_MIN` out of reach.
Each case's figure is the median of its calls and the lower quartile of the per-round ratios; the tokens of both
must be equal, and ``packed_weights`` counts the matrices packed (none off AVX2, where the rules pack nothing).
Writes ``benchmarks/results/packed_in_decoding.json`` with the machine (CPU, vector flags).
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


def run(name: str, rounds: int, quick: bool) -> dict[str, Any]:
    model, ids, kw = case(name, quick)
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


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    p.add_argument("--rounds", type=int, default=7, help="calls of each way, alternating (default 7)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick-models", action="store_true", help="tiny models (what --quick uses)")
    args = script_args(p, argv, QUICK, "packed-in-decoding", results=RESULTS)
    torch.set_num_threads(args.threads)
    kernels.use("rules")
    rows = {}
    for name in args.cases:
        rows[name] = run(name, args.rounds, args.quick_models)
        print(name, {k: v for k, v in rows[name].items() if k != "calls_s"}, flush=True)
    write_results(args.out, "packed_in_decoding", {
        "what": __doc__.split("\n\n")[0], "machine": machine(), "settings": {k: v for k, v in vars(args).items()
                                                                          if k != "out"}, "cases": rows})


if __name__ == "__main__":
    main()
