"""GPT's last token against BERT's [CLS]: the same review-sentiment data, the same size, the same budget.

    python benchmarks/gpt_vs_bert_textclass.py            # the README's table (about 10 CPU minutes, one thread)
    python benchmarks/gpt_vs_bert_textclass.py --quick    # toy sizes, seconds (a smoke test)

Radford et al. (2018, Figure 1) classify a text with a left-to-right Transformer by reading the final state of its
last token (the extract token) into a linear layer; BERT (Devlin et al. 2019, section 3) reads the first token,
[CLS], which attends both ways. Both are ``aiayn train textclass`` (``--model-type gpt`` or ``bert``):

    (a) scratch       aiayn train textclass --data DIR --model-type {bert,gpt} --max-len 64 --steps 400 --lr LR
    (b) pre-trained   aiayn train mlm --data train.txt --max-len 64 --steps 600                  (BERT: masked LM)
                      aiayn train lm  --data train.txt --tokenizer char --block 64 --steps 600   (GPT: next token)
                      aiayn train textclass --data DIR --init-from RUN --steps 400 --lr LR

The data is ``../shared/data/chinese-reviews-sentiment`` split exactly as ``benchmarks/reviews_sentiment.py``
splits it (each review once, the 47 under both labels dropped, 80/10/10 with split seed 0), so the test split is
the same 1,736 reviews. To fit well under 25 minutes on one thread (that script took 107 minutes on two) each model
is smaller and trains less: d_model 64, 2 layers, 2 heads, d_ff 256, dropout 0.1 for both (bert-tiny's and
gpt-tiny's shapes, narrowed), texts cut to 64 tokens, 400 updates of 32 (that script: d_model 128 and 128
tokens, 1200 updates), pre-training 600 updates (that script: 5000). Both classifiers start from the same
WordPiece vocabulary (2000, trained on the training reviews) when from scratch; pre-trained, each keeps its
pre-training run's tokenizer: BERT the masked LM's WordPiece (2000), GPT the language model's characters (for
Chinese, WordPiece also splits to characters; the character vocabulary keeps the rarer ones WordPiece maps to
[UNK]). The GPT reads each text as ``[CLS] text [SEP]`` from scratch, ``text </s>`` pre-trained.

Chosen on validation: the peak learning rate of each (family, start) from ``--lrs`` with the first seed, and
the weights of each run (the recipe keeps its best on validation). Reported: the test accuracy of the chosen
rate over ``--seeds``, each run scoring the test split once at its end. The rates tried (3e-3, 1e-3) follow a
first run of 200 updates with 1e-3 and 3e-4, where 1e-3 won on validation for all four and 3e-4 trailed. Writes
``<out>/gpt_vs_bert_textclass.json``, with ``minutes`` (wall clock, on a shared machine) and ``cpu_minutes``.
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
from aiayn.benchmark.scripts import reviews, script_args, write_results

HERE = Path(__file__).parent
RESULTS = HERE / "results"  # a full run writes here unless --out says
QUICK = {"steps": 6, "pretrain_steps": 4, "lrs": [1e-3], "seeds": [0], "quick_texts": 200, "eval_every": 3}
QUICK_MODEL = {"d_model": 32, "n_heads": 2, "n_layers": 1, "d_ff": 64}
MODEL = {"d_model": 64, "n_heads": 2, "n_layers": 2, "d_ff": 256, "dropout": 0.1, "attention_dropout": 0.1}
FAMILIES = {"bert": "mlm", "gpt": "lm"}  # each family's pre-training recipe


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    accs = [r["test_accuracy"] for r in runs]
    return {"test_accuracy_mean": statistics.mean(accs),
            "test_accuracy_sd": statistics.stdev(accs) if len(accs) > 1 else 0.0, "runs": runs}


def pretrain(family: str, train_file: Path, args: argparse.Namespace, model: dict[str, Any], work: Path
             ) -> dict[str, Any]:
    """The family's own pre-training on the training reviews: masked LM for BERT, next token for GPT."""
    common = {"data": str(train_file), "steps": args.pretrain_steps, "batch_size": 32, "out": str(work),
              "name": f"pretrain-{family}", "progress": False, "verbose": False, "model": model}
    if family == "bert":
        done = recipes.train("mlm", max_len=args.max_len, **common)
        score = {"mlm_accuracy": done["mlm_accuracy"]}
    else:
        done = recipes.train("lm", tokenizer="char", block=args.max_len, **common)
        score = {"val_loss": done["val_loss"], "perplexity": done["perplexity"]}
    print(f"({family}) {FAMILIES[family]} pre-training, {args.pretrain_steps} updates: {score} "
          f"({done['seconds'] / 60:.1f} min)", flush=True)
    return {"run": done["run"], "steps": args.pretrain_steps, "seconds": done["seconds"], **score}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(HERE.parent.parent / "shared" / "data" / "chinese-reviews-sentiment"))
    p.add_argument("--steps", type=int, default=400, help="updates of each classifier")
    p.add_argument("--pretrain-steps", type=int, default=600, help="pre-training updates (0: scratch only)")
    p.add_argument("--lrs", type=float, nargs="+", default=[3e-3, 1e-3], help="peak rates tried on validation")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="seeds of the chosen settings")
    p.add_argument("--max-len", type=int, default=64, help="tokens per text (and per pre-training block)")
    p.add_argument("--eval-every", type=int, default=100, help="validate every N updates, keeping the best")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--quick-texts", type=int, default=None, help=argparse.SUPPRESS)
    args = script_args(p, argv, QUICK, "gpt-vs-bert-textclass", results=RESULTS)
    torch.set_num_threads(args.threads)
    t0, cpu0 = time.perf_counter(), time.process_time()
    work = Path(tempfile.mkdtemp(prefix="gpt-vs-bert-"))
    data, train, val, test, classes, report = reviews(Path(args.data), work, args.quick_texts)  # its split
    print(f"{report}; {len(train[0]):,} train, {len(val[0]):,} validation, {len(test[0]):,} test; {classes}",
          flush=True)
    model = {**MODEL, **QUICK_MODEL} if args.quick else MODEL
    train_file = work / "train.txt"
    train_file.write_text("\n".join(train[0]) + "\n", encoding="utf-8")
    starts: dict[str, dict[str, Any]] = {"scratch": {}}
    pretrained: dict[str, Any] = {}
    if args.pretrain_steps:
        for family in FAMILIES:
            pretrained[family] = pretrain(family, train_file, args, model, work)
        starts["pretrained"] = {}
    common = {"data": str(data), "steps": args.steps, "max_len": args.max_len, "batch_size": 32,
              "warmup": max(1, args.steps // 10), "eval_every": args.eval_every, "out": str(work),
              "progress": False, "verbose": False}
    keep = ("seconds", "val_accuracy", "chosen_step", "test_accuracy", "test_precision", "test_recall",
            "test_macro_f1", "test_confusion")
    results: dict[str, Any] = {}
    for start in starts:
        for family in FAMILIES:
            extra: dict[str, Any] = {"model_type": family}
            if start == "pretrained":
                extra["init_from"] = str(pretrained[family]["run"])  # the source's config and tokenizer
            else:
                extra["model"] = model

            def train_one(lr: float, seed: int, start: str = start, family: str = family,
                          extra: dict[str, Any] = extra) -> dict[str, Any]:
                return recipes.train("textclass", lr=lr, seed=seed, name=f"{start}-{family}-{lr:g}-{seed}",
                                     **extra, **common)

            tried = []
            for lr in args.lrs:  # the rate, chosen on validation with the first seed
                done = train_one(lr, args.seeds[0])
                tried.append({"lr": lr, "val_accuracy": done["val_accuracy"], "run": done})
                print(f"({start} {family}) lr {lr:g}: validation accuracy {done['val_accuracy']:.4f} "
                      f"({done['seconds']:.0f} s)", flush=True)
            best = max(tried, key=lambda t: t["val_accuracy"])
            runs = [best["run"]] + [train_one(best["lr"], s) for s in args.seeds[1:]]
            n_params = sum(q.numel() for q in aiayn.load(best["run"]["run"]).parameters())  # tied weights once
            results[f"{start}_{family}"] = {
                "lr": best["lr"], "parameters": n_params,
                "tried": [{k: v for k, v in t.items() if k != "run"} for t in tried],
                **summary([{k: r[k] for k in keep} for r in runs])}
            r = results[f"{start}_{family}"]
            print(f"({start} {family}) lr {best['lr']:g}: test accuracy {r['test_accuracy_mean']:.4f} "
                  f"+- {r['test_accuracy_sd']:.4f} over seeds {args.seeds} ({n_params:,} parameters)", flush=True)
    write_results(args.out, "gpt_vs_bert_textclass", {
        "args": vars(args), "model": model, "data": report,
        "split": {"train": len(train[0]), "validation": len(val[0]), "test": len(test[0])},
        "pretraining": {f: {k: v for k, v in d.items() if k != "run"} for f, d in pretrained.items()},
        **results, "minutes": round((time.perf_counter() - t0) / 60, 1),
        "cpu_minutes": round((time.process_time() - cpu0) / 60, 1),  # this process's CPU time: the load-free cost
        "machine": {"cpu": platform.processor() or platform.machine(), "threads": args.threads,
                    "torch": torch.__version__},
    })


if __name__ == "__main__":
    main()
