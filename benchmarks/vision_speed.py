"""Forward speed of ``swin-t`` and ``vit-b16`` at 224 px (random weights): ours against Hugging Face.

    python benchmarks/vision_speed.py [--batch 8] [--rounds 5] [--models swin-t vit-b16]

Each Hugging Face model (``SwinForImageClassification``, ``ViTForImageClassification`` with the preset's sizes)
is converted with ``aiayn.from_hf``, so both run the same weights, in one process, in eval mode without
gradients, alternately (A B A B ... after a warm-up of each), on the same batch; their logits must agree.
Reports the median images/s of each, their ratio, and the share of the machine's matmul peak (FLOPs per
image counted by ``torch.utils.flop_counter`` on our model; the peak timed on a 2048^3 float32 matmul).
Writes ``benchmarks/results/vision_speed.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

import aiayn

HERE = Path(__file__).parent


def hugging_face(name: str):
    """The Hugging Face model with the sizes of our preset ``name``."""
    import transformers

    cfg = aiayn.preset(name)
    if name.startswith("swin"):
        hf = transformers.SwinConfig(image_size=cfg.image_size, patch_size=cfg.patch_size, embed_dim=cfg.d_model,
                                     depths=list(cfg.n_layers), num_heads=list(cfg.n_heads),
                                     window_size=cfg.window_size, num_labels=cfg.num_classes)
        return transformers.SwinForImageClassification(hf)
    hf = transformers.ViTConfig(image_size=cfg.image_size, patch_size=cfg.patch_size, hidden_size=cfg.d_model,
                                num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
                                intermediate_size=cfg.d_ff, num_labels=cfg.num_classes)
    return transformers.ViTForImageClassification(hf)


def matmul_peak(n: int = 2048, repeats: int = 5) -> float:
    """Float32 matmul FLOP/s of this machine, the best of ``repeats``."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2 * n**3 / best


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["swin-t", "vit-b16"])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", default=str(HERE / "results"), help="folder for vision_speed.json")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    import transformers

    peak = matmul_peak()
    results = {"batch": args.batch, "rounds": args.rounds, "matmul_peak_gflops": round(peak / 1e9, 1), "models": {},
               "machine": {"cpu": platform.processor() or platform.machine(), "threads": args.threads,
                           "torch": torch.__version__, "transformers": transformers.__version__}}
    print(f"forward, batch {args.batch}, 224 px, {args.threads} threads; matmul peak {peak / 1e9:.0f} GFLOP/s")
    for name in args.models:
        torch.manual_seed(0)
        hf = hugging_face(name).eval()
        ours = aiayn.from_hf(hf).eval()
        images = torch.randn(args.batch, 3, 224, 224)
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            ours(images[:1])
        flops = counter.get_total_flops()
        runs = {"aiayn": lambda m=ours, x=images: m(x), "transformers": lambda m=hf, x=images: m(pixel_values=x).logits}
        times: dict[str, list[float]] = {k: [] for k in runs}
        outputs = {}
        with torch.inference_mode():
            for i in range(args.rounds + 1):  # round 0 warms up
                for label, fn in runs.items():
                    t = time.perf_counter()
                    outputs[label] = fn()
                    if i:
                        times[label].append(time.perf_counter() - t)
        diff = (outputs["aiayn"] - outputs["transformers"]).abs().max().item()
        speed = {k: args.batch / statistics.median(v) for k, v in times.items()}
        ratio = speed["aiayn"] / speed["transformers"]
        share = {k: flops * v / peak for k, v in speed.items()}
        results["models"][name] = {
            "params": aiayn.count_parameters(ours), "gflops_per_image": round(flops / 1e9, 2),
            "images_per_s": {k: round(v, 2) for k, v in speed.items()}, "ratio": round(ratio, 3),
            "share_of_matmul_peak": {k: round(v, 3) for k, v in share.items()}, "max_abs_logit_diff": diff,
            "seconds": times,
        }
        print(f"{name} ({flops / 1e9:.1f} GFLOPs per image):")
        for k, v in speed.items():
            print(f"  {k:<13}{v:7.2f} images/s  ({share[k]:.0%} of peak; runs: "
                  f"{', '.join(f'{t:.2f}s' for t in times[k])})")
        print(f"  ratio {ratio:.2f}x; logits differ by at most {diff:.1e}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "vision_speed.json").write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out / 'vision_speed.json'}")


if __name__ == "__main__":
    main()
