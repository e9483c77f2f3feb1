"""The ``ambiguous-dates`` task: day-first numeric dates whose day and month only their order tells apart.

Checked against hand-worked pairs, against ``datetime`` for many draws, and for what the task is for: the BPE
the translation recipe trains reads every source as five tokens, and a Transformer without positions gives
the same output for "05.03.2019" and "03.05.2019" (a bag of tokens), one with positions does not.
"""

import datetime as dt
import random
from collections import Counter

import pytest
import torch

import aiayn
from aiayn.data import make_pairs, train_tokenizers
from aiayn.data.synthetic import TASKS, ambiguous_date_pair
from aiayn.recipes.translation import Config


class Drawn(random.Random):
    """A generator whose ``randint`` returns the given values in turn (checking each is within its range)."""

    def __init__(self, *values: int) -> None:
        super().__init__(0)
        self.values = list(values)

    def randint(self, a: int, b: int) -> int:
        v = self.values.pop(0)
        assert a <= v <= b
        return v


@pytest.mark.parametrize(("day", "month", "year", "source", "target"), [
    (5, 3, 2019, "05.03.2019", "2019-03-05"),
    (3, 5, 2019, "03.05.2019", "2019-05-03"),  # the same numbers, the other date
    (12, 1, 1900, "12.01.1900", "1900-01-12"),
    (7, 7, 2099, "07.07.2099", "2099-07-07"),
])
def test_hand_worked_pairs(day, month, year, source, target):
    assert ambiguous_date_pair(Drawn(day, month, year)) == (source, target)


def test_draws_are_day_first_dates_with_day_and_month_both_in_1_to_12():
    rng = random.Random(0)
    pairs = [ambiguous_date_pair(rng) for _ in range(3000)]
    for src, tgt in pairs:
        day, month, year = (int(x) for x in src.split("."))
        assert 1 <= day <= 12 and 1 <= month <= 12 and 1900 <= year <= 2099
        assert dt.date.fromisoformat(tgt) == dt.date(year, month, day)
    days = Counter(int(s[:2]) for s, _ in pairs)
    assert sorted(days) == list(range(1, 13))  # every value is drawn as a day (and, below, as a month)
    assert sorted({int(s[3:5]) for s, _ in pairs}) == list(range(1, 13))
    same = sum(s[:2] == s[3:5] for s, _ in pairs) / len(pairs)
    assert abs(same - 1 / 12) < 0.02  # day == month one time in 12: the pairs order cannot matter for


def test_registered_as_a_made_up_translation_task():
    assert "ambiguous-dates" in TASKS
    assert Config(data=["ambiguous-dates"]).made_up
    train, test = make_pairs("ambiguous-dates", 2000, 100, seed=3)
    assert len(train) == 2000 and len(test) == 100
    assert not {s for s, _ in test} & {s for s, _ in train}  # held out means held out


def test_bpe_sees_five_tokens_and_swapping_day_and_month_keeps_the_bag():
    train, _ = make_pairs("ambiguous-dates", 5000, 10, seed=0)
    src_tok, _ = train_tokenizers(train, kind="bpe", vocab_size=8000, joint=True)
    a, b = src_tok.encode("05.03.2019"), src_tok.encode("03.05.2019")
    assert len(a) == len(b) == 5  # day . month . year
    assert a != b and Counter(a) == Counter(b)  # another sequence, the same bag


@pytest.mark.parametrize(("positional", "same"), [("none", True), ("sinusoidal", False), ("learned", False)])
def test_without_positions_the_output_is_a_function_of_the_bag(one_thread, positional, same):
    cfg = aiayn.preset("transformer-tiny", src_vocab_size=16, tgt_vocab_size=16, d_model=32, n_heads=2, d_ff=64,
                       positional=positional)
    model = aiayn.build(cfg).eval()
    if positional == "learned":  # make the learned positions as large as the tokens, so they cannot hide
        torch.nn.init.normal_(model.src_embed.positions.weight)
    day, dot, month, year = 5, 4, 7, 9
    src = torch.tensor([[day, dot, month, dot, year, 2], [month, dot, day, dot, year, 2]])  # (2, S)
    tgt = torch.tensor([[1, 9, 10, 11]] * 2)  # (2, T): the same target prefix for both
    with torch.no_grad():
        logits = model(src, tgt)  # (2, T, V)
    assert torch.allclose(logits[0], logits[1], atol=1e-5) == same
