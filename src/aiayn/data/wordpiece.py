"""WordPiece, BERT's tokenizer (Wu et al., 2016; Devlin et al., 2019), run by Hugging Face ``tokenizers``.

Text is lower-cased and split on whitespace and punctuation; each word is then cut greedily into the
longest pieces in the vocabulary, continuation pieces marked ``##``:

    "Unaffable people"  ->  [CLS] un ##aff ##able people [SEP]

A pair becomes ``[CLS] A [SEP] B [SEP]`` with segment ids 0 for ``[CLS] A [SEP]`` and 1 for ``B [SEP]``.
Our trained vocabularies put the specials first: ``[PAD]`` 0, ``[UNK]`` 1, ``[CLS]`` 2, ``[SEP]`` 3,
``[MASK]`` 4; BERT's own ``vocab.txt`` keeps its ids (``[PAD]`` 0, ``[CLS]`` 101, ...).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from torch import Tensor

from aiayn.data.tokenizer import read_json
from aiayn.io import write_text

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


class WordPieceTokenizer:
    """A ``tokenizers`` WordPiece tokenizer with BERT's specials; ``pad_id``, ``cls_id``, ``sep_id``,
    ``mask_id``, ``unk_id`` name their ids, ``first_normal_id`` is the first id after them all."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        ids = {s: tokenizer.token_to_id(s) for s in SPECIALS}
        missing = [s for s, i in ids.items() if i is None]
        if missing:
            raise ValueError(f"a BERT tokenizer needs the special tokens {list(SPECIALS)}; missing {missing}")
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (ids[s] for s in SPECIALS)
        # the first id past every special (and past a released BERT vocabulary's [unused] slots among them):
        # where the masked LM's random replacements start
        self.first_normal_id = 1 + max(i for i in ids.values() if i is not None)
        tokenizer.no_padding()
        tokenizer.no_truncation()
        tokenizer.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", self.cls_id), ("[SEP]", self.sep_id)])
        self.tokenizer = tokenizer

    @staticmethod
    def _empty(vocab: dict[str, int] | None = None, lowercase: bool = True) -> Tokenizer:
        tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]") if vocab else models.WordPiece(unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece()
        if vocab:  # specials are whole tokens, never split, and decoding skips them
            tok.add_special_tokens([s for s in SPECIALS if s in vocab])
        return tok

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 8000, min_frequency: int = 2) -> WordPieceTokenizer:
        """Learn a vocabulary of at most ``vocab_size`` pieces from ``texts``."""
        tok = cls._empty()
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                            special_tokens=list(SPECIALS))
        tok.train_from_iterator(texts, trainer)
        # The trainer numbers the pieces in an order that varies from run to run (it iterates hash
        # maps); number them specials first, then sorted, so the same texts always give the same ids.
        pieces = sorted(set(tok.get_vocab()) - set(SPECIALS))
        return cls(cls._empty({piece: i for i, piece in enumerate([*SPECIALS, *pieces])}))

    @classmethod
    def from_vocab(cls, path: str | os.PathLike, lowercase: bool = True) -> WordPieceTokenizer:
        """BERT's ``vocab.txt``: one piece per line, the line number is its id."""
        lines = Path(path).read_text(encoding="utf-8").split("\n")  # splitlines would also split at \x85, \u2028
        lines = lines[:-1] if lines and lines[-1] == "" else lines  # the final newline ends the last line
        return cls(cls._empty({piece: i for i, piece in enumerate(lines)}, lowercase))

    @classmethod
    def load(cls, path: str | os.PathLike) -> WordPieceTokenizer:
        """A ``tokenizer.json`` (ours, or one that came with BERT weights).

        Raises:
            ValueError: naming ``path``, when it is not a ``tokenizers`` JSON (not UTF-8, not JSON, no model).
        """
        text = json.dumps(read_json(path, "a tokenizers JSON"))
        try:
            return cls(Tokenizer.from_str(text))
        except Exception as e:  # tokenizers raises its own Exception type for a JSON it cannot read
            raise ValueError(f"{path} is not a tokenizers JSON file: {e}") from e

    def save(self, path: str | os.PathLike) -> None:
        write_text(path, self.tokenizer.to_str())

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def __len__(self) -> int:  # as every other tokenizer here
        return self.vocab_size

    def encode(self, text: str, pair: str | None = None) -> tuple[list[int], list[int]]:
        """``(ids, segment ids)`` of ``[CLS] text [SEP]`` or ``[CLS] text [SEP] pair [SEP]``."""
        enc = self.tokenizer.encode(text, pair)
        return enc.ids, enc.type_ids

    def decode(self, ids: Iterable[int]) -> str:
        return self.tokenizer.decode([int(i) for i in ids])

    def batch(self, texts: Sequence[str], max_len: int = 512) -> tuple[Tensor, Tensor, Tensor]:
        """``(ids, segment ids, attention mask)``, each ``(B, T)``: single texts, cut to ``max_len``
        tokens (keeping the final ``[SEP]``), padded on the right."""
        if not texts:
            raise ValueError("texts: give at least one text")
        if max_len < 2:
            raise ValueError(f"max_len={max_len} must be at least 2 ([CLS] and [SEP])")
        rows = []
        for row, _ in (self.encode(t) for t in texts):
            rows.append(row if len(row) <= max_len else row[: max_len - 1] + [self.sep_id])
        width = max(len(r) for r in rows)
        ids = torch.tensor([r + [self.pad_id] * (width - len(r)) for r in rows])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        return ids, torch.zeros_like(ids), mask


def bert_tokenizer(folder: str | os.PathLike) -> WordPieceTokenizer:
    """The WordPiece tokenizer of a BERT run or Hugging Face folder: its ``tokenizer.json``, else ``vocab.txt``
    (lowercasing unless ``tokenizer_config.json`` says ``do_lower_case: false``, as a cased BERT's does)."""
    folder = Path(folder)
    if (folder / "tokenizer.json").is_file():
        return WordPieceTokenizer.load(folder / "tokenizer.json")
    if (folder / "vocab.txt").is_file():
        settings = folder / "tokenizer_config.json"
        lower = json.loads(settings.read_text()).get("do_lower_case", True) if settings.is_file() else True
        return WordPieceTokenizer.from_vocab(folder / "vocab.txt", lowercase=lower)
    raise FileNotFoundError(f"{folder} holds neither tokenizer.json nor vocab.txt")


__all__ = ["SPECIALS", "WordPieceTokenizer", "bert_tokenizer"]
