"""Translation: a small Transformer trained on this machine's CPU, chosen on validation, scored once on test.

    python benchmarks/translation_multi30k.py                      # Multi30k de -> en, 1,433 updates
    python benchmarks/translation_multi30k.py --minutes 60         # as many updates as 60 minutes allow
    python benchmarks/translation_multi30k.py --quick              # a toy run of a few seconds (a smoke test)
    python benchmarks/translation_multi30k.py --data ../shared/data/tatoeba-cmn-eng/cmn.txt \\
        --src-lang en --tgt-lang zh --updates 510                  # Tatoeba en -> zh (20 minutes here)

The training is the ``multi30k-de-en`` recipe preset (``aiayn train multi30k-de-en``): the paper's (post-norm,
label smoothing 0.1, Adam 0.9/0.98/1e-9, warm-up) with the schedule
fitted to the run (``budget.py``): after a linear warm-up the rate decays linearly to zero at the last
update, and the checkpoints of the last 20% are averaged (section 6.1 averages the last 5). 1,433 updates
is what 60 minutes gave on this kind of machine; ``--updates`` makes the run the same on a busy machine.

Choices use the validation split only: four ways to finish (the last checkpoint or the average, greedy or
beam 4 with length penalty 0.6) are scored on all of it, the best is chosen, and that one alone is scored
on the test split (Multi30k's ``test_2016_flickr``; for a TSV, 1,000 held-out pairs after a seeded shuffle,
with the 1,000 before them as validation). Results go to ``<out>/<name>.json`` and a curve to
``<out>/<name>.png``.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import torch
from budget import parse_args, train_for

import aiayn
from aiayn.data import encode_pairs, held_out_split, read_corpus, token_batches, train_tokenizers
from aiayn.evaluation import corpus_scores
from aiayn.recipes.translation import translate_texts
from aiayn.training import average_checkpoints, label_smoothed_loss

HERE = Path(__file__).parent
# --quick: a toy model on 2,000 pairs, 20 updates, 8 pairs to score
QUICK = {"updates": 20, "vocab_size": 300, "d_model": 64, "layers": 1, "warmup": 5, "max_tokens": 1024}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="multi30k", help="'multi30k' or a TSV file of pairs (Tatoeba's cmn.txt)")
    p.add_argument("--data-dir", default=str(HERE.parent.parent / "shared" / "data" / "multi30k"))
    p.add_argument("--src-lang", default="de")
    p.add_argument("--tgt-lang", default="en")
    p.add_argument("--updates", type=int, default=1433, help="updates to train (the recipe's)")
    p.add_argument("--minutes", type=float, default=None, help="train for this long instead of --updates")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--max-tokens", type=int, default=3072)
    p.add_argument("--warmup", type=int, default=400)
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", default=None)
    p.add_argument("--replot", metavar="RESULTS", help="train nothing: redraw the curve of a results file")
    args = parse_args(p, argv, QUICK, "translation")
    if args.replot:
        results = json.loads(Path(args.replot).read_text())
        _plot(results["curve"], Path(args.replot).with_suffix(".png"), results["name"])
        return

    torch.set_num_threads(args.threads)
    multi30k = args.data == "multi30k"
    name = args.name or (f"translation_multi30k_{args.src_lang}_{args.tgt_lang}" if multi30k
                         else f"translation_{Path(args.data).stem}_{args.src_lang}_{args.tgt_lang}")
    if multi30k:
        train_pairs, val_pairs = (read_corpus("multi30k", args.data_dir, split, args.src_lang, args.tgt_lang)
                                  for split in ("train", "val"))
    else:
        train_pairs, val_pairs = held_out_split(read_corpus(args.data), 1000, args.seed)
    if multi30k:
        test_pairs, test_name = read_corpus("multi30k", args.data_dir, "test_2016_flickr", args.src_lang,
                                            args.tgt_lang), "test_2016_flickr"
    else:  # a TSV: the last 1,000 held out are the test set, the 1,000 before them validation
        test_pairs, test_name = val_pairs, "held-out 1,000 pairs"
        train_pairs, val_pairs = train_pairs[:-1000], train_pairs[-1000:]
    if args.quick:
        train_pairs, val_pairs, test_pairs = train_pairs[:2000], val_pairs[:8], test_pairs[:8]
    curve_pairs = val_pairs[:500]
    src_tok, tgt_tok = train_tokenizers(train_pairs, kind="bpe", vocab_size=args.vocab_size, joint=True)
    cfg = aiayn.preset("transformer-tiny", src_vocab_size=src_tok.vocab_size, tgt_vocab_size=tgt_tok.vocab_size,
                       d_model=args.d_model, n_heads=args.d_model // 64, n_encoder_layers=args.layers,
                       n_decoder_layers=args.layers, d_ff=4 * args.d_model, dropout=args.dropout, max_len=512)
    model = aiayn.build(cfg)
    length = f"{args.minutes:g} minutes" if args.minutes is not None else f"{args.updates:,} updates"
    print(f"{name}: {len(train_pairs):,} training pairs; model {aiayn.count_parameters(model):,} parameters, "
          f"joint BPE {src_tok.vocab_size:,}; {length} on {torch.get_num_threads()} threads")

    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, betas=(0.9, 0.98), eps=1e-9)

    def loss_fn(model, batch):
        src, tgt_in, tgt_out = batch
        return label_smoothed_loss(model(src, tgt_in), tgt_out, cfg.pad_id, 0.1)

    curve: list[dict] = []
    saved: list[Path] = []
    tmp = Path(tempfile.mkdtemp(prefix=name))
    marks = {"curve": 0, "saved": 0}

    def on_chunk(step: int, history: list[dict], total: int) -> None:
        trained = history[-1]["seconds"]
        if step >= 0.8 * total and step - marks["saved"] >= total // 25:  # the last 20%: keep for averaging
            saved.append(aiayn.save(model, tmp / f"step{step}.safetensors"))
            marks["saved"] = step
        if step >= marks["curve"] or step >= total:  # 8 points along the run
            t = time.perf_counter()
            hyps = translate_texts(model, src_tok, tgt_tok, [s for s, _ in curve_pairs])
            bleu = corpus_scores(hyps, [r for _, r in curve_pairs], args.tgt_lang)["bleu"]
            curve.append({"minutes": round(trained / 60, 2), "step": step, "loss": history[-1]["loss"],
                          "val_bleu_greedy": round(bleu, 2)})
            print(f"  {trained / 60:5.1f} min  update {step:5d} of {total:5d}  loss {history[-1]['loss']:.3f}  "
                  f"val BLEU (greedy, 500) {bleu:5.2f}   [{time.perf_counter() - t:.0f} s to decode]", flush=True)
            marks["curve"] = step + total // 8

    batches = token_batches(encode_pairs(train_pairs, src_tok, tgt_tok), args.max_tokens, cfg.pad_id, cfg.bos_id,
                            cfg.eos_id, args.seed)
    budget = {"minutes": args.minutes} if args.minutes is not None else {"minutes": None, "updates": args.updates}
    history = train_for(model, batches, optimizer, loss_fn, warmup=args.warmup, shape="linear", on_chunk=on_chunk,
                        chunk=min(50, args.updates), **budget)
    step, trained = len(history), history[-1]["seconds"]

    results = {"name": name, "data": args.data, "test": test_name, "args": vars(args),
               "params": aiayn.count_parameters(model), "updates": step, "train_minutes": round(trained / 60, 1),
               "target_tokens_per_s": round(sum(r["tokens"] for r in history) / trained), "curve": curve,
               "machine": {"cpu": platform.processor() or platform.machine(), "threads": torch.get_num_threads(),
                           "torch": torch.__version__}}
    finishes = {}
    for label, weights in (("last", None), (f"average of last {len(saved)}", tmp / "avg.safetensors")):
        if weights is not None:
            average_checkpoints(saved, weights)
        finishes.update({(label, beam): weights for beam in (1, 4)})

    def score(pairs, finish: tuple[str, int]) -> dict:
        weights, beam = finishes[finish], finish[1]
        chosen_model = model if weights is None else aiayn.load(weights)
        t = time.perf_counter()
        hyps = translate_texts(chosen_model, src_tok, tgt_tok, [s for s, _ in pairs], beam=beam)
        scores = corpus_scores(hyps, [r for _, r in pairs], args.tgt_lang)
        print(f"    {finish[0]}, {'greedy' if beam == 1 else 'beam 4'}: BLEU {scores['bleu']:.2f}   "
              f"[{time.perf_counter() - t:.0f} s]")
        return scores

    def words(finish: tuple[str, int]) -> str:
        return f"{finish[0]}, {'greedy' if finish[1] == 1 else 'beam 4'}"

    print(f"  validation ({len(val_pairs):,} pairs): the four ways to finish")
    val_bleu = {words(f): round(score(val_pairs, f)["bleu"], 2) for f in finishes}
    choice = max(finishes, key=lambda f: val_bleu[words(f)])
    print(f"  test ({test_name}): the choice on validation alone")
    scores = score(test_pairs, choice)  # the test split: once, for the choice made on validation
    results["val_bleu"] = val_bleu
    results["choice"] = words(choice)
    results["test_bleu"] = round(scores["bleu"], 2)
    results["test_chrf"] = round(scores["chrf"], 2)
    results["signature"] = scores["signature"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    _plot(curve, out / f"{name}.png", name)
    print(f"wrote {out / name}.json and .png")


def _plot(curve: list[dict], path: Path, title: str) -> None:
    """The validation curve alone: the test split is scored once, at the end, and drawn nowhere."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([c["step"] for c in curve], [c["val_bleu_greedy"] for c in curve], marker="o",
            label="validation (its first 500 pairs), greedy")
    ax.set_xlabel("updates")
    ax.set_ylabel("BLEU")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
