"""One GPU (an H200, say) in a few minutes: MFU of ``gpt2`` and ``transformer-base`` training, tokens/s of
``gpt2`` generation; bf16 autocast, attention through SDPA (flash kernels on CUDA), optional ``torch.compile``.
Each training case runs beside the peer a user would pick instead, with the same settings (bf16 autocast, SDPA,
fused AdamW, the same batch; compiled on both sides or on neither): ``GPT2LMHeadModel`` (``attn_implementation=
"sdpa"``, when ``transformers`` is installed) and ``torch.nn.Transformer``; ``vs_peer`` is our speed over theirs.

    bash benchmarks/gpu.sh eager                 # or compiled; or: python benchmarks/gpu.py [--compile]
    python benchmarks/gpu.py --device cpu --quick   # toy sizes on the CPU: checks the script runs

MFU is the model's FLOPs per step (counted once with ``torch.utils.flop_counter`` on the real step: matmuls
and attention kernels, backward included) divided by the step's median time and by the vendor's dense bf16
peak of this GPU (989 TFLOP/s for an H100 or H200 SXM: :data:`aiayn.training.loop.PEAK_BF16`), the figure
MFU is quoted against elsewhere; the share of the measured bf16 matmul peak (``torch.mm`` of 8192^2 squares)
is reported beside it (``mfu_measured``), and alone on a device the table does not know.

``--compile`` compiles what each case times: the training models, and for generation the forward of every
decode step (``GPT.features`` with ``dynamic=True``: the prompt's step and each one-token step on the growing
cache) and the output layer; the output and ``gpu.json`` (``compiled``) say which.
Writes ``gpu.json`` in ``--out`` (``benchmarks/results``), in the form of the CPU harness's files (the page
``docs/benchmarks.md`` leaves it out); ``--quick`` writes into a new temporary folder unless ``--out`` says where.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import aiayn
from aiayn.benchmark.harness import SCHEMA, count_flops, machine, write_result
from aiayn.benchmark.peers.hf import gpt2_hf
from aiayn.benchmark.peers.torch_transformer import TorchTransformer
from aiayn.decoding import sample
from aiayn.training.loop import vendor_peak
from aiayn.training.losses import label_smoothed_loss

HERE = Path(__file__).parent


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def seconds(fn, device: torch.device, steps: int, warmup: int = 3) -> list[float]:
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


def matmul_peak(device: torch.device, dtype: torch.dtype, n: int) -> float:
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    return 2 * n**3 / min(seconds(lambda: a @ b, device, 10))


def training_step(model, loss_fn, batch, device, compile_: bool):
    """One AdamW step under bf16 autocast (fused AdamW on CUDA)."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    forward = torch.compile(model) if compile_ else model

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = loss_fn(forward, batch)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def generation(gpt, prompt: torch.Tensor, n: int, compile_: bool):
    """Greedy generation of ``n`` tokens after ``prompt``, and what of it runs compiled. Compiled, every
    decode step's forward (``features``: the prompt's step, then one token at a time on the growing cache, its
    length a dynamic size rather than one graph per step) and the output layer go through ``torch.compile``."""
    compiled = "nothing (eager)"
    if compile_:
        gpt.features = torch.compile(gpt.features, dynamic=True)  # the instance's, over the method
        gpt.lm_head.compile()
        compiled = "each decode step's forward (GPT.features, dynamic=True) and lm_head"
    return (lambda: sample(gpt, prompt, n, temperature=0)), compiled


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda")
    p.add_argument("--steps", type=int, default=20, help="timed steps per case (medians are reported)")
    p.add_argument("--compile", action="store_true", help="torch.compile the models")
    p.add_argument("--quick", action="store_true", help="toy sizes (to check the script, e.g. on a CPU)")
    p.add_argument("--out", help="folder for gpu.json (default benchmarks/results; --quick: a new temporary folder)")
    args = p.parse_args(argv)
    if args.out is None:  # toy numbers never replace measured ones
        args.out = tempfile.mkdtemp(prefix="gpu-quick-") if args.quick else str(HERE / "results")
    device = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = True
    q = args.quick
    peak = matmul_peak(device, torch.bfloat16, 512 if q else 8192)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    vendor = vendor_peak(name)
    print(f"{name}: vendor dense bf16 peak " + (f"{vendor / 1e12:.0f} TFLOP/s" if vendor else "unknown")
          + f", measured bf16 matmul peak {peak / 1e12:.0f} TFLOP/s")
    cases = {}

    # gpt2 training: batch 16 x 1024 tokens
    torch.manual_seed(0)
    gpt = aiayn.build("gpt-tiny" if q else "gpt2").to(device)
    b, t = (2, 32) if q else (16, 1024)
    ids = torch.randint(0, gpt.cfg.vocab_size, (b, t + 1), device=device)

    def lm_loss(model, batch):
        return F.cross_entropy(model(batch[:, :-1]).flatten(0, 1).float(), batch[:, 1:].flatten())

    cases["gpt2-train"] = (training_step(gpt, lm_loss, ids, device, args.compile), b * t, "tokens")
    peers = {}
    try:
        hf = gpt2_hf(q)
        hf.config._attn_implementation = "sdpa"  # PyTorch's fused attention, as ours
        hf = hf.to(device)

        def hf_loss(model, batch):
            return F.cross_entropy(model(input_ids=batch[:, :-1]).logits.flatten(0, 1).float(),
                                   batch[:, 1:].flatten())

        hf_ids = ids.clamp_max(hf.config.vocab_size - 1)
        peers["gpt2-train"] = ("GPT2LMHeadModel", training_step(hf, hf_loss, hf_ids, device, args.compile))
    except ImportError:
        print("transformers is not installed: gpt2-train runs without its peer")

    # transformer-base training: batch 128 x (64 source + 64 target) tokens, vocabulary 32,000
    cfg = aiayn.preset("transformer-tiny" if q else "transformer-base", src_vocab_size=32000, tgt_vocab_size=32000,
                       share_embeddings=True)
    seq2seq = aiayn.build(cfg).to(device)
    b2, s2 = (2, 16) if q else (128, 64)
    src = torch.randint(4, 32000, (b2, s2), device=device)
    tgt = torch.randint(4, 32000, (b2, s2 + 1), device=device)

    def mt_loss(model, batch):
        loss, _, n = label_smoothed_loss(model(batch[0], batch[1][:, :-1]), batch[1][:, 1:], cfg.pad_id, 0.1)
        return loss / n

    cases["transformer-base-train"] = (training_step(seq2seq, mt_loss, (src, tgt), device, args.compile),
                                       b2 * 2 * s2, "tokens")
    theirs = TorchTransformer(cfg).to(device)
    theirs.load_ours(seq2seq)  # the same weights: the same computation
    peers["transformer-base-train"] = ("torch.nn.Transformer",
                                       training_step(theirs, mt_loss, (src, tgt), device, args.compile))

    results = {}
    for case, (step, units, unit) in cases.items():
        flops = count_flops(step)  # one real step, backward and optimizer included
        times = seconds(step, device, args.steps)
        med = statistics.median(times)
        results[case] = {"throughput": units / med, "unit": unit, "median_s": med, "flops_per_step": flops,
                         "mfu": flops / med / vendor if vendor else None, "mfu_measured": flops / med / peak,
                         "compiled": "the model" if args.compile else "nothing (eager)"}
        line = (f"{case}: {units / med:,.0f} {unit}/s, MFU " + _shares(flops / med, vendor, peak)
                + (" (compiled: the model)" if args.compile else ""))
        if case in peers:
            peer, peer_step = peers[case]
            peer_flops = count_flops(peer_step)
            peer_med = statistics.median(seconds(peer_step, device, args.steps))
            results[case].update(peer=peer, peer_throughput=units / peer_med, peer_median_s=peer_med,
                                 peer_mfu=peer_flops / peer_med / vendor if vendor else None,
                                 peer_mfu_measured=peer_flops / peer_med / peak, vs_peer=peer_med / med)
            line += f"; {peer}: {units / peer_med:,.0f} {unit}/s ({peer_med / med:.2f}x)"
        print(line)

    # gpt2 generation: greedy, batch 1, 256 new tokens, bf16 weights
    gpt = gpt.to(torch.bfloat16).eval()
    prompt = torch.randint(0, gpt.cfg.vocab_size, (1, 16), device=device)
    n = 16 if q else 256
    generate, compiled = generation(gpt, prompt, n, args.compile)
    times = seconds(generate, device, max(3, args.steps // 5), warmup=1)
    results["gpt2-generate"] = {"throughput": n / statistics.median(times), "unit": "tokens",
                                "median_s": statistics.median(times), "compiled": compiled}
    print(f"gpt2-generate: {n / statistics.median(times):,.0f} tokens/s (batch 1, bf16; compiled: {compiled})")

    path = write_result({"schema": SCHEMA, "case": "gpu", "kind": "gpu", "quick": q, "compile": args.compile,
                         "dtype": "bfloat16 autocast", "measured_bf16_peak_flops": peak,
                         "vendor_bf16_peak_flops": vendor, "results": results, "machine": machine(device)}, args.out)
    print(f"wrote {path}")


def _shares(flops_per_s: float, vendor: float | None, measured: float) -> str:
    """The MFU against the vendor's peak (the headline) with the measured peak's beside it."""
    of_measured = f"{flops_per_s / measured:.1%} of the measured peak"
    return f"{flops_per_s / vendor:.1%} of the vendor's peak ({of_measured})" if vendor else of_measured


if __name__ == "__main__":
    main()
