"""BART's noising ablation in small (Lewis et al., 2020, Table 1): one tiny BART per noising function, each
trained with that function alone on the same text for the same updates, then scored on held-out text.

    python benchmarks/bart_noising.py            # the README's table and benchmarks/results/bart_noising.{json,png}
    python benchmarks/bart_noising.py --quick    # toy sizes, seconds (a smoke test)

Data: tiny-shakespeare (``../shared/data/tinyshakespeare/input.txt``) with the speakers' names dropped; every 2
consecutive lines make one document of about 30 BPE tokens (48% of them have two or more sentences for sentence
permutation to move; 4 lines, 79%, cost twice as much and were far from reconstructing in the budget). Contiguous
blocks: the first 81% of the documents train, the next 9% are validation (the ``denoise`` recipe's own last 10% of
the file it is given; its first 200 documents choose the checkpoint) and the last 10% are test.

Each model: ``aiayn train denoise --data train+validation.txt --noise NAME`` (NAME one of mask, delete, infill,
permute, rotate; ratio 0.3 for the token-level ones, as the paper), the ``bart-tiny`` preset cut to d_model 64
(4 heads, d_ff 256, 2 + 2 layers, 331k parameters), a BPE of 1,000 (the same for every model: it is trained on
the same lines; the script checks), 800 updates of 16 documents for every model, two seeds. That is a tiny
budget: the ten runs and their scoring took 10 minutes of one CPU thread (28 minutes of a shared machine). The
models are still learning at the end (validation loss falling, own test loss 2.8-3.6 nats a token): they are
language models that have begun to denoise, not yet copiers; no test document comes back exactly and greedy
decoding puts fewer tokens in place than copying the corrupted input would. So the teacher-forced losses are
the reconstruction scores to read. The recipe keeps the weights best on validation. The scores, on the test
block only:

    (1) reconstruction: the per-token loss of writing the clean text back, teacher-forced, under every model's
        own noise and under each of the five (a 5 x 5 matrix, one noise draw shared by all models); the common
        yardstick is text infilling's column, since each model's own task differs in difficulty. Greedy
        reconstruction (exact match, tokens in place) of the first 300 test documents under its own noise and
        under infilling.
    (2) a probe: the encoder frozen, its states mean-pooled over a line, and a logistic regression asked whether
        the line's words were shuffled (half the lines are; the same words stay, only their order tells).
        Probe lines come from each block (train: the training block, C of the regression chosen on validation
        lines, test lines scored once). Beside it the same probe on an untrained encoder of the same shape, which
        finds what the tokens alone give away (a capitalised word moved from the front, a comma mid-line).

Chosen on validation: the checkpoint of each run (the recipe validates every ``--eval-every`` updates) and the
probe's C. Nothing else was tuned here; the recipe's defaults (AdamW, peak 2e-3, warm-up then cosine decay, label
smoothing 0.1) stand. Writes ``<out>/bart_noising.json`` and ``<out>/bart_noising.png``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

import aiayn
from aiayn import recipes
from aiayn.benchmark.scripts import script_args, write_results
from aiayn.data import BPETokenizer, collate, load_tokenizer
from aiayn.data.noising import NOISES
from aiayn.recipes.denoise import noised_pairs, reconstruction, split_sentences
from aiayn.training import label_smoothed_loss

HERE = Path(__file__).parent
RESULTS = HERE / "results"  # a full run writes here unless --out says
LINES_PER_DOC = 2
GREEDY_DOCS = 300  # test documents decoded greedily (the losses use every test document)
EVAL_SEED = 12345  # the held-out noise draws: one stream per evaluation noise, shared by every model
# The paper's Table 1 (BART base, each noise alone): SQuAD F1, MNLI accuracy, ELI5/XSum/ConvAI2/CNN-DM perplexity
PAPER = {"mask": {"squad": 90.4, "mnli": 84.1, "eli5": 25.05, "xsum": 7.08, "convai2": 11.73, "cnndm": 6.10},
         "delete": {"squad": 90.4, "mnli": 84.1, "eli5": 24.61, "xsum": 6.90, "convai2": 11.46, "cnndm": 5.87},
         "infill": {"squad": 90.8, "mnli": 84.0, "eli5": 24.26, "xsum": 6.61, "convai2": 11.05, "cnndm": 5.83},
         "rotate": {"squad": 77.2, "mnli": 75.3, "eli5": 53.69, "xsum": 17.14, "convai2": 19.87, "cnndm": 10.59},
         "permute": {"squad": 85.4, "mnli": 81.5, "eli5": 41.87, "xsum": 10.93, "convai2": 16.67, "cnndm": 7.89}}
ORDER = ("mask", "delete", "infill", "permute", "rotate")  # the table's rows in the paper's order
QUICK = {"steps": 8, "seeds": [0], "eval_every": 4, "quick_docs": 200, "probe_lines": 40, "d_model": 32, "cs": [1.0]}


def documents(text: str, lines_per_doc: int = LINES_PER_DOC) -> list[list[str]]:
    """Tiny-shakespeare's spoken lines (speaker names dropped) in order, grouped ``lines_per_doc`` at a time."""
    lines = [line.strip() for block in text.strip().split("\n\n") for line in block.split("\n")[1:] if line.strip()]
    return [lines[i : i + lines_per_doc] for i in range(0, len(lines), lines_per_doc)]


