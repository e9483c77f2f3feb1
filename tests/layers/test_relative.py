"""Transformer-XL's relative positional attention (aiayn.layers.relative) against a direct loop over (i, j) in
float64 and against transformers 5's XLNet relative attention core (the same mechanism), and the relative shift
against its definition."""

import math

import pytest
import torch

from aiayn.layers.positional import sinusoids
from aiayn.layers.relative import RelativeScore, relative_shift
from aiayn.layers.scoring import attend


def scorer(clamp_len=None, c=12, h=3):
    torch.manual_seed(0)
    s = RelativeScore(c, h, c // h, clamp_len=clamp_len).double()
    with torch.no_grad():
        s.u.normal_(), s.v.normal_()
    return s


@pytest.mark.parametrize("t, s", [(4, 4), (3, 7), (1, 6), (5, 9)])
def test_relative_shift_puts_distance_i_minus_j_in_column_j(t, s):
    x = torch.randn(2, 3, t, s)
    y = relative_shift(x)
    for i in range(t):
        for j in range(s):
            if j + t - 1 - i < s:  # the columns the causal mask keeps
                assert torch.equal(y[..., i, j], x[..., i, j + t - 1 - i])


@pytest.mark.parametrize("t, s, clamp_len", [(5, 5, None), (3, 8, None), (4, 9, 3), (1, 7, None)])
def test_relative_scores_equal_the_papers_four_terms_summed_pair_by_pair(t, s, clamp_len):
    """A_ij = (a) q.k + (b) q.W_kR R_{i-j} + (c) u.k + (d) v.W_kR R_{i-j}, over 1/sqrt(D), for every key a query
    may see: queries are the last t of s positions (a memory of s - t first)."""
    score = scorer(clamp_len)
    q, k = torch.randn(2, 3, t, 4, dtype=torch.float64), torch.randn(2, 3, s, 4, dtype=torch.float64)
    got = score(q, k)
    w = score.r_net.weight.view(3, 4, 12)  # W_kR per head: (H, D, C)
    for i in range(t):
        for j in range(s):
            dist = (s - t + i) - j
            if dist < 0:
                continue  # the future: masked
            r_enc = sinusoids(torch.tensor([min(dist, clamp_len or dist)]), 12, "concat").double()[0]  # (C,)
            r = w @ r_enc  # (H, D)
            want = ((q[..., i, :] + score.u) * k[..., j, :]).sum(-1) + ((q[..., i, :] + score.v) * r).sum(-1)
            torch.testing.assert_close(got[..., i, j], want / math.sqrt(4), rtol=1e-10, atol=1e-10)


def test_relative_attention_equals_xlnets_relative_attention_core():
    """transformers 5's XLNetRelativeAttention.rel_attn_core with 'uni' distances klen .. 0, the same biases and
    projected sinusoids, and the causal mask over a memory: the same attention output."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.xlnet.modeling_xlnet import XLNetRelativeAttention

    torch.manual_seed(1)
    b, h, d, mlen, qlen = 2, 3, 4, 3, 5
    klen = mlen + qlen
    ours = RelativeScore(h * d, h, d)
    with torch.no_grad():
        ours.u.normal_(), ours.v.normal_()
    theirs = XLNetRelativeAttention(transformers.XLNetConfig(d_model=h * d, n_head=h, d_inner=8)).eval()
    with torch.no_grad():
        theirs.r_w_bias.copy_(ours.u), theirs.r_r_bias.copy_(ours.v)
    q, k, v = (torch.randn(b, h, n, d) for n in (qlen, klen, klen))
    with torch.no_grad():
        distances = torch.arange(klen, -1, -1)  # XLNet's 'uni' encodes klen .. 0, one more than needed
        r = ours.r_net(sinusoids(distances, h * d, "concat")).view(klen + 1, 1, h, d).expand(-1, b, -1, -1)
        future = torch.triu(torch.ones(qlen, klen), diagonal=1 + mlen)  # 1 = may not attend (XLNet's mask)
        want = theirs.rel_attn_core(q.permute(2, 0, 1, 3), k.permute(2, 0, 1, 3), v.permute(2, 0, 1, 3), r,
                                    attn_mask=future[:, :, None, None])  # (qlen, B, H, D)
        keep = future == 0
        got, _ = attend(ours(q, k), v, keep)  # (B, H, qlen, D)
    torch.testing.assert_close(got.permute(2, 0, 1, 3), want, atol=1e-5, rtol=1e-5)
