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


# --- rotary positions (RoPE, Su et al. 2021) inside attention --------------------------------------------------

def rotate_by_hand(x, positions, base=10000.0):
    """RoPE written out: pair (i, i + D/2) of ``x`` ``(T, D)`` turned by the angle p * base^(-2i/D) at position p."""
    t, d = x.shape
    out = x.clone()
    for row, p in zip(range(t), positions):
        for i in range(d // 2):
            angle = p * base ** (-2 * i / d)
            a, b = x[row, i].item(), x[row, i + d // 2].item()
            out[row, i] = a * math.cos(angle) - b * math.sin(angle)
            out[row, i + d // 2] = b * math.cos(angle) + a * math.sin(angle)
    return out


def test_rotary_attention_weights_are_the_rotated_queries_and_keys_dot_products_by_hand():
    from aiayn.layers import MultiHeadAttention, RotaryEmbedding

    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 2, n_kv_heads=1, bias=False).eval()  # head dim 8; both heads read kv head 0
    x = torch.randn(1, 5, 16, dtype=torch.float64).float()
    start = 3
    with torch.no_grad():
        _, weights = attn(x, is_causal=True, need_weights=True, rotary=RotaryEmbedding(8)(5, start=start))
        w = attn.in_proj.weight.double()
        q, k = x[0].double() @ w[:16].T, x[0].double() @ w[16:24].T  # (T, 2 x 8), (T, 8)
    positions = range(start, start + 5)
    k_rot = rotate_by_hand(k, positions)
    for h in range(2):
        q_rot = rotate_by_hand(q[:, 8 * h : 8 * (h + 1)], positions)
        scores = (q_rot @ k_rot.T / math.sqrt(8)).masked_fill(~torch.ones(5, 5, dtype=torch.bool).tril(), -math.inf)
        torch.testing.assert_close(weights[0, h].double(), scores.softmax(-1), atol=1e-5, rtol=1e-5)


def test_rotary_attention_depends_only_on_relative_positions():
    # Su et al. (2021), eq. 16: (R_m q) . (R_n k) = q . R_{n-m} k. Shifting every position by the same offset
    # leaves the output as it was, but only if the keys turn with the queries; and the positions do count.
    from aiayn.layers import MultiHeadAttention, RotaryEmbedding

    torch.manual_seed(0)
    attn = MultiHeadAttention(32, 4, n_kv_heads=2).eval()
    rope = RotaryEmbedding(8)
    x = torch.randn(2, 6, 32)
    with torch.no_grad():
        at_zero, _ = attn(x, is_causal=True, rotary=rope(6))
        shifted, _ = attn(x, is_causal=True, rotary=rope(6, start=41))
        by_ids, _ = attn(x, is_causal=True, rotary=rope(6, position_ids=torch.arange(6).expand(2, 6) + 1000))
        unrotated, _ = attn(x, is_causal=True)
    torch.testing.assert_close(shifted, at_zero, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(by_ids, at_zero, atol=1e-4, rtol=1e-4)
    assert (unrotated - at_zero).abs().max() > 1e-2  # the rotation does change the attention
