"""Translation: the paper's Transformer on made-up pairs or a parallel corpus, and translating with a run.

The default job makes its own parallel data (free-English dates -> ISO dates), trains the tiny
Transformer on the CPU in about two minutes, prints held-out translations and the exact-match accuracy,
and saves the weights, the tokenizers and a picture of encoder-decoder attention. On a corpus (Multi30k,
a TSV such as Tatoeba's, or two aligned files) it uses a joint BPE vocabulary and reports validation loss,
BLEU and chrF.

The training is the paper's: label smoothing 0.1, Adam (0.9, 0.98, 1e-9), warm-up then inverse square
root decay (section 5.3), dropout 0.1.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path
from shlex import quote
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from aiayn.analysis import count_parameters
from aiayn.data import (
    BPETokenizer,
    CharTokenizer,
    PretrainedTokenizer,
    collate,
    encode_pairs,
    held_out_split,
    length_batches,
    load_tokenizer,
    make_pairs,
    read_corpus,
    seq2seq_batch,
    token_batches,
    train_tokenizers,
)
from aiayn.data.synthetic import TASKS
from aiayn.layers import record_attention, record_samples, reinforce_loss
from aiayn.models import build, preset
from aiayn.pipelines.loading import ready
from aiayn.pipelines.translation import load_run as load_run  # here too, where it was before aiayn.pipelines
from aiayn.pipelines.translation import translate, translate_texts
from aiayn.recipes.base import Evaluation, Recipe, RecipeConfig, fused, positive, setting
from aiayn.training import device as devices
from aiayn.training import distributed, label_smoothed_loss, noam_lr

if TYPE_CHECKING:
    from aiayn.data.sentencepiece import SentencePieceTokenizer

Pairs = list[tuple[str, str]]
SCHEDULES = ("noam", "linear")


@dataclass(frozen=True)
class Config(RecipeConfig):
    recipe: ClassVar[str] = "translation"
    data: list = setting(["dates"], "'dates', 'ambiguous-dates' or 'copy' (made up here), 'multi30k' (with "
                                    "--data-dir), a TSV file of pairs (Tatoeba's cmn.txt), or two aligned text files")
    data_dir: str | None = setting(None, "the folder of Multi30k's six .gz files (downloaded there when missing)")
    src_lang: str = setting("de", "source language (Multi30k; BLEU's tokenizer is 13a, or zh for Chinese targets)")
    tgt_lang: str = setting("en", "target language")
    tokenizer: str | None = setting(None, "char or bpe; default characters for made-up data, joint BPE for a "
                                          "corpus (shared embeddings, tied output)")
    vocab_size: int = setting(8000, "BPE vocabulary, both languages together")
    n_train: int = setting(50_000, "made-up data: training pairs drawn")
    n_test: int | None = setting(None, "held-out pairs: default 500 made up, 1,000 of a TSV or two files "
                                       "(Multi30k holds out its val split)")
    preset: str = setting("transformer-tiny", "the model preset")
    steps: int = setting(1000, "optimizer updates (about two minutes of the default job on a laptop CPU)")
    max_tokens: int = setting(1024, "padded tokens per batch (the paper: 25,000)")
    warmup: int = setting(200, "warm-up updates (the paper: 4,000 of 100,000; 200 fits 1,000 updates)")
    schedule: str = setting("noam", "noam: the paper's warm-up then inverse square root decay; linear: warm-up "
                                    "then linear decay to zero at the last update, which a time budget wants")
    lr_factor: float = setting(0.3, "multiplies the paper's rate d_model^-0.5 min(step^-0.5, step warmup^-1.5); "
                                    "the tiny post-norm default learns slowly at 1 and diverges at 2")
    label_smoothing: float = setting(0.1, "section 5.4")
    beam: int = setting(1, "final evaluation: beam size (1 = greedy; the paper: 4)")

    def __post_init__(self) -> None:
        super().__post_init__()
        positive(self, "vocab_size", "n_train", "n_test", "max_tokens", "lr_factor", "beam")
        if not 0 <= self.label_smoothing < 1:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule={self.schedule!r}: expected one of {list(SCHEDULES)}")
        if self.tokenizer not in (None, "char", "bpe"):
            raise ValueError(f"tokenizer={self.tokenizer!r}: expected 'char' or 'bpe'")
        if not 1 <= len(self.data) <= 2:
            raise ValueError(f"data takes one name or file, or two aligned files; got {len(self.data)}")

    @property
    def made_up(self) -> bool:
        return list(self.data) in ([t] for t in TASKS)


def load_pairs(cfg: Config) -> tuple[str, Pairs, Pairs]:
    """``(name, train, held_out)`` as ``cfg.data`` says: made-up pairs, Multi30k's train and val splits, or a
    TSV file or two aligned files with ``n_test`` pairs held out after a seeded shuffle."""
    if cfg.made_up:
        train, test = make_pairs(cfg.data[0], cfg.n_train, cfg.n_test or 500, cfg.seed)
        return cfg.data[0], train, test
    if list(cfg.data) == ["multi30k"]:
        return (f"multi30k-{cfg.src_lang}-{cfg.tgt_lang}",
                read_corpus(cfg.data, cfg.data_dir, "train", cfg.src_lang, cfg.tgt_lang),
                read_corpus(cfg.data, cfg.data_dir, "val", cfg.src_lang, cfg.tgt_lang))
    train, test = held_out_split(read_corpus(cfg.data), cfg.n_test or 1000, cfg.seed)
    return Path(cfg.data[0]).stem, train, test


def _scores(run: Path, args: dict[str, Any], data: list[str], data_dir: str | None = None,
            split: str = "test_2016_flickr", src_lang: str | None = None, tgt_lang: str | None = None, beam: int = 4,
            weights: str | None = None, **run_on: Any) -> dict[str, Any]:
    """``aiayn evaluate`` of a translation run: :func:`evaluate`, the languages defaulting to the run's."""
    langs: dict[str, Any] = {"src_lang": src_lang or args.get("src_lang"), "tgt_lang": tgt_lang or args.get("tgt_lang")}
    return {**evaluate(run, data, data_dir, split, beam=beam, weights=weights, **run_on, **langs), "beam": beam}


