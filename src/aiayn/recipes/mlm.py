"""Masked language modelling: BERT pre-training (masked LM plus next-sentence prediction), RoBERTa's (the masked
LM alone), and embedding sentences with a BERT (or a RoBERTa, DistilBERT, ALBERT: every family built on it).

Every example is a pair ``[CLS] A [SEP] B [SEP]``: B is the line after A half of the time (label 0,
"is next") and a random line otherwise (label 1). 15% of the non-special tokens are chosen for the
masked-LM loss (80% shown as [MASK], 10% as a random token, 10% unchanged), drawn anew for every batch. The
loss is the mean over chosen tokens plus the mean next-sentence loss, as BERT sums the two.

With ``nsp=False`` (RoBERTa, Liu et al. 2019, section 4.2: next-sentence prediction removed, masks drawn anew
each time an example is seen, section 4.1) B is always the line after A, both in segment 0, and the loss is
the masked LM's alone; the model has the ``mlm`` head only.

The default data is made up, so it runs with no download: A is a date written freely in English and B
an ISO date, the same date (is next) or another one; the model must learn date words to fill masks and
to read both forms to tell whether they agree.

Sentence embeddings (:func:`embed`): text -> WordPiece ([CLS] text [SEP]) -> BERT -> mean of the real
tokens' states -> L2-normalised.
"""

from __future__ import annotations

import dataclasses
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, cast

import torch
import torch.nn.functional as F

from aiayn.analysis import count_parameters
from aiayn.data import make_pairs, read_text
from aiayn.data.masking import IGNORE, mask_tokens
from aiayn.data.wordpiece import WordPieceTokenizer, bert_tokenizer
from aiayn.models import build, preset
from aiayn.models.bert import BERT
from aiayn.pipelines.embed import embed, embed_texts, load_bert
from aiayn.pipelines.loading import check_tokenizer, load_model, special_ids
from aiayn.recipes.base import Evaluation, Recipe, RecipeConfig, fused, positive, setting
from aiayn.training import decay_groups, distributed, finetune, warmup_cosine
from aiayn.training import device as devices

Example = tuple[list[int], list[int], int]  # ids, segment ids, is-not-next label


def sentence_pairs(lines: list[str], rng: random.Random) -> list[tuple[str, str, int]]:
    """``(A, B, label)`` for consecutive lines: B follows A (label 0) or is a random other line (1), half each.

    BERT draws the random B from another document; a text file here has no document boundaries, so B is any
    other line of it (one near A now and then, which makes the task a little harder than the paper's)."""
    out = []
    for i in range(len(lines) - 1):
        if rng.random() < 0.5:
            out.append((lines[i], lines[i + 1], 0))
        else:
            j = rng.randrange(len(lines) - 1)
            j = j + 1 if j >= i else j  # never A itself
            out.append((lines[i], lines[j], int(j != i + 1)))
    return out


def next_pairs(lines: list[str]) -> list[tuple[str, str, int]]:
    """``(A, B, 0)`` for consecutive lines: B always follows A (contiguous text, no next-sentence task)."""
    return [(lines[i], lines[i + 1], 0) for i in range(len(lines) - 1)]


def date_pairs(n: int, seed: int, nsp: bool = True) -> list[tuple[str, str, int]]:
    """Made-up pairs: a free-English date and the ISO form of the same date (0) or, half of the time when
    ``nsp``, of another (1)."""
    rng = random.Random(seed)
    pairs, _ = make_pairs("dates", n, 0, seed)
    out = []
    for free, iso in pairs:
        if not nsp or rng.random() < 0.5:
            out.append((free, iso, 0))
        else:
            other = pairs[rng.randrange(len(pairs))][1]
            out.append((free, other, int(other != iso)))
    return out


