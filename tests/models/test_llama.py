"""Llama's switches on the GPT model and the shared layers: exact preset counts, the KV cache of grouped heads,
cache == recompute with a sliding window and padding, RoPE's relative positions, the window mask by hand."""

import dataclasses
import math

import pytest
import torch

import aiayn
from aiayn.analysis import counts, parameter_table
from aiayn.layers import RotaryEmbedding, apply_rotary, causal_mask
from aiayn.layers.kv_cache import KVCache
from aiayn.layers.positional import rope_frequencies


@pytest.mark.parametrize("name, count", [("llama2-7b", 6_738_415_616), ("llama3-8b", 8_030_261_248),
                                         ("mistral-7b", 7_241_732_096)])
def test_presets_count_the_released_models_exactly(name, count):
    table = parameter_table(name)  # built on the meta device
    assert table["total"] == count == counts(name).total_parameters
    cfg = aiayn.preset(name)
    d, kv = cfg.d_model, cfg.kv_heads * cfg.d_model // cfg.n_heads
    by_hand = (cfg.n_layers * (2 * d * d + 2 * d * kv + 3 * d * cfg.d_ff + 2 * d)  # no biases, RMSNorm gains
               + 2 * cfg.vocab_size * d + d)  # untied tokens and output, final norm
    assert by_hand == count and table["norms"] == (2 * cfg.n_layers + 1) * d


def tiny(**overrides):
    torch.manual_seed(0)
    return aiayn.build("llama-tiny", **overrides).eval()


def test_kv_cache_holds_only_the_kv_heads():
    model = tiny()
    cfg = model.cfg
    assert cfg.n_kv_heads == 2 < cfg.n_heads == 4
    cache = model.new_cache(12)
    with torch.no_grad():
        model(torch.randint(0, 256, (3, 7)), cache=cache)
    d = cfg.d_model // cfg.n_heads
    for layer in cache:
        assert layer.self_attn.k.shape == layer.self_attn.v.shape == (3, cfg.n_kv_heads, 12, d)
    assert model.decoder.layers[0].self_attn.in_proj.weight.shape == (cfg.d_model + 2 * cfg.n_kv_heads * d,
                                                                       cfg.d_model)


@pytest.mark.parametrize("window", [None, 4])
def test_cached_steps_equal_a_full_recompute_with_left_padding(window):
    model = tiny(attention_window=window)
    ids = torch.randint(3, 256, (2, 11))
    mask = torch.ones(2, 11, dtype=torch.bool)
    mask[1, :3] = False  # the second row padded on the left
    with torch.no_grad():
        full = model(ids, attention_mask=mask)
        cache = model.new_cache(11)
        steps = [model(ids[:, :5], attention_mask=mask[:, :5], cache=cache)]
        for i in range(5, 11):
            steps.append(model(ids[:, i : i + 1], attention_mask=mask[:, : i + 1], cache=cache))
    real = mask[:, :, None].expand_as(full)
    torch.testing.assert_close(torch.cat(steps, 1)[real], full[real], atol=1e-5, rtol=1e-5)


def test_sliding_window_sees_only_the_last_w_positions():
    m = causal_mask(2, 5, window=3)  # queries at absolute positions 3 and 4
    assert m.tolist() == [[False, True, True, True, False], [False, False, True, True, True]]
    ids = torch.randint(0, 256, (1, 10))
    changed = ids.clone()
    changed[0, 0] = (ids[0, 0] + 1) % 256
    with torch.no_grad():
        a, b = (tiny(attention_window=3)(x) for x in (ids, changed))
        full = [tiny()(x) for x in (ids, changed)]
    # one layer reaches back 2 positions, four layers 8: position 8 still sees token 0, position 9 no longer does
    assert tiny().cfg.n_layers == 4 and not torch.allclose(a[0, 8], b[0, 8]) and torch.equal(a[0, 9], b[0, 9])
    assert not torch.allclose(full[0][0, 9], full[1][0, 9])  # without the window it does


