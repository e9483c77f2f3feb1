"""``aiayn train`` and ``aiayn translate`` as plain functions.

The default job makes its own parallel data (free-English dates -> ISO dates), trains the tiny
Transformer on the CPU, prints held-out translations and the exact-match accuracy, and saves the
checkpoint, the tokenizers and a picture of encoder-decoder attention in ``runs/<name>/``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch

import aiayn
from aiayn.data import encode_pairs, load_tokenizer, make_pairs, seq2seq_batch, token_batches, train_tokenizers
from aiayn.decoding import greedy
from aiayn.io import write_json
from aiayn.layers import record_attention
from aiayn.training import fit, label_smoothed_loss, noam_optimizer


def new_run_dir(out: str | os.PathLike, name: str) -> Path:
    """``out/name``, or ``out/name-2``, ``-3`` ... if that one is taken: a new run never overwrites one."""
    out = Path(out)
    path, i = out / name, 1
    while path.exists():
        i += 1
        path = out / f"{name}-{i}"
    path.mkdir(parents=True)
    return path


def translate_ids(model, src_tok, tgt_tok, texts: list[str], batch_size: int = 256) -> list[str]:
    out = []
    for i in range(0, len(texts), batch_size):
        src, _, _ = seq2seq_batch([(t, "") for t in texts[i : i + batch_size]], src_tok, tgt_tok)
        out += [tgt_tok.decode(row.tolist()) for row in greedy(model, src)]
    return out


def exact_match(hypotheses: list[str], references: list[str]) -> float:
    return sum(h == r for h, r in zip(hypotheses, references, strict=True)) / max(len(references), 1)


def attention_picture(model, src_tok, tgt_tok, src_text: str, path: Path) -> Path:
    """Encoder-decoder attention of every decoder layer and head for one example."""
    from aiayn.viz import plot_attention_grid

    hyp = translate_ids(model, src_tok, tgt_tok, [src_text])[0]
    src, tgt_in, _ = seq2seq_batch([(src_text, hyp)], src_tok, tgt_tok)
    with torch.no_grad(), record_attention(model) as rec:
        model(src, tgt_in)
    layers = [rec[f"decoder.layers.{i}.cross_attn"][0][0] for i in range(len(model.decoder.layers))]
    keys = src_tok.tokens(src_text) + ["</s>"]
    queries = ["<s>"] + tgt_tok.tokens(hyp)
    return plot_attention_grid(layers, queries, keys, path, title=f"encoder-decoder attention: {src_text!r} -> {hyp!r}",
                               row_label="decoder layer")


def train(
    task: str = "dates",
    preset: str = "transformer-tiny",
    steps: int = 1000,
    max_tokens: int = 1024,
    warmup: int = 200,
    lr_factor: float = 0.3,
    label_smoothing: float = 0.1,
    n_train: int = 50_000,
    n_test: int = 500,
    seed: int = 0,
    out: str | os.PathLike = "runs",
    name: str | None = None,
    progress: bool = True,
    show: int = 8,
    verbose: bool = True,
    **overrides: Any,
) -> dict[str, Any]:
    """Train a Transformer on a task the package makes itself and evaluate it on held-out pairs.

    The recipe is the paper's (label smoothing 0.1, Adam 0.9/0.98/1e-9, warm-up then inverse square
    root decay, dropout 0.1), scaled to a two-minute CPU run: 1,000 steps of about 1,000 tokens, a short
    warm-up, and the schedule multiplied by ``lr_factor`` = 0.3. The unscaled rate (peak 6e-3 at
    d_model 128 with 200 warm-up steps) is too high for this small post-norm model: at factor 1 it learns
    slowly and at 2 it diverges.

    Returns:
        ``{"run": folder, "exact_match": float, "loss": last loss, "seconds": float, "samples": [...]}``.
    """
    say = print if verbose else (lambda *a, **k: None)
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    train_pairs, test_pairs = make_pairs(task, n_train, n_test, seed)
    src_tok, tgt_tok = train_tokenizers(train_pairs, kind="char", joint=False)
    cfg = aiayn.preset(preset, src_vocab_size=src_tok.vocab_size, tgt_vocab_size=tgt_tok.vocab_size,
                       share_embeddings=False, **overrides)
    model = aiayn.build(cfg)
    say(f"task {task}: {len(train_pairs)} training pairs, {len(test_pairs)} held out; e.g. "
        f"{train_pairs[0][0]!r} -> {train_pairs[0][1]!r}")
    say(f"model {preset}: {aiayn.count_parameters(model):,} parameters; {steps} steps of <= {max_tokens} tokens")

    def loss_fn(model, batch):
        src, tgt_in, tgt_out = batch
        return label_smoothed_loss(model(src, tgt_in), tgt_out, cfg.pad_id, label_smoothing)

    optimizer, scheduler = noam_optimizer(model, cfg.d_model, warmup, lr_factor)
    batches = token_batches(encode_pairs(train_pairs, src_tok, tgt_tok), max_tokens, cfg.pad_id, cfg.bos_id, cfg.eos_id,
                            seed)
    history = fit(model, batches, steps, optimizer, loss_fn,
                  scheduler, progress=progress, desc=f"train {task}")
    hyps = translate_ids(model, src_tok, tgt_tok, [s for s, _ in test_pairs])
    refs = [t for _, t in test_pairs]
    score = exact_match(hyps, refs)
    seconds = time.perf_counter() - t0

    run = new_run_dir(out, name or task)
    aiayn.save(model, run)
    src_tok.save(run / "src_tokenizer.json")
    tgt_tok.save(run / "tgt_tokenizer.json")
    samples = [{"source": s, "reference": r, "output": h} for (s, r), h in zip(test_pairs, hyps)]
    write_json(run / "run.json", {
        "task": task, "preset": preset, "steps": steps, "max_tokens": max_tokens, "warmup": warmup, "seed": seed,
        "exact_match": score, "final_loss": history[-1]["loss"], "seconds": round(seconds, 1),
        "samples": samples[:50],
    })
    write_json(run / "history.json", history)
    picture = attention_picture(model, src_tok, tgt_tok, test_pairs[0][0], run / "attention.png")

    width = max(len(s["source"]) for s in samples[:show])
    say(f"\nheld-out examples ({'source':>{max(width - 7, 0)}} -> output   [reference])")
    for s in samples[:show]:
        mark = "ok" if s["output"] == s["reference"] else "WRONG"
        say(f"  {s['source']:>{width}} -> {s['output']:<12} [{s['reference']}] {mark}")
    say(f"\nexact match on {len(refs)} held-out pairs: {score:.1%}   ({seconds:.0f} s)")
    say(f"saved {run}/: model.safetensors, tokenizers, run.json, {picture.name}")
    say(f"try: aiayn translate --run {run} \"{test_pairs[1][0]}\"")
    return {"run": run, "exact_match": score, "loss": history[-1]["loss"], "seconds": seconds, "samples": samples}


def load_run(run: str | os.PathLike):
    """``(model, src_tokenizer, tgt_tokenizer)`` of a run folder written by :func:`train`."""
    run = Path(run)
    if not (run / "model.safetensors").is_file():
        raise FileNotFoundError(f"{run} holds no model.safetensors; is it a run folder written by `aiayn train`?")
    model = aiayn.load(run).eval()
    return model, load_tokenizer(run / "src_tokenizer.json"), load_tokenizer(run / "tgt_tokenizer.json")


def translate(run: str | os.PathLike, texts: list[str]) -> list[str]:
    """Translate ``texts`` greedily with the model saved in ``run``."""
    model, src_tok, tgt_tok = load_run(run)
    return translate_ids(model, src_tok, tgt_tok, list(texts))


__all__ = ["train", "translate", "load_run"]