def encode(tok: WordPieceTokenizer, pairs: list[tuple[str, str, int]], max_len: int,
           segments: bool = True) -> list[Example]:
    """Token ids of ``[CLS] A [SEP] B [SEP]``, the longer side cut until the pair fits ``max_len``; B in segment 1
    unless ``segments`` is false (RoBERTa has one segment)."""
    assert tok.cls_id is not None and tok.sep_id is not None  # a WordPieceTokenizer refuses a vocabulary without them
    if max_len < 3:
        raise ValueError(f"max_len={max_len} must be at least 3: [CLS] A [SEP] B [SEP] has three special tokens")
    out = []
    for a, b, label in pairs:
        ids_a, ids_b = tok.encode(a)[0][1:-1], tok.encode(b)[0][1:-1]
        while len(ids_a) + len(ids_b) + 3 > max_len:
            (ids_a if len(ids_a) >= len(ids_b) else ids_b).pop()
        ids = [tok.cls_id, *ids_a, tok.sep_id, *ids_b, tok.sep_id]
        out.append((ids, [0] * (len(ids_a) + 2) + [int(segments)] * (len(ids_b) + 1), label))
    return out


def collate(examples: list[Example], tok: WordPieceTokenizer, vocab_size: int, generator: torch.Generator):
    """``(inputs, segments, attention mask, mlm labels, nsp labels)`` with fresh masking."""
    # a WordPieceTokenizer has every special (it refuses a vocabulary without one)
    assert tok.pad_id is not None and tok.cls_id is not None and tok.sep_id is not None and tok.mask_id is not None
    width = max(len(e[0]) for e in examples)
    ids = torch.tensor([e[0] + [tok.pad_id] * (width - len(e[0])) for e in examples])
    segments = torch.tensor([e[1] + [0] * (width - len(e[1])) for e in examples])
    inputs, labels = mask_tokens(ids, tok.mask_id, vocab_size, (tok.pad_id, tok.cls_id, tok.sep_id),
                                 generator=generator, first_normal_id=tok.first_normal_id)
    return inputs, segments, (ids != tok.pad_id).long(), labels, torch.tensor([e[2] for e in examples])


def batches(examples: list[Example], batch_size: int, tok, vocab_size: int, seed: int, start: int = 0):
    """Endless shuffled batches; batch k is drawn and masked from a generator seeded with ``(seed, k)``."""
    k = start
    while True:
        gen = torch.Generator().manual_seed(seed * 1_000_003 + k)
        idx = torch.randint(len(examples), (batch_size,), generator=gen).tolist()
        yield collate([examples[i] for i in idx], tok, vocab_size, gen)
        k += 1


def losses(model, batch, nsp: bool = True):
    """``(masked-LM loss sum, its logits (N, V), next-sentence loss sum, its logits (B, 2), N chosen tokens)``;
    without ``nsp`` the next-sentence loss is 0 and its logits ``None``."""
    inputs, segments, mask, labels, is_next = batch
    hidden = model(inputs, segments, mask)
    chosen = labels != IGNORE
    mlm_logits = model.mlm_logits(hidden[chosen])  # only the chosen positions: (N, V)
    mlm = F.cross_entropy(mlm_logits, labels[chosen], reduction="sum")
    if not nsp:
        return mlm, mlm_logits, mlm.new_zeros(()), None, int(chosen.sum())
    nsp_logits = model.nsp_logits(hidden)
    return mlm, mlm_logits, F.cross_entropy(nsp_logits, is_next, reduction="sum"), nsp_logits, int(chosen.sum())


@torch.no_grad()
def scores(model, held_out: list, nsp: bool = True) -> dict[str, float]:
    """``{"val_loss" (per masked token), "mlm_accuracy", "nsp_accuracy"}`` on batches of :func:`collate` (moved
    to ``model``'s device); without ``nsp``, no ``"nsp_accuracy"``."""
    model.eval()
    where = devices.of(model)
    mlm_loss = hits = n = nsp_hits = pairs = 0
    for batch in held_out:
        batch = devices.move(batch, where)
        mlm, mlm_logits, _, nsp_logits, k = losses(model, batch, nsp)
        labels = batch[3]
        mlm_loss, n = mlm_loss + mlm.item(), n + k
        hits += int((mlm_logits.argmax(-1) == labels[labels != IGNORE]).sum())
        if nsp_logits is not None:
            nsp_hits += int((nsp_logits.argmax(-1) == batch[4]).sum())
        pairs += batch[4].numel()
    out = {"val_loss": mlm_loss / n, "mlm_accuracy": hits / n}
    return {**out, "nsp_accuracy": nsp_hits / pairs} if nsp else out


