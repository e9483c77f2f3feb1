"""From GPT-2 to Llama, one switch at a time: a character-level model on tiny-shakespeare with the GPT-2 block,
then each of Llama's changes alone, then all of them, at one parameter count and one training budget.

    python benchmarks/llama_ablation.py                         # 1,500 updates a run, seeds 0 and 1
    python benchmarks/llama_ablation.py --updates 11427         # the full budget of benchmarks/lm_shakespeare.py,
                                                                # in benchmarks/results/llama_ablation_11427/
    python benchmarks/llama_ablation.py --quick                 # a toy run of a few seconds (a smoke test)

Every run is the ``shakespeare-char`` recipe (batches of 8 blocks of 128 characters, AdamW (0.9, 0.99) at a
peak of 2e-3 with weight decay 0.2, warm-up then cosine decay; 4 layers, 4 heads, 128 wide), the settings chosen
on validation for the GPT-2 block, used unchanged for every variant. The variants:

    gpt2      learned positions, LayerNorm, GELU, 4 kv heads, biases            (the recipe's model)
    +rope     rotary positions instead of the learned table
    +rmsnorm  RMSNorm instead of LayerNorm
    +swiglu   SwiGLU feed-forward (gate, up, down)
    +gqa      2 key/value heads shared by the 4 query heads
    +nobias   no biases in the attention and feed-forward linears
    llama     all five

Each variant's ``d_ff`` is the one that brings its parameter count closest to the GPT-2 block's (SwiGLU has
three matrices, so about 2/3 of GELU's width; RoPE drops the position table; fewer kv heads and no biases free
parameters for the feed-forward). The output stays tied to the token table for all (Llama unties it; that is a
choice of size, not of block). The text is cut as :mod:`lm_shakespeare` cuts it: the first 85% trains, the last
10% is validation (the best weights on it are kept, every ``eval_every`` updates), the 5% between is the test
split, scored once per run.

Speed is measured apart from training, so that other work on the machine weighs on every variant alike: forward
and backward of one training batch, the variants taken in turn for 7 rounds, the median of each. KV-cache memory
per token is what the model's cache holds in float32: 2 (k and v) x layers x kv heads x head dim x 4 bytes.

``--updates`` sets the budget: 1,500 updates by default (about 2.5 minutes a run on one quiet thread here, so that
14 runs fit in a session); the full 15-minute budget of the GPT benchmark is ``--updates 11427`` (about 21
minutes a run on one quiet thread), whose results go to a folder of their own: a results file is never replaced
by runs of another budget (``--fresh`` does that). Finished runs are kept in the results file and skipped, and a
run stopped part-way goes on from its last saved state (every 500 updates; the run folders are kept in
``--work``), so a longer run can be done in pieces. The runs can also be shared out among processes that write
one results file, one per core, each merging its runs into the file under a
lock; a last invocation with every variant then only measures the speeds and draws the plot:

    python benchmarks/llama_ablation.py --updates 11427 --seeds 0 &
    python benchmarks/llama_ablation.py --updates 11427 --seeds 1 &
    wait; python benchmarks/llama_ablation.py --updates 11427

Writes ``<out>/llama_ablation.json`` and ``<out>/llama_ablation.png``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from filelock import FileLock

import aiayn
from aiayn import recipes
from aiayn.benchmark.scripts import script_args
from aiayn.io import write_json, write_text
from aiayn.recipes.lm import perplexity

HERE = Path(__file__).parent
RESULTS = HERE / "results"  # a full run writes here unless --out says
PRESET = recipes.PRESETS["shakespeare-char"][1]
BASE = PRESET["model"]  # d_model 128, 4 layers, 4 heads, d_ff 512, exact GELU
SWITCHES: dict[str, dict[str, Any]] = {
    "+rope": {"positional": "rope"},
    "+rmsnorm": {"norm": "rmsnorm"},
    "+swiglu": {"activation": "swiglu"},
    "+gqa": {"n_kv_heads": 2},
    "+nobias": {"bias": False},
}
VARIANTS: dict[str, dict[str, Any]] = {"gpt2": {}, **SWITCHES,
                                       "llama": {k: v for s in SWITCHES.values() for k, v in s.items()}}
VOCAB = 65  # tiny-shakespeare's characters; only the token table depends on it, alike for every variant
UPDATES = 1500  # a run's updates by default: 14 runs fit in a session
QUICK = {"updates": 20, "seeds": [0], "quick_chars": 20_000, "variants": ["gpt2", "llama"], "rounds": 2}


def sized(switches: dict[str, Any], d_model: int = BASE["d_model"]) -> dict[str, Any]:
    """The model settings of a variant: the recipe's model with ``switches``, and the ``d_ff`` (a multiple of 8)
    whose parameter count is closest to the GPT-2 block's."""
    def count(overrides: dict[str, Any]) -> int:
        cfg = aiayn.preset("gpt-tiny", **{"vocab_size": VOCAB, **BASE, "d_model": d_model, **overrides})
        with torch.device("meta"):
            return aiayn.count_parameters(aiayn.build(cfg))

    target = count({})
    at8, at16 = count({**switches, "d_ff": 8}), count({**switches, "d_ff": 16})  # the count is linear in d_ff
    best = 8 + 8 * round((target - at8) / (at16 - at8))
    d_ff = min((best - 8, best, best + 8), key=lambda w: abs(count({**switches, "d_ff": w}) - target))
    return {**BASE, "d_model": d_model, **switches, "d_ff": d_ff}


