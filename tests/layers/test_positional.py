import math

import pytest
import torch

from aiayn.layers import Embedding, LearnedPositionalEmbedding, SinusoidalPositionalEncoding, sinusoidal_encoding


def test_sinusoidal_table_against_hand_computed_values():
    # d_model = 4: frequencies 1/10000^(0/4) = 1 and 1/10000^(2/4) = 1/100.
    expected = torch.tensor([
        [0.0, 1.0, 0.0, 1.0],
        [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)],
        [math.sin(2), math.cos(2), math.sin(0.02), math.cos(0.02)],
    ])
    torch.testing.assert_close(sinusoidal_encoding(3, 4), expected)
    concat = expected[:, [0, 2, 1, 3]]  # all sines, then all cosines
    torch.testing.assert_close(sinusoidal_encoding(3, 4, layout="concat"), concat)


def test_sinusoidal_formula_at_large_positions_and_dimensions():
    table = sinusoidal_encoding(5000, 512)
    pos, i = 4321, 100
    torch.testing.assert_close(table[pos, 2 * i], torch.tensor(math.sin(pos / 10000 ** (2 * i / 512))), atol=1e-6,
                               rtol=0)
    torch.testing.assert_close(table[pos, 2 * i + 1], torch.tensor(math.cos(pos / 10000 ** (2 * i / 512))), atol=1e-6,
                               rtol=0)


def test_sinusoidal_works_past_the_longest_training_length():
    pe = SinusoidalPositionalEncoding(8, max_len=4)
    torch.testing.assert_close(pe(3, start=10), sinusoidal_encoding(13, 8)[10:])
    torch.testing.assert_close(pe(20), sinusoidal_encoding(20, 8))


def test_learned_positions_refuse_a_sequence_longer_than_they_are():
    pe = LearnedPositionalEmbedding(4, 8)
    assert pe(4).shape == (4, 8)
    with pytest.raises(ValueError, match="longer than the 4 learned positions"):
        pe(5)


def test_embedding_scales_tokens_by_sqrt_d_model_and_adds_positions():
    emb = Embedding(10, 16, dropout=0.0)
    ids = torch.tensor([[1, 2, 3]])
    expected = emb.tokens.weight[ids] * 4.0 + sinusoidal_encoding(3, 16)
    torch.testing.assert_close(emb(ids), expected)
    torch.testing.assert_close(emb(ids[:, 2:], start=2), expected[:, 2:])


@pytest.mark.parametrize("ids, error", [
    (torch.tensor([[1.0, 2.0]]), "integer token ids"),
    (torch.tensor([1, 2]), r"shape \(batch, length\)"),
    (torch.tensor([[1, 10]]), r"token id 10, outside the vocabulary \[0, 10\)"),
    (torch.tensor([[-1, 2]]), "token id -1"),
])
def test_embedding_names_bad_ids(ids, error):
    with pytest.raises((ValueError, TypeError), match=error):
        Embedding(10, 16)(ids)
