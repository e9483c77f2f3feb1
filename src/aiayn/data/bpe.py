"""Byte-level byte-pair encoding, trained and run by Hugging Face ``tokenizers``.

Section 5.1 of the paper: "Sentences were encoded using byte-pair encoding, which has a shared
source-target vocabulary of about 37000 tokens" (Sennrich et al., 2016). BPE starts from single symbols
and repeatedly merges the most frequent adjacent pair into a new symbol until the vocabulary is full.

Here the symbols are the 256 bytes of UTF-8 (as GPT-2 does), not characters:

    "fährt"  ->  bytes  66 c3a4 68 72 74  ->  after merges, e.g.  "f" "ähr" "t"
    "公"     ->  bytes  e5 85 ac          ->  one token if training saw it often, else up to three

so every string can be encoded (there is no ``<unk>`` for a character unseen in training, Chinese
included) and decoding the bytes gives back the text exactly: no normaliser, no lower-casing, spaces,
tabs and newlines kept. Ids 0-3 are ``<pad>``, ``<s>``, ``</s>``, ``<unk>`` as in
:class:`~aiayn.data.tokenizer.CharTokenizer`, whose interface this class follows.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from aiayn.data.tokenizer import (
    BOS,
    EOS,
    PAD,
    SPECIALS,
    UNK,
    CharTokenizer,
    content_ids,
    is_char_tokenizers_json,
    read_json,
)
from aiayn.io import write_text

if TYPE_CHECKING:
    from aiayn.data.sentencepiece import SentencePieceTokenizer

# The byte alphabet every byte-level vocabulary holds, plus the four specials.
MIN_VOCAB_SIZE = len(SPECIALS) + len(pre_tokenizers.ByteLevel.alphabet())
MASK = "<mask>"


class BPETokenizer:
    """Subword tokenizer: a trained ``tokenizers.Tokenizer`` behind CharTokenizer's interface.

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` whose ids 0-3 are ``<pad>``, ``<s>``, ``</s>``, ``<unk>``
            (as :meth:`train` makes).
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        got = [tokenizer.token_to_id(s) for s in SPECIALS]
        if got != list(range(len(SPECIALS))):
            raise ValueError(f"tokenizer must give {list(SPECIALS)} the ids 0-3, got {got}")
        # Text that happens to contain "<s>" or "</s>" is text: encode it byte by byte, so that
        # encode() never adds a special token and decode() gives it back.
        tokenizer.encode_special_tokens = True
        self.tokenizer = tokenizer
        self.pad_id, self.bos_id, self.eos_id, self.unk_id = PAD, BOS, EOS, UNK
        self.mask_id = tokenizer.token_to_id(MASK)  # None unless trained with mask=True (BART's <mask>)

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 8000, min_frequency: int = 2,
              mask: bool = False) -> BPETokenizer:
        """Learn merges from ``texts`` until the vocabulary holds ``vocab_size`` tokens (or no pair is
        seen ``min_frequency`` times).

        Args:
            texts: training sentences.
            vocab_size: the most tokens, specials and the 256 bytes included; at least 260.
            min_frequency: how often a pair must occur to be merged.
            mask: add a ``<mask>`` token (id 4) for denoising pre-training; it decodes as ``<mask>``.

        Returns:
            The trained tokenizer; its ``vocab_size`` is at most the one asked for.
        """
        if vocab_size < MIN_VOCAB_SIZE + mask:
            raise ValueError(
                f"vocab_size={vocab_size} is too small: a byte-level vocabulary holds {len(SPECIALS) + mask} specials "
                f"and 256 bytes, so it must be at least {MIN_VOCAB_SIZE + mask}"
            )
        if min_frequency < 1:
            raise ValueError(f"min_frequency={min_frequency} must be at least 1")
        tokenizer = Tokenizer(models.BPE(unk_token=SPECIALS[UNK]))
        # add_prefix_space=False: a prefix space would come back from decode() as an extra space.
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=list(SPECIALS) + [MASK] * mask,  # given first, so they get ids 0-3 (and 4)
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # all 256 bytes, seen in training or not
            show_progress=False,
        )
        tokenizer.train_from_iterator(texts, trainer)
        return cls(tokenizer)

    def __len__(self) -> int:
        return self.tokenizer.get_vocab_size()

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, no special tokens added."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def tokens(self, text: str) -> list[str]:
        """The piece of ``text`` each token covers, for labelling pictures.

        A token that is part of one character's bytes (a rare Chinese character, say) is labelled with
        that whole character, so such a character shows once per piece.
        """
        return [text[a:b] for a, b in self.tokenizer.encode(text, add_special_tokens=False).offsets]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``, stopping at ``</s>`` and skipping ``<pad>`` and ``<s>``; unknown ids read ``<unk>``."""
        return self.tokenizer.decode(content_ids(ids, self.vocab_size), skip_special_tokens=False)

    def to_json(self) -> dict:
        """The ``tokenizers`` JSON of this tokenizer (what :meth:`save` writes)."""
        return json.loads(self.tokenizer.to_str())

    def save(self, path: str | os.PathLike) -> None:
        """Write the ``tokenizers`` JSON atomically; :meth:`load` or :func:`load_tokenizer` read it back."""
        write_text(path, self.tokenizer.to_str())

    @classmethod
    def load(cls, path: str | os.PathLike) -> BPETokenizer:
        tokenizer = _read(path)
        if not isinstance(tokenizer.model, models.BPE):
            raise ValueError(f"{path} holds a {type(tokenizer.model).__name__} model, not BPE")
        return cls(tokenizer)


def _read(path: str | os.PathLike) -> Tokenizer:
    text = json.dumps(read_json(path))  # not UTF-8, not JSON: named
    try:
        return Tokenizer.from_str(text)
    except Exception as e:  # tokenizers raises its own Exception type for bad JSON
        raise ValueError(f"{path} is not a tokenizers JSON file: {e}") from e


class PretrainedTokenizer:
    """Any ``tokenizers`` JSON as it came with pretrained weights (GPT-2's ``tokenizer.json``), with its
    own ids; ``eos_id`` is its end-of-text token if it has one (``<|endoftext|>``, ``</s>``)."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        ids = [tokenizer.token_to_id(t) for t in ("<|endoftext|>", "</s>")]
        self.eos_id = next((i for i in ids if i is not None), None)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Iterable[int]) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    def save(self, path: str | os.PathLike) -> None:
        write_text(path, self.tokenizer.to_str())


def load_tokenizer(path: str | os.PathLike
                   ) -> CharTokenizer | BPETokenizer | PretrainedTokenizer | SentencePieceTokenizer:
    """The tokenizer saved at ``path``: a :class:`CharTokenizer` (JSON with ``"type": "char"``), a Marian's
    :class:`~aiayn.data.sentencepiece.SentencePieceTokenizer` (``"type": "sentencepiece"``), a
    :class:`BPETokenizer` (``tokenizers`` BPE JSON with aiayn's specials at ids 0-3) or, for any other
    ``tokenizers`` JSON (one that came with pretrained weights), a :class:`PretrainedTokenizer`."""
    data = read_json(path)
    if data.get("type") == "char":
        return CharTokenizer.load(path)
    if is_char_tokenizers_json(data):  # ours as `aiayn export` writes it for transformers: the same ids
        return CharTokenizer.from_tokenizers(data, path)
    if data.get("type") == "sentencepiece":  # a Marian's, which `aiayn convert hf-marian` writes
        from aiayn.data.sentencepiece import SentencePieceTokenizer

        return SentencePieceTokenizer.load(path)
    if isinstance(data.get("model"), dict) and data["model"].get("type") == "BPE":
        tokenizer = _read(path)
        if [tokenizer.token_to_id(s) for s in SPECIALS] == list(range(len(SPECIALS))):
            return BPETokenizer(tokenizer)
        return PretrainedTokenizer(tokenizer)
    raise ValueError(
        f"{path} is neither a character tokenizer (\"type\": \"char\") nor a BPE tokenizer "
        f"(\"model\": {{\"type\": \"BPE\"}}); its top-level keys are {sorted(data)}"
    )


def train_tokenizers(
    pairs: Sequence[tuple[str, str]], kind: str = "bpe", vocab_size: int = 8000, joint: bool = True
) -> tuple[CharTokenizer | BPETokenizer, CharTokenizer | BPETokenizer]:
    """Source and target tokenizers for ``pairs`` of (source, target) text.

    Args:
        pairs: training pairs.
        kind: ``"bpe"`` or ``"char"``.
        vocab_size: the most tokens of each BPE tokenizer (a character vocabulary takes every
            character seen).
        joint: one tokenizer trained on both sides and returned twice (the paper's shared vocabulary,
            Section 5.1, which lets the embeddings be tied, Section 3.4); else one per side.

    Returns:
        ``(src_tok, tgt_tok)``; the same object twice when ``joint``.
    """
    if kind == "bpe":
        def train(texts: Iterable[str]) -> CharTokenizer | BPETokenizer:
            return BPETokenizer.train(texts, vocab_size=vocab_size)
    elif kind == "char":
        train = CharTokenizer.train
    else:
        raise ValueError(f"kind={kind!r}: expected 'bpe' or 'char'")
    if joint:
        tok = train([s for s, _ in pairs] + [t for _, t in pairs])
        return tok, tok
    return train([s for s, _ in pairs]), train([t for _, t in pairs])
