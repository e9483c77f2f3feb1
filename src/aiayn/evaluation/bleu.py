"""Corpus BLEU and chrF with sacrebleu, on detokenized text (the paper reports BLEU, sections 6.1 and 6.2).

Scores come from sacrebleu so that they compare with published numbers, and every result carries
sacrebleu's signature (tokenizer, smoothing, version), which says exactly how it was computed.
BLEU tokenizes with ``13a`` (the ``mteval-v13a`` rules WMT uses), or with ``zh`` for Chinese, whose
words are not separated by spaces: ``13a`` would read a whole Chinese sentence as one word.

BLEU is a corpus statistic: n-gram matches are summed over all sentences before the precisions are
taken, so it is not the mean of sentence scores, and a corpus of sentences shorter than four tokens
has no 4-grams and scores 0 even when every hypothesis is right.
"""

from __future__ import annotations

from sacrebleu.metrics import BLEU, CHRF

# Han ideographs (with extension A, compatibility ideographs and the supplementary planes) and the
# CJK punctuation and full-width forms that Chinese text uses. Kana and Hangul are not counted:
# ``zh`` segmentation is for Chinese only.
_CHINESE_RANGES = (
    (0x3000, 0x303F),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0xFF00, 0xFFEF),
    (0x20000, 0x2FA1F),
)


def _is_chinese(char: str) -> bool:
    code = ord(char)
    return any(lo <= code <= hi for lo, hi in _CHINESE_RANGES)


def _mostly_chinese(texts: list[str]) -> bool:
    """True when more than half of the non-space characters of ``texts`` are Chinese."""
    chars = [c for text in texts for c in text if not c.isspace()]
    return sum(map(_is_chinese, chars)) * 2 > len(chars)


def _check_pair(hypotheses: list[str], references: list[str]) -> None:
    for name, texts in (("hypotheses", hypotheses), ("references", references)):
        if isinstance(texts, str):
            raise TypeError(f"{name} must be a list of strings, one per sentence, got a single str")
    if len(hypotheses) != len(references):
        raise ValueError(
            f"hypotheses and references must pair up one to one, got {len(hypotheses)} hypotheses and "
            f"{len(references)} references"
        )
    if not hypotheses:
        raise ValueError("hypotheses and references are empty (0 and 0 sentences); there is nothing to score")


def bleu_tokenizer(references: list[str], target_lang: str | None = None) -> str:
    """The sacrebleu tokenizer for a target language: ``"zh"`` for Chinese, ``"13a"`` otherwise.

    With no ``target_lang``, Chinese is recognised by the references being mostly Chinese characters.
    """
    if target_lang is not None:
        return "zh" if target_lang.lower().startswith("zh") else "13a"
    return "zh" if _mostly_chinese(references) else "13a"


def corpus_scores(hypotheses: list[str], references: list[str], target_lang: str | None = None) -> dict:
    """Corpus BLEU and chrF of detokenized ``hypotheses`` against one reference each.

    Args:
        hypotheses: system outputs, one detokenized string per sentence.
        references: the reference translation of each sentence, in the same order.
        target_lang: the target language code (``"de"``, ``"zh-CN"``, ...); a code starting with ``zh``
            selects sacrebleu's ``zh`` tokenizer, any other ``13a``. ``None`` picks ``zh`` when the
            references are mostly Chinese characters.

    Returns:
        ``{"bleu": float, "chrf": float, "signature": str, "n": int}``: BLEU and chrF2 on a 0-100 scale,
        both sacrebleu signatures (``"BLEU <sig>; chrF2 <sig>"``) and the number of sentences.

    Raises:
        ValueError: the lists differ in length (both lengths are named) or are empty.
    """
    _check_pair(hypotheses, references)
    bleu = BLEU(tokenize=bleu_tokenizer(references, target_lang))
    chrf = CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])  # sacrebleu takes a list of reference streams
    chrf_score = chrf.corpus_score(hypotheses, [references])
    return {
        "bleu": float(bleu_score.score),
        "chrf": float(chrf_score.score),
        "signature": f"{bleu_score.name} {bleu.get_signature()}; {chrf_score.name} {chrf.get_signature()}",
        "n": len(hypotheses),
    }


def exact_match(hypotheses: list[str], references: list[str]) -> float:
    """The fraction of hypotheses that equal their reference string exactly (no normalisation).

    Raises:
        ValueError: the lists differ in length (both lengths are named) or are empty.
    """
    _check_pair(hypotheses, references)
    return sum(h == r for h, r in zip(hypotheses, references)) / len(references)
