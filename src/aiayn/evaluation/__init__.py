"""Evaluation: corpus BLEU and chrF with sacrebleu, exact match, and detection average precision."""

from aiayn.evaluation.bleu import bleu_tokenizer, corpus_scores, exact_match
from aiayn.evaluation.detection import average_precision

__all__ = ["average_precision", "bleu_tokenizer", "corpus_scores", "exact_match"]
