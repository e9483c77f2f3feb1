"""``aiayn serve`` under load, on the loopback: throughput and p50/p99 latency against the number of concurrent
clients and the batch settings, for a GPT-2-shaped language model and the Marian-shaped translation model.

    python benchmarks/serve_load.py                     # the sweeps (a few minutes on 2 cores)
    python benchmarks/serve_load.py --soak 600          # 10 minutes at steady load instead: failures, memory
    python benchmarks/serve_load.py --quick             # toy sizes, seconds, into a temporary folder
    python benchmarks/serve_load.py --compile           # the language model eager and with --compile, 16 clients
    python benchmarks/serve_load.py --peer              # against `transformers serve`, with and without its
                                                        # continuous batching: serve_peer.json
    python benchmarks/serve_load.py --peer-rounds 7     # the target's two servers at 16 clients, in rounds:
                                                        # serve_peer_rounds.json

Each server is ``aiayn serve`` in its own process on 127.0.0.1 (port 0: a free one), loaded from a run folder
this script writes into a temporary folder: random weights of ``gpt2`` (124M: 12 layers, d_model 768, a
50,257-token vocabulary) or of the decoding benchmarks' Marian-shaped model (3+3 layers, d_model 256, 8,000
tokens), with byte-level BPE tokenizers trained on the package's own synthetic text. The end-of-text token's
output row is zeroed, so greedy decoding never picks it (its logit is 0, the largest of thousands of random
logits is not) and every request makes exactly ``--new`` tokens: the latencies compare like with like.

Clients are ``httpx`` coroutines in this process, each sending its requests one after the other (a closed loop:
a client sends its next request when its last is answered), every request bounded in time. For ``c`` clients:
``--requests`` requests each (at least), tokens (or sentences) per second over the wall time, and the latency
of every request; at 16 clients also each ``--max-batch`` of ``--batches`` and each ``--max-wait-ms`` of
``--waits``. The baseline is one client's sequential loop against a server that does not batch
(``--max-batch 1``): what a user gets without the server's batching. Targets (the issue's): at 16 clients,
tokens/s >= 4x that baseline, with p99 latency <= 3x a lone request's. The soak sends at ``--soak-clients``
for ``--soak`` seconds and records failed requests and the server's resident memory (VmRSS) each 10 s;
growth is measured from the end of the first minute (the warm-up). Writes ``benchmarks/results/serve_load.json``
(the sweeps) or ``serve_soak.json`` (``--soak``).

``--peer`` serves the language model (its vocabulary the tokenizer's 4,000 tokens, so every text is spelled)
exported to a Hugging Face folder (``aiayn.to_hf``: ``GPT2LMHeadModel`` and its tokenizer) by ``transformers
serve`` (transformers 5, ``pip install "transformers[serving]"``), without and with ``--continuous-batching``
(paged attention), and by ``aiayn serve`` eager (``--max-batch`` of ``--peer-max-batch``, 64: as many rows as the
most clients, as transformers' continuous batching takes) and ``--compile`` (``--max-len 64``, 16 slots), one
server at a time, each on a free port of the loopback, with the same greedy ``/v1/completions`` requests (the same
prompts, ``--new`` tokens each): throughput and p50/p99 latency at ``--peer-clients`` (1 4 16 64), and each
server's texts for the same prompts compared with ``aiayn serve``'s (special tokens' text left out: ``transformers
serve`` skips it, ``aiayn serve`` spells ``<unk>``). Target (issue 59): at 16 clients, ``aiayn
serve``'s best throughput >= 2x the best of ``transformers serve``'s, with p99 latency no worse. Writes
``serve_peer.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import torch

import aiayn
from aiayn.benchmark.cases.common import small_transformer
from aiayn.benchmark.harness import machine
from aiayn.benchmark.scripts import script_args, write_results
from aiayn.data.bpe import EOS, BPETokenizer
from aiayn.data.synthetic import date_lines
from aiayn.defaults import SERVING

RESULTS = Path(__file__).resolve().parent / "results"
QUICK = {"new": 4, "requests": 2, "clients": [1, 4], "batches": [4], "waits": [0], "quick_models": True,
         "soak": 0}
WAIT = SERVING["max_wait_ms"]  # aiayn serve's default --max-wait-ms: every level but the waits sweep
TIMEOUT = 120.0  # seconds any one request may take before it counts as failed


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--new", type=int, default=32, help="new tokens per completion (default 32)")
    p.add_argument("--requests", type=int, default=3, help="requests per client at each level (default 3)")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16, 32],
                   help="concurrent clients, one level each (default 1 4 16 32)")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 4, 16],
                   help="--max-batch settings swept at 16 clients (default 1 4 16)")
    p.add_argument("--waits", type=float, nargs="+", default=[0, 10, 50],
                   help="--max-wait-ms settings swept at 16 clients and the largest batch (default 0 10 50; the "
                        "other levels run with aiayn serve's default)")
    p.add_argument("--threads", type=int, default=2, help="the server's torch threads (default 2)")
    p.add_argument("--soak", type=float, default=0,
                   help="seconds of steady load on the LM, instead of the sweeps (default 0: the sweeps)")
    p.add_argument("--soak-clients", type=int, default=8, help="clients during the soak (default 8)")
    p.add_argument("--quick-models", action="store_true", help="tiny models (what --quick uses)")
    p.add_argument("--compile", action="store_true",
                   help="instead of the sweeps: the language model served eager and with --compile (both at "
                        "--max-batch 16), 16 clients, --rounds alternating rounds: serve_compile.json (with "
                        "--quick-models: serve_compile_tiny.json; see --max-len)")
    p.add_argument("--peer", action="store_true",
                   help="instead of the sweeps: transformers serve (without and with --continuous-batching) against "
                        "aiayn serve (eager, --compile) on the same exported folder, one at a time: serve_peer.json")
    p.add_argument("--peer-clients", type=int, nargs="+", default=[1, 4, 16, 64],
                   help="--peer's concurrent clients (default 1 4 16 64)")
    p.add_argument("--peer-rounds", type=int, default=0,
                   help="instead of the sweeps: the target's servers alone (transformers serve "
                        "--continuous-batching, aiayn serve --compile), 16 clients, this many alternating rounds, "
                        "each server started afresh in each: serve_peer_rounds.json (default 0: not run)")
    p.add_argument("--peer-max-batch", type=int, default=64,
                   help="--peer's eager aiayn serve --max-batch (default 64: the most clients, as transformers "
                        "serve's continuous batching takes them all; the compiled server keeps 16, since its step "
                        "computes every slot up to the highest taken)")
    p.add_argument("--rounds", type=int, default=5, help="--compile's alternating rounds (default 5)")
    p.add_argument("--max-len", type=int, default=64,
                   help="--compile's servers' --max-len (default 64; 0: the model's positions, into "
                        "serve_compile_full.json)")
    args = script_args(p, argv, QUICK, "serve-load", results=RESULTS)
    if args.compile and args.rounds < 2:
        p.error(f"--rounds must be >= 2 (the ratio's lower quartile needs two), got {args.rounds}")
    with tempfile.TemporaryDirectory(prefix="serve-load-") as tmp:
        lm = lm_run(Path(tmp) / "lm", args.quick_models, tokenizer_vocabulary=args.peer)
        if args.compile:  # eager against compiled serving, into its own file
            results = {"settings": {k: v for k, v in vars(args).items() if k != "out"}, **compiled(lm, args)}
            name = "serve_compile" + ("_tiny" if args.quick_models else "") + ("" if args.max_len else "_full")
            write_results(args.out, name, results)
            return
        if args.peer_rounds:  # the target's comparison in rounds, into its own file
            results = {"settings": {k: v for k, v in vars(args).items() if k != "out"},
                       **peer_rounds(lm, Path(tmp) / "hf", args)}
            write_results(args.out, "serve_peer_rounds", results)
            print(f"target: {results['target']}")
            return
        if args.peer:  # transformers serve against aiayn serve, into its own file
            results = {"settings": {k: v for k, v in vars(args).items() if k != "out"},
                       **peer(lm, Path(tmp) / "hf", args)}
            write_results(args.out, "serve_peer", results)
            print(f"target: {results['target']}")
            return
        if args.soak:  # the soak alone, into its own file
            results = {"settings": {k: v for k, v in vars(args).items() if k != "out"}, "soak": soak(lm, args)}
            results["targets"] = targets(results)
            write_results(args.out, "serve_soak", results)
            return
        mt = translation_run(Path(tmp) / "mt", args.quick_models)
        results = {"settings": {k: v for k, v in vars(args).items() if k != "out"},
                   "lm": sweep(lm, "completions", args), "translation": sweep(mt, "translations", args)}
    results["targets"] = targets(results)
    write_results(args.out, "serve_load", results)
    for name, met in results["targets"].items():
        print(f"{name}: {met}")


# ---- the run folders -----------------------------------------------------------------------------------------


def texts(n: int, seed: int) -> list[str]:
    """``n`` lines of the package's synthetic dates ("the 7th of March 2019 = 2019-03-07", and the like)."""
    return date_lines(n, seed)


