import math

import pytest
import sacrebleu

from aiayn.evaluation import corpus_scores, exact_match


def test_identical_text_scores_100_on_both_metrics():
    refs = ["The dog bit the man.", "No one was surprised by what happened next."]
    scores = corpus_scores(refs, list(refs))
    assert scores["bleu"] == pytest.approx(100.0)
    assert scores["chrf"] == pytest.approx(100.0)
    assert scores["n"] == 2
    assert "tok:13a" in scores["signature"] and "chrF2" in scores["signature"]


def test_bleu_worked_by_hand():
    # hyp 1 vs ref 1: matches 5/6 unigrams, 3/5 bigrams, 2/4 trigrams, 1/3 4-grams, equal lengths (BP = 1).
    one = corpus_scores(["the cat sat on the mat"], ["the cat sat on a mat"])
    assert one["bleu"] == pytest.approx(100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25)
    # hyp 2 is a prefix of ref 2: every n-gram matches (5/5, 4/4, 3/3, 2/2); the corpus sums the counts
    # (10/11, 7/9, 5/7, 3/5) and the lengths (11 vs 12): BP = exp(1 - 12/11). Not the mean of sentence scores.
    both = corpus_scores(["the cat sat on the mat", "the cat sat on the"],
                         ["the cat sat on a mat", "the cat sat on the mat"])
    expected = 100 * math.exp(1 - 12 / 11) * (10 / 11 * 7 / 9 * 5 / 7 * 3 / 5) ** 0.25
    assert both["bleu"] == pytest.approx(expected)


def test_matches_sacrebleu_called_directly():
    hyps = ["The dog bit the man.", "It wasn't surprising.", "The man had just bitten him."]
    refs = ["The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."]
    scores = corpus_scores(hyps, refs)
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score)


def test_chrf_matches_a_value_published_in_sacrebleus_tests():
    # sacrebleu's test/test_chrf.py (sentence-level chrF2, beta 2): 39.14078509. Every n-gram order
    # has a match here, so epsilon smoothing (used there, not by corpus chrF) changes only the 5th digit.
    hyp = "Co nás nejvíc trápí, protože lékaři si vybírají, kdo bude žít a kdo zemře."
    ref = "Nejvíce smutní jsme z toho, že musíme rozhodovat o tom, kdo bude žít a kdo zemře."
    assert corpus_scores([hyp], [ref])["chrf"] == pytest.approx(39.14078509, abs=1e-4)


def test_chinese_is_segmented_into_characters():
    # zh splits every character: the hypothesis is the reference without its final "。", so all
    # n-gram precisions are 1 and only the brevity penalty (7 vs 8 tokens) counts. 13a sees one
    # "word" per sentence, and the two words differ.
    hyp, ref = ["我爱北京天安门"], ["我爱北京天安门。"]
    expected = 100 * math.exp(1 - 8 / 7)
    zh = corpus_scores(hyp, ref, target_lang="zh")
    assert zh["bleu"] == pytest.approx(expected)
    assert "tok:zh" in zh["signature"]
    assert corpus_scores(hyp, ref)["bleu"] == pytest.approx(expected)  # recognised from the references
    assert corpus_scores(hyp, ref, target_lang="zh-CN")["bleu"] == pytest.approx(expected)
    assert corpus_scores(hyp, ref, target_lang="de")["bleu"] == 0.0  # forced 13a
    assert corpus_scores(ref, ref, target_lang="zh")["bleu"] == pytest.approx(100.0)


def test_english_with_a_few_chinese_characters_keeps_13a():
    scores = corpus_scores(["Beijing (北京) is the capital of China."], ["Beijing (北京) is the capital of China."])
    assert "tok:13a" in scores["signature"]


def test_mismatched_or_empty_lists_are_refused():
    with pytest.raises(ValueError, match="3 hypotheses and 2 references"):
        corpus_scores(["a", "b", "c"], ["a", "b"])
    with pytest.raises(ValueError, match="empty"):
        corpus_scores([], [])
    with pytest.raises(ValueError, match="1 hypotheses and 2 references"):
        exact_match(["a"], ["a", "b"])
    with pytest.raises(TypeError, match="single str"):
        corpus_scores("a b c d", ["a b c d"])


def test_exact_match_counts_identical_strings_only():
    assert exact_match(["a b", "c d", "e f", "g"], ["a b", "c d", "e f ", "h"]) == 0.5
