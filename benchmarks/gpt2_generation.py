"""Greedy generation speed of ``gpt2`` (124M, random weights) with a KV cache: ours against Hugging Face.

    python benchmarks/gpt2_generation.py [--new-tokens 256] [--rounds 3]

Both run the same weights (ours converted from the Hugging Face model with ``aiayn.from_hf``) in one
process, alternately (A B A B ... after a warm-up of each), and must produce the same tokens. Reports the
median tokens/s of each and their ratio. Writes ``benchmarks/results/gpt2_generation.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

import aiayn
from aiayn.decoding import sample

HERE = Path(__file__).parent


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--prompt-tokens", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    import transformers

    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval()
    ours = aiayn.from_hf(hf).eval()
    prompt = torch.randint(0, 50257, (1, args.prompt_tokens))
    n = args.new_tokens

    def run_ours() -> torch.Tensor:
        return sample(ours, prompt, n, temperature=0)

    def run_hf() -> torch.Tensor:
        with torch.no_grad():
            return hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
                               do_sample=False, pad_token_id=50256)

    times: dict[str, list[float]] = {"aiayn": [], "transformers": []}
    outputs = {}
    for i in range(args.rounds + 1):  # round 0 warms up
        for name, fn in (("aiayn", run_ours), ("transformers", run_hf)):
            t = time.perf_counter()
            outputs[name] = fn()
            if i:
                times[name].append(time.perf_counter() - t)
    same = outputs["aiayn"].tolist() == outputs["transformers"].tolist()
    speed = {k: n / statistics.median(v) for k, v in times.items()}
    ratio = speed["aiayn"] / speed["transformers"]
    print(f"gpt2 greedy, {args.prompt_tokens}-token prompt, {n} new tokens, batch 1, {args.threads} threads:")
    for k, v in speed.items():
        print(f"  {k:<13}{v:7.1f} tokens/s   (runs: {', '.join(f'{t:.1f}s' for t in times[k])})")
    print(f"  ratio {ratio:.2f}x; same tokens: {same}")
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    (out / "gpt2_generation.json").write_text(json.dumps({
        "case": "gpt2 124M random weights, greedy with KV cache, batch 1", "new_tokens": n,
        "prompt_tokens": args.prompt_tokens, "tokens_per_s": {k: round(v, 2) for k, v in speed.items()},
        "ratio": round(ratio, 3), "same_tokens": same, "seconds": times,
        "machine": {"cpu": platform.processor() or platform.machine(), "threads": args.threads,
                    "torch": torch.__version__, "transformers": transformers.__version__},
    }, indent=2) + "\n")


if __name__ == "__main__":
    main()