def test_rope_scores_depend_only_on_the_offset():
    rope = RotaryEmbedding(8, theta=10000.0)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)

    def score(m, n):
        cos, sin = rope(1, start=m)
        cos_k, sin_k = rope(1, start=n)
        return float((apply_rotary(q, cos, sin) * apply_rotary(k, cos_k, sin_k)).sum())

    assert score(7, 3) == pytest.approx(score(104, 100), abs=1e-4)
    assert score(7, 3) != pytest.approx(score(7, 5), abs=1e-3)
    cos, _ = rope(3, position_ids=torch.tensor([[0, 1, 2]]))
    assert cos.shape == (1, 1, 3, 8) and torch.allclose(cos[0, 0], rope(3)[0])


def test_llama3_scaling_divides_long_waves_keeps_short_ones_and_blends_between():
    plain = rope_frequencies(64, 500000.0)
    scaled = rope_frequencies(64, 500000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                             "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
    wavelen = 2 * math.pi / plain
    short, long = wavelen < 8192 / 4, wavelen > 8192
    assert torch.equal(scaled[short], plain[short]) and torch.allclose(scaled[long], plain[long] / 8)
    middle = ~short & ~long
    assert middle.any() and ((scaled[middle] < plain[middle]) & (scaled[middle] > plain[middle] / 8)).all()


def test_bad_switches_are_refused_with_their_names():
    cfg = aiayn.preset("llama-tiny")
    for changes, message in [({"n_kv_heads": 3}, "n_kv_heads=3 must divide n_heads=4"),
                             ({"norm": "batchnorm"}, "norm='batchnorm'"),
                             ({"positional": "alibi"}, "positional='alibi'"),
                             ({"attention_window": 0}, "attention_window=0"),
                             ({"rope_scaling": {"rope_type": "yarn"}}, "rope_scaling="),
                             ({"positional": "learned", "rope_scaling": {"rope_type": "llama3"}}, "needs positional"),
                             ({"d_model": 28}, "head dim d_model / n_heads = 28 / 4 = 7 must be even"),
                             ({"rope_scaling": {"rope_type": "llama3", "factor": 8}}, "needs 'low_freq_factor'"),
                             ({"rope_scaling": {"rope_type": "llama3", "factor": 8, "low_freq_factor": 4,
                                                "high_freq_factor": 1, "original_max_position_embeddings": 64}},
                              "low_freq_factor < high_freq_factor"),
                             ({"rope_scaling": {"rope_type": "llama3", "factor": "8x", "low_freq_factor": 1,
                                                "high_freq_factor": 4, "original_max_position_embeddings": 64}},
                              "must be numbers")]:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
            dataclasses.replace(cfg, **changes)
    with pytest.raises(ValueError, match=r"ids must have shape \(batch, length\), got \(5,\)"):
        tiny()(torch.zeros(5, dtype=torch.long))
    with pytest.raises(ValueError, match="window=0 must be positive"):
        KVCache(8, window=0)


def test_as_many_kv_heads_as_heads_is_not_grouped_and_compares_equal():
    cfg = aiayn.preset("llama-tiny")
    assert dataclasses.replace(cfg, n_kv_heads=4) == dataclasses.replace(cfg, n_kv_heads=None)
    assert dataclasses.replace(cfg, n_kv_heads=4).kv_heads == 4


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_half_precision_llama_runs_in_its_dtype_with_float32_angles(dtype):
    # cos and sin follow the queries' dtype (a float32 query beside bfloat16 values made SDPA refuse), and the
    # frequencies stay float32 through .to(dtype): rounded to bfloat16 they would turn late positions wrongly
    model, ids = tiny(max_len=512), torch.randint(0, 256, (2, 300))
    with torch.no_grad():
        ref = model(ids)
        low = model.to(dtype)
        assert low.rotary.inv_freq.dtype == torch.float32
        torch.testing.assert_close(low.rotary.inv_freq, tiny(max_len=512).rotary.inv_freq, atol=0, rtol=0)
        out = low(ids)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), ref, atol=0.1, rtol=0.05)


