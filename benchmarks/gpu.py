"""One GPU in one short command (``bash benchmarks/gpu.sh``), the most valuable figure first, ``gpu.json``
rewritten after each figure so that a command cut off keeps what it measured before.

    python benchmarks/gpu.py decode        # HBM bandwidth; gpt2 bf16 greedy decoding, batch 1, 256 new tokens:
                                           #   eager, compile=True, GPT2LMHeadModel static cache + compiled
    python benchmarks/gpu.py train         # MFU of bf16 training: gpt2 (16 x 1024) against GPT2LMHeadModel,
                                           #   transformer-base against torch.nn.Transformer; --compile: both sides
    python benchmarks/gpu.py decode --device cpu --quick --sides eager   # toy sizes: checks the script

**Decoding** is bound by memory: each new token at batch 1 reads every weight once, so tokens/s times the weight
bytes read per token, over the bandwidth a device-to-device copy reaches, is the share of that bound the decoding
reaches (``share_of_bound``). ``compile=True`` is aiayn's static cache with the step compiled
(:mod:`aiayn.layers.session`; CUDA graphs on a GPU); its first full-length generation (a graph recorded per width
of the columns attended) is run before timing, and ``cudagraph_skips`` counts the graphs inductor declined to
record (``TORCH_LOGS=perf_hints`` says why). The peer is ``GPT2LMHeadModel.generate`` on the same weights with its
static cache and compiled forward, also warmed.

**Training** MFU is the FLOPs of one step (counted with ``torch.utils.flop_counter`` on the uncompiled model:
under a dispatch mode dynamo would run the compiled frame eagerly and never compile it after) over the step's
median time and the vendor's dense bf16 peak (989 TFLOP/s for an H100 or H200 SXM:
:data:`aiayn.training.loop.PEAK_BF16`); ``mfu_measured`` is the share of the measured bf16 matmul peak.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import aiayn
from aiayn.benchmark.cases.generation import generation, weight_bytes_per_token
from aiayn.benchmark.harness import SCHEMA, count_flops, machine, memory_bandwidth
from aiayn.benchmark.peers.hf import gpt2_hf
from aiayn.benchmark.peers.torch_transformer import TorchTransformer
from aiayn.decoding import sample
from aiayn.training.loop import vendor_peak
from aiayn.training.losses import label_smoothed_loss

HERE = Path(__file__).parent
SIDES = ("eager", "compiled", "hf")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds(fn: Callable[[], Any], device: torch.device, steps: int, warmup: int = 3) -> list[float]:
    """Wall time of each of ``steps`` calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(steps):
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        out.append(time.perf_counter() - t)
    return out


class Results:
    """``gpu.json`` in ``out``: every figure written as soon as it is measured (atomically: a cut never leaves a
    torn file), beside those of the other stages of the same command."""

    def __init__(self, out: Path, device: torch.device, quick: bool) -> None:
        self.path = out / "gpu.json"
        out.mkdir(parents=True, exist_ok=True)
        old = json.loads(self.path.read_text()) if self.path.exists() else {}
        self.data: dict[str, Any] = {"schema": SCHEMA, "case": "gpu", "kind": "gpu", "quick": quick,
                                     "results": old.get("results", {}), "machine": machine(device)}

    def add(self, name: str, **figures: Any) -> None:
        now = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
        self.data["results"][name] = {**figures, "at": now}
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.data, indent=2) + "\n")
        tmp.replace(self.path)
        shown = {k: (f"{v:.4g}" if isinstance(v, float) else v) for k, v in figures.items() if k != "what"}
        print(f"{name}: {shown}", flush=True)


# ---- decoding ---------------------------------------------------------------------------------------------------


def cudagraph_skips() -> int:
    from torch._dynamo.utils import counters

    return int(counters["inductor"]["cudagraph_skips"])


