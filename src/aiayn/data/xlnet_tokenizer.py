"""XLNet's tokenizer: the SentencePiece unigram model of a released folder's ``spiece.model``, run by Hugging Face
``tokenizers`` as ``transformers``' ``XLNetTokenizer`` runs it.

    text -> normalise (`` and '' -> ", NFKD, accents stripped, the model's own character map) -> split on
    whitespace, each word marked with "▁" -> the unigram pieces of highest score -> ids (the model's own)

A text becomes ``text <sep> <cls>`` with segment ids 0, 0, 2; a pair ``A <sep> B <sep> <cls>`` (0 ... 1 ... 2):
XLNet reads its summary from the last token, so ``<cls>`` comes last. The pieces and their scores are read from
the model file (``sentencepiece``'s protobuf, the ``hf`` extra), so the ids are the checkpoint's.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import Unigram
from torch import Tensor

SPECIALS = ("<unk>", "<s>", "</s>", "<cls>", "<sep>", "<pad>", "<mask>", "<eod>", "<eop>")
UNKNOWN = 2  # sentencepiece's ModelProto.SentencePiece.Type.UNKNOWN


class XLNetTokenizer:
    """The tokenizer of ``spiece.model``; ``pad_id``, ``cls_id``, ``sep_id``, ``mask_id``, ``unk_id``,
    ``bos_id``, ``eos_id`` name their ids (XLNet's vocabulary: 5, 3, 4, 6, 0, 1, 2).

    Args:
        path: the SentencePiece model file.
        lowercase: lower-case the text first (``do_lower_case``; the released XLNets are cased).
    """

    def __init__(self, path: str | os.PathLike, lowercase: bool = False) -> None:
        try:
            from sentencepiece import sentencepiece_model_pb2
        except ImportError as e:  # pragma: no cover - the hf extra has it
            raise ImportError("reading spiece.model needs sentencepiece: pip install 'aiayn[hf]'") from e
        proto = sentencepiece_model_pb2.ModelProto()  # type: ignore[attr-defined,unused-ignore]
        proto.ParseFromString(Path(path).read_bytes())
        vocab = [(p.piece, p.score) for p in proto.pieces]
        unk = next((i for i, p in enumerate(proto.pieces) if p.type == UNKNOWN), 0)
        tok = Tokenizer(Unigram(vocab, unk_id=unk, byte_fallback=False))
        steps = [normalizers.Replace("``", '"'), normalizers.Replace("''", '"'), normalizers.NFKD(),
                 normalizers.StripAccents(), *([normalizers.Lowercase()] if lowercase else [])]
        charsmap = proto.normalizer_spec.precompiled_charsmap
        if charsmap:
            steps.append(normalizers.Precompiled(charsmap))
        tok.normalizer = normalizers.Sequence(steps)
        words = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(), words])
        tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
        present = [s for s in SPECIALS if tok.token_to_id(s) is not None]
        tok.add_special_tokens([AddedToken(s, lstrip=s == "<mask>") for s in present])
        ids = {s: tok.token_to_id(s) for s in SPECIALS}
        missing = [s for s in ("<cls>", "<sep>", "<pad>") if ids[s] is None]
        if missing:
            raise ValueError(f"{path}: an XLNet tokenizer needs the pieces {missing}")
        self.unk_id, self.bos_id, self.eos_id, self.cls_id, self.sep_id, self.pad_id, self.mask_id = (
            ids["<unk>"], ids["<s>"], ids["</s>"], ids["<cls>"], ids["<sep>"], ids["<pad>"], ids["<mask>"])
        tok.post_processor = processors.TemplateProcessing(
            single="$A:0 <sep>:0 <cls>:2", pair="$A:0 <sep>:0 $B:1 <sep>:1 <cls>:2",
            special_tokens=[("<sep>", self.sep_id), ("<cls>", self.cls_id)])
        self.tokenizer = tok

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def __len__(self) -> int:
        return self.vocab_size

    def tokens(self, text: str) -> list[str]:
        """The pieces of ``text``, without specials."""
        return self.tokenizer.encode(text, add_special_tokens=False).tokens

    def encode(self, text: str, pair: str | None = None) -> tuple[list[int], list[int]]:
        """``(ids, segment ids)`` of ``text <sep> <cls>`` or ``text <sep> pair <sep> <cls>``."""
        enc = self.tokenizer.encode(text, pair)
        return enc.ids, enc.type_ids

    def decode(self, ids: Iterable[int]) -> str:
        return self.tokenizer.decode([int(i) for i in ids])

    def batch(self, texts: Sequence[str], max_len: int = 512) -> tuple[Tensor, Tensor, Tensor]:
        """``(ids, segment ids, attention mask)``, each ``(B, T)``: single texts, cut to ``max_len`` tokens
        (keeping the final ``<sep> <cls>``), padded on the right (an XLNet classifies each row's last real token,
        :meth:`aiayn.models.xlnet.XLNet.classify`)."""
        if not texts:
            raise ValueError("texts: give at least one text")
        if max_len < 3:
            raise ValueError(f"max_len={max_len} must be at least 3 (a token, <sep> and <cls>)")
        rows, types = [], []
        for row, kinds in (self.encode(t) for t in texts):
            cut = row if len(row) <= max_len else row[: max_len - 2] + row[-2:]
            rows.append(cut)
            types.append(kinds if len(kinds) <= max_len else kinds[: max_len - 2] + kinds[-2:])
        width = max(len(r) for r in rows)
        pad = [self.pad_id]
        ids = torch.tensor([r + pad * (width - len(r)) for r in rows])
        segments = torch.tensor([t + [0] * (width - len(t)) for t in types])
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        return ids, segments, mask


def xlnet_tokenizer(folder: str | os.PathLike) -> XLNetTokenizer:
    """The tokenizer of an XLNet folder's ``spiece.model`` (``do_lower_case`` from ``tokenizer_config.json``)."""
    import json

    folder = Path(folder)
    settings = folder / "tokenizer_config.json"
    lower = bool(json.loads(settings.read_text()).get("do_lower_case", False)) if settings.is_file() else False
    return XLNetTokenizer(folder / "spiece.model", lowercase=lower)


__all__ = ["XLNetTokenizer", "xlnet_tokenizer"]
