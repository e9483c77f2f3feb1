"""Streams for a model with a memory (aiayn.data.lm.lm_streams): each row reads its piece of the text in order across
batches, so what a row's memory holds is the text just before its block."""

import itertools

import pytest
import torch

from aiayn.data import lm_streams


def test_each_row_continues_its_piece_of_the_text_batch_after_batch():
    tokens = torch.arange(103)
    batches = list(itertools.islice(lm_streams(tokens, block=4, batch_size=3), 8))
    per_row = 102 // 3  # 34 tokens a row: 8 whole blocks of 4
    for b in range(3):
        read = torch.cat([x[b] for x, _ in batches])
        assert torch.equal(read, tokens[b * per_row : b * per_row + 32])
        assert torch.equal(torch.cat([y[b] for _, y in batches]), read + 1)  # the next token everywhere


def test_start_skips_batches_and_an_epoch_starts_each_piece_again():
    tokens = torch.arange(103)
    every = list(itertools.islice(lm_streams(tokens, block=4, batch_size=3), 10))
    resumed = next(lm_streams(tokens, block=4, batch_size=3, start=3))
    assert torch.equal(resumed[0], every[3][0])
    assert torch.equal(every[8][0], every[0][0])  # 8 blocks a row: batch 8 is batch 0 again


def test_a_text_too_short_for_its_streams_is_refused_by_its_sizes():
    with pytest.raises(ValueError, match="leaves 3 tokens a stream, fewer than a block of 4"):
        next(lm_streams(torch.arange(10), block=4, batch_size=3))