class Translation(Recipe):
    evaluation = Evaluation(("data", "data_dir", "split", "src_lang", "tgt_lang", "beam", "weights"), "data", _scores,
                            one_file=False)
    cfg: Config

    def __init__(self, cfg: Config, folder: Path | None, say) -> None:
        super().__init__(cfg, folder, say)
        self.run_name, self.train_pairs, self.test_pairs = load_pairs(cfg)
        kind = cfg.tokenizer or ("char" if cfg.made_up else "bpe")
        joint = kind == "bpe"
        # what load_tokenizer may read back
        src_tok: CharTokenizer | BPETokenizer | PretrainedTokenizer | SentencePieceTokenizer
        tgt_tok: CharTokenizer | BPETokenizer | PretrainedTokenizer | SentencePieceTokenizer
        if folder is None:  # several ranks: rank 0's tokenizers
            src_tok, tgt_tok = distributed.broadcast(train_tokenizers(self.train_pairs, kind=kind,
                                                                      vocab_size=cfg.vocab_size, joint=joint))
        else:
            src_tok, tgt_tok = (load_tokenizer(folder / "src_tokenizer.json"),
                                load_tokenizer(folder / "tgt_tokenizer.json"))
        self.src_tok, self.tgt_tok = src_tok, tgt_tok
        self.files = {"src_tokenizer.json": src_tok, "tgt_tokenizer.json": tgt_tok}
        self.mcfg = preset(cfg.preset, **{"src_vocab_size": src_tok.vocab_size,
                                          "tgt_vocab_size": tgt_tok.vocab_size, "share_embeddings": joint,
                                          **cfg.model})
        self.model = build(self.mcfg)
        self.held_out = encode_pairs(self.test_pairs, src_tok, tgt_tok)
        say(f"data {self.run_name}: {len(self.train_pairs):,} training pairs, {len(self.test_pairs):,} held out; "
            f"e.g. {self.train_pairs[0][0]!r} -> {self.train_pairs[0][1]!r}")
        say(f"model {cfg.preset}: {count_parameters(self.model):,} parameters, {kind} vocabulary of "
            f"{src_tok.vocab_size:,}{'' if joint else f' / {tgt_tok.vocab_size:,}'}; "
            f"{cfg.steps} updates of <= {cfg.max_tokens} x {cfg.accum} tokens")

    def optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9,  # section 5.3
                                **fused(self.model))

    def schedule(self, step: int, total: int) -> float:
        cfg, d = self.cfg, self.mcfg.d_model
        warmup, fitted = max(cfg.warmup, 1), cfg.warmup_for(total)
        if cfg.schedule == "noam":
            # the paper's rate; a warm-up fitted to a short run reaches the same peak, d^-0.5 warmup^-0.5, sooner
            # (the factor is 1 when the run keeps its warm-up)
            return noam_lr(step + 1, d, max(fitted, 1), cfg.lr_factor) * (max(fitted, 1) / warmup) ** 0.5
        peak = cfg.lr_factor * noam_lr(warmup, d, warmup)
        if step < fitted:
            return peak * (step + 1) / fitted
        return peak * max(0.0, 1 - (step - fitted) / max(1, total - fitted))

    def batches(self, start: int):
        cfg, m = self.cfg, self.mcfg
        return token_batches(encode_pairs(self.train_pairs, self.src_tok, self.tgt_tok), cfg.max_tokens, m.pad_id,
                             m.bos_id, m.eos_id, cfg.seed, start=start)

    def loss(self, model, batch):
        src, tgt_in, tgt_out = batch
        if model.training and self.mcfg.cross_scoring == "hard-sample":
            return sampled_attention_loss(model, batch, self.mcfg.pad_id, self.cfg.label_smoothing)
        return label_smoothed_loss(model(src, tgt_in), tgt_out, self.mcfg.pad_id, self.cfg.label_smoothing)

    @torch.no_grad()
    def validate(self, model) -> dict[str, float]:
        from aiayn.evaluation import corpus_scores

        model.eval()
        where = devices.of(model)
        loss = nll = n = 0
        for batch in batches_once(self.held_out, self.cfg.max_tokens, self.mcfg):
            l_, nll_, n_ = self.loss(model, devices.move(batch, where))
            loss, nll, n = loss + l_.item(), nll + nll_.item(), n + int(n_)
        record = {"val_loss": loss / n, "val_nll": nll / n}
        if not self.cfg.made_up:  # BLEU on a corpus; made-up pairs are scored by exact match at the end
            hyps = translate_texts(model, self.src_tok, self.tgt_tok, [s for s, _ in self.test_pairs])
            scores = corpus_scores(hyps, [t for _, t in self.test_pairs], self.cfg.tgt_lang)
            record.update(bleu=scores["bleu"], chrf=scores["chrf"])
        return record

    def describe(self, record: dict[str, float]) -> str:
        return (f"validation loss {record['val_loss']:.3f}"
                + (f", BLEU {record['bleu']:.1f}, chrF {record['chrf']:.1f}" if "bleu" in record else ""))

    def finish(self, model, folder: Path, validation: list[dict[str, float]]) -> dict[str, Any]:
        from aiayn.evaluation import corpus_scores, exact_match

        say, cfg, pairs = self.say, self.cfg, self.test_pairs
        hyps = translate_texts(model, self.src_tok, self.tgt_tok, [s for s, _ in pairs], beam=cfg.beam)
        refs = [t for _, t in pairs]
        score = exact_match(hyps, refs)
        scores = corpus_scores(hyps, refs, None if cfg.made_up else cfg.tgt_lang)
        samples = [{"source": s, "reference": r, "output": h} for (s, r), h in zip(pairs, hyps)]
        picture = attention_picture(model, self.src_tok, self.tgt_tok, pairs[0][0], folder / "attention.png")
        say("\nheld-out examples: source -> output   [reference]")
        width = min(max(len(s["source"]) for s in samples[:8]), 60)
        for s in samples[:8]:
            say(f"  {s['source']:>{width}} -> {s['output']}   [{s['reference']}] "
                f"{'ok' if s['output'] == s['reference'] else '--'}")
        say(f"\non {len(refs):,} held-out pairs: exact match {score:.1%}, BLEU {scores['bleu']:.1f}, chrF "
            f"{scores['chrf']:.1f}, validation loss {validation[-1]['val_loss']:.3f}; picture {picture.name}")
        say(f"try: aiayn translate --run {quote(str(folder))} {quote(pairs[1 % len(pairs)][0])}")
        return {"exact_match": score, "bleu": scores["bleu"], "chrf": scores["chrf"],
                "bleu_signature": scores["signature"], "val_loss": validation[-1]["val_loss"], "samples": samples}


