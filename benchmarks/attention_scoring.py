"""Attention scoring functions side by side: the translation recipe on its made-up dates, with the encoder-decoder
attention scored by dot, scaled dot (the paper), additive (Bahdanau), bilinear (Luong's "general"), or hard
attention to one source position (argmax with a straight-through gradient, or sampled and trained by REINFORCE).

    python benchmarks/attention_scoring.py            # the README table (20 minutes on one shared thread)
    python benchmarks/attention_scoring.py --quick    # toy sizes, seconds (a smoke test)

Each run is ``aiayn train`` (the default dates job) with a smaller model and fewer updates, and one setting
changed, ``TransformerConfig.cross_scoring``::

    recipes.train("translation", steps=STEPS, seed=SEED, n_test=N_VAL,
                  model={"d_model": 64, "n_heads": 4, "d_ff": 256, "cross_scoring": SCORING})

The same budget for all (the updates, the recipe's defaults: its learning rate, warm-up, batch, label smoothing),
two seeds each (a seed draws the data and the initial weights). Splits: the recipe's held-out pairs are the
validation split (500 pairs, none in training): its exact match and loss are what any choice here reads, i.e. the
ranking of the scorers; nothing is tuned per scorer. The test split is 1,000 further pairs drawn with another
seed, none of whose sources is in training or validation, decoded greedily once per run after training.

Speed, two ways, each a ratio measured in this one process: the training tokens (target tokens) per second of
each scorer's model, forward + backward + update with the recipe's loss on the same batches, timed in interleaved
rounds (median; each run's own tokens/s is kept too, but on a shared machine it follows the load), and the
forward time of each scorer alone (``(B, H, T, D)`` queries and ``(B, H, S, D)`` keys in,
``(B, H, T, S)`` scores out; no gradient), median of interleaved rounds, over dot's, at a few sizes: section
3.2.1's "dot-product attention is much faster and more space-efficient in practice". Writes
``<out>/attention_scoring.json``.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from aiayn import recipes
from aiayn.benchmark.scripts import script_args, write_results
from aiayn.data import make_pairs
from aiayn.evaluation import exact_match
from aiayn.layers import SCORINGS, AdditiveScore, BilinearScore, DotScore, ScaledDotScore
from aiayn.pipelines.translation import load_run, translate_texts
from aiayn.recipes.translation import Config, Translation

RESULTS = Path(__file__).parent / "results"  # a full run writes here unless --out says
MODEL = {"d_model": 64, "n_heads": 4, "d_ff": 256}  # the tiny preset's 2 + 2 layers at half its width
QUICK = {"steps": 4, "seeds": [0], "scorings": ["scaled_dot", "hard-sample"], "n_train": 300, "n_val": 16,
         "n_test": 16, "sizes": ["2,8,8"], "rounds": 1, "heads": 2, "d_head": 8, "speed_steps": 1}


def test_pairs(n: int, seed: int, n_train: int, n_val: int) -> list[tuple[str, str]]:
    """``n`` dates pairs drawn with another seed than the run's, none of whose sources is among the run's training
    or validation sources (the recipe draws those with ``make_pairs("dates", n_train, n_val, seed)``)."""
    train, val = make_pairs("dates", n_train, n_val, seed)
    seen = {s for s, _ in train} | {s for s, _ in val}
    _, candidates = make_pairs("dates", 0, 2 * n + 100, 10_000 + seed)
    fresh = [(s, t) for s, t in candidates if s not in seen][:n]
    if len(fresh) < n:
        raise ValueError(f"n_test={n}: only {len(fresh)} fresh test pairs found")
    return fresh


def train_one(scoring: str, seed: int, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One run of the recipe; validation numbers from the recipe, the test split scored once afterwards."""
    t0 = time.perf_counter()
    done = recipes.train("translation", steps=args.steps, seed=seed, n_train=args.n_train, n_test=args.n_val,
                         model={**MODEL, "cross_scoring": scoring}, out=str(work), name=f"{scoring}-{seed}",
                         device="cpu", progress=False, verbose=False)
    history = done["history"]
    tokens = sum(r["tokens"] for r in history[1:])  # the first update also warms up: left out
    tokens_per_s = tokens / max(history[-1]["seconds"] - history[0]["seconds"], 1e-9)
    model, src_tok, tgt_tok = load_run(done["run"], device="cpu")
    test = test_pairs(args.n_test, seed, args.n_train, args.n_val)
    hyps = translate_texts(model, src_tok, tgt_tok, [s for s, _ in test])
    return {"scoring": scoring, "seed": seed, "val_exact_match": done["exact_match"], "val_loss": done["val_loss"],
            "test_exact_match": exact_match(hyps, [t for _, t in test]), "final_train_loss": history[-1]["loss"],
            "train_tokens_per_s": tokens_per_s, "train_seconds": history[-1]["seconds"],
            "run_seconds": time.perf_counter() - t0}


