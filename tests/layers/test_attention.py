import pytest
import torch
from torch import nn

from aiayn.layers import MultiHeadAttention, causal_mask, padding_mask, record_attention, scaled_dot_product_attention


def qkv(b=2, h=3, t=5, s=7, d=8):
    return torch.randn(b, h, t, d), torch.randn(b, h, s, d), torch.randn(b, h, s, d)


def reference(q, k, v, mask=None):
    """Equation 1 written out in float64."""
    scores = q.double() @ k.double().transpose(-2, -1) / q.size(-1) ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return (scores.softmax(-1) @ v.double()).float()


@pytest.mark.parametrize("kind", ["none", "padding", "causal", "both"])
def test_fused_and_explicit_paths_agree_with_equation_1(kind):
    q, k, v = qkv(t=7, s=7)
    ids = torch.tensor([[5, 5, 5, 5, 5, 0, 0], [5, 5, 5, 5, 5, 5, 5]])
    mask = {"none": None, "padding": padding_mask(ids, 0), "causal": causal_mask(7),
            "both": padding_mask(ids, 0) & causal_mask(7)}[kind]
    fused, none = scaled_dot_product_attention(q, k, v, mask)
    explicit, weights = scaled_dot_product_attention(q, k, v, mask, need_weights=True)
    assert none is None and weights.shape == (2, 3, 7, 7)
    torch.testing.assert_close(fused, explicit, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(explicit, reference(q, k, v, mask), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 7))
    if mask is not None:
        assert (weights.masked_select(~mask.expand_as(weights)) == 0).all()


def test_is_causal_equals_explicit_causal_mask():
    q, k, v = qkv(t=6, s=6)
    a, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
    b, _ = scaled_dot_product_attention(q, k, v, causal_mask(6), need_weights=True)
    c, _ = scaled_dot_product_attention(q, k, v, is_causal=True, need_weights=True)
    torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(a, c, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("need_weights", [False, True])
def test_is_causal_with_a_mask_or_fewer_queries_than_keys_is_refused_on_both_paths(need_weights):
    # the fused kernel puts the diagonal top-left and refuses a mask; the explicit path put it bottom-right and
    # dropped the mask: the two answered differently, so neither is taken
    q, k, v = qkv(t=2, s=4)
    with pytest.raises(ValueError, match=r"is_causal=True takes no mask .* T=2, S=4 .*causal_mask\(T, S\)"):
        scaled_dot_product_attention(q, k, v, is_causal=True, need_weights=need_weights)
    q, k, v = qkv(t=4, s=4)
    with pytest.raises(ValueError, match="got a mask and T=4, S=4"):
        scaled_dot_product_attention(q, k, v, causal_mask(4), is_causal=True, need_weights=need_weights)


def test_additive_float_mask_is_added_to_scores():
    q, k, v = qkv()
    bias = torch.randn(3, 5, 7)
    fused, _ = scaled_dot_product_attention(q, k, v, bias)
    explicit, w = scaled_dot_product_attention(q, k, v, bias, need_weights=True)
    scores = q @ k.transpose(-2, -1) / 8**0.5 + bias
    torch.testing.assert_close(w, scores.softmax(-1), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(fused, explicit, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("need_weights", [False, True])
def test_a_row_with_nothing_to_attend_to_gives_zeros_not_nan(need_weights):
    q, k, v = (x.requires_grad_() for x in qkv(b=1, h=1, t=3, s=4))
    mask = torch.tensor([[True, False, True, False], [False] * 4, [True] * 4])
    out, w = scaled_dot_product_attention(q, k, v, mask, need_weights=need_weights)
    assert torch.isfinite(out).all()
    assert (out[0, 0, 1] == 0).all() and (out[0, 0, 0] != 0).any()
    if need_weights:
        assert (w[0, 0, 1] == 0).all()
    out.sum().backward()
    assert all(torch.isfinite(x.grad).all() for x in (q, k, v))


def test_multi_head_attention_equals_torch_multihead_attention():
    ours = MultiHeadAttention(16, 4).eval()
    ref = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    with torch.no_grad():
        ref.in_proj_weight.copy_(ours.in_proj.weight)
        ref.in_proj_bias.copy_(ours.in_proj.bias)
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    x, mem = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    keep = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])  # True = may attend
    out, w = ours(x, mem, mask=keep[:, None, None, :], need_weights=True)
    ref_out, ref_w = ref(x, mem, mem, key_padding_mask=~keep, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(w, ref_w, atol=1e-6, rtol=1e-5)
    self_out, _ = ours(x)
    torch.testing.assert_close(self_out, ref(x, x, x)[0], atol=1e-6, rtol=1e-5)


def test_record_attention_collects_weights_by_module_name_and_leaves_nothing_behind():
    model = nn.Sequential(MultiHeadAttention(8, 2))
    x = torch.randn(1, 3, 8)
    with record_attention(model) as rec:
        out, _ = model[0](x)
    assert list(rec) == ["0"] and rec["0"][0].shape == (1, 2, 3, 3)
    torch.testing.assert_close(rec["0"][0].sum(-1), torch.ones(1, 2, 3))
    torch.testing.assert_close(out, model[0](x)[0])
    with record_attention(model) as rec2:
        pass
    model[0](x)
    assert rec2 == {}


def test_heads_must_divide_d_model():
    with pytest.raises(ValueError, match="d_model=10 must be divisible by n_heads=4"):
        MultiHeadAttention(10, 4)
