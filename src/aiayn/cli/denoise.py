"""``aiayn train --task denoise``: BART pre-training, reconstructing text from a corrupted copy.

Each example is a line of text. The encoder reads it corrupted (by default BART's best setting,
section 5.1: its sentences shuffled, then spans covering 30% of the tokens each replaced by one
``<mask>``); the decoder writes the original, trained with cross-entropy (label smoothing 0.1)
on every token. The noise of batch k is drawn from a generator seeded with ``(seed, k)``, so a run
resumed after a stop sees exactly the batches it would have seen.

The default data is made up, so it runs with no download: each line is a date written freely in
English and then in ISO form ("tuesday, march 5th, 2019 = 2019-03-05"). The two halves say the same
thing, so a masked month or year can be read off the other half, which is what the model must learn.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

import aiayn
from aiayn.cli.lm import date_lines, read_text
from aiayn.cli.runs import Run, open_run
from aiayn.data import BPETokenizer, collate, load_tokenizer
from aiayn.data.noising import NOISES, corrupt
from aiayn.decoding import greedy
from aiayn.io import write_json
from aiayn.training import adamw_cosine, distributed, label_smoothed_loss

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def split_sentences(tok: BPETokenizer, line: str, max_tokens: int) -> list[list[int]]:
    """The token ids of each sentence of ``line`` (a space kept in front of all but the first, so the
    sentences concatenated are the line's own encoding up to merges across the boundary), cut so the
    whole has at most ``max_tokens``."""
    out, room = [], max_tokens
    for i, sentence in enumerate(_SENTENCE_END.split(line.strip())):
        ids = tok.encode((" " if i else "") + sentence)[:room]
        if ids:
            out.append(ids)
        room -= len(ids)
        if room <= 0:
            break
    return out


def noised_pairs(docs: list[list[list[int]]], idx: list[int], mask_id: int, cfg, rng: np.random.Generator,
                 noise: tuple[str, ...], ratio: float) -> list[tuple[list[int], list[int]]]:
    """``(corrupted + </s>, original)`` token ids for the documents ``idx``; the corrupted side (which
    inserted masks may lengthen) is cut to the model's ``max_len``."""
    return [(corrupt(docs[i], mask_id, rng, noise, ratio)[: cfg.max_len - 1] + [cfg.eos_id],
             [t for s in docs[i] for t in s]) for i in idx]


def batches(docs, batch_size: int, cfg, mask_id: int, noise, ratio: float, seed: int, start: int = 0):
    """Endless batches ``(src, tgt_in, tgt_out)`` of ``batch_size`` random documents, freshly corrupted;
    batch k depends only on ``(seed, k)``."""
    k = start
    while True:
        rng = np.random.default_rng((seed, k))
        idx = rng.integers(len(docs), size=batch_size).tolist()
        yield collate(noised_pairs(docs, idx, mask_id, cfg, rng, noise, ratio), cfg.pad_id, cfg.bos_id, cfg.eos_id)
        k += 1


def train_denoise(
    data: str | None = None,
    vocab_size: int = 1000,
    preset: str = "bart-tiny",
    steps: int = 600,
    batch_size: int = 64,
    max_len: int = 128,
    noise: tuple[str, ...] | list[str] = ("permute", "infill"),
    ratio: float = 0.3,
    lr: float = 2e-3,
    warmup: int = 100,
    label_smoothing: float = 0.1,
    eval_every: int = 200,
    accum: int = 1,
    save_every: int = 500,
    n_train: int = 20_000,
    n_test: int = 300,
    seed: int = 0,
    out: str | os.PathLike = "runs",
    name: str | None = None,
    progress: bool = True,
    show: int = 5,
    verbose: bool = True,
    resume: str | os.PathLike | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """Pre-train a small BART to reconstruct corrupted text; report how much of the held-out text it
    gets back exactly.

    Args:
        data: a UTF-8 text file, one document per line (the last 10% of the lines are held out);
            ``None`` makes date lines.
        vocab_size: byte-level BPE vocabulary, ``<mask>`` included.
        max_len: tokens kept of each line.
        noise: corruptions, a subset of ``permute``, ``rotate``, ``mask``, ``delete``, ``infill``
            (:func:`aiayn.data.noising.corrupt`); ``ratio`` the share of tokens masked or deleted.
        accum: batches per update (gradient accumulation; under ``torchrun``, on each rank).
        resume: a run folder to continue (``aiayn train --resume``).
        overrides: config fields of the preset.

    Returns:
        ``{"run", "val_loss", "exact_match", "token_accuracy", "copy_accuracy" (the same score for the
        corrupted input itself), "samples", "validation", "history", "seconds"}``.
    """
    noise = tuple(noise)
    if set(noise) - set(NOISES):
        raise ValueError(f"noise={list(noise)}: expected names from {list(NOISES)}")
    args = {k: v for k, v in locals().items() if k not in ("progress", "verbose", "show", "out", "name", "resume",
                                                          "overrides")}
    args.update(overrides, task="denoise", noise=list(noise))
    say = print if verbose else (lambda *a, **k: None)
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    if data is None:
        train_lines, test_lines, run_name = date_lines(n_train, seed), date_lines(n_test, seed + 1), "denoise-dates"
    else:
        lines = [line.strip() for line in read_text(data).splitlines() if line.strip()]
        cut = int(len(lines) * 0.9)
        train_lines, test_lines, run_name = lines[:cut], lines[cut:][:n_test], f"denoise-{Path(data).stem}"
        if not test_lines:
            raise ValueError(f"{data} has too few lines to hold any out; give at least 10")
    if resume is not None:
        tok = load_tokenizer(Path(resume) / "tokenizer.json")
    else:
        tok = BPETokenizer.train(train_lines, vocab_size=vocab_size, mask=True)
    tok = distributed.broadcast(tok)  # several ranks: rank 0's
    cfg = aiayn.preset(preset, **{"src_vocab_size": tok.vocab_size, "tgt_vocab_size": tok.vocab_size,
                                  "pad_id": tok.pad_id, **overrides})
    if cfg.pad_id != tok.pad_id or tok.eos_id != cfg.eos_id:
        raise ValueError(f"preset {preset!r} must use the tokenizer's <pad> {tok.pad_id} and </s> {tok.eos_id}")
    if max_len >= cfg.max_len:
        raise ValueError(f"max_len={max_len} must be below the model's max_len={cfg.max_len} (room for </s>)")
    model = aiayn.build(cfg)
    train_docs = [d for d in (split_sentences(tok, line, max_len) for line in train_lines) if d]
    test_docs = [split_sentences(tok, line, max_len) for line in test_lines]
    say(f"data {run_name}: {len(train_docs):,} training lines, {len(test_docs):,} held out; BPE {tok.vocab_size:,} "
        f"with <mask>; noise {'+'.join(noise)} at {ratio:.0%}")
    say(f"model {preset}: {aiayn.count_parameters(model):,} parameters; {steps} updates of {batch_size} lines")

    run = open_run(out, name or run_name, args, resume, {"tokenizer.json": tok})
    optimizer, scheduler = adamw_cosine(model, lr, steps, warmup, weight_decay=0.01, betas=(0.9, 0.98))
    state = Run(run, model, optimizer, scheduler, accum)
    if resume is not None:
        state.restore()

    def loss_fn(model, batch):
        src, tgt_in, tgt_out = batch
        return label_smoothed_loss(model(src, tgt_in), tgt_out, cfg.pad_id, label_smoothing)

    fixed = np.random.default_rng((seed, 2**32 - 1))  # held-out noise: a stream no training batch uses
    held_out = noised_pairs(test_docs, list(range(len(test_docs))), tok.mask_id, cfg, fixed, noise, ratio)
    eval_batches = [collate(held_out[i : i + 100], cfg.pad_id, cfg.bos_id, cfg.eos_id)
                    for i in range(0, len(held_out), 100)]

    @torch.no_grad()
    def validate(step: int, history: list[dict[str, float]]) -> None:
        model.eval()
        loss = nll = n = 0
        for batch in eval_batches:
            l_, nll_, n_ = loss_fn(model, batch)
            loss, nll, n = loss + l_.item(), nll + nll_.item(), n + n_
        state.record({"step": step, "val_loss": loss / n, "val_nll": nll / n})
        say(f"\n  step {step}: validation loss {loss / n:.3f}")

    train_batches = batches(train_docs, batch_size, cfg, tok.mask_id, noise, ratio, seed, start=state.position)
    history = state.fit(train_batches, steps, loss_fn, clip=1.0, progress=progress, desc=f"train {run_name}",
                        every=eval_every, callback=validate, save_every=save_every)
    model = state.trained_model()  # rank 0: the whole model (gathered from the shards under FSDP)
    if model is None:  # the other ranks: rank 0 evaluates and writes the rest
        return {"run": run, "history": history}
    aiayn.save(model, run)

    samples, right, copied = [], 0, 0
    for batch, pairs in ((b, held_out[i : i + 100]) for b, i in zip(eval_batches, range(0, len(held_out), 100))):
        out_ids = greedy(model, batch[0], max_len=min(batch[0].size(1) + 50, cfg.max_len - 1)).tolist()
        for (src, tgt), hyp in zip(pairs, out_ids):
            hyp = hyp[: hyp.index(cfg.eos_id)] if cfg.eos_id in hyp else hyp
            right += sum(a == b for a, b in zip(hyp, tgt))
            copied += sum(a == b for a, b in zip(src[:-1], tgt))  # the baseline: output the input as it is
            samples.append({"corrupted": tok.decode(src[:-1]), "output": tok.decode(hyp), "original": tok.decode(tgt)})
    exact = sum(s["output"] == s["original"] for s in samples) / len(samples)
    total = sum(len(t) for _, t in held_out)
    token_accuracy, copy_accuracy = right / total, copied / total
    result = {"run": run, "val_loss": state.validation[-1]["val_loss"], "exact_match": exact,
              "token_accuracy": token_accuracy, "copy_accuracy": copy_accuracy, "samples": samples, "validation": state.validation,
              "history": history, "seconds": time.perf_counter() - t0}
    write_json(run / "run.json", {"data": run_name, "preset": preset, "config": aiayn.models.config_to_dict(cfg),
                                  **args, **{k: v for k, v in result.items() if k not in ("run", "history")}})
    if show:
        say("\nheld-out lines: corrupted input -> reconstruction   [original]")
    for s in samples[:show]:
        say(f"  {s['corrupted']}\n    -> {s['output']}   [{s['original']}] "
            f"{'ok' if s['output'] == s['original'] else '--'}")
    say(f"\non {len(samples):,} held-out lines: reconstructed exactly {exact:.1%}, tokens in place "
        f"{token_accuracy:.1%} (copying the input: {copy_accuracy:.1%}), validation loss {result['val_loss']:.3f}   ({result['seconds']:.0f} s); saved {run}/")
    return result


__all__ = ["batches", "split_sentences", "train_denoise"]
