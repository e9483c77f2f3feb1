from collections import Counter

import numpy as np
import pytest

from aiayn.data.noising import document_rotation, sentence_permutation, text_infilling, token_deletion, token_masking

MASK = 0


def doc(n=1000):
    return list(range(1, n + 1))  # distinct tokens, so what happened to each can be traced


def test_token_masking_and_deletion_hit_the_ratio():
    rng = np.random.default_rng(0)
    masked = token_masking(doc(), MASK, 0.3, rng)
    assert len(masked) == 1000 and masked.count(MASK) == 300
    assert all(m in (MASK, t) for m, t in zip(masked, doc()))
    kept = token_deletion(doc(), 0.3, rng)
    assert len(kept) == 700 and kept == sorted(kept)  # order kept, 30% gone


def test_text_infilling_masks_the_ratio_with_spans_of_mean_three():
    rng = np.random.default_rng(1)
    covered, masks, total = 0, 0, 0
    for _ in range(200):
        out = text_infilling(doc(), MASK, 0.3, rng)
        kept = [t for t in out if t != MASK]
        assert kept == sorted(kept)  # what is left keeps its order
        covered += 1000 - len(kept)
        masks += out.count(MASK)
        total += 1000
    assert abs(covered / total - 0.3) < 0.01
    assert abs(covered / masks - 3.0) < 0.35  # tokens per [MASK]: the mean span length, zero-length ones included


def test_zero_length_spans_insert_a_mask():
    rng = np.random.default_rng(2)
    inserted = spans = 0
    for _ in range(300):
        out = [0] + text_infilling(doc(50), -1, 0.2, rng) + [51]  # sentinels around the document
        for i, t in enumerate(out[1:-1], start=1):
            if t == -1:
                spans += 1
                before = next(x for x in reversed(out[:i]) if x != -1)
                after = next(x for x in out[i + 1:] if x != -1)
                inserted += after == before + 1  # nothing missing around it: an insertion
    assert 0.02 < inserted / spans < 0.12  # Poisson(3) gives length 0 with probability e^-3 = 0.05
    assert text_infilling(doc(20), MASK, 0.0, rng) == doc(20)  # nothing to mask: nothing changes


def test_sentence_permutation_keeps_the_sentences_and_rotation_keeps_the_cycle():
    rng = np.random.default_rng(3)
    sentences = [[1, 2, 3, 99], [4, 5, 99], [6, 99], [7, 8, 9, 10, 99]]
    seen = set()
    for _ in range(50):
        out = sentence_permutation(sentences, rng)
        assert Counter(map(tuple, _split(out))) == Counter(map(tuple, sentences))
        seen.add(tuple(out))
    assert len(seen) > 10
    rotated = document_rotation(doc(10), rng)
    k = rotated.index(1)
    assert rotated[k:] + rotated[:k] == doc(10)


def _split(ids, stop=99):
    out, cur = [], []
    for t in ids:
        cur.append(t)
        if t == stop:
            out.append(cur)
            cur = []
    return out


@pytest.mark.parametrize("fn", [lambda r: token_masking(doc(), MASK, 1.5, r), lambda r: token_deletion(doc(), -0.1, r)])
def test_bad_ratios_are_refused(fn):
    with pytest.raises(ValueError, match=r"ratio=.* must be in"):
        fn(np.random.default_rng(0))
