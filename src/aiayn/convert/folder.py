"""A Hugging Face model folder -> an aiayn run folder that ``aiayn generate`` (GPT-2)
or ``aiayn translate`` (Marian) can use.

    FOLDER/config.json + model.safetensors (or pytorch_model.bin) [+ tokenizer.json]
      -> OUT/model.safetensors (weights + config) [+ tokenizer.json]
    a Marian's  FOLDER/source.spm, target.spm, vocab.json [, target_vocab.json, tokenizer_config.json]
      -> OUT/source.spm, target.spm, vocab.json [, target_vocab.json]
         + src_tokenizer.json, tgt_tokenizer.json ({"type": "sentencepiece", ...}: which files, which specials)
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import aiayn
from aiayn.convert import CONVERTERS

if TYPE_CHECKING:
    from aiayn.data.sentencepiece import SentencePieceTokenizer

KINDS = {"hf": None, **{f"hf-{k}": k for k in CONVERTERS}}


def convert(folder: str | os.PathLike, out: str | os.PathLike, kind: str = "hf") -> Path:
    """Convert the Hugging Face model in ``folder`` into the run folder ``out``.

    Args:
        kind: ``"hf"`` takes the folder's own ``model_type``; ``"hf-gpt2"``, ``"hf-marian"`` also check it.

    Returns:
        ``out``; with a Marian's SentencePiece files it is a translation run (``aiayn translate --run out``).

    Raises:
        ValueError: a Marian's vocabulary that does not fit its model (ids beyond it, other ``</s>`` or ``<pad>``).
    """
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")
    folder, out = Path(folder), Path(out)
    config = folder / "config.json"
    if not config.is_file():
        raise FileNotFoundError(f"{folder} holds no config.json; expected a Hugging Face model folder")
    model_type = json.loads(config.read_text()).get("model_type")
    if KINDS[kind] is not None and model_type != KINDS[kind]:
        raise ValueError(f"{folder} holds a {model_type!r} model, not {KINDS[kind]!r} as {kind} says")
    model = aiayn.from_hf(folder)
    marian = model_type == "marian" and (folder / "source.spm").is_file()
    spm = _checked_marian_tokenizers(folder, model.cfg) if marian else ()
    out.mkdir(parents=True, exist_ok=True)
    aiayn.save(model, out)
    if (folder / "tokenizer.json").is_file():
        shutil.copyfile(folder / "tokenizer.json", out / "tokenizer.json")
    for tok, name in zip(spm, ("src_tokenizer.json", "tgt_tokenizer.json")):  # as a translation run keeps them
        tok.save(out / name)
    return out


def _checked_marian_tokenizers(folder: Path, cfg) -> tuple[SentencePieceTokenizer, SentencePieceTokenizer]:
    """A Marian's ``(source, target)`` SentencePiece tokenizers, checked against its model's ``cfg``: ids within
    its vocabularies, the same ``</s>`` and ``<pad>``."""
    from aiayn.data.sentencepiece import marian_tokenizers

    src_tok, tgt_tok = marian_tokenizers(folder)
    for side, tok, size in (("source", src_tok, cfg.src_vocab_size), ("target", tgt_tok, cfg.tgt_vocab_size)):
        if max(tok.itos) >= size:
            raise ValueError(f"{tok.vocab_file} gives ids up to {max(tok.itos)}, beyond the model's {side} "
                             f"vocabulary of {size}")
        if (tok.eos_id, tok.pad_id) != (cfg.eos_id, cfg.pad_id):
            raise ValueError(f"{tok.vocab_file} gives {tok.specials['eos']} and {tok.specials['pad']} the ids "
                             f"{tok.eos_id} and {tok.pad_id}; the model's config {cfg.eos_id} and {cfg.pad_id}")
    return src_tok, tgt_tok
