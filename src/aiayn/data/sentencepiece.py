"""Marian's tokenizers (OPUS-MT): SentencePiece models whose pieces take their ids from a vocabulary of the model's,
read as Hugging Face's ``MarianTokenizer`` reads them.

A Marian folder holds two SentencePiece models and one vocabulary for both sides (or one per side,
``target_vocab.json``, when its ``tokenizer_config.json`` says ``separate_vocabs``):

    source.spm    source text -> pieces         "the cat" -> "▁the" "▁cat"
    vocab.json    piece -> id                   {"</s>": 0, "<unk>": 1, "▁the": 5, ..., "<pad>": 58100}
    target.spm    pieces -> target text         "▁die" "▁Katze" -> "die Katze"

The SentencePiece models' own ids are not used: a piece that ``vocab.json`` lacks (a character no training text
held) is ``<unk>``. As ``MarianTokenizer`` does, ``</s>``, ``<unk>`` and ``<pad>`` written in the text are those
tokens, and a leading language code (``>>fra<< ...``, multilingual models) is one token. A source sentence ends
with ``</s>``; decoding starts from ``<pad>`` (Marian has no ``<s>``) and its text leaves out ``<pad>``, ``</s>``
and ``<unk>`` (``batch_decode(..., skip_special_tokens=True)``).

``sentencepiece`` is an optional dependency (``pip install "aiayn[hf]"``), imported when a tokenizer is made.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterable
from functools import partial
from pathlib import Path
from typing import Any

from aiayn.io import atomic_write, write_json

TYPE = "sentencepiece"  # the "type" of a saved tokenizer's JSON (src_tokenizer.json, tgt_tokenizer.json)
SPACE = "▁"  # SentencePiece's mark of a space
CLEAN_UP = [(" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
            (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")]  # Hugging Face's clean_up_tokenization, in its order


def _processor(path: Path) -> Any:
    try:
        import sentencepiece
    except ImportError as e:  # an extra: only Marian's tokenizers need it
        raise ImportError('Marian\'s tokenizers need sentencepiece: pip install "aiayn[hf]"') from e
    if not path.is_file():
        raise FileNotFoundError(f"no SentencePiece model at {path}")
    try:
        return sentencepiece.SentencePieceProcessor(model_file=str(path))
    except (OSError, RuntimeError) as e:
        raise ValueError(f"{path} is not a SentencePiece model: {e}") from e


def _read_json(path: Path) -> Any:
    from aiayn.data.tokenizer import read_json

    return read_json(path, "a tokenizer's settings")


class SentencePieceTokenizer:
    """One side of a Marian model: a SentencePiece model for text <-> pieces, a vocabulary for pieces <-> ids.

    It has :class:`~aiayn.data.tokenizer.CharTokenizer`'s interface, so translation reads and writes text with it
    unchanged. ``bos_id`` is ``pad_id``, Marian's decoder start.

    Args:
        model: the SentencePiece model (``source.spm`` or ``target.spm``).
        vocab: the JSON ``{piece: id}`` (``vocab.json``).
        eos, unk, pad: the special tokens, as ``tokenizer_config.json`` names them.
        clean_up_spaces: decoding drops the space before ``.``, ``,``, ``?``, ``!``, ``'s`` and the like, as
            Hugging Face's ``clean_up_tokenization_spaces`` does.

    Raises:
        ValueError: ``vocab`` is not a ``{piece: id}`` object, or lacks one of the special tokens.
        ImportError: ``sentencepiece`` is not installed.
    """

    def __init__(self, model: str | os.PathLike, vocab: str | os.PathLike, *, eos: str = "</s>", unk: str = "<unk>",
                 pad: str = "<pad>", clean_up_spaces: bool = False) -> None:
        self.model_file, self.vocab_file = Path(model), Path(vocab)
        self.sp = _processor(self.model_file)
        self.stoi = _read_json(self.vocab_file)
        if not isinstance(self.stoi, dict) or not all(isinstance(i, int) for i in self.stoi.values()):
            raise ValueError(f"{vocab} is not a vocabulary: expected a JSON object {{piece: id}}")
        missing = [t for t in (eos, unk, pad) if t not in self.stoi]
        if missing:
            raise ValueError(f"{vocab} lacks the special tokens {missing}")
        self.itos = {i: s for s, i in self.stoi.items()}
        self.specials = {"eos": eos, "unk": unk, "pad": pad}
        self.eos_id, self.unk_id, self.pad_id = self.stoi[eos], self.stoi[unk], self.stoi[pad]
        self.bos_id = self.pad_id
        self.clean_up_spaces = clean_up_spaces
        # Longest first, so one special that starts another is not cut out of it.
        self._split = re.compile("(" + "|".join(re.escape(t) for t in sorted({eos, unk, pad}, key=len,
                                                                                   reverse=True)) + ")")

    def __len__(self) -> int:
        return self.vocab_size

    @property
    def vocab_size(self) -> int:
        return len(self.stoi)

    def tokens(self, text: str) -> list[str]:
        """SentencePiece's pieces of ``text``, one per id :meth:`encode` gives (which is ``<unk>`` for a piece the
        vocabulary lacks), with the specials written in the text and a leading language code as they stand."""
        out: list[str] = []
        for chunk in self._split.split(text):  # the specials written in the text, and the text between them
            if chunk in self.specials.values():
                out.append(chunk)
            elif chunk:
                if chunk.startswith(">>") and (end := chunk.find("<<")) != -1:  # a language code: >>fra<<
                    out.append(chunk[: end + 2])
                    chunk = chunk[end + 2 :]
                out.extend(self.sp.encode(chunk, out_type=str))
        return out

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, without the ``</s>`` a source sentence ends with."""
        return [self.stoi.get(p, self.unk_id) for p in self.tokens(text)]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids`` up to the first ``</s>``, leaving out ``<pad>``, ``<unk>`` and ids outside the vocabulary
        (as ``MarianTokenizer.batch_decode(ids, skip_special_tokens=True)`` does)."""
        pieces = []
        for i in ids:
            i = int(i)
            if i == self.eos_id:
                break
            if i not in (self.pad_id, self.unk_id) and i in self.itos:
                pieces.append(self.itos[i])
        # SentencePiece gives back a piece it lacks (a language code) as it is, ▁ and all: hence the replace.
        text = self.sp.decode_pieces(pieces).replace(SPACE, " ").strip()
        return _clean_up(text) if self.clean_up_spaces else text

    def to_json(self) -> dict:
        """What :meth:`save` writes: the files' names (beside the JSON) and the settings."""
        return {"type": TYPE, "model": self.model_file.name, "vocab": self.vocab_file.name, **self.specials,
                "clean_up_spaces": self.clean_up_spaces}

    def save(self, path: str | os.PathLike) -> None:
        """Write the JSON at ``path`` and copy the SentencePiece model and the vocabulary beside it (under their
        own names), unless they are there already; :meth:`load` reads them back."""
        folder = Path(path).parent
        for file in (self.model_file, self.vocab_file):
            there = folder / file.name
            if not (there.exists() and there.samefile(file)):
                atomic_write(there, partial(shutil.copyfile, file))
        write_json(path, self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike) -> SentencePieceTokenizer:
        """The tokenizer :meth:`save` wrote at ``path``.

        Raises:
            ValueError: ``path`` is not such a JSON; FileNotFoundError: a file it names is missing.
        """
        data = _read_json(Path(path))
        if not is_saved(data):
            raise ValueError(f"{path} is not a SentencePiece tokenizer saved by aiayn (\"type\": \"{TYPE}\")")
        folder = Path(path).parent
        for key in ("model", "vocab", "eos", "unk", "pad"):
            if not isinstance(data.get(key), str):
                raise ValueError(f"{path} has no {key!r} string, which a SentencePiece tokenizer needs")
            if key in ("model", "vocab") and (Path(data[key]).name != data[key] or data[key] in ("", ".", "..")):
                raise ValueError(f"{path} names {key} {data[key]!r}; it must be a file beside it (a plain file "
                                 f"name), not a path that leads out of its folder")
        return cls(folder / data["model"], folder / data["vocab"], eos=data["eos"], unk=data["unk"],
                   pad=data["pad"], clean_up_spaces=bool(data.get("clean_up_spaces", False)))