def scorer_speed(sizes: list[str], heads: int, d_head: int, rounds: int) -> list[dict[str, Any]]:
    """Forward time of each scorer alone per size ``"B,T,S"``, as a ratio over dot's (median of interleaved rounds)."""
    torch.manual_seed(0)
    scorers = {"dot": DotScore(), "scaled_dot": ScaledDotScore(), "bilinear": BilinearScore(heads, d_head),
               "additive": AdditiveScore(heads, d_head)}
    rows = []
    for size in sizes:
        b, t, s = map(int, size.split(","))
        q, k = torch.randn(b, heads, t, d_head), torch.randn(b, heads, s, d_head)
        times: dict[str, list[float]] = {name: [] for name in scorers}
        with torch.no_grad():
            for score in scorers.values():  # warm up
                score(q, k)
            for _ in range(rounds):
                for name, score in scorers.items():
                    calls, t0 = 0, time.perf_counter()
                    while calls < 3 or time.perf_counter() - t0 < 0.05:
                        score(q, k)
                        calls += 1
                    times[name].append((time.perf_counter() - t0) / calls)
        dot = statistics.median(times["dot"])
        for name in scorers:
            ms = statistics.median(times[name]) * 1e3
            rows.append({"scoring": name, "B": b, "H": heads, "T": t, "S": s, "D": d_head, "ms": ms,
                         "ratio_to_dot": ms / (dot * 1e3)})
        print("  " + ", ".join(f"{r['scoring']} {r['ratio_to_dot']:.2f}x" for r in rows[-len(scorers):])
              + f" of dot ({dot * 1e3:.3f} ms) at B={b} H={heads} T={t} S={s} D={d_head}")
    return rows


def train_speed(scorings: list[str], steps: int, rounds: int) -> list[dict[str, Any]]:
    """Training tokens per second of each scorer's model on the same few batches, forward + backward + Adam step
    with the recipe's own loss (REINFORCE's term included), timed in interleaved rounds (median), over scaled
    dot's: the whole model's cost, steadier than the runs' own tokens/s on a shared machine."""
    tasks = {}
    for scoring in scorings:
        torch.manual_seed(0)
        cfg = Config(n_train=2000, model={**MODEL, "cross_scoring": scoring})
        tasks[scoring] = Translation(cfg, None, lambda *a, **k: None)
    first = next(iter(tasks.values()))
    batches = list(itertools.islice(first.batches(0), 4))
    tokens = sum(int((b[2] != first.mcfg.pad_id).sum()) for b in batches)
    times: dict[str, list[float]] = {s: [] for s in scorings}
    optims = {s: torch.optim.Adam(t.model.parameters(), lr=1e-4) for s, t in tasks.items()}
    for r in range(rounds + 1):  # round 0 warms up
        for scoring, task in tasks.items():
            task.model.train()
            t0 = time.perf_counter()
            for _ in range(steps):
                for batch in batches:
                    optims[scoring].zero_grad()
                    loss, _, n = task.loss(task.model, batch)
                    (loss / n).backward()
                    optims[scoring].step()
            if r:
                times[scoring].append(time.perf_counter() - t0)
    base = statistics.median(times[scorings[0]])
    rows = [{"scoring": s, "tokens_per_s": tokens * steps / statistics.median(times[s]),
             "ratio_to_" + scorings[0]: base / statistics.median(times[s])} for s in scorings]
    print("training tokens/s: " + ", ".join(f"{r['scoring']} {r['tokens_per_s']:,.0f}" for r in rows))
    return rows