def never_ending(model: torch.nn.Module, eos: int) -> None:
    """Zero the end-of-text token's row of every token table (the output is tied to them) and give it an output
    bias of -10^4: greedy decoding never picks it."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.Embedding):
                module.weight[eos] = 0
        generator = getattr(model, "generator", None)
        if generator is not None and generator.bias is not None:
            generator.bias[eos] = -1e4


def lm_run(folder: Path, quick: bool, tokenizer_vocabulary: bool = False) -> Path:
    """The language model's run folder: ``gpt2``'s shape (``quick``: a tiny one) with random weights and a BPE
    tokenizer of 4,000 tokens. ``tokenizer_vocabulary``: the model's vocabulary is the tokenizer's (``--peer``,
    whose texts are compared: with GPT-2's 50,257 rows the model picks ids the tokenizer cannot spell)."""
    tok = BPETokenizer.train(texts(4000, 0), vocab_size=300 if quick else 4000)
    small = {"d_model": 32, "n_layers": 2, "n_heads": 4, "vocab_size": 512, "max_len": 128} if quick else {}
    if tokenizer_vocabulary:
        small["vocab_size"] = len(tok)
    cfg = aiayn.preset("gpt2", eos_id=EOS, **small)  # the tokenizer's end-of-text, not GPT-2's 50256
    torch.manual_seed(0)
    model = aiayn.build(cfg)
    never_ending(model, EOS)
    aiayn.save(model, folder)
    tok.save(folder / "tokenizer.json")
    return folder


def translation_run(folder: Path, quick: bool) -> Path:
    tok = BPETokenizer.train(texts(4000, 1), vocab_size=300 if quick else 4000)
    cfg = small_transformer(quick)
    torch.manual_seed(0)
    model = aiayn.build(cfg)
    never_ending(model, EOS)
    aiayn.save(model, folder)
    tok.save(folder / "src_tokenizer.json")
    tok.save(folder / "tgt_tokenizer.json")
    return folder


# ---- a server and its clients --------------------------------------------------------------------------------


@dataclasses.dataclass
class Server:
    url: str
    pid: int


@contextmanager
def serving(run: Path, threads: int, max_batch: int, max_wait_ms: float = WAIT,
            compile: bool = False, max_len: int | None = None) -> Iterator[Server]:
    """``aiayn serve RUN`` in a child process on 127.0.0.1 (a free port); stopped (SIGTERM) at the end."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "aiayn.cli.serve", str(run), "--port", "0", "--name", "bench",
                             "--max-batch", str(max_batch), "--max-wait-ms", str(max_wait_ms), "--max-queue", "1024",
                             "--log-level", "warning", "--device", "cpu", *(["--compile"] if compile else []),
                             *([] if max_len is None else ["--max-len", str(max_len)])],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""  # "aiayn serve: bench (...) on http://127.0.0.1:PORT"
        found = re.search(r"http://127\.0\.0\.1:\d+", line)
        if not found:
            raise RuntimeError(f"the server did not start: {line}{proc.stderr.read() if proc.stderr else ''}")
        yield Server(found.group(0), proc.pid)
    finally:
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL after a minute."""
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()


def request(kind: str, text: str, new: int, model: str | None = None) -> tuple[str, dict[str, Any]]:
    if kind == "completions":
        return "/v1/completions", {"prompt": text, "max_tokens": new, "temperature": 0,
                                   **({"model": model} if model else {})}
    return "/v1/translations", {"input": [text], "beam": 1}


async def clients(url: str, kind: str, n: int, per_client: int, new: int, prompts: list[str],
                  until: float | None = None, model: str | None = None) -> dict[str, Any]:
    """``n`` closed-loop clients sending ``per_client`` requests each (or, with ``until``, until that time):
    what came back, timed."""
    latencies: list[float] = []
    tokens, failed = 0, 0

    async def client(i: int, http: httpx.AsyncClient) -> None:
        nonlocal tokens, failed
        k = 0
        while (k < per_client) if until is None else (time.monotonic() < until):
            path, body = request(kind, prompts[(i * 7919 + k) % len(prompts)], new, model)
            start = time.perf_counter()
            try:
                r = await http.post(url + path, json=body, timeout=TIMEOUT)
                r.raise_for_status()
                latencies.append(time.perf_counter() - start)
                tokens += r.json()["usage"]["completion_tokens"] if kind == "completions" else 1
            except (httpx.HTTPError, KeyError, ValueError):
                failed += 1
            k += 1

    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(limits=limits) as http:
        start = time.perf_counter()
        await asyncio.gather(*(client(i, http) for i in range(n)))
        wall = time.perf_counter() - start
    q = statistics.quantiles(latencies, n=100, method="inclusive") if len(latencies) > 1 else latencies * 99
    return {"clients": n, "requests": len(latencies), "failed": failed, "wall_s": round(wall, 2),
            "per_s": round(tokens / wall, 2), "p50_s": round(q[49], 3), "p99_s": round(q[98], 3)}


def level(url: str, kind: str, n: int, per_client: int, new: int, prompts: list[str], batch: int,
          wait: float = WAIT, model: str | None = None) -> dict[str, Any]:
    asyncio.run(clients(url, kind, 1, 1, new, prompts, model=model))  # warm-up: the first call's one-off costs
    found = asyncio.run(clients(url, kind, n, per_client, new, prompts, model=model))
    print(f"  {kind}: max-batch {batch:>2}, max-wait {wait:>4g} ms, {n:>3} clients  {found['per_s']:>8} /s"
          f"  p50 {found['p50_s']:.2f} s  p99 {found['p99_s']:.2f} s  failed {found['failed']}", flush=True)
    return found


def sweep(run: Path, kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """The lone baseline (no batching, one client), the clients sweep (the largest batch, the default wait) and
    the batch and wait sweeps (16 clients, or the most asked for)."""
    prompts = texts(256, 2)
    unit = "tokens" if kind == "completions" else "sentences"
    print(f"{run.name}: {unit} per second", flush=True)
    many = 16 if 16 in args.clients else max(args.clients)
    out: dict[str, Any] = {"unit": unit}
    with serving(run, args.threads, 1) as server:
        out["lone"] = level(server.url, kind, 1, max(args.requests, 4), args.new, prompts, 1)
    out["by_batch"] = {}
    for b in args.batches:
        with serving(run, args.threads, b) as server:
            if b == max(args.batches):
                out["by_clients"] = {n: level(server.url, kind, n, args.requests, args.new, prompts, b)
                                     for n in args.clients}
                out["by_batch"][b] = out["by_clients"][many]
            else:
                out["by_batch"][b] = level(server.url, kind, many, args.requests, args.new, prompts, b)
    out["by_wait"] = {}
    for w in args.waits:
        if w == WAIT:
            out["by_wait"][w] = out["by_clients"][many]
            continue
        with serving(run, args.threads, max(args.batches), w) as server:
            out["by_wait"][w] = level(server.url, kind, many, args.requests, args.new, prompts, max(args.batches), w)
    out["max_batch"], out["many"], out["max_wait_ms"] = max(args.batches), many, WAIT
    return out


def compiled(run: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The language model served eager and with ``--compile`` side by side (both alive; rounds alternate, so what
    else the machine does weighs on each alike): 16 clients at ``--max-batch 16``, both with ``--max-len``
    (64 by default: prompts and new tokens fit; the compiled slots read all their columns every step), and the
    compiled server's start (its compile) timed. The ratio is compiled tokens/s over eager, per round."""
    prompts, batch, n, most = texts(256, 2), 16, 16, args.max_len or None
    start = time.perf_counter()
    with serving(run, args.threads, batch, max_len=most) as eager:
        up_eager = time.perf_counter() - start
        start = time.perf_counter()
        with serving(run, args.threads, batch, compile=True, max_len=most) as fast:
            up_compiled = time.perf_counter() - start
            rounds: dict[str, list[dict[str, Any]]] = {"eager": [], "compiled": []}
            for _ in range(args.rounds):
                for name, server in (("eager", eager), ("compiled", fast)):
                    rounds[name].append(level(server.url, "completions", n, args.requests, args.new, prompts, batch))
    ratios = sorted(c["per_s"] / e["per_s"] for e, c in zip(rounds["eager"], rounds["compiled"]))
    return {"clients": n, "max_batch": batch, "max_len": most, "startup_s": {"eager": round(up_eager, 1),
                                                             "compiled": round(up_compiled, 1)},
            "rounds": rounds, "ratio_median": round(statistics.median(ratios), 3),
            "ratio_lower_quartile": round(statistics.quantiles(ratios, n=4, method="inclusive")[0], 3),
            "p99_median_s": {k: statistics.median(r["p99_s"] for r in v) for k, v in rounds.items()}}


@contextmanager
def transformers_serving(folder: Path, threads: int, continuous: bool) -> Iterator[Server]:
    """``transformers serve FOLDER`` in a child process on 127.0.0.1 (a free port), waited for until it answers
    ``/health``; stopped (SIGTERM) at the end."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    command = [str(Path(sys.executable).parent / "transformers"), "serve", str(folder), "--host", "127.0.0.1",
               "--port", str(port), "--device", "cpu", "--log-level", "warning",
               "--continuous-batching" if continuous else "--no-continuous-batching"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"transformers serve did not start: {proc.stderr.read() if proc.stderr else ''}")
            time.sleep(0.5)
        yield Server(url, proc.pid)
    finally:
        stop(proc)


def greedy_texts(url: str, prompts: list[str], new: int, model: str | None) -> list[str]:
    """What a server answers each prompt, one request at a time (greedy)."""
    out = []
    for text in prompts:
        body = {"prompt": text, "max_tokens": new, "temperature": 0, **({"model": model} if model else {})}
        r = httpx.post(url + "/v1/completions", json=body, timeout=TIMEOUT)
        r.raise_for_status()
        out.append(r.json()["choices"][0]["text"])
    return out


def plain(said: list[str]) -> list[str]:
    """Texts without special tokens' text (``transformers serve`` skips it; ``aiayn serve`` spells ``<unk>``)."""
    return [re.sub(r"<unk>|<s>|</s>|<pad>", "", t) for t in said]


def peer(run: Path, hf: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``transformers serve`` (without and with continuous batching) and ``aiayn serve`` (eager, compiled) on one
    exported folder, one server at a time: the clients sweep of each, and their texts against aiayn's."""
    aiayn.to_hf(run, hf)
    prompts, checked = texts(256, 2), texts(8, 5)
    batch = {"aiayn": args.peer_max_batch, "aiayn --compile": 16}  # --max-batch; transformers serve has none
    servers = {"transformers": lambda: transformers_serving(hf, args.threads, False),
               "transformers --continuous-batching": lambda: transformers_serving(hf, args.threads, True),
               "aiayn": lambda: serving(hf, args.threads, batch["aiayn"]),
               "aiayn --compile": lambda: serving(hf, args.threads, batch["aiayn --compile"], compile=True,
                                                  max_len=64)}
    found: dict[str, Any] = {}
    for name, start in servers.items():
        model = str(hf) if name.startswith("transformers") else None
        print(f"{name}: tokens per second", flush=True)
        with start() as server:
            said = greedy_texts(server.url, checked, args.new, model)  # (also the warm-up)
            by = {n: level(server.url, "completions", n, args.requests, args.new, prompts, batch.get(name, 0),
                           model=model) for n in args.peer_clients}
        found[name] = {"texts": said, "by_clients": by, "max_batch": batch.get(name)}
    ours = plain(found["aiayn"]["texts"])
    for entry in found.values():
        entry["texts_equal_aiayn"] = plain(entry["texts"]) == ours
    at = 16 if 16 in args.peer_clients else max(args.peer_clients)
    theirs = max((v for k, v in found.items() if k.startswith("transformers")), key=lambda v: v["by_clients"][at]
                 ["per_s"])["by_clients"][at]
    best = max((v for k, v in found.items() if k.startswith("aiayn")), key=lambda v: v["by_clients"][at]["per_s"])
    mine = best["by_clients"][at]
    ratio = mine["per_s"] / theirs["per_s"]
    target = {"clients": at, "throughput_ratio": round(ratio, 2), "p99_s": {"aiayn": mine["p99_s"],
                                                                           "transformers": theirs["p99_s"]},
              "met": ratio >= 2 and mine["p99_s"] <= theirs["p99_s"]}
    return {"servers": found, "target": target, "load_average_1_5_15": list(os.getloadavg()), "machine": machine()}


def peer_rounds(run: Path, hf: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The target's comparison repeated: ``transformers serve --continuous-batching`` (the faster peer at 16 clients)
    and ``aiayn serve --compile`` (16 slots, ``--max-len 64``) on one exported folder, one server at a time, started
    afresh in each of ``--peer-rounds`` rounds (A B, then B A), 16 clients each; the throughput ratio round by round,
    its median and lower quartile, and each side's p99 (median of the rounds)."""
    aiayn.to_hf(run, hf)
    prompts, checked, n = texts(256, 2), texts(8, 5), 16
    sides = {"transformers --continuous-batching": lambda: transformers_serving(hf, args.threads, True),
             "aiayn --compile": lambda: serving(hf, args.threads, n, compile=True, max_len=64)}
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
    said: dict[str, list[str]] = {}
    for r in range(args.peer_rounds):
        for name in list(sides) if r % 2 == 0 else list(sides)[::-1]:
            model = str(hf) if name.startswith("transformers") else None
            with sides[name]() as server:
                said[name] = greedy_texts(server.url, checked, args.new, model)  # (also the warm-up)
                rounds[name].append(level(server.url, "completions", n, args.requests, args.new, prompts, n,
                                          model=model))
    ours, theirs = rounds["aiayn --compile"], rounds["transformers --continuous-batching"]
    ratios = sorted(a["per_s"] / t["per_s"] for a, t in zip(ours, theirs))
    q1 = statistics.quantiles(ratios, n=4, method="inclusive")[0] if len(ratios) > 1 else ratios[0]
    p99 = {name: statistics.median(r["p99_s"] for r in got) for name, got in rounds.items()}
    same = plain(said["transformers --continuous-batching"]) == plain(said["aiayn --compile"])
    target = {"clients": n, "ratio_median": round(statistics.median(ratios), 3), "ratio_lower_quartile": round(q1, 3),
              "p99_median_s": p99, "texts_equal": same,
              "met": q1 >= 2 and p99["aiayn --compile"] <= p99["transformers --continuous-batching"]}
    return {"rounds": rounds, "target": target, "load_average_1_5_15": list(os.getloadavg()), "machine": machine()}


def rss_mib(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", text).group(1)) / 1024  # type: ignore[union-attr]


def soak(run: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Steady load for ``--soak`` seconds: every request's outcome, and the server's memory each 10 s."""
    prompts = texts(256, 3)
    with serving(run, args.threads, 16) as server:
        asyncio.run(clients(server.url, "completions", 1, 1, args.new, prompts))
        end = time.monotonic() + args.soak
        memory: list[tuple[float, float]] = []

        async def watch() -> dict[str, Any]:
            start = time.monotonic()
            load = asyncio.ensure_future(clients(server.url, "completions", args.soak_clients, 0, args.new,
                                                 random.Random(0).sample(prompts, len(prompts)), until=end))
            while not load.done():
                memory.append((round(time.monotonic() - start, 1), round(rss_mib(server.pid), 1)))
                await asyncio.wait({load}, timeout=10)
            return load.result()

        found = asyncio.run(watch())
    warm = next((m for t, m in memory if t >= min(60.0, args.soak / 4)), memory[0][1])
    growth = (memory[-1][1] - warm) / warm
    print(f"  soak: {found['requests']} requests, {found['failed']} failed; resident memory {warm} -> "
          f"{memory[-1][1]} MiB ({growth:+.1%})", flush=True)
    return {**found, "seconds": args.soak, "memory_mib": memory, "after_warmup_mib": warm,
            "growth": round(growth, 4)}


def targets(results: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets, each with what was measured: speed-up over the lone loop and p99 over a lone
    request's latency, at the clients sweep's 16 (or its most) under the largest batch."""
    out = {}
    for name in ("lm", "translation"):
        if name not in results:
            continue
        r = results[name]
        at = r["by_clients"][r["many"]]
        speed, slow = at["per_s"] / r["lone"]["per_s"], at["p99_s"] / r["lone"]["p50_s"]
        out[name] = {"clients": r["many"], "speedup": round(speed, 2), "p99_over_lone": round(slow, 2),
                     "met": speed >= 4 and slow <= 3}
    if "soak" in results:
        s = results["soak"]
        out["soak"] = {"failed": s["failed"], "growth": s["growth"], "met": s["failed"] == 0 and s["growth"] < 0.05}
    return out


if __name__ == "__main__":
    main()
