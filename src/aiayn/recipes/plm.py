"""Permutation language modelling: XLNet pre-training (Yang et al., 2019, section 2).

The text is read as ``batch_size`` streams in order (:func:`aiayn.data.lm_streams`), a segment of ``seq_len`` tokens
at a time, the content stream's states of each segment kept as the next one's memory (the model's ``mem_len``, or
``seq_len`` where the config keeps all it is given, as the released XLNets' do; section 2.4). For every segment a
factorisation order z is drawn, a random permutation of its positions, and only the last 1/K of z is predicted
(partial prediction, section 2.3: the first tokens of an order have too little context to learn from; the paper's K
is 6 or 7):

    non-targets   see each other (both ways) and the memory, never a target
    target z_t    its query stream sees the non-targets, the targets before it in z and the memory; never its
                  own token (the content stream, which later layers and targets read, sees that one too)

with ``perm_mask`` and ``target_mapping`` built by the rules of the original ``_local_perm`` (:func:`permutation`;
its targets are drawn uniformly, section 2.3, not as its n-gram spans in local chunks). The loss is the
mean cross-entropy of the targets. Lines are joined with ``[SEP]``; there are no segment ids (XLNet's pairs of
segments serve its fine-tuning tasks, not the language model). The tokenizer is WordPiece, so ``aiayn train
textclass --init-from`` fine-tunes the run (XLNet classifies the last real token). The default data is made-up
date lines, so it runs with no download.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, cast

import torch
import torch.nn.functional as F
from torch import Tensor

from aiayn.analysis import count_parameters
from aiayn.data import date_lines, lm_stream_pass, lm_streams, read_text
from aiayn.data.wordpiece import WordPieceTokenizer, bert_tokenizer
from aiayn.models import build, preset
from aiayn.recipes.base import Recipe, RecipeConfig, fused, positive, setting
from aiayn.training import decay_groups, distributed, finetune, warmup_cosine
from aiayn.training import device as devices

Batch = tuple[Tensor, Tensor, Tensor, Tensor]  # ids (B, T), perm_mask (B, T, T), target_mapping (B, K, T), labels


def permutation(ids: Tensor, k: int, generator: torch.Generator) -> Batch:
    """``(ids, perm_mask, target_mapping, labels)`` for a batch of segments ``(B, T)``: per row a random order, its
    last ``T // k`` positions (at least one) the targets, listed by position (module docstring)."""
    b, t = ids.shape
    n = max(1, t // k)
    order = torch.argsort(torch.rand(b, t, generator=generator), dim=1)  # (B, T): z, positions in the order drawn
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(t).expand(b, t))  # (B, T): where each is in z
    target = rank >= t - n  # (B, T): the last n of z
    # i may not see j: j is a target, and i is a non-target or j comes at or after i in z
    perm = target[:, None, :] & (~target[:, :, None] | (rank[:, None, :] >= rank[:, :, None]))
    where = target.nonzero()[:, 1].view(b, n)  # (B, n): the targets' positions, in order of position
    mapping = F.one_hot(where, t).float()  # (B, n, T)
    return ids, perm.float(), mapping, ids.gather(1, where)


@dataclass(frozen=True)
class Config(RecipeConfig):
    recipe: ClassVar[str] = "plm"
    data: str | None = setting(None, "a UTF-8 text file (its last 10% held out); default: made-up date lines")
    vocab_size: int = setting(2000, "WordPiece vocabulary")
    n_train: int = setting(30_000, "made-up lines to train on")
    n_test: int = setting(1_000, "made-up lines held out")
    preset: str = setting("xlnet-tiny", "the model preset (an XLNet; its mem_len is the memory carried)")
    seq_len: int = setting(64, "tokens a segment")
    predict: int = setting(6, "K: the last 1/K of each factorisation order is predicted (section 2.3: 6 or 7)")
    batch_size: int = setting(32, "streams (segments a batch)")
    lr: float = setting(1e-3, "peak learning rate")
    weight_decay: float = setting(0.01, "AdamW's, on matrices only (XLNet's)")
    warmup: int = setting(100, "warm-up updates")
    eval_every: int = setting(250, "validate every N updates, keeping the best weights")
    eval_blocks: int = setting(256, "held-out segments a validation reads")

    def __post_init__(self) -> None:
        super().__post_init__()
        positive(self, "vocab_size", "n_train", "n_test", "seq_len", "predict", "batch_size", "lr", "eval_blocks")


