"""Denoising: BART pre-training, reconstructing text from a corrupted copy.

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

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np
import torch

from aiayn.analysis import count_parameters
from aiayn.data import BPETokenizer, collate, date_lines, load_tokenizer, read_text
from aiayn.data.noising import NOISES, corrupt
from aiayn.decoding import greedy
from aiayn.models import build, preset
from aiayn.recipes.base import Recipe, RecipeConfig, fused, positive, setting
from aiayn.training import decay_groups, distributed, label_smoothed_loss, warmup_cosine
from aiayn.training import device as devices

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


@dataclass(frozen=True)
class Config(RecipeConfig):
    recipe: ClassVar[str] = "denoise"
    data: str | None = setting(None, "a UTF-8 text file, one document per line (the last 10% held out); default: "
                                     "made-up date lines")
    vocab_size: int = setting(1000, "byte-level BPE vocabulary, <mask> included")
    n_train: int = setting(20_000, "made-up lines to train on")
    n_test: int = setting(300, "lines held out (at most)")
    preset: str = setting("bart-tiny", "the model preset")
    steps: int = setting(600, "optimizer updates")
    batch_size: int = setting(64, "lines per batch")
    max_len: int = setting(128, "tokens kept of each line")
    noise: str = setting("permute,infill", "corruptions, comma-separated, from permute, rotate, mask, delete, "
                                           "infill (BART's best, section 5.1: permute,infill)")
    noise_ratio: float = setting(0.3, "share of tokens masked or deleted (BART: 0.3)")
    lr: float = setting(2e-3, "peak learning rate")
    weight_decay: float = setting(0.01, "AdamW's, on matrices only")
    warmup: int = setting(100, "warm-up updates")
    label_smoothing: float = setting(0.1, "as the paper's Transformer")
    clip: float = setting(1.0, "maximum gradient norm")
    eval_every: int = setting(200, "validate every N updates, keeping the best weights")

    def __post_init__(self) -> None:
        super().__post_init__()
        positive(self, "vocab_size", "n_train", "n_test", "batch_size", "max_len", "lr", "clip")
        unknown = set(self.noises) - set(NOISES)
        if unknown or not self.noises:
            raise ValueError(f"noise={self.noise!r}: expected names from {list(NOISES)}, comma-separated")
        if not 0 <= self.noise_ratio <= 1:
            raise ValueError(f"noise_ratio must be in [0, 1], got {self.noise_ratio}")
        if not 0 <= self.label_smoothing < 1:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")

    @property
    def noises(self) -> tuple[str, ...]:
        return tuple(n.strip() for n in self.noise.split(",") if n.strip())


class Denoising(Recipe):
    cfg: Config

    def __init__(self, cfg: Config, folder: Path | None, say) -> None:
        super().__init__(cfg, folder, say)
        self.clip = cfg.clip
        if cfg.data is None:
            train_lines, test_lines = date_lines(cfg.n_train, cfg.seed), date_lines(cfg.n_test, cfg.seed + 1)
            self.run_name = "denoise-dates"
        else:
            lines = [line.strip() for line in read_text(cfg.data).splitlines() if line.strip()]
            cut = int(len(lines) * 0.9)
            train_lines, test_lines = lines[:cut], lines[cut:][: cfg.n_test]
            self.run_name = f"denoise-{Path(cfg.data).stem}"
            if not test_lines:
                raise ValueError(f"{cfg.data} has too few lines to hold any out; give at least 10")
        if folder is not None:
            tok = cast(BPETokenizer, load_tokenizer(folder / "tokenizer.json"))  # the BPE with <mask> trained below
        else:
            tok = BPETokenizer.train(train_lines, vocab_size=cfg.vocab_size, mask=True)
        self.tok = tok = distributed.broadcast(tok)  # several ranks: rank 0's
        assert tok.mask_id is not None  # trained with mask=True
        self.files = {"tokenizer.json": tok}
        m = self.mcfg = preset(cfg.preset, **{"src_vocab_size": tok.vocab_size, "tgt_vocab_size": tok.vocab_size,
                                              "pad_id": tok.pad_id, **cfg.model})
        if m.pad_id != tok.pad_id or tok.eos_id != m.eos_id:
            raise ValueError(f"preset {cfg.preset!r} must use the tokenizer's <pad> {tok.pad_id} and </s> {tok.eos_id}")
        if cfg.max_len >= m.max_len:
            raise ValueError(f"max_len={cfg.max_len} must be below the model's max_len={m.max_len} (room for </s>)")
        self.model = build(m)
        self.train_docs = [d for d in (split_sentences(tok, line, cfg.max_len) for line in train_lines) if d]
        test_docs = [split_sentences(tok, line, cfg.max_len) for line in test_lines]
        fixed = np.random.default_rng((cfg.seed, 2**32 - 1))  # held-out noise: a stream no training batch uses
        self.held_out = noised_pairs(test_docs, list(range(len(test_docs))), tok.mask_id, m, fixed, cfg.noises,
                                     cfg.noise_ratio)
        self.eval_batches = [collate(self.held_out[i : i + 100], m.pad_id, m.bos_id, m.eos_id)
                             for i in range(0, len(self.held_out), 100)]
        say(f"data {self.run_name}: {len(self.train_docs):,} training lines, {len(test_docs):,} held out; BPE "
            f"{tok.vocab_size:,} with <mask>; noise {'+'.join(cfg.noises)} at {cfg.noise_ratio:.0%}")
        say(f"model {cfg.preset}: {count_parameters(self.model):,} parameters; {cfg.steps} updates of "
            f"{cfg.batch_size} lines")

    def optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(decay_groups(self.model, self.cfg.weight_decay), lr=self.cfg.lr, betas=(0.9, 0.98),
                                 **fused(self.model))

    def schedule(self, step: int, total: int) -> float:
        return warmup_cosine(step, self.cfg.warmup_for(total), total)

    def batches(self, start: int):
        cfg = self.cfg
        assert self.tok.mask_id is not None  # trained with mask=True
        return batches(self.train_docs, cfg.batch_size, self.mcfg, self.tok.mask_id, cfg.noises, cfg.noise_ratio,
                       cfg.seed, start=start)

    def loss(self, model, batch):
        src, tgt_in, tgt_out = batch
        return label_smoothed_loss(model(src, tgt_in), tgt_out, self.mcfg.pad_id, self.cfg.label_smoothing)

    @torch.no_grad()
    def validate(self, model) -> dict[str, float]:
        model.eval()
        where = devices.of(model)
        loss = nll = n = 0
        for batch in self.eval_batches:
            l_, nll_, n_ = self.loss(model, devices.move(batch, where))
            loss, nll, n = loss + l_.item(), nll + nll_.item(), n + int(n_)
        return {"val_loss": loss / n, "val_nll": nll / n}

    def describe(self, record: dict[str, float]) -> str:
        return f"validation loss {record['val_loss']:.3f}"

    def finish(self, model, folder: Path, validation: list[dict[str, float]]) -> dict[str, Any]:
        result = reconstruction(model, self.tok, self.held_out, self.eval_batches)
        say = self.say
        say("\nheld-out lines: corrupted input -> reconstruction   [original]")
        for s in result["samples"][:5]:
            say(f"  {s['corrupted']}\n    -> {s['output']}   [{s['original']}] "
                f"{'ok' if s['output'] == s['original'] else '--'}")
        say(f"\non {len(result['samples']):,} held-out lines: reconstructed exactly {result['exact_match']:.1%}, "
            f"tokens in place {result['token_accuracy']:.1%} (copying the input: {result['copy_accuracy']:.1%}), "
            f"validation loss {validation[-1]['val_loss']:.3f}")
        return {"val_loss": validation[-1]["val_loss"], **result}


@torch.no_grad()
def reconstruction(model, tok, held_out: list[tuple[list[int], list[int]]], eval_batches: list) -> dict[str, Any]:
    """How much of the held-out text greedy decoding gets back: ``{"exact_match", "token_accuracy",
    "copy_accuracy" (the same score for the corrupted input itself, the baseline), "samples"}``. The sources go to
    ``model``'s device."""
    cfg, where = model.cfg, devices.of(model)
    samples, right, copied = [], 0, 0
    for batch, i in zip(eval_batches, range(0, len(held_out), 100)):
        sources = devices.move(batch[0], where)
        out_ids = greedy(model, sources, max_len=min(sources.size(1) + 50, cfg.max_len - 1)).tolist()
        for (src, tgt), hyp in zip(held_out[i : i + 100], out_ids):
            hyp = hyp[: hyp.index(cfg.eos_id)] if cfg.eos_id in hyp else hyp
            right += sum(a == b for a, b in zip(hyp, tgt))
            copied += sum(a == b for a, b in zip(src[:-1], tgt))  # the baseline: output the input as it is
            samples.append({"corrupted": tok.decode(src[:-1]), "output": tok.decode(hyp), "original": tok.decode(tgt)})
    total = sum(len(t) for _, t in held_out)
    return {"exact_match": sum(s["output"] == s["original"] for s in samples) / len(samples),
            "token_accuracy": right / total, "copy_accuracy": copied / total, "samples": samples}


__all__ = ["Config", "Denoising", "batches", "reconstruction", "split_sentences"]