def summarise(runs: list[dict[str, Any]], scorings: list[str], speed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for scoring in scorings:
        mine = [r for r in runs if r["scoring"] == scoring]
        row: dict[str, Any] = {"scoring": scoring}
        for key in ("val_exact_match", "test_exact_match", "val_loss", "train_tokens_per_s"):
            values = [r[key] for r in mine]
            row[key] = statistics.mean(values)
            row[key + "_by_seed"] = values
        timed = next(t for t in speed if t["scoring"] == scoring)
        row["interleaved_tokens_per_s"] = timed["tokens_per_s"]
        row["interleaved_speed_ratio"] = timed[f"ratio_to_{scorings[0]}"]
        rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| cross-attention scoring | validation exact match | test exact match | validation loss | "
             f"training tokens/s (x {rows[0]['scoring']}) |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['scoring']} | {fmt(r['val_exact_match_by_seed'])} | {fmt(r['test_exact_match_by_seed'])} "
                     f"| {r['val_loss']:.3f} | {r['interleaved_tokens_per_s']:,.0f} "
                     f"({r['interleaved_speed_ratio']:.2f}x) |")
    return "\n".join(lines)


def fmt(values: list[float]) -> str:
    mean = statistics.mean(values)
    return f"{mean:.1%}" + (f" ({', '.join(f'{v:.1%}' for v in values)})" if len(values) > 1 else "")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scorings", nargs="+", default=list(SCORINGS), choices=SCORINGS)
    p.add_argument("--steps", type=int, default=500, help="updates of every run (the same budget for all)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--n-train", type=int, default=50_000, help="training pairs (the recipe's default)")
    p.add_argument("--n-val", type=int, default=500, help="validation pairs: the recipe's held-out pairs")
    p.add_argument("--n-test", type=int, default=1000, help="test pairs, scored once per run")
    p.add_argument("--sizes", nargs="+", default=["32,16,32", "32,64,64", "16,128,128"],
                   help="scorer speed: B,T,S of each size measured")
    p.add_argument("--heads", type=int, default=4, help="scorer speed: heads")
    p.add_argument("--d-head", type=int, default=32, help="scorer speed: head dim (and additive's hidden size)")
    p.add_argument("--rounds", type=int, default=7, help="scorer speed: interleaved rounds, the median kept")
    p.add_argument("--speed-steps", type=int, default=2, help="training speed: passes over 4 batches per round")
    p.add_argument("--threads", type=int, default=1)
    args = script_args(p, argv, QUICK, "attention-scoring", results=RESULTS)
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    print("scorer forward time over dot's:")
    speed = scorer_speed(args.sizes, args.heads, args.d_head, args.rounds)
    training_speed = train_speed(args.scorings, args.speed_steps, args.rounds)
    work = Path(tempfile.mkdtemp(prefix="attention-scoring-"))
    runs = []
    for seed in args.seeds:  # the scorers interleaved, so a busier minute of the machine hits them alike
        for scoring in args.scorings:
            runs.append(train_one(scoring, seed, args, work))
            r = runs[-1]
            print(f"{scoring:>12} seed {seed}: validation exact match {r['val_exact_match']:.1%}, test "
                  f"{r['test_exact_match']:.1%}, val loss {r['val_loss']:.3f}, {r['train_tokens_per_s']:,.0f} "
                  f"tokens/s ({r['run_seconds']:.0f} s)", flush=True)
    rows = summarise(runs, args.scorings, training_speed)
    print(table(rows))
    write_results(args.out, "attention_scoring", {
        "args": vars(args), "model": MODEL, "summary": rows, "runs": runs, "scorer_speed": speed,
        "training_speed": training_speed,
        "table": table(rows), "minutes": round((time.perf_counter() - t0) / 60, 1),
        "machine": {"cpu": platform.processor() or platform.machine(), "threads": args.threads,
                    "torch": torch.__version__},
    })


if __name__ == "__main__":
    main()
