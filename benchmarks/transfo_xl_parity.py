"""Transformer-XL against ``transformers==4.46.3``'s ``TransfoXLLMHeadModel`` (``transformers`` 5 dropped the class, and
4.46.3 cannot be installed beside this package's other dependencies, so it runs in a Python of its own):

    python3 -m venv /tmp/hf446 && /tmp/hf446/bin/pip install torch==2.13.0 transformers==4.46.3
    python benchmarks/transfo_xl_parity.py --hf-python /tmp/hf446/bin/python   # writes results/transfo_xl_parity.json

For each random config of odd sizes (with and without the adaptive embedding and softmax, pre- and post-norm,
shared and per-layer biases, clamped and same-length attention):

1. from theirs: the worker (in the other Python) builds the model with random weights, saves it
   (``save_pretrained``), runs two consecutive segments with memory and saves the log-probabilities and the new
   memories; this process converts the folder (``aiayn.from_hf``) and runs the same segments;
2. to theirs: this process exports a random model of ours (``aiayn.to_hf``), the worker loads it with
   ``TransfoXLLMHeadModel.from_pretrained`` and runs the segments; this process compares.

The worker starts the memory empty (``mems`` of 0 positions), as the paper's code does: ``TransfoXLLMHeadModel``
called without ``mems`` starts from ``mem_len`` states of zeros, which the first segment then attends to.
Reported: the largest absolute difference of the log-probabilities and of the memories per config and direction;
the run fails above 1e-4.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "transfo_xl_parity.json"
LIMIT = 1e-4
CONFIGS = {  # transformers' TransfoXLConfig fields
    "adaptive-div2-same-length-clamped": {
        "vocab_size": 101, "cutoffs": [20, 60], "div_val": 2, "d_model": 30, "d_embed": 30, "n_head": 3,
        "d_head": 10, "d_inner": 46, "n_layer": 3, "mem_len": 9, "clamp_len": 6, "same_length": True},
    "one-softmax-no-cutoffs": {
        "vocab_size": 67, "cutoffs": [], "div_val": 1, "d_model": 36, "d_embed": 36, "n_head": 4, "d_head": 9,
        "d_inner": 50, "n_layer": 2, "mem_len": 5, "clamp_len": -1, "same_length": False},
    "div1-projected-pre-norm-shared-biases": {
        "vocab_size": 83, "cutoffs": [30], "div_val": 1, "d_model": 28, "d_embed": 20, "n_head": 4, "d_head": 7,
        "d_inner": 38, "n_layer": 2, "mem_len": 7, "clamp_len": -1, "same_length": False, "pre_lnorm": True,
        "untie_r": False},
}
SEGMENTS = (7, 5)  # positions of the two segments, batch 2


def ids_for(vocab: int):
    import torch

    g = torch.Generator().manual_seed(3)
    return [torch.randint(0, vocab, (2, t), generator=g) for t in SEGMENTS]


def worker(folder: Path, name: str, build: bool) -> None:
    """In the transformers 4 Python: build (``build``) or load the model in ``folder``, run the two segments, save."""
    import torch
    from transformers import TransfoXLConfig, TransfoXLLMHeadModel

    # 4.46.3 writes arange(...).type_as(dtype=...), which the torch of its day took as .to(dtype) and torch 2.13
    # refuses; let it mean that again here (only this call passes dtype= alone)
    type_as = torch.Tensor.type_as
    torch.Tensor.type_as = lambda self, other=None, dtype=None: (self.to(dtype) if other is None
                                                                 else type_as(self, other))
    torch.manual_seed(0)
    if build:
        model = TransfoXLLMHeadModel(TransfoXLConfig(dropout=0.0, dropatt=0.0, **CONFIGS[name])).eval()
        with torch.no_grad():  # away from the initial 1s and 0s, so every weight matters
            for p in model.parameters():
                p.add_(torch.randn_like(p) * 0.1)
        model.save_pretrained(folder, safe_serialization=False)
    else:
        model = TransfoXLLMHeadModel.from_pretrained(folder).eval()
    cfg = model.config
    mems = [torch.zeros(0, 2, cfg.d_model) for _ in range(cfg.n_layer)]
    out = {}
    with torch.no_grad():
        for i, ids in enumerate(ids_for(cfg.vocab_size)):
            o = model(input_ids=ids, mems=mems)
            mems = o.mems
            out[f"logprobs{i}"] = o.prediction_scores
            out[f"mems{i}"] = torch.stack([m.transpose(0, 1) for m in mems])  # (L, B, M, C)
    torch.save(out, folder / "outputs.pt")


def ours(model):
    import torch

    memory = model.new_memory()
    out = {}
    with torch.no_grad():
        for i, ids in enumerate(ids_for(model.cfg.vocab_size)):
            out[f"logprobs{i}"] = model(ids, memory)
            out[f"mems{i}"] = torch.stack(list(memory))
    return out


def compare(a: dict, b: dict) -> dict[str, float]:
    return {kind: max(float((a[f"{kind}{i}"] - b[f"{kind}{i}"]).abs().max()) for i in range(len(SEGMENTS)))
            for kind in ("logprobs", "mems")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--hf-python", default=sys.executable, help="a Python with transformers==4.46.3")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)  # folder, config name, build|load
    args = parser.parse_args(argv)
    if args.worker:
        worker(Path(args.worker[0]), args.worker[1], args.worker[2] == "build")
        return 0
    import torch

    import aiayn
    from aiayn.benchmark.harness import machine

    def run_worker(folder: Path, name: str, how: str) -> dict:
        subprocess.run([args.hf_python, __file__, "--worker", str(folder), name, how], check=True)
        return torch.load(folder / "outputs.pt")

    version = subprocess.run([args.hf_python, "-c", "import transformers; print(transformers.__version__)"],
                             check=True, capture_output=True, text=True).stdout.strip()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, hf in CONFIGS.items():
            theirs = run_worker(Path(tmp) / f"{name}-hf", name, "build")
            converted = aiayn.from_hf(Path(tmp) / f"{name}-hf")
            from_theirs = compare(ours(converted), theirs)
            torch.manual_seed(1)
            mine = aiayn.build(converted.cfg).eval()
            with torch.no_grad():
                for p in mine.parameters():
                    p.add_(torch.randn_like(p) * 0.1)
            aiayn.to_hf(mine, Path(tmp) / f"{name}-ours")
            to_theirs = compare(ours(mine), run_worker(Path(tmp) / f"{name}-ours", name, "load"))
            rows[name] = {"config": hf, "from_transformers": from_theirs, "to_transformers": to_theirs}
            print(f"{name:40} from theirs {from_theirs}   to theirs {to_theirs}")
    worst = max(v for r in rows.values() for d in ("from_transformers", "to_transformers") for v in r[d].values())
    result = {"machine": machine(), "transformers": version, "segments": list(SEGMENTS), "batch": 2,
              "limit": LIMIT, "worst": worst, "configs": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"worst difference {worst:.2e} (limit {LIMIT:g}); wrote {args.out}")
    return 0 if worst <= LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
