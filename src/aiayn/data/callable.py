"""A tokenizer you call, as ``transformers``' are called: one small wrapper over every tokenizer here
(:class:`~aiayn.data.tokenizer.CharTokenizer`, :class:`~aiayn.data.bpe.BPETokenizer`,
:class:`~aiayn.data.bpe.PretrainedTokenizer`, :class:`~aiayn.data.wordpiece.WordPieceTokenizer`,
:class:`~aiayn.data.sentencepiece.SentencePieceTokenizer`) that adds the special tokens the model reads and pads
on the model's side.

    tok = aiayn.pipeline("runs/mlm").tokenizer          # or aiayn.pipelines.tokenizer("runs/mlm"): no weights read
    batch = tok(["a text", "another text"], return_tensors="pt", padding=True)
    batch["input_ids"], batch["attention_mask"]          # (B, T) each; mask 1 = a real token
    tok.batch_decode(ids, skip_special_tokens=True)

What is added (``specials``), as each task encodes its inputs:

    "bert"   [CLS] text [SEP]      a BERT (WordPiece), padded on the right; an XLNet: text <sep> <cls>
    "eos"    text </s>             a translation's or a BART's source, a GPT classifier's text; right
    "none"   text                  a GPT prompt, padded on the LEFT so that every prompt's next token is last
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from aiayn.data.wordpiece import WordPieceTokenizer
from aiayn.data.xlnet_tokenizer import XLNetTokenizer

SPECIALS = ("bert", "eos", "none")


class CallableTokenizer:
    """``tok(texts, return_tensors="pt", padding=True)`` over one of our tokenizers.

    Args:
        tok: the tokenizer that encodes (a translation's source side).
        specials: what each text gets around it: ``"bert"``, ``"eos"`` or ``"none"`` (see the module).
        padding_side: ``"right"``, or ``"left"`` for decoder-only generation.
        decoder: the tokenizer that decodes (a translation's target side); default ``tok``.
        max_length: the tokens a text is cut to with ``truncation=True`` (the model's positions); ``None``: uncut.

    Raises:
        ValueError: an unknown ``specials`` or ``padding_side``; ``"bert"`` without a WordPiece tokenizer;
            ``"eos"`` with a tokenizer that has no end-of-text token.
    """

    def __init__(self, tok: Any, specials: str, padding_side: str = "right", decoder: Any = None,
                 max_length: int | None = None) -> None:
        if specials not in SPECIALS:
            raise ValueError(f"specials={specials!r}: expected one of {SPECIALS}")
        if padding_side not in ("left", "right"):
            raise ValueError(f"padding_side={padding_side!r}: expected 'left' or 'right'")
        if (specials == "bert") != isinstance(tok, (WordPieceTokenizer, XLNetTokenizer)):
            raise ValueError(f"specials={specials!r} with a {type(tok).__name__}: 'bert' goes with a WordPiece "
                             f"tokenizer (or XLNet's, which adds its own), and only them")
        if specials == "eos" and getattr(tok, "eos_id", None) is None:
            raise ValueError(f"specials='eos': the {type(tok).__name__} has no end-of-text token")
        self.tok, self.specials, self.padding_side = tok, specials, padding_side
        self.decoder = tok if decoder is None else decoder
        self.max_length = max_length

    def __repr__(self) -> str:
        return (f"CallableTokenizer({type(self.tok).__name__}, specials={self.specials!r}, "
                f"padding_side={self.padding_side!r}, vocab_size={self.vocab_size})")

    @property
    def vocab_size(self) -> int:
        return int(self.tok.vocab_size)

    @property
    def pad_token_id(self) -> int:
        """The id that pads: the tokenizer's padding token, else its end-of-text (GPT-2 has no padding token;
        the attention mask hides it)."""
        pad = getattr(self.tok, "pad_id", None)
        return int(self.tok.eos_id if pad is None else pad)

    @property
    def eos_token_id(self) -> int | None:
        return getattr(self.tok, "eos_id", None)

    @property
    def all_special_ids(self) -> list[int]:
        """The ids that ``skip_special_tokens`` drops: padding, start, end, ``[CLS]``, ``[SEP]``, ``[MASK]``."""
        ids = {getattr(t, name, None) for t in (self.tok, self.decoder)
               for name in ("pad_id", "bos_id", "eos_id", "cls_id", "sep_id", "mask_id")}
        return sorted(i for i in ids if i is not None)

    def encode(self, text: str, truncation: bool = False, max_length: int | None = None) -> list[int]:
        """The ids of one text with the model's special tokens; cut to ``max_length`` (default the model's)
        with ``truncation``, keeping the last token (``[SEP]``, ``</s>``) where there is one."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a string, got {type(text).__name__}")
        if self.specials == "bert":
            ids = list(self.tok.encode(text)[0])  # [CLS] text [SEP]
        else:
            ids = list(self.tok.encode(text)) + ([self.tok.eos_id] if self.specials == "eos" else [])
        limit = max_length or self.max_length
        if truncation and limit is not None and len(ids) > limit:
            ends = 2 if isinstance(self.tok, XLNetTokenizer) else 1  # XLNet's <sep> <cls>, else [SEP] or </s>
            ids = ids[: limit - ends] + ids[-ends:] if self.specials != "none" else ids[:limit]
        return ids

    def __call__(self, texts: str | Sequence[str], return_tensors: str | None = None, padding: bool | str = False,
                 truncation: bool = False, max_length: int | None = None) -> dict[str, Any]:
        """``{"input_ids", "attention_mask"}`` of one text or a list, as ``transformers``' tokenizers give them.

        Args:
            texts: one text (lists of ids come back) or a list (lists of lists).
            return_tensors: ``"pt"`` for ``(B, T)`` long tensors (``(1, T)`` for one text); ``None``: lists.
            padding: ``True`` or ``"longest"`` pads to the longest text, on ``padding_side``.
            truncation, max_length: cut each text (see :meth:`encode`).

        Raises:
            ValueError: ``return_tensors="pt"`` of texts of different lengths without ``padding``, or another
                ``return_tensors``.
        """
        if return_tensors not in (None, "pt"):
            raise ValueError(f"return_tensors={return_tensors!r}: only 'pt' (PyTorch) or None")
        if padding not in (False, True, "longest", "do_not_pad"):
            raise ValueError(f"padding={padding!r}: expected True, False, 'longest' or 'do_not_pad'")
        one = isinstance(texts, str)
        given: list[str] = [texts] if isinstance(texts, str) else list(texts)
        rows = [self.encode(t, truncation, max_length) for t in given]
        masks = [[1] * len(r) for r in rows]
        if padding in (True, "longest") and rows:
            width = max(len(r) for r in rows)
            fill = self.pad_token_id
            if self.padding_side == "left":
                rows = [[fill] * (width - len(r)) + r for r in rows]
                masks = [[0] * (width - len(m)) + m for m in masks]
            else:
                rows = [r + [fill] * (width - len(r)) for r in rows]
                masks = [m + [0] * (width - len(m)) for m in masks]
        if return_tensors == "pt":
            if len({len(r) for r in rows}) > 1:
                raise ValueError("texts of different lengths make no tensor: pass padding=True")
            return {"input_ids": torch.tensor(rows, dtype=torch.long).reshape(len(rows), -1),
                    "attention_mask": torch.tensor(masks, dtype=torch.long).reshape(len(rows), -1)}
        return {"input_ids": rows[0] if one else rows, "attention_mask": masks[0] if one else masks}

    def decode(self, ids: Iterable[int] | torch.Tensor, skip_special_tokens: bool = False) -> str:
        """The text of one row of ids (by the decoding side's tokenizer). ``skip_special_tokens`` drops
        :attr:`all_special_ids` first; without it, what the tokenizer itself does with them (ours stop at
        ``</s>``)."""
        row = [int(i) for i in (ids.tolist() if isinstance(ids, torch.Tensor) else ids)]
        if skip_special_tokens:
            drop = set(self.all_special_ids)
            row = [i for i in row if i not in drop]
        return str(self.decoder.decode(row))

    def batch_decode(self, rows: Iterable[Iterable[int]] | torch.Tensor, skip_special_tokens: bool = False
                     ) -> list[str]:
        """:meth:`decode` of each row of a ``(B, T)`` tensor or a list of lists."""
        return [self.decode(r, skip_special_tokens) for r in (rows.tolist() if isinstance(rows, torch.Tensor)
                                                               else rows)]


__all__ = ["SPECIALS", "CallableTokenizer"]
