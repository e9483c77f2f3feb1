"""Parallel data the package makes itself, so the default job needs no download.

``dates``: a date written freely in English -> its ISO form. The model must find the year, month and
day wherever the format puts them, turn month names into numbers, pad days to two digits and reorder:

    "tuesday, march 5th, 2019"  -> "2019-03-05"
    "5.3.2019"                  -> "2019-03-05"      (day first, dotted, as in most of Europe)
    "the 5th of Mar 2019"       -> "2019-03-05"

Only unambiguous formats are used (never 03/05/2019, which is March in the US and May elsewhere).

``ambiguous-dates``: a numeric date written day first, "DD.MM.YYYY", with the day and the month both drawn
from 1..12, -> its ISO form. Each of the two small numbers could be either, so only their order tells the
day from the month: a model that sees the source as a bag of tokens (a Transformer without positions) can
do no better than chance on the pairs where they differ (11 in 12 of them):

    "05.03.2019"  -> "2019-03-05"
    "03.05.2019"  -> "2019-05-03"                      (the same three numbers, another date)

``copy``: random symbol strings copied unchanged, The Annotated Transformer's first example.
"""

from __future__ import annotations

import calendar
import datetime as dt
import random

MONTHS = list(calendar.month_name)[1:]
MONTHS_ABBR = list(calendar.month_abbr)[1:]
WEEKDAYS = list(calendar.day_name)
WEEKDAYS_ABBR = list(calendar.day_abbr)
FIRST, LAST = dt.date(1900, 1, 1).toordinal(), dt.date(2099, 12, 31).toordinal()


def ordinal(n: int) -> str:
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


FORMATS = [
    lambda d, r: f"{d.day} {MONTHS[d.month - 1]} {d.year}",
    lambda d, r: f"{MONTHS[d.month - 1]} {d.day}, {d.year}",
    lambda d, r: f"{MONTHS_ABBR[d.month - 1]} {d.day} {d.year}",
    lambda d, r: f"{d.day} {MONTHS_ABBR[d.month - 1]} {d.year}",
    lambda d, r: f"the {ordinal(d.day)} of {r.choice([MONTHS, MONTHS_ABBR])[d.month - 1]} {d.year}",
    lambda d, r: f"{WEEKDAYS[d.weekday()]}, {MONTHS[d.month - 1]} {ordinal(d.day)}, {d.year}",
    lambda d, r: f"{WEEKDAYS_ABBR[d.weekday()]} {d.day} {MONTHS_ABBR[d.month - 1]} {d.year}",
    lambda d, r: f"{ordinal(d.day)} {MONTHS[d.month - 1]} {d.year}",
    lambda d, r: f"{d.day}.{d.month}.{d.year}",
    lambda d, r: f"{d.day:02d}.{d.month:02d}.{d.year}",
    lambda d, r: f"{d.year}/{d.month}/{d.day}",
    lambda d, r: f"{MONTHS[d.month - 1]} {ordinal(d.day)} {d.year}",
]


def date_pair(rng: random.Random) -> tuple[str, str]:
    """One (free English, ISO) pair."""
    d = dt.date.fromordinal(rng.randint(FIRST, LAST))
    text = rng.choice(FORMATS)(d, rng)
    text = rng.choice([text, text.lower(), text.lower(), text.upper()]) if text[0].isalpha() else text
    return text, d.isoformat()


def ambiguous_date_pair(rng: random.Random) -> tuple[str, str]:
    """One ("DD.MM.YYYY", ISO) pair, day first, with the day and the month both in 1..12."""
    day, month, year = rng.randint(1, 12), rng.randint(1, 12), rng.randint(1900, 2099)
    return f"{day:02d}.{month:02d}.{year}", f"{year}-{month:02d}-{day:02d}"


def copy_pair(rng: random.Random, symbols: str = "abcdefghij", min_len: int = 4, max_len: int = 10) -> tuple[str, str]:
    s = "".join(rng.choice(symbols) for _ in range(rng.randint(min_len, max_len)))
    return s, s


TASKS = {"dates": date_pair, "copy": copy_pair, "ambiguous-dates": ambiguous_date_pair}


def make_pairs(task: str, n_train: int, n_test: int,
               seed: int = 0) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """``n_train`` training and ``n_test`` held-out pairs; no held-out source occurs in training.

    Raises:
        ValueError: unknown task.
    """
    if task not in TASKS:
        raise ValueError(f"task={task!r} must be one of {sorted(TASKS)}")
    rng = random.Random(seed)
    make = TASKS[task]
    test: dict[str, str] = {}
    while len(test) < n_test:
        src, tgt = make(rng)
        test[src] = tgt
    train: list[tuple[str, str]] = []
    while len(train) < n_train:
        src, tgt = make(rng)
        if src not in test:
            train.append((src, tgt))
    return train, list(test.items())


def date_lines(n: int, seed: int) -> list[str]:
    """``n`` lines "free date = ISO date" of the dates task (what the lm, denoise recipes learn from)."""
    pairs, _ = make_pairs("dates", n, 0, seed)
    return [f"{s} = {t}" for s, t in pairs]