def is_saved(data: Any) -> bool:
    """Whether ``data`` (a saved tokenizer's JSON) is a :class:`SentencePieceTokenizer`'s."""
    return isinstance(data, dict) and data.get("type") == TYPE


def is_sentencepiece(path: str | os.PathLike) -> bool:
    """Whether the tokenizer JSON at ``path`` is a :class:`SentencePieceTokenizer`'s (``"type": "sentencepiece"``)."""
    try:
        return is_saved(json.loads(Path(path).read_text(encoding="utf-8")))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False


def marian_tokenizers(folder: str | os.PathLike) -> tuple[SentencePieceTokenizer, SentencePieceTokenizer]:
    """``(source, target)`` tokenizers of a Hugging Face Marian folder, as ``MarianTokenizer.from_pretrained``
    reads its ``source.spm``, ``target.spm``, ``vocab.json`` (and ``target_vocab.json``) and
    ``tokenizer_config.json``.

    Raises:
        FileNotFoundError: a file is missing; ValueError: a file is not what it should be.
    """
    folder = Path(folder)
    config_file = folder / "tokenizer_config.json"
    config = _read_json(config_file) if config_file.is_file() else {}

    def token(key: str, default: str) -> str:  # a string, or an AddedToken as older versions saved it
        value = config.get(key) or default
        return value["content"] if isinstance(value, dict) else str(value)

    options: dict[str, Any] = {"eos": token("eos_token", "</s>"), "unk": token("unk_token", "<unk>"),
                               "pad": token("pad_token", "<pad>"),
                               "clean_up_spaces": bool(config.get("clean_up_tokenization_spaces", False))}
    vocab = folder / "vocab.json"
    target_vocab = folder / "target_vocab.json" if config.get("separate_vocabs") else vocab
    for file in (vocab, target_vocab):
        if not file.is_file():
            raise FileNotFoundError(f"{folder} holds no {file.name}, which Marian's tokenizers need")
    return (SentencePieceTokenizer(folder / "source.spm", vocab, **options),
            SentencePieceTokenizer(folder / "target.spm", target_vocab, **options))


def _clean_up(text: str) -> str:
    """Hugging Face's ``clean_up_tokenization``: no space before punctuation and English contractions."""
    for spaced, joined in CLEAN_UP:
        text = text.replace(spaced, joined)
    return text
