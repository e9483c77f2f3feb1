"""Evaluation: corpus BLEU and chrF with sacrebleu, and exact match."""

from aiayn.evaluation.bleu import bleu_tokenizer, corpus_scores, exact_match

__all__ = ["bleu_tokenizer", "corpus_scores", "exact_match"]
