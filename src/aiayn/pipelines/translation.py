"""Translating with a saved translation run (or a converted Marian or BART): greedy or beam search, in batches of
similar length.
"""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path
from typing import cast

import torch

from aiayn.data import (
    load_tokenizer,
    seq2seq_batch,
)
from aiayn.decoding import beam_search, greedy
from aiayn.decoding.settings import check, check_beams
from aiayn.models.checkpoint import saved_config
from aiayn.models.transformer import Transformer
from aiayn.pipelines.loading import check_tokenizer, load_model, no_weights, special_ids
from aiayn.training import device as devices


def translate_texts(model, src_tok, tgt_tok, texts: list[str], beam: int = 1, batch_size: int = 128,
                    compile: bool = False) -> list[str]:
    """Translate ``texts`` in batches of similar length; greedy for ``beam=1``, else beam search. The batches go to
    ``model``'s device. ``compile``: over a static cache with a compiled step (the model's static session,
    :mod:`aiayn.layers.session`)."""
    return [best[0] for best in n_best(model, src_tok, tgt_tok, texts, beam, 1, batch_size, compile)]


def n_best(model, src_tok, tgt_tok, texts: list[str], beam: int = 1, n: int = 1,
           batch_size: int = 128, compile: bool = False, max_new_tokens: int | None = None) -> list[list[str]]:
    """The ``n`` best translations of each text, best first (beam search's ``n`` best beams, ``n <= beam``);
    :func:`translate_texts` is ``n=1``. ``compile``: as :func:`translate_texts`' (each batch shape compiles once:
    the batches are sorted by length, so a new length is a new shape). ``max_new_tokens``: the most target tokens
    (default the source's length + 50, section 6.1)."""
    check(num_beams=beam, num_return_sequences=n, max_new_tokens=max_new_tokens)
    check_beams(beam, model.cfg.tgt_vocab_size)
    if not 1 <= n <= beam:
        raise ValueError(f"n_best must be between 1 and the beam size {beam}, got {n}")
    where = devices.of(model)
    for i, text in enumerate(texts):  # longer than the positions: refused, not cut or read past the table
        if (size := len(src_tok.encode(text)) + 1) > model.cfg.max_len:  # (+ </s>)
            raise ValueError(f"text {i + 1} (line {i + 1} of the input) is {size} tokens with its </s>; the model "
                             f"reads at most {model.cfg.max_len} (its max_len): split it")
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    out: list[list[str]] = [[] for _ in texts]
    for i in range(0, len(order), batch_size):
        idx = order[i : i + batch_size]
        src, _, _ = seq2seq_batch([(texts[j], "") for j in idx], src_tok, tgt_tok)
        src = devices.move(src, where)
        ids = (greedy(model, src, max_new_tokens, compile=compile) if beam == 1
               else beam_search(model, src, beam=beam, max_len=max_new_tokens, num_return_sequences=n,
                                compile=compile))
        assert isinstance(ids, torch.Tensor)  # the tokens alone: no return_scores
        rows = ids.tolist()  # (len(idx) * n) rows, each text's n together
        for k, j in enumerate(idx):
            out[j] = [tgt_tok.decode(row) for row in rows[k * n : (k + 1) * n]]
    return out


def load_run(run: str | os.PathLike, weights: str | os.PathLike | None = None, *,
             device: str | torch.device | None = None, quantize: str | None = None):
    """``(model, src_tokenizer, tgt_tokenizer)`` of a translation run folder.

    Args:
        weights: other weights of the run's model than its last (``model.safetensors``): a file in the run
            (``best.safetensors``, ``average.safetensors``), else a path.
        device, quantize: where the model goes, and ``"int8"`` for int8 weights on the CPU
            (:func:`aiayn.pipelines.loading.ready`; default: a GPU if any, float32).

    Raises:
        ValueError: ``device`` names no device of this machine, or a bad ``quantize``.
    """
    run = Path(run)
    if not (run / "model.safetensors").is_file():
        raise no_weights(run)
    if not (run / "src_tokenizer.json").is_file():
        raise FileNotFoundError(f"{run} holds no src_tokenizer.json: it is not a translation run (a language "
                                f"model's run takes `aiayn generate`)")
    if weights is not None:
        given, weights = weights, run / weights if (run / weights).is_file() else Path(weights)  # the run's first
        if not weights.is_file():
            raise FileNotFoundError(f"weights={str(given)!r}: no such file, in {run} or as a path")
        ours, theirs = saved_config(run), saved_config(weights)
        if ours != theirs:  # another model's weights would read the run's tokens as other words
            differ = ([f"{f.name} {getattr(theirs, f.name)} (the run's {getattr(ours, f.name)})" for f in
                       fields(theirs) if getattr(ours, f.name) != getattr(theirs, f.name)]
                      if type(ours) is type(theirs) else [f"a {type(theirs).__name__}"])
            raise ValueError(f"weights={str(given)!r} are not of this run's model ({type(ours).__name__}): "
                             + ", ".join(differ))
    model = cast(Transformer, load_model(weights or run, device, quantize, kinds=(Transformer,), task="translation"))
    src_tok, tgt_tok = load_tokenizer(run / "src_tokenizer.json"), load_tokenizer(run / "tgt_tokenizer.json")
    ids = special_ids(model.cfg)
    for tok, file, size in ((src_tok, "src_tokenizer.json", model.cfg.src_vocab_size),
                            (tgt_tok, "tgt_tokenizer.json", model.cfg.tgt_vocab_size)):
        check_tokenizer(tok, run / file, size, ids, exact=(run / "args.json").is_file())
    return model, src_tok, tgt_tok


def translate(run: str | os.PathLike, texts: list[str], beam: int = 1,
              weights: str | os.PathLike | None = None, *, device: str | torch.device | None = None,
              quantize: str | None = None) -> list[str]:
    """Translate ``texts`` with the model saved in ``run`` (greedy, or beam search for ``beam > 1``).

    Args:
        weights: as :func:`load_run`'s; default the last weights.
        device, quantize: as :func:`load_run`'s (default: a GPU when there is one, else the CPU; float32).
    """
    model, src_tok, tgt_tok = load_run(run, weights, device=device, quantize=quantize)
    return translate_texts(model, src_tok, tgt_tok, list(texts), beam=beam)


__all__ = ["load_run", "n_best", "translate", "translate_texts"]
