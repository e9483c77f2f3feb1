import math

import pytest
import torch

import aiayn
from aiayn.decoding import sample
from aiayn.training import decay_groups


@pytest.mark.parametrize("name, count", [("gpt2", 124_439_808), ("gpt2-medium", 354_823_168),
                                         ("gpt2-large", 774_030_080), ("gpt2-xl", 1_557_611_200)])
def test_preset_parameter_counts_are_gpt2s(name, count):
    with torch.device("meta"):
        assert aiayn.count_parameters(aiayn.build(name)) == count


def tiny(**kw):
    torch.manual_seed(0)
    return aiayn.build("gpt-tiny", vocab_size=50, d_model=32, n_heads=4, n_layers=3, d_ff=64, **kw).eval()


def test_a_future_token_never_changes_an_earlier_output():
    model = tiny()
    ids = torch.randint(0, 50, (2, 12))
    changed = ids.clone()
    changed[:, 7] = (changed[:, 7] + 1) % 50
    with torch.no_grad():
        a, b = model(ids), model(changed)
    torch.testing.assert_close(a[:, :7], b[:, :7])
    assert not torch.allclose(a[:, 7:], b[:, 7:])


def test_cached_logits_equal_a_full_recompute_at_every_step():
    model = tiny()
    ids = torch.randint(0, 50, (2, 10))
    cache = model.new_cache(10)
    with torch.no_grad():
        full = model(ids)
        steps = [model(ids[:, :4], cache=cache)]  # a prompt of 4, then one token at a time
        steps += [model(ids[:, i : i + 1], cache=cache) for i in range(4, 10)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_gpt2_initialisation_and_weight_decay_on_matrices_only():
    model = aiayn.build("gpt-tiny", n_layers=8, d_model=256, d_ff=1024)
    assert model.lm_head.weight is model.embed.tokens.weight
    residual = model.decoder.layers[0].ff.fc2.weight.std().item()
    assert abs(residual - 0.02 / math.sqrt(16)) < 0.001
    assert abs(model.decoder.layers[0].ff.fc1.weight.std().item() - 0.02) < 0.001
    decay, no_decay = decay_groups(model, 0.1)
    assert all(p.dim() == 2 for p in decay["params"]) and all(p.dim() == 1 for p in no_decay["params"])
    assert sum(p.numel() for g in (decay, no_decay) for p in g["params"]) == aiayn.count_parameters(model)


def test_too_long_inputs_and_bad_masks_are_refused_with_names():
    model = tiny()
    with pytest.raises(ValueError, match="longer than the 256 learned positions"):
        model(torch.zeros(1, 257, dtype=torch.long))
    with pytest.raises(ValueError, match=r"attention_mask must be \(batch, cached \+ new positions\)"):
        model(torch.zeros(2, 5, dtype=torch.long), attention_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="exceed the model's 256 learned positions"):
        sample(model, [[1, 2]], max_new_tokens=300)


def test_positions_and_mask_count_real_tokens_and_build_one_mask_for_every_layer():
    model = tiny()
    ids = torch.randint(0, 50, (2, 4))
    position_ids, mask, is_causal, start = model.positions_and_mask(ids)
    assert (position_ids, mask, is_causal, start) == (None, None, True, 0)  # SDPA's causal kernel, no mask built
    real = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])  # the first row padded on the left
    position_ids, mask, is_causal, start = model.positions_and_mask(ids, real)
    assert position_ids.tolist() == [[0, 0, 0, 1], [0, 1, 2, 3]] and not is_causal and start == 0
    # (B, 1, T, S): causal, and padding never attended to
    assert mask.shape == (2, 1, 4, 4) and mask[1, 0].equal(torch.ones(4, 4, dtype=torch.bool).tril())
    assert mask[0, 0].tolist() == [[False] * 4, [False] * 4, [False, False, True, False], [False, False, True, True]]
    cache = model.new_cache(8)
    with torch.no_grad():
        model(ids, attention_mask=real, cache=cache)
    one = torch.cat([real, torch.ones(2, 1, dtype=real.dtype)], dim=1)  # one new token after the cached four
    position_ids, mask, is_causal, start = model.positions_and_mask(ids[:, :1], one, cache)
    assert position_ids.tolist() == [[2], [4]] and start == 4 and not is_causal
    assert mask.equal(one.bool()[:, None, None, :])  # one new token: the key-only padding mask (B, 1, 1, S)