@dataclass(frozen=True)
class Config(RecipeConfig):
    recipe: ClassVar[str] = "mlm"
    data: str | None = setting(None, "a UTF-8 text file, one sentence per line, consecutive lines continuing each "
                                     "other (the last 10% held out); default: made-up date pairs")
    vocab_size: int = setting(2000, "WordPiece vocabulary")
    n_train: int = setting(20_000, "made-up pairs to train on")
    n_test: int = setting(500, "made-up pairs held out")
    preset: str = setting("bert-tiny", "the model preset (a BERT, RoBERTa, DistilBERT or ALBERT)")
    nsp: bool = setting(True, "next-sentence prediction beside the masked LM (BERT); false: the masked LM alone on "
                              "contiguous text, RoBERTa's recipe")
    max_len: int = setting(64, "tokens per pair")
    batch_size: int = setting(32, "pairs per batch")
    lr: float = setting(1e-3, "peak learning rate")
    weight_decay: float = setting(0.01, "AdamW's, on matrices only (BERT)")
    warmup: int = setting(100, "warm-up updates")
    eval_every: int = setting(250, "validate every N updates, keeping the best weights")

    def __post_init__(self) -> None:
        super().__post_init__()
        positive(self, "vocab_size", "n_train", "n_test", "max_len", "batch_size", "lr")


def _scores(run: Path, args: dict[str, Any], data: str, **run_on: Any) -> dict[str, float]:
    """``aiayn evaluate`` of a masked-LM run: :func:`masked_accuracy` on the file ``data``."""
    return masked_accuracy(run, data, **run_on)


class MaskedLM(Recipe):
    evaluation = Evaluation(("data",), "data", _scores)
    takes_init_from = True

    cfg: Config

    def __init__(self, cfg: Config, folder: Path | None, say) -> None:
        super().__init__(cfg, folder, say)
        if cfg.data is None:
            train_pairs = date_pairs(cfg.n_train, cfg.seed, cfg.nsp)
            test_pairs = date_pairs(cfg.n_test, cfg.seed + 1, cfg.nsp)
            self.run_name = "mlm-dates"
        else:
            lines = [line.strip() for line in read_text(cfg.data).splitlines() if line.strip()]
            cut = int(len(lines) * 0.9)
            rng = random.Random(cfg.seed)
            pairs_of = (lambda part: sentence_pairs(part, rng)) if cfg.nsp else next_pairs
            train_pairs, test_pairs = pairs_of(lines[:cut]), pairs_of(lines[cut:])
            self.run_name = f"mlm-{Path(cfg.data).stem}"
        if len(test_pairs) < 1:
            raise ValueError("the held-out part of the data makes no sentence pairs; give a longer file")
        start = self.start_from()  # further pre-training: the source's config and tokenizer
        if folder is not None:
            tok = WordPieceTokenizer.load(folder / "tokenizer.json")
        elif start is not None:
            assert cfg.init_from is not None  # start_from loads it
            tok = bert_tokenizer(finetune.folder_of(cfg.init_from))
        else:
            tok = WordPieceTokenizer.train([t for a, b, _ in train_pairs for t in (a, b)], vocab_size=cfg.vocab_size)
        self.tok = tok = distributed.broadcast(tok)  # several ranks: rank 0's
        self.files = {"tokenizer.json": tok}
        head = "pretraining" if cfg.nsp else "mlm"
        if start is not None:
            self.mcfg = dataclasses.replace(start, **{"head": head, **cfg.model})
        else:
            self.mcfg = preset(cfg.preset, **{"vocab_size": tok.vocab_size, "pad_id": tok.pad_id,
                                              "cls_id": tok.cls_id, "sep_id": tok.sep_id,
                                              "mask_id": tok.mask_id, "max_len": cfg.max_len,
                                              "head": head, **cfg.model})
        self.model = build(self.mcfg)
        self.train_ex, test_ex = (encode(tok, pairs, min(cfg.max_len, self.mcfg.max_tokens), segments=cfg.nsp)
                                  for pairs in (train_pairs, test_pairs))
        eval_gen = torch.Generator().manual_seed(12345)
        self.held_out = [collate(test_ex[i : i + 64], tok, self.mcfg.vocab_size, eval_gen)
                         for i in range(0, len(test_ex), 64)]
        self.n_test = len(test_ex)
        say(f"data {self.run_name}: {len(self.train_ex):,} training pairs, {len(test_ex):,} held out; WordPiece "
            f"{tok.vocab_size:,}")
        say(f"model {cfg.preset}: {count_parameters(self.model):,} parameters; {cfg.steps} updates of "
            f"{cfg.batch_size} pairs")

    def optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(decay_groups(self.model, self.cfg.weight_decay), lr=self.cfg.lr, betas=(0.9, 0.999),
                                 **fused(self.model))

    def schedule(self, step: int, total: int) -> float:
        return warmup_cosine(step, self.cfg.warmup_for(total), total)

    def batches(self, start: int):
        return batches(self.train_ex, self.cfg.batch_size, self.tok, self.mcfg.vocab_size, self.cfg.seed, start=start)

    def loss(self, model, batch):
        mlm, _, nsp, _, n = losses(model, batch, self.cfg.nsp)
        b = batch[0].size(0)
        # per token: mean MLM loss + mean NSP loss. fit divides by the update's masked tokens, so under --accum each
        # batch's NSP mean is weighted by its share of them (the MLM term equals one large batch exactly)
        return mlm + nsp * (n / b), mlm.detach(), n

    def validate(self, model) -> dict[str, float]:
        return scores(model, self.held_out, self.cfg.nsp)

    def describe(self, record: dict[str, float]) -> str:
        said = f"masked-token loss {record['val_loss']:.3f}, accuracy {record['mlm_accuracy']:.1%}"
        return f"{said}; next-sentence accuracy {record['nsp_accuracy']:.1%}" if "nsp_accuracy" in record else said

    def finish(self, model, folder: Path, validation: list[dict[str, float]]) -> dict[str, Any]:
        last = validation[-1]
        self.say(f"on {self.n_test:,} held-out pairs: {self.describe(last)}")
        return {k: last[k] for k in ("mlm_accuracy", "nsp_accuracy", "val_loss") if k in last}


