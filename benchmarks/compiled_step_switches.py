"""Two switches of a compiled decoding step on the CPU, each timed on and off in one process:

    attention   the attention of one query: PyTorch's fused kernel (``F.scaled_dot_product_attention``, off) or
                equation 1 written out (two products and a softmax, which inductor fuses, on), switched by
                ``aiayn.layers.functional.ONE_QUERY_EXPLICIT``
    min-chunk   inductor's ``cpp.min_chunk_size``: its default (off: a kernel of more than 512 elements wakes
                every thread, what aiayn compiles with) or 65,536 (on: small kernels run on one thread)
    width       the columns a step attends over: the whole static buffer (off) or those written so far, rounded
                up to 16 (on, a dynamic size of the one compiled step), switched by ``aiayn.layers.session.BUCKET``
    beam-table  beam search's reordering: the buffers' rows copied every step (off) or a table of rows moved,
                which the step reads the buffers through (on), switched by ``aiayn.layers.session.BEAM_TABLE``
    rank        beam search's ranking after the model (top-k of the candidates, the finished set, the stopping
                test): eager (off) or through ``torch.compile`` (on), switched by ``aiayn.decoding.beam.COMPILE_RANK``
    block       beam search's top-k of the K x V candidates: over all of them (off) or over the best blocks of
                64 tokens first (on), switched by ``aiayn.decoding.beam.BLOCK``
    packed      the products of 2 rows or more by large matrices: the rules' (oneDNN's over the plain matrix, or
                inductor's; off) or oneDNN's over the weight's blocked copy (an opaque op, on), switched by
                ``aiayn.layers.fast.PACK_COMPILED``

    python benchmarks/compiled_step_switches.py --switch attention [--threads 2] [--rounds 8]
    python benchmarks/compiled_step_switches.py --switch min-chunk
    python benchmarks/compiled_step_switches.py --switch width
    python benchmarks/compiled_step_switches.py --switch beam-table --cases translation-beam4-b16
    python benchmarks/compiled_step_switches.py --switch rank --cases translation-beam4-b16
    python benchmarks/compiled_step_switches.py --switch block --cases translation-beam4-b16
    python benchmarks/compiled_step_switches.py --switch packed --cases translation-greedy-b16 gpt2-b16
    python benchmarks/compiled_step_switches.py --switch attention --quick   # toy sizes, into a temporary folder

Each case is an ``aiayn bench`` case's own work with ``compile=True``: the Marian-shaped translation model (batch 16,
greedy and beam 4), llama-tiny (batch 1 and 16), GPT-2 124M at batch 1 and 16 (16 prompts of 16 tokens, 64 new: a
server's 16 slots) and the Llama-shaped 124M at batch 16. After two calls of each setting (the compile, then a warm
call), the two take their rounds in turn (A B, then B A); the ratio is the time with the switch off over the time with
it on, round by round (> 1: the switch pays), and both must decode the same tokens. Writes
``benchmarks/results/compiled_step_<switch>.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import torch
import torch._inductor.config as inductor_config
from torch import Tensor

import aiayn.decoding.beam as beam
import aiayn.layers.fast as fast
import aiayn.layers.functional as functional
import aiayn.layers.kernels as kernels
import aiayn.layers.session as static
from aiayn.benchmark.cases import generation
from aiayn.benchmark.cases.decoding import decode, translation
from aiayn.benchmark.harness import machine
from aiayn.benchmark.scripts import script_args, write_results
from aiayn.decoding import sample
from aiayn.models.gpt import PRESETS
from aiayn.models.gpt.session import gpt_step
from aiayn.models.transformer.session import seq2seq_step

RESULTS = Path(__file__).parent / "results"  # a full run writes here unless --out says
CASES = ["translation-greedy-b16", "translation-beam4-b16", "llama-tiny-b1", "llama-tiny-b16", "gpt2-b1",
         "gpt2-b16", "llama-124m-b16"]
QUICK_CASES = ["translation-greedy-b16", "translation-beam4-b16", "llama-tiny-b16"]


def work(case: str, quick: bool) -> Callable[[], Tensor]:
    """``case``'s compiled decoding as a call giving its tokens."""
    cpu = torch.device("cpu")
    if case.startswith("translation"):
        tr, beam = translation(quick, cpu), 4 if "beam4" in case else 1
        return lambda: decode(tr.ours, tr.src, beam, tr.new, 0.6, compile=True)
    if case.startswith("gpt2"):
        g = generation.generation(quick, cpu)
        if case == "gpt2-b16":
            prompt = torch.randint(0, g.ours.cfg.vocab_size, (16, g.prompt.size(1)),
                                   generator=torch.Generator().manual_seed(0))
            g = dataclasses.replace(g, prompt=prompt, new=8 if quick else 64)
    else:
        cfg = PRESETS["llama-tiny"] if case.startswith("llama-tiny") else generation.LLAMA_124M
        g = generation.llama_generation(cfg, int(case.rsplit("-b", 1)[1]), quick, cpu)
    return lambda: cast(Tensor, sample(g.ours, g.prompt, g.new, temperature=0, compile=True))


