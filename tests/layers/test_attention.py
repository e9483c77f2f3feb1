import pytest
import torch
import torch.nn.functional as F
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


# --- grouped-query attention: query head h reads kv head h // (H / Hkv) (Ainslie et al. 2023) ---------------

def grouped_reference(q, k, v, mask=None):
    """Grouped-query attention written head by head, as Hugging Face's Llama maps them: query head h reads kv
    head ``h // (H / Hkv)``; each head is equation 1 in float64 (``reference``)."""
    group = q.size(1) // k.size(1)
    heads = []
    for h in range(q.size(1)):
        head_mask = None if mask is None else mask.expand(q.size(0), q.size(1), -1, -1)[:, h : h + 1]
        heads.append(reference(q[:, h : h + 1], k[:, h // group : h // group + 1], v[:, h // group : h // group + 1],
                               head_mask))
    return torch.cat(heads, dim=1)


GROUPED_MASKS = {
    "none": lambda: None,
    "padding": lambda: padding_mask(torch.tensor([[5] * 5 + [0] * 2, [5] * 7]), 0),  # (B, 1, 1, S)
    "causal": lambda: causal_mask(7),  # (T, S)
    "per-head": lambda: torch.rand(2, 6, 7, 7, generator=torch.Generator().manual_seed(1)) > 0.3,  # (B, H, T, S)
}


@pytest.mark.parametrize("kind", sorted(GROUPED_MASKS))
@pytest.mark.parametrize("kv_heads", [1, 2, 3])
def test_grouped_heads_explicit_and_fused_paths_equal_a_head_by_head_reference(kind, kv_heads):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 6, 7, 8, generator=g)
    k, v = torch.randn(2, kv_heads, 7, 8, generator=g), torch.randn(2, kv_heads, 7, 8, generator=g)
    mask = GROUPED_MASKS[kind]()
    fused, _ = scaled_dot_product_attention(q, k, v, mask)
    explicit, weights = scaled_dot_product_attention(q, k, v, mask, need_weights=True)
    want = grouped_reference(q, k, v, mask)
    want = want.masked_fill(want.isnan(), 0.0)  # a per-head row with nothing to attend to: zeros
    torch.testing.assert_close(fused, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(explicit, want, atol=1e-5, rtol=1e-5)
    # and PyTorch's own: each kv head repeated for its group (torch.repeat_interleave), or SDPA's enable_gqa
    group = 6 // kv_heads
    ours = F.scaled_dot_product_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                                          attn_mask=mask if kind != "per-head" else None)
    if kind != "per-head":  # (SDPA gives NaN where a row is all masked; no mask here leaves one)
        torch.testing.assert_close(explicit, ours, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(explicit, F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True),
                                   atol=1e-5, rtol=1e-5)
    scores = (q @ k.repeat_interleave(group, 1).transpose(-2, -1)) / 8**0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    expected_weights = scores.softmax(-1)
    torch.testing.assert_close(weights, expected_weights.masked_fill(expected_weights.isnan(), 0.0), atol=1e-6,
                               rtol=1e-5)


@pytest.mark.parametrize("kv_heads", [1, 2])
def test_grouped_heads_is_causal_on_both_paths_equals_the_reference(kv_heads):
    g = torch.Generator().manual_seed(2)
    q, k, v = torch.randn(2, 4, 6, 8, generator=g), torch.randn(2, kv_heads, 6, 8, generator=g), \
        torch.randn(2, kv_heads, 6, 8, generator=g)
    want = grouped_reference(q, k, v, causal_mask(6))
    for need_weights in (False, True):
        out, _ = scaled_dot_product_attention(q, k, v, is_causal=True, need_weights=need_weights)
        torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("case", ["causal-self", "masked-self", "cross", "cached"])
