"""``aiayn embed``: sentence embeddings from a BERT (a Hugging Face folder or an aiayn run folder).

    text -> WordPiece ([CLS] text [SEP]) -> BERT -> mean of the real tokens' states -> L2-normalised
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from torch import Tensor

import aiayn
from aiayn.data.wordpiece import WordPieceTokenizer
from aiayn.models.bert import BERT, mean_pool


def load_bert(folder: str | os.PathLike) -> tuple[BERT, WordPieceTokenizer, int]:
    """``(model, tokenizer, max_len)`` of a Hugging Face BERT folder or an aiayn run folder."""
    folder = Path(folder)
    if (folder / "config.json").is_file():
        model = aiayn.from_hf(folder)
    elif (folder / "model.safetensors").is_file():
        model = aiayn.load(folder)
    else:
        raise FileNotFoundError(f"{folder} holds neither a Hugging Face model (config.json) nor an aiayn checkpoint")
    if not isinstance(model, BERT):
        raise ValueError(f"{folder} holds a {type(model).__name__}, not a BERT; sentence embeddings need a BERT")
    if (folder / "tokenizer.json").is_file():
        tok = WordPieceTokenizer.load(folder / "tokenizer.json")
    elif (folder / "vocab.txt").is_file():
        tok = WordPieceTokenizer.from_vocab(folder / "vocab.txt")
    else:
        raise FileNotFoundError(f"{folder} holds neither tokenizer.json nor vocab.txt")
    max_len = model.cfg.max_len
    st = folder / "sentence_bert_config.json"  # sentence-transformers' own length limit, when it has one
    if st.is_file():
        max_len = min(max_len, json.loads(st.read_text()).get("max_seq_length", max_len))
    return model.eval(), tok, max_len


@torch.no_grad()
def embed(folder: str | os.PathLike, texts: list[str], batch_size: int = 64) -> Tensor:
    """``(N, C)`` L2-normalised sentence embeddings of ``texts`` (mean pooling over real tokens)."""
    if isinstance(texts, str):
        raise TypeError("texts must be a list of strings, got one string")
    model, tok, max_len = load_bert(folder)
    out = []
    for i in range(0, len(texts), batch_size):
        ids, types, mask = tok.batch(texts[i : i + batch_size], max_len)
        out.append(mean_pool(model(ids, types, mask), mask))
    return torch.cat(out) if out else torch.empty(0, model.cfg.d_model)