def decode(results: Results, device: torch.device, quick: bool, sides: list[str], rounds: int) -> None:
    """The bandwidth, then gpt2 bf16 greedy decoding on each side, each figure written when it is measured."""
    bandwidth = memory_bandwidth(16 if quick else 2048, device=device)
    results.add("hbm_bandwidth", bytes_per_s=bandwidth, what="a device-to-device copy, bytes read + written / s")
    g = generation(quick, device)  # GPT2LMHeadModel and ours on the same random weights, no end token
    ours, hf, prompt, new = g.ours.to(torch.bfloat16), g.hf.to(torch.bfloat16), g.prompt, g.new
    read = weight_bytes_per_token(ours)
    eager_ids = None
    for side in sides:
        if side == "hf":
            import transformers

            hf.generation_config.cache_implementation = "static"
            hf.generation_config.compile_config = transformers.CompileConfig()
            hf.generation_config.compile_config._compile_all_devices = True
            def run() -> torch.Tensor:
                return hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new,
                                   do_sample=False)
        else:
            def run(compile: bool = side == "compiled") -> torch.Tensor:
                return sample(ours, prompt, new, temperature=0, compile=compile)
        skips = cudagraph_skips()
        start = time.perf_counter()
        ids = run()  # the compile and, on a GPU, every width's graph recorded: one full-length generation
        sync(device)
        first = time.perf_counter() - start
        times = seconds(run, device, rounds, warmup=0)
        tokens_per_s = new / statistics.median(times)
        figures: dict[str, Any] = {
            "tokens_per_s": tokens_per_s, "median_s": statistics.median(times), "first_call_s": first,
            "weight_bytes_per_token": read, "share_of_bound": tokens_per_s * read / bandwidth,
            "cudagraph_skips": cudagraph_skips() - skips, "batch": 1, "new_tokens": new, "dtype": "bfloat16"}
        if side == "eager":
            eager_ids = ids
        elif eager_ids is not None:  # bf16 rounds otherwise in other kernels: a share, not a check
            figures["tokens_as_eager"] = float((ids == eager_ids).float().mean())
        results.add(f"gpt2-decode-{side}", **figures)
    got = {side: results.data["results"][f"gpt2-decode-{side}"] for side in sides}  # this run's, not an older one's
    if "compiled" in got and "hf" in got:
        ratio = got["compiled"]["tokens_per_s"] / got["hf"]["tokens_per_s"]
        results.add("gpt2-decode-compiled-vs-hf", ratio=ratio, target=1.5, met=ratio >= 1.5)


# ---- training ---------------------------------------------------------------------------------------------------


def training_step(model, loss_fn, batch, device: torch.device, compile: bool | str | Callable[..., Any]):
    """``(step, plain)``: one AdamW update under bf16 autocast (fused AdamW on CUDA) through ``model``
    (``torch.compile(model, backend=compile)`` unless ``compile`` is False), and the same update through the
    uncompiled model, whose FLOPs :func:`measure` counts."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")

    def update(forward):
        def step():
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = loss_fn(forward, batch)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return step

    forward = model
    if compile:
        forward = torch.compile(model, backend="inductor" if compile is True else compile)
    return update(forward), update(model)


def measure(step, plain, units: int, device: torch.device, steps: int, vendor: float | None,
            peak: float) -> dict[str, Any]:
    """A step's throughput and MFU: its FLOPs counted on ``plain`` (the uncompiled model) before ``step`` runs."""
    flops = count_flops(plain)
    times = seconds(step, device, steps)
    med = statistics.median(times)
    return {"tokens_per_s": units / med, "median_s": med, "flops_per_step": flops,
            "mfu": flops / med / vendor if vendor else None, "mfu_measured": flops / med / peak}