def test_grouped_multi_head_attention_gives_the_fused_paths_output_when_asked_for_weights(case):
    # need_weights (and record_attention) take the explicit path, which repeats kv heads itself; the default
    # path hands the kv heads to SDPA (enable_gqa): both must read kv head h // (H / Hkv) for query head h
    from aiayn.layers import KVCache

    torch.manual_seed(0)
    attn = MultiHeadAttention(48, 6, n_kv_heads=2).eval()
    x, memory = torch.randn(2, 5, 48), torch.randn(2, 7, 48)
    with torch.no_grad():
        if case == "cached":
            want, _ = attn(x, is_causal=True)
            for need_weights in (False, True):
                cache = KVCache(5)
                steps = [attn(x[:, :2], is_causal=True, cache=cache, need_weights=need_weights)[0]]
                steps += [attn(x[:, i : i + 1], is_causal=True, cache=cache, need_weights=need_weights)[0]
                          for i in range(2, 5)]
                torch.testing.assert_close(torch.cat(steps, 1), want, atol=1e-5, rtol=1e-5)
            return
        args = {"causal-self": {"x": x, "is_causal": True},
                "masked-self": {"x": x, "mask": padding_mask(torch.tensor([[4] * 3 + [0] * 2, [4] * 5]), 0)},
                "cross": {"x": x, "memory": memory,
                          "mask": padding_mask(torch.tensor([[4] * 5 + [0] * 2, [4] * 7]), 0)}}[case]
        fused, none = attn(**args)
        explicit, weights = attn(**args, need_weights=True)
        with record_attention(attn) as rec:
            recorded, _ = attn(**args)
    assert none is None and weights.shape[:2] == (2, 6)
    torch.testing.assert_close(explicit, fused, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(recorded, fused, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rec[""][0], weights)


ONE_QUERY_MASKS = {
    "none": lambda: None,
    "padding": lambda: padding_mask(torch.tensor([[5] * 5 + [0] * 2, [5] * 7]), 0),  # (B, 1, 1, S)
    "per-head": lambda: torch.rand(2, 6, 1, 7, generator=torch.Generator().manual_seed(1)) > 0.5,  # (B, H, 1, S)
    "empty row": lambda: torch.tensor([[True] * 7, [False] * 7]).view(2, 1, 1, 7),
    "(T, S)": lambda: torch.tensor([[True] * 4 + [False] * 3]),  # (1, S): the last query of a causal mask
}


@pytest.mark.parametrize("kind", sorted(ONE_QUERY_MASKS))
@pytest.mark.parametrize("kv_heads", [1, 2, 3, 6])
def test_a_compiled_one_query_step_takes_the_explicit_path_and_equals_the_reference(kind, kv_heads, monkeypatch):
    """A decoding step (one query a row) inside torch.compile on a CPU is equation 1 written out, grouped heads
    read in place (``functional._one_query``), not the fused kernel; same outputs as the head-by-head reference."""
    from aiayn.layers import functional

    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 6, 1, 8, generator=g)
    k, v = torch.randn(2, kv_heads, 7, 8, generator=g), torch.randn(2, kv_heads, 7, 8, generator=g)
    mask = ONE_QUERY_MASKS[kind]()
    want = grouped_reference(q, k, v, mask)
    want = want.masked_fill(want.isnan(), 0.0)  # a row with nothing to attend to: zeros
    taken = []
    one_query = functional._one_query
    monkeypatch.setattr(functional, "_one_query", lambda *a: taken.append(1) or one_query(*a))
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v: scaled_dot_product_attention(q, k, v, mask)[0], backend="eager")
    torch.testing.assert_close(compiled(q, k, v), want, atol=1e-5, rtol=1e-5)
    assert taken  # traced through the explicit path
    taken.clear()
    torch.testing.assert_close(scaled_dot_product_attention(q, k, v, mask)[0], want, atol=1e-5, rtol=1e-5)
    assert not taken  # eager: the fused kernel (one call there, where the explicit path is five)
    monkeypatch.setattr(functional, "ONE_QUERY_EXPLICIT", False)
    torch._dynamo.reset()
    torch.testing.assert_close(compiled(q, k, v), want, atol=1e-5, rtol=1e-5)
    assert not taken  # the switch off: the fused kernel inside the graph too