NAMES = {"attention": ("fused", "explicit"), "min-chunk": ("default", "min_chunk"),  # (off, on) in the results
         "width": ("buffer", "filled"), "beam-table": ("copied", "table"), "rank": ("eager", "compiled"),
         "block": ("all", "blocks"), "packed": ("rules", "packed")}
STEPS = (gpt_step, seq2seq_step)
DEFAULT_MIN_CHUNK = inductor_config.cpp.min_chunk_size  # inductor's own (512)
MIN_CHUNK = 1 << 16  # the alternative: a decode step's elementwise kernels (a layer norm of B x C) on one thread


def chunked(size: int) -> dict[tuple[str, str], Any]:
    """Each compiled step as :func:`aiayn.layers.session.compiled_step` makes it on a CPU, but with ``size``."""
    return {(f.__module__, f.__qualname__, "cpu"): torch.compile(f, dynamic=False,
                                                                 options={"cpp.min_chunk_size": size})
            for f in STEPS}


def switch(name: str) -> Callable[[bool], None]:
    """The call that turns switch ``name`` on or off."""
    if name == "attention":
        def attention(on: bool) -> None:
            functional.ONE_QUERY_EXPLICIT = on
        return attention
    if name == "width":
        bucket = static.BUCKET

        def width(on: bool) -> None:
            static.BUCKET = bucket if on else None
        return width
    if name == "beam-table":
        def beam_table(on: bool) -> None:
            static.BEAM_TABLE = on
        return beam_table
    if name == "rank":
        def rank(on: bool) -> None:
            beam.COMPILE_RANK = on
        return rank
    if name == "block":
        block = beam.BLOCK

        def blocks(on: bool) -> None:
            beam.BLOCK = block if on else None
        return blocks
    if name == "packed":
        kernels.use("rules")  # a session's prepare_compiled leaves the switch as set here (measure would set it)

        def packed(on: bool) -> None:
            fast.PACK_COMPILED = on
        return packed
    steps = {False: chunked(DEFAULT_MIN_CHUNK), True: chunked(MIN_CHUNK)}

    def min_chunk(on: bool) -> None:
        static._compiled.update(steps[on])  # the steps the next decoding takes
    return min_chunk


def timed(run: Callable[[], Tensor], turn: Callable[[bool], None], on: bool) -> tuple[float, Tensor]:
    turn(on)
    start = time.perf_counter()
    ids = run()
    return time.perf_counter() - start, ids


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--switch", choices=sorted(NAMES), required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=8, help="timed rounds per setting, alternating (default 8)")
    p.add_argument("--cases", nargs="+", choices=CASES, default=CASES)
    args = script_args(p, argv, {"rounds": 2, "cases": QUICK_CASES}, "compiled-step", results=RESULTS)
    torch.set_num_threads(args.threads)
    turn, (off, on) = switch(args.switch), NAMES[args.switch]
    rows = []
    with torch.no_grad():
        for case in args.cases:
            run = work(case, args.quick)
            for flag in (False, True, False, True):  # each setting compiled, then warm
                timed(run, turn, flag)
            seconds: dict[bool, list[float]] = {False: [], True: []}
            ids: dict[bool, Tensor] = {}
            for r in range(args.rounds):
                for flag in (False, True) if r % 2 == 0 else (True, False):
                    t, ids[flag] = timed(run, turn, flag)
                    seconds[flag].append(t)
            ratios = [f / e for f, e in zip(seconds[False], seconds[True], strict=True)]
            q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
            row = {"case": case, f"{off}_s": round(statistics.median(seconds[False]), 4),
                   f"{on}_s": round(statistics.median(seconds[True]), 4),
                   f"{off}_over_{on}": round(statistics.median(ratios), 3), "q1": round(q1, 3),
                   "q3": round(q3, 3), "same_tokens": bool(torch.equal(ids[False], ids[True]))}
            print("  ".join(f"{k} {v}" for k, v in row.items()), flush=True)
            rows.append(row)
    turn(args.switch != "min-chunk")  # the library's setting again
    write_results(args.out, f"compiled_step_{args.switch.replace('-', '_')}", {
        "what": f"compiled decoding, {off} against {on}, one process, alternating",
        "threads": args.threads, "rounds": args.rounds, "quick": args.quick,
        "machine": machine(torch.device("cpu")), "rows": rows})


if __name__ == "__main__":
    main()