def kv_bytes_per_token(model_cfg: Any) -> int:
    """float32 bytes the KV cache holds per token: k and v, every layer, every kv head."""
    return 2 * model_cfg.n_layers * model_cfg.kv_heads * (model_cfg.d_model // model_cfg.n_heads) * 4


def saved(path: Path, variants: dict[str, Any], **results: Any) -> dict[str, Any]:
    """Write the results file, first taking into ``variants`` the runs and variants it holds that ``variants``
    lacks (written there by another process sharing the file), under a lock, with each variant's mean losses and
    speed relative to gpt2; the merged ``variants``."""
    lock = Path(tempfile.gettempdir()) / f"aiayn-{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:16]}.lock"
    with FileLock(lock):
        old = json.loads(path.read_text()) if path.is_file() else {}
        for name, theirs in (old.get("variants", {}) if old.get("updates") == results["updates"] else {}).items():
            mine = variants.setdefault(name, theirs)
            mine["runs"] = {**theirs["runs"], **mine["runs"]}
        base = variants.get("gpt2", {})
        for entry in variants.values():
            runs = entry["runs"].values()
            entry["test_loss_mean"] = round(statistics.mean(r["test_loss"] for r in runs), 4) if runs else None
            entry["val_loss_mean"] = round(statistics.mean(r["val_loss"] for r in runs), 4) if runs else None
            if "tokens_per_s" in entry and "tokens_per_s" in base:
                entry["speed_vs_gpt2"] = round(entry["tokens_per_s"] / base["tokens_per_s"], 3)
        write_json(path, {"name": "llama_ablation", **results,
                          "variants": {n: variants[n] for n in VARIANTS if n in variants}})
    return variants


def speed(models: dict[str, torch.nn.Module], block: int, batch: int, rounds: int) -> dict[str, float]:
    """Training tokens/s of each model (forward + backward of one batch), the models in turn, median of rounds."""
    x = torch.randint(0, VOCAB, (batch, block))
    times: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(rounds + 1):  # the first round warms up
        for name, model in models.items():
            start = time.perf_counter()
            F.cross_entropy(model(x).flatten(0, 1), x.flatten()).backward()
            times[name].append(time.perf_counter() - start)
            model.zero_grad(set_to_none=True)
    return {name: batch * block / statistics.median(t[1:]) for name, t in times.items()}


def plot(results: dict[str, Any], path: Path) -> None:
    from aiayn.viz.common import pyplot, save

    plt = pyplot()
    names = [n for n in VARIANTS if n in results["variants"]]
    rows = [results["variants"][n] for n in names]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    for i, r in enumerate(rows):
        losses = [run["test_loss"] for run in r["runs"].values()]
        ax1.scatter([i] * len(losses), losses, color="C0", s=14, zorder=3)
        ax1.bar(i, statistics.mean(losses), color="C0", alpha=0.35)
    ax1.axhline(statistics.mean(run["test_loss"] for run in rows[0]["runs"].values()), color="gray", lw=0.8, ls="--")
    lo = min(run["test_loss"] for r in rows for run in r["runs"].values())
    hi = max(run["test_loss"] for r in rows for run in r["runs"].values())
    ax1.set_ylim(lo - 0.05, hi + 0.03)
    ax1.set_xticks(range(len(names)), names, rotation=30)
    ax1.set_ylabel("test loss (nats / char)")
    ax1.set_title(f"after {results['updates']:,} updates (dots: seeds)", fontsize=9)
    ax2.bar(range(len(names)), [r["tokens_per_s"] / rows[0]["tokens_per_s"] for r in rows], color="C1", alpha=0.7,
            label="training tokens/s")
    ax2.bar(range(len(names)), [r["kv_bytes_per_token"] / rows[0]["kv_bytes_per_token"] for r in rows],
            color="none", edgecolor="k", label="KV cache bytes / token")
    ax2.set_xticks(range(len(names)), names, rotation=30)
    ax2.set_ylabel("relative to gpt2")
    ax2.legend(fontsize=7)
    fig.suptitle("From GPT-2 to Llama, one switch at a time (tiny-shakespeare, characters)", fontsize=10)
    fig.tight_layout()
    save(fig, path)


def table(results: dict[str, Any]) -> str:
    """The README's table: one row a variant, test loss as the mean and each seed's."""
    seeds = sorted({s for e in results["variants"].values() for s in e["runs"]}, key=int)
    rows = ["| block | d_ff | parameters | validation loss | test loss (seeds " + ", ".join(seeds) + ") | training "
            "tokens/s | KV cache bytes / token |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, e in results["variants"].items():
        each = ", ".join(f"{e['runs'][s]['test_loss']:.3f}" if s in e["runs"] else "-" for s in seeds)
        tps = f"{e['tokens_per_s']:,} ({e['speed_vs_gpt2']:.2f}x)" if "speed_vs_gpt2" in e else "-"
        rows.append(f"| {name} | {e['model']['d_ff']} | {e['params']:,} | {e['val_loss_mean']:.3f} | "
                    f"{e['test_loss_mean']:.3f} ({each}) | {tps} | {e['kv_bytes_per_token']:,} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(HERE.parent.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"))
    p.add_argument("--updates", type=int, default=UPDATES, help=f"updates per run (default {UPDATES}; 11427: the "
                   "15-minute budget, written to benchmarks/results/llama_ablation_<updates> unless --out is given)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--rounds", type=int, default=7, help="speed: rounds of every variant in turn")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--fresh", action="store_true", help="forget finished runs in the results file")
    p.add_argument("--work", default=None, help="the runs' folders (default <temp>/aiayn-llama-ablation-<updates>; "
                                                "--quick: a new one): a run stopped part-way resumes there")
    p.add_argument("--quick-chars", type=int, default=None, help=argparse.SUPPRESS)
    args = script_args(p, argv, QUICK, "llama-ablation", results=RESULTS)
    torch.set_num_threads(args.threads)

    out = Path(args.out)
    if out == RESULTS and args.updates != UPDATES:  # the default folder holds the default budget's runs
        out = RESULTS / f"llama_ablation_{args.updates}"
    path = out / "llama_ablation.json"
    old = json.loads(path.read_text()) if path.is_file() and not args.fresh else {}
    if old and old.get("updates") != args.updates:  # runs of another budget are not comparable: never replaced
        p.error(f"{path} holds runs of {old.get('updates')} updates, not --updates {args.updates}: give another "
                "--out, or --fresh to replace them")
    text = Path(args.data).read_text(encoding="utf-8")[: args.quick_chars]
    test_at, val_at = int(len(text) * 0.85), int(len(text) * 0.9)  # train | test | validation
    work = Path(args.work or (tempfile.mkdtemp(prefix="llama-ablation") if args.quick else
                              Path(tempfile.gettempdir()) / f"aiayn-llama-ablation-{args.updates}"))
    work.mkdir(parents=True, exist_ok=True)
    files = {part: work / f"{part}.txt" for part in ("train", "test", "validation")}
    for part, piece in zip(files, (text[:test_at], text[test_at:val_at], text[val_at:])):
        if not files[part].is_file() or files[part].read_text(encoding="utf-8") != piece:  # another process reads it
            write_text(files[part], piece)

    d_model = 32 if args.quick else BASE["d_model"]
    variants: dict[str, Any] = old.get("variants", {})
    models = {}
    for name in args.variants:
        model = sized(VARIANTS[name], d_model)
        mcfg = aiayn.preset("gpt-tiny", **{"vocab_size": VOCAB, **model})
        entry = variants.setdefault(name, {"runs": {}})
        entry.update(model=model, params=aiayn.count_parameters(aiayn.build(mcfg)),
                     kv_bytes_per_token=kv_bytes_per_token(mcfg))
        models[name] = aiayn.build(mcfg)
        for seed in args.seeds:
            if str(seed) in entry["runs"]:
                continue
            cfg = recipes.config("shakespeare-char", data=str(files["train"]), val_data=str(files["validation"]),
                                 steps=args.updates, seed=seed, out=str(work), name=f"{name}-{seed}",
                                 model=model, eval_every=max(1, min(PRESET["eval_every"], args.updates // 6)),
                                 **({"block": 32, "warmup": 5} if args.quick else {}))
            folder = work / f"{name}-{seed}"
            if (folder / "train_state.safetensors").is_file():  # stopped part-way: on from its last saved state
                done = recipes.resume(folder, progress=False, verbose=False)
            else:
                shutil.rmtree(folder, ignore_errors=True)  # stopped before its first save
                done = recipes.train(cfg, progress=False, verbose=False)
            history = done["history"]
            run = {"val_loss": round(perplexity(done["run"], files["validation"])["loss"], 4),
                   "test_loss": round(perplexity(done["run"], files["test"])["loss"], 4),  # once, here
                   "train_minutes": round(history[-1]["seconds"] / 60, 2)}
            entry["runs"][str(seed)] = run
            print(f"{name:9s} seed {seed}: d_ff {model['d_ff']}, {entry['params']:,} parameters, validation "
                  f"{run['val_loss']:.4f}, test {run['test_loss']:.4f}, {run['train_minutes']} min", flush=True)
            variants = saved(path, variants, updates=args.updates)  # after every run: a stopped job keeps it

    block = 32 if args.quick else PRESET["block"]
    for name, tps in speed(models, block, PRESET["batch_size"], args.rounds).items():
        variants[name]["tokens_per_s"] = round(tps)
    saved(path, variants, updates=args.updates, recipe="shakespeare-char",
          split={"train": [0, test_at], "test": [test_at, val_at], "validation": [val_at, len(text)]},
          machine={"cpu": platform.processor() or platform.machine(), "threads": args.threads,
                   "torch": torch.__version__})
    results = json.loads(path.read_text())
    print(f"wrote {path}")
    if "gpt2" in results["variants"] and all("tokens_per_s" in e for e in results["variants"].values()):
        plot(results, out / "llama_ablation.png")
    else:
        print("no plot: it needs gpt2 and every variant's speed (run again with every variant)")
    print(table(results))


if __name__ == "__main__":
    main()
