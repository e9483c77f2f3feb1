"""A character tokenizer: one id per character, with the special tokens every model here expects.

Ids 0-3 are ``<pad>``, ``<s>``, ``</s>``, ``<unk>``, matching the configs' ``pad_id``, ``bos_id``, ``eos_id``.

It saves as our own small JSON (``{"type": "char", "vocab": [...]}``); :meth:`CharTokenizer.to_tokenizers` gives
the same vocabulary in Hugging Face ``tokenizers``' own format, for an exported folder that ``AutoTokenizer`` opens:

    "ab" newline "?"  --Split(any one character, isolated)-->  "a" "b" newline "?"  --WordLevel-->  ids
                      ("?" unseen in training: <unk> = 3)
    ids  --Fuse (join without spaces)-->  "ab" newline "<unk>"
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from aiayn import io
from aiayn.io import write_json

if TYPE_CHECKING:
    from tokenizers import Tokenizer

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
    """The JSON object in the tokenizer file at ``path`` (:func:`aiayn.io.read_json`: a file that is not UTF-8, not
    JSON or not an object is refused naming it)."""
    return io.read_json(path, what)


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

    def to_tokenizers(self) -> Tokenizer:
        """This vocabulary as a Hugging Face ``tokenizers.Tokenizer`` that encodes and decodes as :meth:`encode`
        and :meth:`decode` do: a WordLevel model over single characters behind a pre-tokenizer that splits
        the text into every character, spaces and newlines included.

        Returns:
            A ``Tokenizer`` with the same ids (``<pad>``, ``<s>``, ``</s>``, ``<unk>`` at 0-3, added as special
            tokens; a character outside the vocabulary is ``<unk>``), no normaliser (text is taken as it is) and
            a ``Fuse`` decoder (tokens joined without spaces). It sets ``encode_special_tokens`` so that text
            spelling ``"<s>"`` is three characters, as :meth:`encode` reads it; that flag is not saved in
            ``tokenizer.json``, so an exported folder says it in ``tokenizer_config.json``
            (``"split_special_tokens": true``).
        """
        from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

        tokenizer = Tokenizer(models.WordLevel(dict(self.stoi), unk_token=SPECIALS[UNK]))
        # "[\s\S]", not ".": Oniguruma's "." does not match a newline. One code point per piece, as list(text)
        # splits a str (not one grapheme: "e" + a combining accent is two pieces, as in encode).
        tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
        tokenizer.decoder = decoders.Fuse()
        tokenizer.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
        tokenizer.encode_special_tokens = True
        return tokenizer

    @classmethod
    def from_tokenizers(cls, data: dict, path: str | os.PathLike = "the tokenizer") -> CharTokenizer:
        """The character tokenizer that :meth:`to_tokenizers` wrote as ``data`` (a ``tokenizer.json``'s object,
        read from ``path``), so an exported folder comes back as the tokenizer it was made from.

        Raises:
            ValueError: naming ``path``, when ``data`` is not such a tokenizer: not a WordLevel model whose
                ids are 0, 1, 2, ... with the four specials first and single characters after them.
        """
        model = data.get("model")
        vocab = model.get("vocab") if isinstance(model, dict) else None
        if not is_char_tokenizers_json(data) or not isinstance(vocab, dict):
            raise ValueError(f"{path} is not a character tokenizer in tokenizers' format (a WordLevel model over "
                             f"single characters, split one character at a time)")
        itos = sorted(vocab, key=vocab.__getitem__)
        if [vocab[s] for s in itos] != list(range(len(itos))) or itos[:4] != list(SPECIALS):
            raise ValueError(f"{path}: a character vocabulary must give {list(SPECIALS)} the ids 0-3 and the "
                             f"characters after them ids with no gaps")
        return cls(itos[4:])


def is_char_tokenizers_json(data: dict) -> bool:
    """Whether ``data`` (a ``tokenizer.json``'s object) is a character vocabulary that
    :meth:`CharTokenizer.to_tokenizers` wrote: a WordLevel model behind a one-character split."""
    model, pre = data.get("model"), data.get("pre_tokenizer")
    return (isinstance(model, dict) and model.get("type") == "WordLevel" and isinstance(pre, dict)
            and pre.get("type") == "Split" and pre.get("pattern") == {"Regex": r"[\s\S]"})