def train(results: Results, device: torch.device, quick: bool, compile: bool, steps: int) -> None:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    vendor = vendor_peak(name)
    n = 512 if quick else 8192
    a, b = torch.randn(n, n, device=device, dtype=torch.bfloat16), torch.randn(n, n, device=device,
                                                                               dtype=torch.bfloat16)
    peak = 2 * n**3 / min(seconds(lambda: a @ b, device, 10))
    results.add("bf16_matmul_peak", flops_per_s=peak, vendor_flops_per_s=vendor, device=name)
    suffix = "-compiled" if compile else ""

    torch.manual_seed(0)
    gpt = aiayn.build("gpt-tiny" if quick else "gpt2").to(device)
    bt, t = (2, 32) if quick else (16, 1024)
    ids = torch.randint(0, gpt.cfg.vocab_size, (bt, t + 1), device=device)

    def lm_loss(model, batch):
        return F.cross_entropy(model(batch[:, :-1]).flatten(0, 1).float(), batch[:, 1:].flatten())

    def hf_loss(model, batch):
        return F.cross_entropy(model(input_ids=batch[:, :-1]).logits.flatten(0, 1).float(), batch[:, 1:].flatten())

    ours = measure(*training_step(gpt, lm_loss, ids, device, compile), bt * t, device, steps, vendor, peak)
    del gpt
    try:
        hf = gpt2_hf(quick)
        hf.config._attn_implementation = "sdpa"  # PyTorch's fused attention, as ours
        hf = hf.to(device)
        theirs = measure(*training_step(hf, hf_loss, ids.clamp_max(hf.config.vocab_size - 1), device, compile),
                         bt * t, device, steps, vendor, peak)
        del hf
        ours.update(peer="GPT2LMHeadModel", peer_tokens_per_s=theirs["tokens_per_s"], peer_mfu=theirs["mfu"],
                    vs_peer=ours["tokens_per_s"] / theirs["tokens_per_s"])
    except ImportError:
        ours.update(peer=None)
    results.add(f"gpt2-train{suffix}", **ours, compiled=compile, batch=[bt, t], targets="MFU >= 0.5, vs_peer >= 1.2")

    cfg = aiayn.preset("transformer-tiny" if quick else "transformer-base", src_vocab_size=32000,
                       tgt_vocab_size=32000, share_embeddings=True)
    seq2seq = aiayn.build(cfg).to(device)
    b2, s2 = (2, 16) if quick else (128, 64)
    src = torch.randint(4, 32000, (b2, s2), device=device)
    tgt = torch.randint(4, 32000, (b2, s2 + 1), device=device)

    def mt_loss(model, batch):
        loss, _, n = label_smoothed_loss(model(batch[0], batch[1][:, :-1]), batch[1][:, 1:], cfg.pad_id, 0.1)
        return loss / n

    peer = TorchTransformer(cfg).to(device)
    peer.load_ours(seq2seq)  # the same weights: the same computation
    ours = measure(*training_step(seq2seq, mt_loss, (src, tgt), device, compile), b2 * 2 * s2, device, steps,
                   vendor, peak)
    theirs = measure(*training_step(peer, mt_loss, (src, tgt), device, compile), b2 * 2 * s2, device, steps,
                     vendor, peak)
    ours.update(peer="torch.nn.Transformer", peer_tokens_per_s=theirs["tokens_per_s"], peer_mfu=theirs["mfu"],
                vs_peer=ours["tokens_per_s"] / theirs["tokens_per_s"])
    results.add(f"transformer-base-train{suffix}", **ours, compiled=compile, batch=[b2, s2], targets="vs_peer >= 1.1")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stage", choices=["decode", "train"])
    p.add_argument("--device", default="cuda")
    p.add_argument("--steps", type=int, default=20, help="timed training steps per side (medians are reported)")
    p.add_argument("--rounds", type=int, default=5, help="timed generations per decoding side")
    p.add_argument("--sides", default=",".join(SIDES), help=f"decoding sides, of {','.join(SIDES)}")
    p.add_argument("--compile", action="store_true", help="train: torch.compile both sides")
    p.add_argument("--quick", action="store_true", help="toy sizes (to check the script, e.g. on a CPU)")
    p.add_argument("--out", help="folder for gpu.json (default benchmarks/results; --quick: a new temporary folder)")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("gpu.py: --device cuda, but torch.cuda.is_available() is False", file=sys.stderr)
        return 2
    sides = [s for s in args.sides.split(",") if s]
    if not sides or set(sides) - set(SIDES):
        p.error(f"--sides must name some of {','.join(SIDES)}, got {args.sides!r}")
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="gpu-quick-")) if args.quick \
        else HERE / "results"  # toy numbers never replace measured ones
    torch.backends.cuda.matmul.allow_tf32 = True
    results = Results(out, device, args.quick)
    if args.stage == "decode":
        decode(results, device, args.quick, sides, args.rounds)
    else:
        train(results, device, args.quick, args.compile, args.steps)
    print(f"wrote {results.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