def test_a_llama_config_is_refused_by_the_gpt2_export():
    from aiayn.models.gpt import gpt2

    with pytest.raises(ValueError, match=r"positional='rope'.*is not a GPT-2"):
        gpt2.export(tiny())


def test_every_parameter_gets_a_gradient():
    model = tiny(attention_window=5).train()
    ids = torch.randint(0, 256, (2, 9))
    model(ids).logsumexp(-1).mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_a_windowed_cache_rolls_and_generates_the_tokens_of_recomputing_with_a_fraction_of_the_memory():
    from aiayn.decoding import sample
    from aiayn.decoding.beam import beam_search_lm

    model = tiny(attention_window=4)
    prompt = torch.randint(3, 256, (2, 5))
    with torch.no_grad():
        cached = sample(model, prompt, 40, temperature=0)
        recomputed = sample(model, prompt, 40, temperature=0, use_cache=False)
        cache = model.new_cache(45)
        model(prompt, cache=cache)
        for _ in range(40):  # the cache a generation of 45 positions holds
            model(torch.zeros(2, 1, dtype=torch.long), cache=cache)
        beams = beam_search_lm(model, prompt[:1], 12, beam=3)
        beams_recomputed = beam_search_lm(model, prompt[:1], 12, beam=3, use_cache=False)
    assert torch.equal(cached, recomputed)
    assert all(layer.self_attn.k.size(2) == 8 for layer in cache)  # 2W positions, not 45
    assert cache.length == 45 and cache[0].self_attn.start > 30
    assert torch.equal(beams, beams_recomputed)


def test_logits_are_unchanged_when_every_position_shifts_by_a_constant(monkeypatch):
    # RoPE makes attention see relative positions only (Su et al. 2021, eq. 16): turning every query and key
    # 1000 positions further on changes no logit; it would if only the queries turned
    model = tiny()
    ids = torch.randint(3, 256, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.bool)
    mask[1, :2] = False
    with torch.no_grad():
        plain, padded = model(ids), model(ids, attention_mask=mask)
        real = model.rotary.forward

        def shifted(t, start=0, position_ids=None):
            return real(t, start + 1000, None if position_ids is None else position_ids + 1000)

        monkeypatch.setattr(model.rotary, "forward", shifted)
        torch.testing.assert_close(model(ids), plain, atol=2e-4, rtol=1e-4)
        torch.testing.assert_close(model(ids, attention_mask=mask), padded, atol=2e-4, rtol=1e-4)
        monkeypatch.setattr(model.rotary, "forward", lambda t, start=0, position_ids=None: real(1, 0)
                            if position_ids is None else real(t, 0, torch.zeros_like(position_ids)))
        assert (model(ids) - plain).abs().max() > 1e-2  # and positions matter: all at position 0 differs


def test_the_explicit_attention_path_gives_the_fused_paths_logits_with_grouped_heads():
    # recording the attention weights takes the explicit path (kv heads repeated for their groups by hand);
    # the default hands the 2 kv heads to SDPA: query head h must read kv head h // 2 on both
    from aiayn.layers import record_attention

    model = tiny()
    assert model.cfg.n_kv_heads < model.cfg.n_heads
    ids = torch.randint(3, 256, (2, 8))
    with torch.no_grad():
        fused = model(ids)
        with record_attention(model) as rec:
            explicit = model(ids)
        cache = model.new_cache(8)
        with record_attention(model):
            steps = [model(ids[:, :3], cache=cache)] + [model(ids[:, i : i + 1], cache=cache) for i in range(3, 8)]
    assert rec["decoder.layers.0.self_attn"][0].shape == (2, 4, 8, 8)
    torch.testing.assert_close(explicit, fused, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(torch.cat(steps, 1), fused, atol=1e-5, rtol=1e-5)