@torch.no_grad()
def masked_accuracy(run: str | os.PathLike, path: str | os.PathLike, seed: int = 0, *,
                    device: str | torch.device | None = None, quantize: str | None = None) -> dict[str, float]:
    """``{"mlm_accuracy", "nsp_accuracy", "val_loss", "pairs"}`` of a masked-LM run on a text file (one sentence
    per line): every consecutive pair, masked as in training with a fixed seed (no ``"nsp_accuracy"`` for a
    model without a next-sentence head).

    Args:
        device, quantize: where the model runs, and ``"int8"`` for int8 weights on the CPU
            (:func:`aiayn.pipelines.loading.ready`; default: a GPU if any, float32). The masking is drawn on
            the CPU, the same on every device.

    Raises:
        ValueError: ``device`` names no device of this machine, or a bad ``quantize``.
    """
    run = Path(run)
    model = cast(BERT, load_model(run, device, quantize, kinds=(BERT,), task="masked-LM"))
    tok = WordPieceTokenizer.load(run / "tokenizer.json")
    check_tokenizer(tok, run / "tokenizer.json", model.cfg.vocab_size, special_ids(model.cfg), exact=True)
    lines = [line.strip() for line in read_text(path).splitlines() if line.strip()]
    nsp = model.nsp is not None  # a model pre-trained without next-sentence prediction is scored without it
    pairs = sentence_pairs(lines, random.Random(seed)) if nsp else next_pairs(lines)
    examples = encode(tok, pairs, model.cfg.max_tokens, segments=nsp)
    if not examples:
        raise ValueError(f"{path} makes no sentence pairs: it needs at least two lines")
    gen = torch.Generator().manual_seed(seed)
    held_out = [collate(examples[i : i + 64], tok, model.cfg.vocab_size, gen) for i in range(0, len(examples), 64)]
    return {**scores(model, held_out, nsp), "pairs": len(examples)}


__all__ = [
    "Config",
    "MaskedLM",
    "bert_tokenizer",
    "date_pairs",
    "embed",
    "embed_texts",
    "load_bert",
    "masked_accuracy",
    "next_pairs",
    "sentence_pairs",
]
