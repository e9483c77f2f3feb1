"""A character tokenizer: one id per character, with the special tokens every model here expects.

Ids 0-3 are ``<pad>``, ``<s>``, ``</s>``, ``<unk>``, matching the configs' ``pad_id``, ``bos_id``, ``eos_id``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from aiayn.io import write_json

SPECIALS = ("<pad>", "<s>", "</s>", "<unk>")
PAD, BOS, EOS, UNK = range(4)


def content_ids(ids: Iterable[int], vocab_size: int) -> list[int]:
    """The ids a decoder turns into text: up to the first ``</s>``, without ``<pad>`` and ``<s>``,
    ids outside the vocabulary read as ``<unk>``. Every tokenizer here decodes through it."""
    out = []
    for i in ids:
        i = int(i)
        if i == EOS:
            break
        if i not in (PAD, BOS):
            out.append(i if 0 <= i < vocab_size else UNK)
    return out


def read_json(path: str | os.PathLike, what: str = "a saved tokenizer") -> dict:
    """The JSON object in the file at ``path``.

    Raises:
        FileNotFoundError: no file there; ValueError: naming ``path``, when it is not UTF-8, not JSON, or not
            an object.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"{path} is not UTF-8 text ({e.reason} at byte {e.start}), so not {what}") from e
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not JSON ({e}), so not {what}") from e
    if not isinstance(data, dict):
        raise ValueError(f"{path} holds a JSON {type(data).__name__}, not {what}")
    return data


class CharTokenizer:
    """Characters seen in training get ids; anything else is ``<unk>``."""

    def __init__(self, chars: Iterable[str]) -> None:
        self.itos = list(SPECIALS) + [c for c in dict.fromkeys(chars) if c not in SPECIALS]
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = PAD, BOS, EOS, UNK

    @classmethod
    def train(cls, texts: Iterable[str]) -> CharTokenizer:
        return cls(sorted({c for t in texts for c in t}))

    def __len__(self) -> int:
        return len(self.itos)

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        return [self.stoi.get(c, UNK) for c in text]

    def tokens(self, text: str) -> list[str]:
        return list(text)

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``, stopping at ``</s>`` and skipping ``<pad>`` and ``<s>``."""
        return "".join(self.itos[i] for i in content_ids(ids, self.vocab_size))

    def to_json(self) -> dict:
        return {"type": "char", "vocab": self.itos}

    def save(self, path: str | os.PathLike) -> None:
        write_json(path, self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike) -> CharTokenizer:
        data = read_json(path)
        vocab = data.get("vocab")
        if (data.get("type") != "char" or not isinstance(vocab, list) or list(vocab[:4]) != list(SPECIALS)
                or not all(isinstance(c, str) for c in vocab) or len(set(vocab)) != len(vocab)):
            raise ValueError(f"{path} is not a character tokenizer saved by aiayn (\"type\": \"char\", a \"vocab\" "
                             f"list of distinct strings starting with {list(SPECIALS)})")
        return cls(vocab[4:])
