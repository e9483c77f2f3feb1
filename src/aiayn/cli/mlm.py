"""``aiayn train --task mlm``: BERT pre-training, masked language model plus next-sentence prediction.

Every example is a pair ``[CLS] A [SEP] B [SEP]``: B is the line after A half of the time (label 0,
"is next") and a random line otherwise (label 1). 15% of the non-special tokens are chosen for the
masked-LM loss (80% shown as [MASK], 10% as a random token, 10% unchanged). The loss is the mean over
chosen tokens plus the mean next-sentence loss, as BERT sums the two.

The default data is made up, so it runs with no download: A is a date written freely in English and B
an ISO date, the same date (is next) or another one; the model must learn date words to fill masks and
to read both forms to tell whether they agree.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

import aiayn
from aiayn.cli.lm import read_text
from aiayn.cli.runs import Run, open_run
from aiayn.data import make_pairs
from aiayn.data.masking import IGNORE, mask_tokens
from aiayn.data.wordpiece import WordPieceTokenizer
from aiayn.io import write_json
from aiayn.training import adamw_cosine, distributed

Example = tuple[list[int], list[int], int]  # ids, segment ids, is-not-next label


def sentence_pairs(lines: list[str], rng: random.Random) -> list[tuple[str, str, int]]:
    """``(A, B, label)`` for consecutive lines: B follows A (label 0) or is a random other line (1), half each."""
    out = []
    for i in range(len(lines) - 1):
        if rng.random() < 0.5:
            out.append((lines[i], lines[i + 1], 0))
        else:
            j = rng.randrange(len(lines) - 1)
            j = j + 1 if j >= i else j  # never A itself
            out.append((lines[i], lines[j], int(j != i + 1)))
    return out


def date_pairs(n: int, seed: int) -> list[tuple[str, str, int]]:
    """Made-up pairs: a free-English date and the ISO form of the same date (0) or of another (1)."""
    rng = random.Random(seed)
    pairs, _ = make_pairs("dates", n, 0, seed)
    out = []
    for free, iso in pairs:
        if rng.random() < 0.5:
            out.append((free, iso, 0))
        else:
            other = pairs[rng.randrange(len(pairs))][1]
            out.append((free, other, int(other != iso)))
    return out


def encode(tok: WordPieceTokenizer, pairs: list[tuple[str, str, int]], max_len: int) -> list[Example]:
    """Token ids of ``[CLS] A [SEP] B [SEP]``, the longer side cut until the pair fits ``max_len``."""
    out = []
    for a, b, label in pairs:
        ids_a, ids_b = tok.encode(a)[0][1:-1], tok.encode(b)[0][1:-1]
        while len(ids_a) + len(ids_b) + 3 > max_len:
            (ids_a if len(ids_a) >= len(ids_b) else ids_b).pop()
        ids = [tok.cls_id, *ids_a, tok.sep_id, *ids_b, tok.sep_id]
        out.append((ids, [0] * (len(ids_a) + 2) + [1] * (len(ids_b) + 1), label))
    return out


def collate(examples: list[Example], tok: WordPieceTokenizer, vocab_size: int, generator: torch.Generator):
    """``(inputs, segments, attention mask, mlm labels, nsp labels)`` with fresh masking."""
    width = max(len(e[0]) for e in examples)
    ids = torch.tensor([e[0] + [tok.pad_id] * (width - len(e[0])) for e in examples])
    segments = torch.tensor([e[1] + [0] * (width - len(e[1])) for e in examples])
    inputs, labels = mask_tokens(ids, tok.mask_id, vocab_size, (tok.pad_id, tok.cls_id, tok.sep_id),
                                 generator=generator, first_normal_id=5)
    return inputs, segments, (ids != tok.pad_id).long(), labels, torch.tensor([e[2] for e in examples])


def batches(examples: list[Example], batch_size: int, tok, vocab_size: int, seed: int, start: int = 0):
    """Endless shuffled batches; batch k is drawn and masked from a generator seeded with ``(seed, k)``."""
    k = start
    while True:
        gen = torch.Generator().manual_seed(seed * 1_000_003 + k)
        idx = torch.randint(len(examples), (batch_size,), generator=gen).tolist()
        yield collate([examples[i] for i in idx], tok, vocab_size, gen)
        k += 1


def train_mlm(
    data: str | None = None,
    vocab_size: int = 2000,
    preset: str = "bert-tiny",
    steps: int = 1000,
    max_len: int = 64,
    batch_size: int = 32,
    lr: float = 1e-3,
    warmup: int = 100,
    eval_every: int = 250,
    accum: int = 1,
    save_every: int = 500,
    n_train: int = 20_000,
    n_test: int = 500,
    seed: int = 0,
    out: str | os.PathLike = "runs",
    name: str | None = None,
    progress: bool = True,
    show: int = 0,
    verbose: bool = True,
    resume: str | os.PathLike | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """Pre-train a small BERT with masked-LM and next-sentence losses; report both accuracies.

    Args:
        data: a UTF-8 text file, one sentence per line, consecutive lines continuing each other (the last
            10% of the lines are held out); ``None`` makes date pairs.
        max_len: tokens per pair.
        show: unused (every training command takes it).
        accum: batches per update (gradient accumulation; under ``torchrun``, on each rank).
        resume: a run folder to continue (``aiayn train --resume``).
        overrides: config fields of the preset.

    Returns:
        ``{"run", "mlm_accuracy", "nsp_accuracy", "val_loss", "validation", "history", "seconds"}``.
    """
    args = {k: v for k, v in locals().items() if k not in ("progress", "verbose", "show", "out", "name", "resume",
                                                          "overrides")}
    args.update(overrides, task="mlm")
    say = print if verbose else (lambda *a, **k: None)
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    if data is None:
        train_pairs, test_pairs, run_name = date_pairs(n_train, seed), date_pairs(n_test, seed + 1), "mlm-dates"
    else:
        lines = [line.strip() for line in read_text(data).splitlines() if line.strip()]
        cut = int(len(lines) * 0.9)
        rng = random.Random(seed)
        train_pairs, test_pairs = sentence_pairs(lines[:cut], rng), sentence_pairs(lines[cut:], rng)
        run_name = f"mlm-{Path(data).stem}"
    if len(test_pairs) < 1:
        raise ValueError("the held-out part of the data makes no sentence pairs; give a longer file")
    if resume is not None:
        tok = WordPieceTokenizer.load(Path(resume) / "tokenizer.json")
    else:
        tok = WordPieceTokenizer.train([t for a, b, _ in train_pairs for t in (a, b)], vocab_size=vocab_size)
    tok = distributed.broadcast(tok)  # several ranks: rank 0's
    cfg = aiayn.preset(preset, **{"vocab_size": tok.vocab_size, "pad_id": tok.pad_id, "cls_id": tok.cls_id,
                                  "sep_id": tok.sep_id, "mask_id": tok.mask_id, "max_len": max_len,
                                  "head": "pretraining", **overrides})
    model = aiayn.build(cfg)
    train_ex, test_ex = encode(tok, train_pairs, max_len), encode(tok, test_pairs, max_len)
    say(f"data {run_name}: {len(train_ex):,} training pairs, {len(test_ex):,} held out; WordPiece {tok.vocab_size:,}")
    say(f"model {preset}: {aiayn.count_parameters(model):,} parameters; {steps} updates of {batch_size} pairs")
    run = open_run(out, name or run_name, args, resume, {"tokenizer.json": tok})
    optimizer, scheduler = adamw_cosine(model, lr, steps, warmup, weight_decay=0.01, betas=(0.9, 0.999))
    state = Run(run, model, optimizer, scheduler, accum)
    if resume is not None:
        state.restore()

    def losses(model, batch):
        inputs, segments, mask, labels, nsp = batch
        hidden = model(inputs, segments, mask)
        chosen = labels != IGNORE
        mlm_logits = model.mlm_logits(hidden[chosen])  # only the chosen positions: (N, V)
        mlm = F.cross_entropy(mlm_logits, labels[chosen], reduction="sum")
        nsp_logits = model.nsp_logits(hidden)
        return mlm, mlm_logits, F.cross_entropy(nsp_logits, nsp, reduction="sum"), nsp_logits, int(chosen.sum())

    def loss_fn(model, batch):
        mlm, _, nsp, _, n = losses(model, batch)
        b = batch[0].size(0)
        return mlm + nsp * (n / b), mlm.detach(), n  # per token: mean MLM loss + mean NSP loss

    eval_gen = torch.Generator().manual_seed(12345)
    held_out = [collate(test_ex[i : i + 64], tok, cfg.vocab_size, eval_gen) for i in range(0, len(test_ex), 64)]

    @torch.no_grad()
    def validate(step: int, history: list[dict[str, float]]) -> None:
        model.eval()
        mlm_loss = hits = n = nsp_hits = pairs = 0
        for batch in held_out:
            mlm, mlm_logits, _, nsp_logits, k = losses(model, batch)
            labels = batch[3]
            mlm_loss, n = mlm_loss + mlm.item(), n + k
            hits += int((mlm_logits.argmax(-1) == labels[labels != IGNORE]).sum())
            nsp_hits += int((nsp_logits.argmax(-1) == batch[4]).sum())
            pairs += batch[4].numel()
        record = {"step": step, "val_loss": mlm_loss / n, "mlm_accuracy": hits / n, "nsp_accuracy": nsp_hits / pairs}
        state.record(record)
        say(f"\n  step {step}: masked-token loss {record['val_loss']:.3f}, accuracy {record['mlm_accuracy']:.1%}; "
            f"next-sentence accuracy {record['nsp_accuracy']:.1%}")

    history = state.fit(batches(train_ex, batch_size, tok, cfg.vocab_size, seed, start=state.position), steps,
                        loss_fn, progress=progress, desc=f"train {run_name}", every=eval_every, callback=validate,
                        save_every=save_every)
    model = state.trained_model()  # rank 0: the whole model (gathered from the shards under FSDP)
    if model is None:  # the other ranks: rank 0 evaluates and writes the rest
        return {"run": run, "history": history}
    aiayn.save(model, run)
    last = state.validation[-1]
    result = {"run": run, "mlm_accuracy": last["mlm_accuracy"], "nsp_accuracy": last["nsp_accuracy"],
              "val_loss": last["val_loss"], "validation": state.validation, "history": history,
              "seconds": time.perf_counter() - t0}
    write_json(run / "run.json", {"data": run_name, "preset": preset, "config": aiayn.models.config_to_dict(cfg),
                                  **args, **{k: v for k, v in result.items() if k not in ("run", "history")}})
    say(f"on {len(test_ex):,} held-out pairs: masked-token accuracy {last['mlm_accuracy']:.1%}, next-sentence "
        f"accuracy {last['nsp_accuracy']:.1%}   ({result['seconds']:.0f} s); saved {run}/")
    return result


__all__ = ["date_pairs", "sentence_pairs", "train_mlm"]