def blocks(docs: list[Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """Train, validation, test: contiguous, 81% / 9% / 10%; the first two cut exactly as the denoise recipe cuts
    the file it is given (its last 10% held out)."""
    n = int(len(docs) * 0.9)
    cut = int(n * 0.9)
    return docs[:cut], docs[cut:n], docs[n:]


def shuffled_lines(lines: list[str], n: int, rng: np.random.Generator) -> tuple[list[str], list[int]]:
    """Up to ``n`` lines of at least 5 words, half of them (label 1) with their words in a new random order."""
    pool = [line for line in lines if len(line.split()) >= 5]
    texts, labels = [], []
    for i in rng.permutation(len(pool))[:n]:
        words, label = pool[i].split(), int(rng.random() < 0.5)
        if label:
            order = rng.permutation(len(words))
            while (order == np.arange(len(words))).all():
                order = rng.permutation(len(words))
            words = [words[j] for j in order]
        texts.append(" ".join(words))
        labels.append(label)
    return texts, labels


@torch.no_grad()
def pooled(model, tok, texts: list[str], max_len: int) -> np.ndarray:
    """``(N, C)``: the encoder's states of each text (as the model reads a document: sentences, then ``</s>``)
    averaged over its tokens."""
    model.eval()
    cfg, out = model.cfg, []
    for i in range(0, len(texts), 100):
        ids = [[t for s in split_sentences(tok, text, max_len) for t in s] + [cfg.eos_id]
               for text in texts[i : i + 100]]
        src = collate([(s, []) for s in ids], cfg.pad_id, cfg.bos_id, cfg.eos_id)[0]  # (B, S)
        keep = (src != cfg.pad_id).unsqueeze(-1).float()  # (B, S, 1)
        out.append(((model.encode(src) * keep).sum(1) / keep.sum(1)).numpy())  # (B, C)
    return np.concatenate(out)


def probe(features: dict[str, np.ndarray], labels: dict[str, list[int]], cs: list[float]) -> dict[str, Any]:
    """Logistic regression on standardised features: C chosen on validation, test scored once."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    def fit(c: float):
        return make_pipeline(StandardScaler(), LogisticRegression(C=c, max_iter=5000)).fit(features["train"],
                                                                                             labels["train"])

    tried = {c: float(fit(c).score(features["validation"], labels["validation"])) for c in cs}
    best = max(cs, key=lambda c: tried[c])
    return {"C": best, "val_accuracy": tried[best], "tried": {str(c): a for c, a in tried.items()},
            "test_accuracy": float(fit(best).score(features["test"], labels["test"]))}


@torch.no_grad()
def nll_per_token(model, pairs: list[tuple[list[int], list[int]]]) -> float:
    """Teacher-forced negative log-likelihood per target token (``</s>`` included) of writing the originals."""
    model.eval()
    cfg, total, count = model.cfg, 0.0, 0
    for i in range(0, len(pairs), 100):
        src, tgt_in, tgt_out = collate(pairs[i : i + 100], cfg.pad_id, cfg.bos_id, cfg.eos_id)
        _, nll, n = label_smoothed_loss(model(src, tgt_in), tgt_out, cfg.pad_id, 0.0)
        total, count = total + nll.item(), count + int(n)
    return total / count


def held_out(test_docs: list[list[list[int]]], mask_id: int, mcfg, ratio: float) -> dict[str, list]:
    """For each noise, ``(corrupted + </s>, original)`` pairs of every test document: one draw, shared by all."""
    return {noise: noised_pairs(test_docs, list(range(len(test_docs))), mask_id, mcfg,
                                np.random.default_rng((EVAL_SEED, k)), (noise,), ratio)
            for k, noise in enumerate(NOISES)}


def greedy_scores(model, tok, pairs) -> dict[str, float]:
    batches = [collate(pairs[i : i + 100], model.cfg.pad_id, model.cfg.bos_id, model.cfg.eos_id)
               for i in range(0, len(pairs), 100)]
    r = reconstruction(model, tok, pairs, batches)
    return {k: r[k] for k in ("exact_match", "token_accuracy", "copy_accuracy")}


def ranks(scores: dict[str, float], higher_is_better: bool) -> dict[str, int]:
    """1 for the best; ties share the better rank."""
    sign = -1 if higher_is_better else 1
    return {k: 1 + sum(sign * v < sign * scores[k] for v in scores.values()) for k in scores}


def mean_sd(values: list[float]) -> dict[str, Any]:
    return {"mean": statistics.mean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
            "runs": values}


def summarize(runs: list[dict[str, Any]], untrained: list[float]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Per noise, the mean and sd over seeds of every score; the ranks of the five by each common score and by
    the paper's SQuAD F1 and XSum perplexity."""
    noises = [n for n in ORDER if any(r["noise"] == n for r in runs)]
    summary: dict[str, Any] = {}
    for noise in noises:
        mine = [r for r in runs if r["noise"] == noise]
        summary[noise] = {
            "own_nll": mean_sd([r["test_nll"][noise] for r in mine]),
            "infill_nll": mean_sd([r["test_nll"]["infill"] for r in mine]),
            "mean_nll_all_noises": mean_sd([statistics.mean(r["test_nll"].values()) for r in mine]),
            "own_exact": mean_sd([r["greedy_own"]["exact_match"] for r in mine]),
            "infill_exact": mean_sd([r["greedy_infill"]["exact_match"] for r in mine]),
            "own_token_accuracy": mean_sd([r["greedy_own"]["token_accuracy"] for r in mine]),
            "infill_token_accuracy": mean_sd([r["greedy_infill"]["token_accuracy"] for r in mine]),
            "probe": mean_sd([r["probe"]["test_accuracy"] for r in mine]),
            "nll_matrix_row": {e: statistics.mean(r["test_nll"][e] for r in mine) for e in NOISES},
        }
    summary["untrained"] = {"probe": mean_sd(untrained)}
    summary["copy_infill_token_accuracy"] = runs[0]["greedy_infill"]["copy_accuracy"]  # the same draw for all

    def by(key: str, higher_is_better: bool) -> dict[str, int]:
        return ranks({n: summary[n][key]["mean"] for n in noises}, higher_is_better)

    order = {"infill_nll": by("infill_nll", False), "mean_nll_all_noises": by("mean_nll_all_noises", False),
             "infill_token_accuracy": by("infill_token_accuracy", True), "infill_exact": by("infill_exact", True),
             "probe": by("probe", True), "paper_squad": ranks({n: PAPER[n]["squad"] for n in noises}, True),
             "paper_xsum": ranks({n: PAPER[n]["xsum"] for n in noises}, False)}
    return summary, order


def table(results: dict[str, Any]) -> str:
    """The README's Markdown table: mean (and sd over seeds) of each score, its rank among the five, and the
    paper's ranks on SQuAD (comprehension) and XSum (generation)."""
    s, r = results["summary"], results["ranks"]
    names = [n for n in ORDER if n in s]

    def cell(key: str, rank: str | None, pct: bool = False) -> str:
        m, sd = s[n][key]["mean"], s[n][key]["sd"]
        text = f"{m:.1%} ± {sd:.1%}" if pct else f"{m:.3f} ± {sd:.3f}"
        return text + (f" ({r[rank][n]})" if rank else "")

    rows = ["| noise, alone | test loss, own noise | test loss, infilling noise (common) | mean test loss, all 5 "
            "noises | tokens in place, own noise | tokens in place, infilling | probe: words shuffled? | paper "
            "rank SQuAD / XSum |", "|---|---|---|---|---|---|---|---|"]
    for n in names:
        rows.append(f"| {n} | {cell('own_nll', None)} | {cell('infill_nll', 'infill_nll')} | "
                    f"{cell('mean_nll_all_noises', 'mean_nll_all_noises')} | "
                    f"{cell('own_token_accuracy', None, True)} | "
                    f"{cell('infill_token_accuracy', 'infill_token_accuracy', True)} | "
                    f"{cell('probe', 'probe', True)} | {r['paper_squad'][n]} / {r['paper_xsum'][n]} |")
    u = s["untrained"]["probe"]
    rows.append(f"| baselines | | | | | {s['copy_infill_token_accuracy']:.1%} (copying the input) | "
                f"{u['mean']:.1%} ± {u['sd']:.1%} (untrained encoder) | |")
    return "\n".join(rows)


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in ORDER if n in summary]
    x = np.arange(len(names))
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    panels = [("own_nll", "infill_nll", "test loss (nats/token), lower is better",
               ("under its own noise", "under text infilling (common)")),
              ("own_token_accuracy", "infill_token_accuracy", "test tokens rebuilt in place (greedy)",
               ("under its own noise", "under text infilling (common)")),
              ("probe", None, "probe test accuracy: words shuffled?", ("frozen encoder, mean-pooled", None))]
    for ax, (a, b, title, labels) in zip(axes, panels):
        width = 0.38 if b else 0.6
        for j, (key, label) in enumerate(zip((a, b), labels)):
            if key is None:
                continue
            means = [summary[n][key]["mean"] for n in names]
            sds = [summary[n][key]["sd"] for n in names]
            ax.bar(x + (j - 0.5) * width if b else x, means, width, yerr=sds, capsize=3, label=label)
        if a == "own_token_accuracy":
            ax.axhline(summary["copy_infill_token_accuracy"], color="k", ls="--", lw=1,
                       label="copying the infilled input")
        if a == "probe":
            ax.axhline(summary["untrained"]["probe"]["mean"], color="k", ls="--", lw=1, label="untrained encoder")
            ax.axhline(0.5, color="grey", ls=":", lw=1, label="chance")
            ax.set_ylim(0.4, 1.0)
        else:
            ax.set_ylim(0, ax.get_ylim()[1] * 1.3)  # room for the legend above the bars
        ax.set_xticks(x, names)
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7)
    fig.suptitle("BART noising functions alone, tiny model on tiny-shakespeare (mean and sd over seeds)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=str(HERE.parent.parent / "shared" / "data" / "tinyshakespeare" / "input.txt"))
    p.add_argument("--steps", type=int, default=800, help="updates of every model")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--eval-every", type=int, default=200)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--noises", nargs="+", default=list(ORDER), choices=list(NOISES))
    p.add_argument("--ratio", type=float, default=0.3, help="share of tokens masked/deleted/infilled (the paper's)")
    p.add_argument("--probe-lines", type=int, default=1500, help="probe lines per split (at most)")
    p.add_argument("--cs", type=float, nargs="+", default=[0.01, 0.1, 1.0, 10.0], help="probe C tried on validation")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--quick-docs", type=int, default=None, help=argparse.SUPPRESS)
    args = script_args(p, argv, QUICK, "bart-noising", results=RESULTS)
    torch.set_num_threads(args.threads)
    t0, cpu0 = time.perf_counter(), time.process_time()

    docs = documents(Path(args.data).read_text(encoding="utf-8"))[: args.quick_docs]
    train, validation, test = blocks(docs)
    work = Path(tempfile.mkdtemp(prefix="bart-noising-"))
    data = work / "train_validation.txt"
    data.write_text("".join(" ".join(d) + "\n" for d in train + validation), encoding="utf-8")
    rng = np.random.default_rng(0)
    probe_data = {name: shuffled_lines([line for d in part for line in d], args.probe_lines, rng)
                  for name, part in (("train", train), ("validation", validation), ("test", test))}
    print(f"{len(docs):,} documents of {LINES_PER_DOC} lines: {len(train):,} train, {len(validation):,} validation, "
          f"{len(test):,} test; probe lines {', '.join(f'{k} {len(v[0])}' for k, v in probe_data.items())}")
    settings = {"data": str(data), "steps": args.steps, "batch_size": args.batch_size,
                "n_test": min(200, len(validation)), "max_len": 96, "eval_every": args.eval_every,
                "warmup": min(100, args.steps // 5), "noise_ratio": args.ratio, "out": str(work), "save_every": 10**9,
                "model": {"d_model": args.d_model, "n_heads": 4 if args.d_model >= 64 else 2,
                          "d_ff": 4 * args.d_model}}
    labels = {k: v[1] for k, v in probe_data.items()}
    runs: list[dict[str, Any]] = []
    untrained: list[float] = []
    tokenizer_json = None
    for seed in args.seeds:
        for noise in args.noises:
            t, c = time.perf_counter(), time.process_time()
            done = recipes.train("denoise", noise=noise, seed=seed, name=f"{noise}-{seed}", progress=False,
                                 verbose=False, **settings)
            train_s, train_cpu = time.perf_counter() - t, time.process_time() - c
            # the weights best on validation (the recipe's best.safetensors), not merely the last
            model = aiayn.load(done["run"] / "best.safetensors")
            tok = cast(BPETokenizer, load_tokenizer(done["run"] / "tokenizer.json"))
            assert tok.mask_id is not None  # the recipe trains its BPE with <mask>
            text = (done["run"] / "tokenizer.json").read_text()
            if tokenizer_json not in (None, text):
                raise RuntimeError("the runs' tokenizers differ; the losses would not be comparable")
            tokenizer_json = text
            test_docs = [split_sentences(tok, " ".join(d), settings["max_len"]) for d in test]
            pairs = held_out(test_docs, tok.mask_id, model.cfg, args.ratio)
            nll = {e: nll_per_token(model, pairs[e]) for e in NOISES}
            feats = {k: pooled(model, tok, v[0], settings["max_len"]) for k, v in probe_data.items()}
            run = {"noise": noise, "seed": seed, "train_seconds": round(train_s, 1),
                   "train_cpu_seconds": round(train_cpu, 1),
                   "best_val_loss": min(r["val_loss"] for r in done["validation"]),
                   "validation": done["validation"], "test_nll": nll,
                   "greedy_own": greedy_scores(model, tok, pairs[noise][:GREEDY_DOCS]),
                   "greedy_infill": greedy_scores(model, tok, pairs["infill"][:GREEDY_DOCS]),
                   "probe": probe(feats, labels, args.cs)}
            runs.append(run)
            print(f"seed {seed} {noise:8s} {train_s:5.0f} s ({train_cpu:.0f} s CPU): test loss own {nll[noise]:.3f} "
                  f"infill "
                  f"{nll['infill']:.3f}; exact own {run['greedy_own']['exact_match']:.1%} infill "
                  f"{run['greedy_infill']['exact_match']:.1%}; probe {run['probe']['test_accuracy']:.1%} "
                  f"(C {run['probe']['C']})", flush=True)
        torch.manual_seed(seed)  # an untrained encoder of the same shape: what the probe gets without pre-training
        blank = aiayn.build(model.cfg)
        untrained.append(probe({k: pooled(blank, tok, v[0], settings["max_len"]) for k, v in probe_data.items()},
                               labels, args.cs)["test_accuracy"])

    summary, order = summarize(runs, untrained)
    results = {"name": "bart_noising", "args": vars(args), "recipe_settings": settings,
               "params": aiayn.count_parameters(model), "model": aiayn.models.config_to_dict(model.cfg),
               "documents": {"train": len(train), "validation": len(validation), "test": len(test),
                             "lines_per_document": LINES_PER_DOC},
               "probe_lines": {k: len(v[0]) for k, v in probe_data.items()},
               "summary": summary, "ranks": order, "paper_table1": PAPER, "runs": runs,
               "minutes": round((time.perf_counter() - t0) / 60, 1),
               "cpu_minutes": round((time.process_time() - cpu0) / 60, 1),
               "machine": {"cpu": platform.processor() or platform.machine(), "threads": args.threads,
                           "torch": torch.__version__}}
    out = Path(args.out)
    write_results(out, "bart_noising", results)
    plot(summary, out / "bart_noising.png")
    print(table(results))
    print(f"{results['minutes']} minutes, {results['cpu_minutes']} of them on the CPU (the machine was shared)")


if __name__ == "__main__":
    main()
