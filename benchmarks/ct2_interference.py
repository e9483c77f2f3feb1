"""Whether running CTranslate2 in a process slows PyTorch in it afterwards: the ``-ct2`` cases time both sides in
one process, so a lasting slowdown after CTranslate2's first call would bias every ratio against ours.

    python benchmarks/ct2_interference.py [--threads 2] [--repeats 5]
    python benchmarks/ct2_interference.py --quick     # toy sizes, into a temporary folder

It did, on a 2-core VM, 3-7x: torch puts its ``libgomp`` in the process' global symbol scope, so CTranslate2
imported after it binds its OpenMP calls there, and the team its worker thread then keeps in torch's runtime makes
that runtime count more threads than cores, after which its threads sleep between parallel regions instead of
spinning. :func:`aiayn.convert.ctranslate2.require` now imports CTranslate2 with ``RTLD_DEEPBIND``, so it calls the
runtime it ships. Each way of importing (``--openmp own``, ours; ``torch``, a plain ``import ctranslate2``) is
measured in a process of its own, and both go in the results.

In one process, with ``--threads`` torch threads (CTranslate2's ``intra_threads`` the same, as the cases set it):
a loop of 2,000 elementwise ops on 200,000 floats (each one OpenMP parallel region, written into one buffer: no
allocation) and our compiled greedy decoding of the Marian-shaped ``decode-greedy-ct2`` work are timed (best of
``--repeats``) before CTranslate2 has run, then after one ``translate_batch`` of the same work, then again after 3
idle seconds. The slowdown is after / before. Writes ``benchmarks/results/ct2_interference.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from aiayn.benchmark.cases.decoding import decode, translation
from aiayn.benchmark.harness import machine
from aiayn.benchmark.peers import ct2
from aiayn.benchmark.scripts import script_args, write_results

RESULTS = Path(__file__).parent / "results"


def best(fn: Callable[[], Any], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


OPENMP = ("own", "torch")  # CTranslate2 imported to call the OpenMP runtime it ships, or torch's (a plain import)


def measure(openmp: str, threads: int, repeats: int, quick: bool) -> dict[str, Any]:
    """The rows and CTranslate2's call time, in this process, CTranslate2 imported the ``openmp`` way."""
    if openmp == "torch":
        import ctranslate2  # noqa: F401  (before ct2.require: a plain import, bound to torch's runtime)
    ct2.require()
    torch.set_num_threads(threads)
    tr = translation(quick, torch.device("cpu"))
    cfg = tr.cfg
    x = torch.randn(200_000)
    y = torch.empty_like(x)

    def elementwise() -> None:
        for _ in range(2000):
            torch.clamp_min(x, 0.0, out=y)

    def ours() -> None:
        decode(tr.ours, tr.src, 1, tr.new, 0.6, compile=True)

    vocab = ct2.Vocabulary(cfg.tgt_vocab_size, {cfg.pad_id: "<pad>", cfg.bos_id: "<s>", cfg.eos_id: "</s>"},
                           bos=cfg.bos_id, eos=cfg.eos_id)
    translator = ct2.translator(tr.hf, vocab, "float32")
    source = vocab.tokens(tr.src)
    with torch.no_grad():
        ours()  # the compile
        work = {"elementwise_loop": elementwise, "ours_compiled_greedy": ours}
        rows: dict[str, dict[str, float]] = {name: {"before_s": best(fn, repeats)} for name, fn in work.items()}
        ct2_s = best(lambda: translator.translate_batch(source, beam_size=1, max_decoding_length=tr.new), 1)
        for name, fn in work.items():
            rows[name]["after_ct2_s"] = best(fn, repeats)
        time.sleep(3)
        for name, fn in work.items():
            row = rows[name]
            row["after_3_idle_s"] = best(fn, repeats)
            row["slowdown"] = round(row["after_ct2_s"] / row["before_s"], 2)
            print(openmp, name, {k: round(v, 4) for k, v in row.items()}, file=sys.stderr, flush=True)
    return {"ctranslate2_call_s": round(ct2_s, 4), "rows": rows}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5, help="timed calls of each, the best kept (default 5)")
    p.add_argument("--openmp", choices=OPENMP, help="measure only this way, here, and print it as JSON (the "
                                                     "script runs itself once per way in a fresh process)")
    args = script_args(p, argv, {"repeats": 2}, "ct2-interference", results=RESULTS)
    if args.openmp:
        print(json.dumps(measure(args.openmp, args.threads, args.repeats, args.quick)))
        return
    ct2.require()
    ways = {}
    for way in OPENMP:
        flags = ["--openmp", way, "--threads", str(args.threads), "--repeats", str(args.repeats), "--out", args.out]
        done = subprocess.run([sys.executable, __file__, *flags, *(["--quick"] if args.quick else [])],
                              stdout=subprocess.PIPE, text=True, check=True)
        ways[way] = json.loads(done.stdout.splitlines()[-1])
    write_results(args.out, "ct2_interference", {
        "what": "torch work timed before and after CTranslate2's first call in the same process, CTranslate2 "
                "imported to call its own OpenMP runtime (own, what aiayn does) or torch's (torch, a plain import)",
        "threads": args.threads, "repeats": args.repeats, "quick": args.quick, "ctranslate2": ct2.version(),
        "machine": machine(torch.device("cpu")), "openmp": ways})


if __name__ == "__main__":
    main()
