"""Sentence embeddings with a saved BERT (a run of ours, or a Hugging Face BERT folder; RoBERTa, DistilBERT,
ALBERT alike): text -> WordPiece ([CLS] text [SEP]) -> BERT -> mean of the real tokens' states -> L2-normalised.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import cast

import torch
from torch import Tensor

from aiayn.data.wordpiece import WordPieceTokenizer, bert_tokenizer
from aiayn.data.xlnet_tokenizer import XLNetTokenizer, xlnet_tokenizer
from aiayn.models import checkpoint
from aiayn.models.bert import BERT, mean_pool
from aiayn.models.xlnet import XLNet
from aiayn.pipelines.loading import check_tokenizer, no_weights, ready, special_ids
from aiayn.training import device as devices


def load_bert(folder: str | os.PathLike, *, device: str | torch.device | None = None,
              quantize: str | None = None) -> tuple[BERT, WordPieceTokenizer | XLNetTokenizer, int]:
    """``(model, tokenizer, max_len)`` of a Hugging Face BERT folder or an aiayn run folder.

    Args:
        device, quantize: where the model goes, and ``"int8"`` for int8 weights on the CPU
            (:func:`aiayn.pipelines.loading.ready`; default: a GPU if any, float32).

    Raises:
        ValueError: ``device`` names no device of this machine, or a bad ``quantize``.
    """
    folder = Path(folder)
    if (folder / "config.json").is_file():
        from aiayn.convert import from_hf

        model = from_hf(folder)
    elif (folder / "model.safetensors").is_file():
        model = checkpoint.load(folder)
    elif (folder / "args.json").is_file():  # a run of ours that has written no weights yet
        raise no_weights(folder)
    else:
        raise FileNotFoundError(f"{folder} holds neither a Hugging Face model (config.json) nor an aiayn checkpoint")
    if not isinstance(model, (BERT, XLNet)):
        raise ValueError(f"{folder} holds a {type(model).__name__}, not a BERT; sentence embeddings need a BERT "
                         f"(or an XLNet)")
    tok = text_tokenizer(folder)
    file = folder / next(f for f in ("spiece.model", "tokenizer.json", "vocab.txt") if (folder / f).is_file())
    check_tokenizer(tok, file, model.cfg.vocab_size, special_ids(model.cfg), exact=(folder / "args.json").is_file())
    # the model's positions (a RoBERTa's fewer: they start above pad_id); an XLNet's are relative: its pre-training's
    max_len = getattr(model.cfg, "max_tokens", 512)
    st = folder / "sentence_bert_config.json"  # sentence-transformers' own length limit, when it has one
    if st.is_file():
        max_len = min(max_len, json.loads(st.read_text()).get("max_seq_length", max_len))
    return cast(BERT, ready(model, device, quantize)), tok, max_len


def embed(folder: str | os.PathLike, texts: list[str], batch_size: int = 64, *,
          device: str | torch.device | None = None, quantize: str | None = None) -> Tensor:
    """``(N, C)`` L2-normalised sentence embeddings of ``texts`` (mean pooling over real tokens), on the CPU.

    Args:
        folder: a Hugging Face BERT folder or an aiayn run folder (:func:`load_bert`).
        device, quantize: as :func:`load_bert`'s (default: a GPU when there is one, else the CPU; float32).
    """
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings, got one string")
    model, tok, max_len = load_bert(folder, device=device, quantize=quantize)
    return embed_texts(model, tok, max_len, texts, batch_size)


@torch.no_grad()
def embed_texts(model: BERT | XLNet, tok: WordPieceTokenizer | XLNetTokenizer, max_len: int, texts: list[str],
                batch_size: int = 64) -> Tensor:
    """:func:`embed` with a loaded model and tokenizer (:func:`load_bert`)."""
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings, got one string")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    where = devices.of(model)
    out = []
    for i in range(0, len(texts), batch_size):
        ids, types, mask = devices.move(tok.batch(texts[i : i + batch_size], max_len), where)
        out.append(mean_pool(model(ids, token_type_ids=types, attention_mask=mask), mask).cpu())
    return torch.cat(out) if out else torch.empty(0, model.cfg.d_model)


def text_tokenizer(folder: str | os.PathLike) -> WordPieceTokenizer | XLNetTokenizer:
    """The tokenizer of an encoder's folder: XLNet's SentencePiece when it holds ``spiece.model``, else BERT's
    WordPiece (:func:`aiayn.data.wordpiece.bert_tokenizer`)."""
    if (Path(folder) / "spiece.model").is_file():
        return xlnet_tokenizer(folder)
    return bert_tokenizer(folder)


__all__ = ["bert_tokenizer", "embed", "embed_texts", "load_bert", "text_tokenizer"]