def sampled_attention_loss(model, batch, pad_id: int, label_smoothing: float):
    """The loss of a model whose cross-attention samples one source position (``cross_scoring="hard-sample"``):
    the label-smoothed loss plus the score-function (REINFORCE) term for the draws, whose reward is minus each
    example's NLL (:func:`aiayn.layers.reinforce_loss`). The term adds its gradient only (``t - t.detach()``),
    so the loss reads as the plain one. ``(loss_sum, nll_sum, n_tokens)`` as :func:`label_smoothed_loss`."""
    src, tgt_in, tgt_out = batch
    with record_samples() as log_probs:
        logits = model(src, tgt_in)  # (B, T, V); log_probs: one (B, H, T) per decoder layer
    loss, nll, n = label_smoothed_loss(logits, tgt_out, pad_id, label_smoothing)
    keep = tgt_out != pad_id  # (B, T): draws at padding positions change no reward
    example_nll = torch.nn.functional.cross_entropy(logits.float().transpose(1, 2), tgt_out, ignore_index=pad_id,
                                                    reduction="none").sum(-1)  # (B,)
    drawn = sum((lp.sum(1) * keep).sum(-1) for lp in log_probs)  # (B,) log p of every draw of each example
    if isinstance(drawn, torch.Tensor):
        term = reinforce_loss(drawn, -example_nll)
        loss = loss + (term - term.detach())
    return loss, nll, n


