"""Translation: the ``multi30k-de-en`` recipe on this machine's CPU, chosen on validation, scored once on test.

    python benchmarks/translation_multi30k.py                      # Multi30k de -> en, 1,433 updates
    python benchmarks/translation_multi30k.py --minutes 60         # as many updates as 60 minutes allow
    python benchmarks/translation_multi30k.py --quick              # a toy run of a few seconds (a smoke test)
    python benchmarks/translation_multi30k.py --data ../shared/data/tatoeba-cmn-eng/cmn.txt \\
        --src-lang en --tgt-lang zh --updates 510                  # Tatoeba en -> zh (20 minutes here)

It is these commands, run for you, with the numbers gathered into one results file:

    aiayn train multi30k-de-en --data-dir DIR                      # writes model.safetensors, average.safetensors
    aiayn evaluate --run runs/multi30k-de-en --data multi30k --data-dir DIR --split val --beam 1
        (and --beam 4, and each with --weights average.safetensors: the four ways to finish, on validation)
    aiayn evaluate --run runs/multi30k-de-en --data multi30k --data-dir DIR --beam B [--weights ...]
        (test_2016_flickr, once, for the way validation chose)

The recipe preset (``aiayn.recipes.PRESETS``) is the paper's training (post-norm, label smoothing 0.1, Adam
0.9/0.98/1e-9, warm-up) fitted to a short run: the rate decays linearly to zero at the last update, and the
weights at 5 points of the last 20% are averaged (section 6.1 averages the last 5 checkpoints). 1,433
updates is what 60 minutes gave on this kind of machine; ``--updates`` makes the run the same on a busy one.

Choices use the validation split only: the four ways to finish (the last weights or the average, greedy or
beam 4 with length penalty 0.6) are scored on all of it, the best is chosen, and that one alone is scored on
the test split: Multi30k's ``test_2016_flickr``; for a TSV, 1,000 pairs set aside after a seeded shuffle
(the recipe holds out 1,000 of the rest as validation). Results go to ``<out>/<name>.json`` and the
validation curve to ``<out>/<name>.png``.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
from pathlib import Path

import torch

import aiayn
from aiayn import recipes
from aiayn.benchmark.scripts import script_args
from aiayn.data import held_out_split, read_corpus
from aiayn.evaluation import corpus_scores
from aiayn.pipelines.translation import translate
from aiayn.recipes.translation import load_pairs

HERE = Path(__file__).parent
RESULTS = HERE / "results"  # a full run writes here unless --out says
PRESET = recipes.PRESETS["multi30k-de-en"][1]
# --quick: a toy model on 2,000 pairs, 20 updates, 8 pairs to validate on and 8 to test
QUICK = {"updates": 20, "quick_pairs": 2000}
QUICK_SETTINGS = {"vocab_size": 300, "max_tokens": 1024, "warmup": 5, "n_test": 8, "eval_every": 10,
                  "model": {**PRESET["model"], "d_model": 64, "n_heads": 1, "n_encoder_layers": 1,
                            "n_decoder_layers": 1, "d_ff": 256}}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="multi30k", help="'multi30k' or a TSV file of pairs (Tatoeba's cmn.txt)")
    p.add_argument("--data-dir", default=str(HERE.parent.parent / "shared" / "data" / "multi30k"))
    p.add_argument("--src-lang", default="de")
    p.add_argument("--tgt-lang", default="en")
    p.add_argument("--updates", type=int, default=PRESET["steps"], help="updates to train (the recipe's)")
    p.add_argument("--minutes", type=float, default=None, help="train for this long instead of --updates")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default=None)
    p.add_argument("--quick-pairs", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--replot", metavar="RESULTS", help="train nothing: redraw the curve of a results file")
    args = script_args(p, argv, QUICK, "translation", results=RESULTS)
    if args.replot:
        results = json.loads(Path(args.replot).read_text())
        _plot(results["curve"], Path(args.replot).with_suffix(".png"), results["name"])
        return

    torch.set_num_threads(args.threads)
    multi30k = args.data == "multi30k"
    name = args.name or (f"translation_multi30k_{args.src_lang}_{args.tgt_lang}" if multi30k
                         else f"translation_{Path(args.data).stem}_{args.src_lang}_{args.tgt_lang}")
    work = Path(tempfile.mkdtemp(prefix=name))
    langs = {"src_lang": args.src_lang, "tgt_lang": args.tgt_lang}
    if multi30k:
        test_pairs, test_name = read_corpus("multi30k", args.data_dir, "test_2016_flickr", **langs), "test_2016_flickr"
        data = {"data": ["multi30k"], "data_dir": args.data_dir}
        if args.quick:  # a slice of the training pairs, as a TSV the recipe holds 8 of out
            data = {"data": [_tsv(read_corpus("multi30k", args.data_dir, "train", **langs)[: args.quick_pairs],
                                  work / "train.tsv")]}
    else:  # a TSV: 1,000 pairs set aside for test; the recipe holds out 1,000 of the rest for validation
        rest, test_pairs = held_out_split(read_corpus(args.data), 1000, args.seed)
        test_name = "1,000 pairs set aside"
        data = {"data": [_tsv(rest[: args.quick_pairs], work / "train.tsv")], "n_test": 1000}
    if args.quick:
        test_pairs = test_pairs[:8]
    budget = {"minutes": args.minutes} if args.minutes is not None else {"steps": args.updates}
    cfg = recipes.config("multi30k-de-en", **data, **langs, **budget, seed=args.seed, out=str(work), name="run",
                         **(QUICK_SETTINGS if args.quick else {}))
    val_pairs = load_pairs(cfg)[2]  # the recipe's validation split, as it holds it out
    print(f"{name}: the multi30k-de-en recipe, {cfg.steps if args.minutes is None else args.minutes} "
          f"{'updates' if args.minutes is None else 'minutes'} on {torch.get_num_threads()} threads")
    done = recipes.train(cfg, progress=False)
    run, history = done["run"], done["history"]
    trained = history[-1]["seconds"]
    curve = [{"minutes": round(history[r["step"] - 1]["seconds"] / 60, 2), "step": r["step"],
              "val_loss": round(r["val_loss"], 4), "val_bleu_greedy": round(r["bleu"], 2)}
             for r in done["validation"]]

    def score(pairs, finish: tuple[str | None, int]) -> dict:
        weights, beam = finish
        hyps = translate(run, [s for s, _ in pairs], beam=beam, weights=weights)
        return corpus_scores(hyps, [t for _, t in pairs], args.tgt_lang)

    def words(finish: tuple[str | None, int]) -> str:
        weights = "last" if finish[0] is None else f"average of {cfg.average}"
        return f"{weights}, {'greedy' if finish[1] == 1 else 'beam 4'}"

    finishes = [(weights, beam) for weights in (None, "average.safetensors") for beam in (1, 4)]
    print(f"  validation ({len(val_pairs):,} pairs): the four ways to finish")
    val_bleu = {}
    for finish in finishes:
        val_bleu[words(finish)] = round(score(val_pairs, finish)["bleu"], 2)
        print(f"    {words(finish)}: BLEU {val_bleu[words(finish)]:.2f}")
    choice = max(finishes, key=lambda f: val_bleu[words(f)])
    scores = score(test_pairs, choice)  # the test split: once, for the choice made on validation
    print(f"  test ({test_name}), {words(choice)}: BLEU {scores['bleu']:.2f}, chrF {scores['chrf']:.2f}")

    model = aiayn.load(run)
    results = {
        "name": name, "data": args.data, "test": test_name, "args": vars(args), "recipe": cfg.to_dict(),
        "params": aiayn.count_parameters(model), "updates": len(history), "train_minutes": round(trained / 60, 1),
        "target_tokens_per_s": round(sum(r["tokens"] for r in history) / trained), "curve": curve,
        "val_bleu": val_bleu, "choice": words(choice), "test_bleu": round(scores["bleu"], 2),
        "test_chrf": round(scores["chrf"], 2), "signature": scores["signature"],
        "machine": {"cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
                    "torch": torch.__version__},
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    _plot(curve, out / f"{name}.png", name)
    print(f"wrote {out / name}.json and .png")


def _tsv(pairs: list[tuple[str, str]], path: Path) -> str:
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    return str(path)


def _plot(curve: list[dict], path: Path, title: str) -> None:
    """The validation curve alone: the test split is scored once, at the end, and drawn nowhere."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([c["step"] for c in curve], [c["val_bleu_greedy"] for c in curve], marker="o",
            label="validation, greedy")
    ax.set_xlabel("updates")
    ax.set_ylabel("BLEU")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
