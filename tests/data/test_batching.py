import random

import pytest
import torch

from aiayn.data import collate, length_batches, token_batches
from aiayn.data.synthetic import make_pairs


def test_length_batches_respect_max_tokens_and_cover_every_example_once():
    rng = random.Random(0)
    lengths = [rng.randint(1, 60) for _ in range(3000)]
    batches = length_batches(lengths, max_tokens=500, rng=random.Random(1))
    seen = sorted(i for b in batches for i in b)
    assert seen == list(range(len(lengths)))
    for b in batches:
        assert max(lengths[i] for i in b) * len(b) <= 500
    # grouping by length keeps padding small: under 15% of the padded tokens here
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    assert 1 - sum(lengths) / padded < 0.15


def test_an_example_longer_than_max_tokens_gets_a_batch_of_its_own():
    batches = length_batches([3, 50, 4], max_tokens=10, rng=random.Random(0))
    assert [1] in batches and sorted(i for b in batches for i in b) == [0, 1, 2]
    with pytest.raises(ValueError, match="max_tokens=0 must be positive"):
        length_batches([1], 0, random.Random(0))


def test_token_batches_are_deterministic_under_a_seed_and_reshuffled_per_epoch():
    pairs = [([5] * random.Random(i).randint(1, 20) + [2], [6] * (i % 7 + 1)) for i in range(200)]

    def first(n, seed):
        it = token_batches(pairs, 64, 0, 1, 2, seed)
        return [next(it) for _ in range(n)]

    a, b, c = first(40, 0), first(40, 0), first(40, 1)
    assert all(torch.equal(x[0], y[0]) for x, y in zip(a, b))
    assert not all(x[0].shape == y[0].shape and torch.equal(x[0], y[0]) for x, y in zip(a, c))
    for src, tgt_in, tgt_out in a:
        assert src.numel() <= 64 or src.size(0) == 1
        assert (tgt_in[:, 0] == 1).all()  # <s> then the target; the output is the target then </s>
        assert torch.equal(tgt_in[:, 1:], tgt_out[:, :-1].masked_fill(tgt_out[:, :-1] == 2, 0))


def test_collate_shifts_the_target_by_hand():
    src, tgt_in, tgt_out = collate([([7, 8, 2], [4, 5]), ([9, 2], [6])], pad_id=0, bos_id=1, eos_id=2)
    assert src.tolist() == [[7, 8, 2], [9, 2, 0]]
    assert tgt_in.tolist() == [[1, 4, 5], [1, 6, 0]]
    assert tgt_out.tolist() == [[4, 5, 2], [6, 2, 0]]


def test_synthetic_held_out_sources_never_occur_in_training():
    train, test = make_pairs("dates", 5000, 300, seed=3)
    assert len(test) == 300 and not {s for s, _ in test} & {s for s, _ in train}
    for src, tgt in test[:50]:
        year, _month, _day = tgt.split("-")
        assert year in src and len(tgt) == 10