def batches_once(pairs, max_tokens: int, cfg):
    """Held-out pairs in token-count batches, each pair once, in length order."""
    lengths = [max(len(s), len(t) + 1) for s, t in pairs]
    for idx in length_batches(lengths, max_tokens, random.Random(0)):
        yield collate([pairs[i] for i in idx], cfg.pad_id, cfg.bos_id, cfg.eos_id)


def attention_picture(model, src_tok, tgt_tok, src_text: str, path: Path) -> Path:
    """Encoder-decoder attention of every decoder layer and head for one example."""
    from aiayn.viz import plot_attention_grid

    hyp = translate_texts(model, src_tok, tgt_tok, [src_text])[0]
    src, tgt_in, _ = devices.move(seq2seq_batch([(src_text, hyp)], src_tok, tgt_tok), devices.of(model))
    with torch.no_grad(), record_attention(model) as rec:
        model(src, tgt_in)
    layers = [rec[f"decoder.layers.{i}.cross_attn"][0][0] for i in range(len(model.decoder.layers))]
    return plot_attention_grid(layers, ["<s>"] + tgt_tok.tokens(hyp), src_tok.tokens(src_text) + ["</s>"], path,
                               title=f"encoder-decoder attention: {src_text!r} -> {hyp!r}", row_label="decoder layer")


def evaluate(run: str | os.PathLike, data: str | list[str], data_dir: str | None = None,
             split: str = "test_2016_flickr", src_lang: str = "de", tgt_lang: str = "en", beam: int = 4,
             weights: str | os.PathLike | None = None, *,
             device: str | torch.device | None = None, quantize: str | None = None) -> dict[str, Any]:
    """Corpus BLEU and chrF (sacrebleu, detokenized; ``zh`` tokenizer for Chinese) of a saved run.

    Args:
        data: ``"multi30k"`` (its ``split`` from ``data_dir``), a TSV file of pairs, or two aligned files;
            every pair of the file is scored.
        beam: beam size (4, as the paper decodes); 1 is greedy.
        weights: as :func:`load_run`'s (e.g. ``"average.safetensors"``); default the last weights.
        device, quantize: as :func:`load_run`'s (default: a GPU when there is one, else the CPU; float32).

    Returns:
        ``{"bleu", "chrf", "signature", "n", "exact_match"}``.
    """
    from aiayn.evaluation import corpus_scores, exact_match

    ready(torch.nn.Identity(), device, quantize)  # a bad device or quantize is refused before the corpus is read
    pairs = read_corpus(data, data_dir, split, src_lang, tgt_lang)
    hyps = translate(run, [s for s, _ in pairs], beam=beam, weights=weights, device=device, quantize=quantize)
    refs = [t for _, t in pairs]
    return {**corpus_scores(hyps, refs, tgt_lang), "exact_match": exact_match(hyps, refs)}