class PermutationLM(Recipe):
    takes_init_from = True

    cfg: Config

    def __init__(self, cfg: Config, folder: Path | None, say) -> None:
        super().__init__(cfg, folder, say)
        if cfg.data is None:
            train_lines, val_lines = date_lines(cfg.n_train, cfg.seed), date_lines(cfg.n_test, cfg.seed + 1)
            self.run_name = "plm-dates"
        else:
            lines = [line.strip() for line in read_text(cfg.data).splitlines() if line.strip()]
            cut = int(len(lines) * 0.9)
            train_lines, val_lines = lines[:cut], lines[cut:]
            self.run_name = f"plm-{Path(cfg.data).stem}"
        start = self.start_from()  # further pre-training: the source's config and tokenizer
        if folder is not None:
            tok = WordPieceTokenizer.load(folder / "tokenizer.json")
        elif start is not None:
            assert cfg.init_from is not None  # start_from loads it
            tok = wordpiece_of(finetune.folder_of(cfg.init_from))
        else:
            tok = WordPieceTokenizer.train(train_lines, vocab_size=cfg.vocab_size)
        self.tok = tok = distributed.broadcast(tok)  # several ranks: rank 0's
        self.files = {"tokenizer.json": tok}
        specials = {"vocab_size": tok.vocab_size, "pad_id": tok.pad_id, "cls_id": tok.cls_id, "sep_id": tok.sep_id,
                    "mask_id": tok.mask_id, "bos_id": None, "eos_id": None}
        if start is not None:
            self.mcfg = dataclasses.replace(start, **{"head": "lm", **cfg.model})
        else:
            self.mcfg = preset(cfg.preset, **{**specials, "head": "lm", **cfg.model})
        if distributed.world_size() > 1:
            raise ValueError("the permutation LM trains on one process: its streams are read in order")
        self.model = build(self.mcfg)
        self.train_ids, val_ids = (self._ids(part) for part in (train_lines, val_lines))
        held = lm_stream_pass(val_ids, cfg.seq_len, cfg.batch_size, cfg.eval_blocks)
        gen = torch.Generator().manual_seed(12345)  # the same orders at every validation
        self.held_out = [permutation(x, cfg.predict, gen) for x, _ in held]
        self.memory = None
        say(f"data {self.run_name}: {self.train_ids.numel():,} training tokens, {val_ids.numel():,} held out; "
            f"WordPiece {tok.vocab_size:,}")
        say(f"model {cfg.init_from or cfg.preset}: {count_parameters(self.model):,} parameters; {cfg.steps} updates "
            f"of {cfg.batch_size} segments of {cfg.seq_len}, the last 1/{cfg.predict} of each order predicted")

    def _ids(self, lines: list[str]) -> Tensor:
        """The lines' tokens, each line's ended by ``[SEP]``, as one stream."""
        ids: list[int] = []
        for line in lines:
            ids += [*self.tok.encode(line)[0][1:-1], cast(int, self.tok.sep_id)]
        return torch.tensor(ids, dtype=torch.long)

    def optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(decay_groups(self.model, self.cfg.weight_decay), lr=self.cfg.lr, betas=(0.9, 0.999),
                                 **fused(self.model))

    def schedule(self, step: int, total: int) -> float:
        return warmup_cosine(step, self.cfg.warmup_for(total), total)

    def new_memory(self, model) -> Any:
        """An empty memory of the model's ``mem_len``, or ``seq_len`` positions where it keeps all (``None``): a
        memory carried through a whole run must stay bounded."""
        return cast(Any, model).new_memory(self.mcfg.mem_len if self.mcfg.mem_len is not None else self.cfg.seq_len)

    def batches(self, start: int):
        self.memory = self.new_memory(self.model)  # the streams start again: so does the memory
        cfg = self.cfg

        def drawn():
            for k, (x, _) in enumerate(lm_streams(self.train_ids, cfg.seq_len, cfg.batch_size, start=start), start):
                yield permutation(x, cfg.predict, torch.Generator().manual_seed(cfg.seed * 1_000_003 + k))

        return drawn()

    def loss(self, model, batch):
        return _loss(model, batch, self.memory)

    @torch.no_grad()
    def validate(self, model) -> dict[str, float]:
        model.eval()
        where = devices.of(model)
        memory = self.new_memory(model)
        total = hits = n = 0.0
        for batch in self.held_out:
            batch = devices.move(batch, where)
            loss, logits, labels = _loss(model, batch, memory, keep=True)
            total, n = total + loss.item(), n + labels.numel()
            hits += int((logits.argmax(-1) == labels).sum())
        loss = total / n
        return {"val_loss": loss, "perplexity": math.exp(min(loss, 700)), "accuracy": hits / n}

    def describe(self, record: dict[str, float]) -> str:
        return f"target loss {record['val_loss']:.3f}, accuracy {record['accuracy']:.1%}"

    def finish(self, model, folder: Path, validation: list[dict[str, float]]) -> dict[str, Any]:
        last = validation[-1]
        self.say(f"on the held-out text: {self.describe(last)} (perplexity {last['perplexity']:.2f})")
        self.say(f"fine-tune: aiayn train textclass --model-type xlnet --init-from {folder} --data DATA")
        return {k: last[k] for k in ("val_loss", "perplexity", "accuracy")}


def wordpiece_of(folder: Path) -> WordPieceTokenizer:
    """The WordPiece tokenizer of an XLNet run of ours to train on; a released XLNet's SentencePiece one is refused
    by name (these recipes encode with WordPiece)."""
    if (folder / "spiece.model").is_file():
        raise ValueError(f"init_from={str(folder)!r} is a Hugging Face XLNet with SentencePiece's spiece.model; the "
                         f"plm and textclass recipes train on WordPiece (an XLNet run of `aiayn train plm`)")
    return bert_tokenizer(folder)


def _loss(model, batch: Batch, memory, keep: bool = False):
    """The summed cross-entropy of the batch's targets (and, with ``keep``, their logits and labels)."""
    ids, perm, mapping, labels = batch
    logits = model.logits(model(ids, memory, perm_mask=perm, target_mapping=mapping))  # (B, K, V)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), reduction="sum")
    if keep:
        return loss, logits, labels
    return loss, loss.detach(), labels.numel()


__all__ = ["Config", "PermutationLM", "permutation", "wordpiece_of"]
