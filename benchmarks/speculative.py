"""Speculative decoding on tiny-shakespeare: a 2-layer draft GPT proposes, a 6-layer target GPT verifies
(:func:`aiayn.decoding.speculative.speculative`), against the target's plain greedy decoding at batch 1.

    python benchmarks/speculative.py            # trains both (about 7 minutes on 2 cores), then 9 rounds
    python benchmarks/speculative.py --quick    # toy models and data, seconds: checks that it runs

Both models are trained by the ``shakespeare-char`` recipe (characters, so one tokenizer for both) on the first
90% of the text: the target, 6 layers of 256, for 1,600 updates; the draft, 2 layers of 128, for 500. A draft is
the weaker model; in minutes of 2 cores a small model learns as much per update as a large one, and given as many
updates the draft had the lower validation loss (as it had against nanoGPT's 6 layers of 384, which learn too
slowly for this budget). The prompts are cut from the last 10%. Greedy speculative decoding makes plain greedy
decoding's tokens, asserted here every round. Each round times plain greedy decoding of every prompt (one at a
time, the regime speculative decoding is for), speculative decoding of them, and the draft's own greedy decoding
(its cost per token, c in Leviathan et al. 2023), in an order that alternates, so that what else the machine
runs weighs on each alike.
Writes ``<out>/speculative.json``: the acceptance rate, tokens per pass of the target, tokens/s of each and their
ratio per round with its median and lower quartile, and acceptance for other numbers of proposals K.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

import aiayn
from aiayn import recipes
from aiayn.benchmark.scripts import script_args, write_results
from aiayn.decoding.sampling import sample
from aiayn.decoding.speculative import speculative
from aiayn.pipelines.lm import load_lm_run

HERE = Path(__file__).parent
RESULTS = HERE / "results"
SIZES = {  # the recipe's model settings (its preset: gpt-tiny, exact GELU, no dropout, 128 positions)
    "target": {"d_model": 256, "n_layers": 6, "n_heads": 4, "d_ff": 1024},
    "draft": {"d_model": 128, "n_layers": 2, "n_heads": 4, "d_ff": 512},
}
QUICK = {"target_steps": 20, "draft_steps": 20, "rounds": 2, "prompts": 2, "new_tokens": 16, "quick_chars": 50_000,
         "sweep": [2]}
QUICK_SIZES = {"target": {"d_model": 64, "n_layers": 2, "n_heads": 2, "d_ff": 128},
               "draft": {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64}}


def train(name: str, model: dict[str, Any], steps: int, lr: float, files: dict[str, Path], work: Path,
          seed: int) -> tuple[torch.nn.Module, Any, dict[str, Any]]:
    """``(model, tokenizer, facts)`` of a ``shakespeare-char`` run of ``steps`` updates."""
    cfg = recipes.config("shakespeare-char", data=str(files["train"]), val_data=str(files["validation"]),
                         model={**recipes.PRESETS["shakespeare-char"][1]["model"], **model}, steps=steps, lr=lr,
                         warmup=min(50, steps // 4), eval_every=0, save_every=10**9, seed=seed, out=str(work),
                         name=name, device="cpu")
    done = recipes.train(cfg, progress=False, verbose=False)
    net, tok = load_lm_run(done["run"], device="cpu")
    seconds = done["history"][-1]["seconds"]
    facts = {"config": model, "params": aiayn.count_parameters(net), "updates": steps, "lr": lr,
             "train_minutes": round(seconds / 60, 2), "val_loss": round(done["validation"][-1]["val_loss"], 4)}
    print(f"{name}: {facts['params']:,} parameters, {steps} updates in {seconds / 60:.1f} min, "
          f"validation loss {facts['val_loss']}")
    return net, tok, facts


def greedy_one_by_one(net: torch.nn.Module, prompts: list[list[int]], n: int) -> list[list[int]]:
    """Plain greedy decoding of each prompt on its own (batch 1), the new tokens."""
    out = []
    for p in prompts:
        row = sample(net, [p], n, temperature=0)
        assert isinstance(row, list)
        out.append(row[0][len(p) :])
    return out


def timed(f, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """``(f(*args, **kwargs), seconds it took)``."""
    start = time.perf_counter()
    result = f(*args, **kwargs)
    return result, time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(HERE.parent.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"))
    p.add_argument("--target-steps", type=int, default=1600, help="updates of the target (batches of 8 x 128)")
    p.add_argument("--draft-steps", type=int, default=500, help="updates of the draft")
    p.add_argument("--k", type=int, default=5, help="proposals per pass (num_assistant_tokens) of the timed rounds")
    p.add_argument("--sweep", type=int, nargs="*", default=[2, 3, 4, 8], help="other K: acceptance, one run")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--prompts", type=int, default=8, help="prompts of 32 characters from the held-out text")
    p.add_argument("--new-tokens", type=int, default=96, help="made per prompt (32 + 96 = the 128 positions)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick-chars", type=int, default=None, help=argparse.SUPPRESS)
    args = script_args(p, argv, QUICK, "speculative", results=RESULTS)
    torch.set_num_threads(args.threads)
    sizes = QUICK_SIZES if args.quick else SIZES

    text = Path(args.data).read_text(encoding="utf-8")[: args.quick_chars]
    val_at = int(len(text) * 0.9)
    work = Path(tempfile.mkdtemp(prefix="speculative-"))
    files = {"train": work / "train.txt", "validation": work / "validation.txt"}
    files["train"].write_text(text[:val_at], encoding="utf-8")
    files["validation"].write_text(text[val_at:], encoding="utf-8")
    draft, tok, draft_facts = train("draft", sizes["draft"], args.draft_steps, 2e-3, files, work, args.seed)
    target, _, target_facts = train("target", sizes["target"], args.target_steps, 2e-3, files, work,
                                             args.seed)
    if target_facts["val_loss"] >= draft_facts["val_loss"]:
        print("warning: the target is no better than the draft on validation; the pair is not a realistic one")
    assert (work / "draft" / "tokenizer.json").read_bytes() == (work / "target" / "tokenizer.json").read_bytes()

    held = text[val_at:]
    step = (len(held) - 32) // args.prompts
    prompts = [tok.encode(held[i * step : i * step + 32]) for i in range(args.prompts)]
    n, k = args.new_tokens, args.k
    made = n * len(prompts)

    want = greedy_one_by_one(target, prompts, n)  # also the warm-up of each
    got, stats = speculative(target, draft, prompts, n, num_assistant_tokens=k)
    assert got == want, "speculative greedy decoding differs from plain greedy decoding"
    greedy_one_by_one(draft, prompts, n)
    print(f"K={k}: acceptance {stats.acceptance_rate:.3f}, {stats.tokens_per_pass:.2f} tokens per target pass")
    print("sample:", repr(tok.decode(prompts[0])), "->", repr(tok.decode(got[0])))

    rounds = []
    for r in range(args.rounds):
        order = ["plain", "speculative", "draft"] if r % 2 == 0 else ["speculative", "plain", "draft"]
        seconds: dict[str, float] = {}
        for name in order:
            if name == "plain":
                out, seconds[name] = timed(greedy_one_by_one, target, prompts, n)
                assert out == want
            elif name == "speculative":
                (out, _), seconds[name] = timed(speculative, target, draft, prompts, n, num_assistant_tokens=k)
                assert out == want, f"round {r}: speculative greedy decoding differs from plain greedy decoding"
            else:
                _, seconds[name] = timed(greedy_one_by_one, draft, prompts, n)
        row = {"order": order, **{f"{name}_tokens_per_s": round(made / s, 1) for name, s in seconds.items()},
               "ratio": round(seconds["plain"] / seconds["speculative"], 3),
               "c": round(seconds["draft"] / seconds["plain"], 4)}
        print(f"round {r}: plain {row['plain_tokens_per_s']} tok/s, speculative {row['speculative_tokens_per_s']} "
              f"tok/s, ratio {row['ratio']}x")
        rounds.append(row)
    ratios = [row["ratio"] for row in rounds]
    quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratios[0]] * 3
    c = statistics.median(row["c"] for row in rounds)

    sweep = []
    for other in args.sweep:  # greedy acceptance is deterministic: one run each; its time is one sample only
        (out, s), secs = timed(speculative, target, draft, prompts, n, num_assistant_tokens=other)
        assert out == want
        sweep.append({"k": other, "acceptance_rate": round(s.acceptance_rate, 4),
                      "tokens_per_pass": round(s.tokens_per_pass, 3), "tokens_per_s_one_run": round(made / secs, 1)})
        print(f"K={other}: acceptance {s.acceptance_rate:.3f}, {s.tokens_per_pass:.2f} tokens per pass, "
              f"{made / secs:.0f} tok/s (one run)")

    print(f"speculative / plain greedy, {len(rounds)} rounds: median {statistics.median(ratios):.2f}x, "
          f"lower quartile {quartiles[0]:.2f}x; draft cost per token c = {c:.3f} of the target's")
    write_results(args.out, "speculative", {
        "name": "speculative", "args": vars(args),
        "target": target_facts, "draft": draft_facts,
        "prompts": len(prompts), "prompt_chars": 32, "new_tokens": n, "k": k,
        "acceptance_rate": round(stats.acceptance_rate, 4), "proposed": stats.proposed, "accepted": stats.accepted,
        "tokens_per_pass": round(stats.tokens_per_pass, 3),
        "rounds": rounds,
        "ratio_median": round(statistics.median(ratios), 3), "ratio_lower_quartile": round(quartiles[0], 3),
        "plain_tokens_per_s_median": round(statistics.median(row["plain_tokens_per_s"] for row in rounds), 1),
        "speculative_tokens_per_s_median": round(
            statistics.median(row["speculative_tokens_per_s"] for row in rounds), 1),
        "c_median": round(c, 4),
        # Leviathan et al.'s walltime model: tokens per target pass (measured here) over the cost of a pass, K
        # draft steps of c and one target pass counted as one step however many positions it scores
        "ratio_cost_model": round(stats.tokens_per_pass / (k * c + 1), 3),
        "k_sweep": sweep,
        "sample": {"prompt": tok.decode(prompts[0]), "continuation": tok.decode(want[0])},
        "machine": {"cpu": platform.processor() or platform.machine(), "threads": args.threads,
                    "torch": torch.__version__},
    })


if __name__ == "__main__":
    main()
