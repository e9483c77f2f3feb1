"""Each noising function alone (``noise=(name,)``, the recipe's ``--noise NAME``), as BART's Table 1 ablation uses
them: each does its own corruption and nothing else, checked by a property of its output against the original."""

from collections import Counter

import numpy as np
import pytest

from aiayn.data.noising import NOISES, corrupt
from aiayn.recipes.denoise import Config, batches

MASK = 0
STOP = 999  # ends every sentence, so a permuted document can be cut back into its sentences


def document(rng, n_sentences=6):
    """Sentences of distinct tokens (so where each token went can be traced), each ending with STOP."""
    out, nxt = [], 1
    for _ in range(n_sentences):
        k = int(rng.integers(3, 9))
        out.append(list(range(nxt, nxt + k)) + [STOP])
        nxt += k
    return out


def sentences_of(ids):
    out, cur = [], []
    for t in ids:
        cur.append(t)
        if t == STOP:
            out.append(tuple(cur))
            cur = []
    return out


def is_rotation(out, ids):
    return len(out) == len(ids) and any(out == ids[k:] + ids[:k] for k in range(len(ids)))


def is_subsequence(short, long):
    it = iter(long)
    return all(t in it for t in short)


@pytest.mark.parametrize("noise", NOISES)
def test_one_noise_alone_does_only_its_own_corruption(noise):
    rng = np.random.default_rng(0)
    changed = 0
    for _ in range(40):
        sentences = document(rng)
        ids = [t for s in sentences for t in s]
        n = len(ids)
        out = corrupt(sentences, MASK, rng, (noise,), ratio=0.3)
        changed += out != ids
        if noise == "mask":  # same length, each token itself or [MASK], 30% masked
            assert len(out) == n and out.count(MASK) == round(0.3 * n)
            assert all(o in (t, MASK) for o, t in zip(out, ids))
        elif noise == "delete":  # shorter by 30%, what is left in order, no [MASK]
            assert len(out) == n - round(0.3 * n) and MASK not in out and is_subsequence(out, ids)
        elif noise == "infill":  # spans -> one [MASK] each: the unmasked tokens are the original minus ~30%, in order
            kept = [t for t in out if t != MASK]
            assert MASK in out and is_subsequence(kept, ids) and n - len(kept) == round(0.3 * n)
        elif noise == "permute":  # the same sentences, each intact, in some order; no token touched
            assert MASK not in out and Counter(sentences_of(out)) == Counter(map(tuple, sentences))
        elif noise == "rotate":  # one cut and swap: a rotation of the whole token sequence
            assert MASK not in out and is_rotation(out, ids)
    assert changed >= 30  # it does corrupt (a permutation or rotation can by chance give the original back)


def test_sentence_noises_never_change_a_token_and_token_noises_never_reorder():
    rng = np.random.default_rng(1)
    for _ in range(20):
        sentences = document(rng)
        ids = [t for s in sentences for t in s]
        for noise in ("permute", "rotate"):
            assert sorted(corrupt(sentences, MASK, rng, (noise,))) == sorted(ids)
        for noise in ("mask", "delete", "infill"):
            kept = [t for t in corrupt(sentences, MASK, rng, (noise,)) if t not in (MASK, STOP)]
            assert kept == sorted(kept)  # ids rise along the document: nothing was moved


def test_the_recipe_switch_selects_one_noise_and_its_batches_use_only_it():
    assert Config(noise="rotate").noises == ("rotate",)
    with pytest.raises(ValueError, match="noise="):
        Config(noise=" , ")
    with pytest.raises(ValueError, match="noise="):
        Config(noise="rotation")
    rng = np.random.default_rng(2)
    docs = [document(rng, 3) for _ in range(20)]

    class Model:  # what batches reads of the model's config
        max_len, pad_id, bos_id, eos_id = 256, 1000, 1001, 1002

    src, _, tgt_out = next(batches(docs, 16, Model, MASK, ("rotate",), 0.3, seed=0))
    for s, t in zip(src.tolist(), tgt_out.tolist()):
        s, t = s[: s.index(Model.eos_id)], t[: t.index(Model.eos_id)]  # the source and the original, </s> off
        assert is_rotation(s, t)
