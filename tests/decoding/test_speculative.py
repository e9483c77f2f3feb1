"""Speculative decoding (:mod:`aiayn.decoding.speculative`): greedy gives plain greedy decoding's tokens whatever
the draft; sampling gives the model's distribution, checked against the exact one by enumeration; the caches
drop rejected positions as if they had never been fed."""

import itertools
from collections import Counter

import pytest
import torch
from scipy import stats

import aiayn
from aiayn.decoding.sampling import sample
from aiayn.decoding.speculative import probabilities, speculative
from aiayn.layers.kv_cache import KVCache

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = [[5, 9, 12, 7, 3, 4], [8], [11, 40, 6, 6, 30]]  # of different lengths, one of a single token


def gpt(preset, seed=0, **overrides):
    torch.manual_seed(seed)
    return aiayn.build(aiayn.preset(preset, **{"vocab_size": 64, "max_len": 64, "eos_id": 2, **overrides})).eval()


def greedy_new(model, prompts, n, eos_id=None):
    """Plain greedy decoding's new tokens, row by row."""
    rows = sample(model, prompts, n, temperature=0, eos_id=eos_id)
    assert isinstance(rows, list)
    return [row[len(p) :] for p, row in zip(prompts, rows)]


@pytest.mark.parametrize("preset", ["gpt-tiny", "llama-tiny"])  # learned positions; RoPE with grouped kv heads
def test_greedy_gives_plain_greedy_tokens_whatever_the_draft(preset):
    model = gpt(preset)
    other = gpt(preset, seed=1, n_layers=1, d_ff=128)  # another random model of the same vocabulary
    for n in (1, 2, 13):  # 13: not a multiple of any k below; 1 and 2: fewer than k
        want = greedy_new(model, PROMPTS, n)
        for k in (1, 4, 5):
            got, seen = speculative(model, other, PROMPTS, n, num_assistant_tokens=k)
            assert got == want, (n, k)
            assert seen.tokens == 3 * n and 0 <= seen.accepted <= seen.proposed
            got, seen = speculative(model, model, PROMPTS, n, num_assistant_tokens=k)  # the model drafts itself
            assert got == want, (n, k)
            assert seen.accepted == seen.proposed and seen.proposed == 3 * (n - 1 - (n - 1) // (k + 1))
            assert seen.passes == 3 * -(-n // (k + 1))  # k + 1 tokens a pass, the last pass cut to what is left


def test_greedy_stops_at_an_end_token_as_plain_greedy_does():
    model, other = gpt("gpt-tiny"), gpt("gpt-tiny", seed=1, n_layers=1)
    free = greedy_new(model, PROMPTS, 20)
    ends = (free[0][6], free[2][3])  # tokens each of two rows makes: one end id, then two
    for eos in (ends[0], ends):
        want = greedy_new(model, PROMPTS, 20, eos_id=eos)
        assert any(len(row) < 20 for row in want)  # a row stopped early
        for draft in (model, other):
            got, seen = speculative(model, draft, PROMPTS, 20, num_assistant_tokens=3, eos_id=eos)
            assert got == want
            assert seen.tokens == sum(len(row) for row in want)


def test_modes_are_put_back():
    model, draft = gpt("gpt-tiny").train(), gpt("gpt-tiny", seed=1, n_layers=1).eval()
    speculative(model, draft, PROMPTS, 3)
    assert model.training and not draft.training


# Sampling. Vocabulary 4, 3 tokens after one prompt: 64 outcomes, each of whose probability under the model is
# the product of 3 of its next-token distributions, enumerated exactly. With 2 proposals per pass, the first pass
# may accept 0, 1 or 2 of them (a rejection at either position) or add the model's own third token.
V, DRAWS, PROMPT = 4, 2000, [1, 3, 0]


def small_pair():
    """A model with peaked next-token distributions, and a draft near it: the same network, its output layer
    perturbed (so that proposals are accepted often but not always)."""
    torch.manual_seed(0)
    model = aiayn.build(aiayn.preset("gpt-tiny", vocab_size=V, max_len=8, d_model=16, n_heads=2, n_layers=1,
                                     d_ff=32, tie_output=False)).eval()
    draft = aiayn.build(model.cfg).eval()
    draft.load_state_dict(model.state_dict())
    with torch.no_grad():
        model.lm_head.weight.normal_(std=0.12)
        draft.lm_head.weight.copy_(model.lm_head.weight + 0.2 * torch.randn_like(model.lm_head.weight))
    return model, draft


def exact(net, temperature, top_k, top_p):
    """``{(a, b, c): P(a, b, c | PROMPT)}`` under ``net`` with the same warping, by enumeration."""
    prefixes = [list(p) for p in itertools.product(range(V), repeat=2)]  # the 16 first two tokens
    with torch.no_grad():
        logits = net(torch.tensor([PROMPT + p for p in prefixes]))[:, len(PROMPT) - 1 :]  # (16, 3, V)
    probs = probabilities(logits.reshape(-1, V), temperature, top_k, top_p).reshape(logits.shape).double()
    return {(*p, c): float(probs[i, 0, p[0]] * probs[i, 1, p[1]] * probs[i, 2, c])
            for i, p in enumerate(prefixes) for c in range(V)}


def chi_square_p(counts, probs):
    """Pearson's chi-square p-value of ``counts`` drawn from ``probs``, the outcomes expected fewer than 5 times
    pooled into one bin (as the test's approximation needs); a count where ``probs`` is 0 gives 0."""
    n = sum(counts.values())
    if any(probs.get(s, 0.0) == 0 for s in counts):
        return 0.0
    big = [s for s in probs if probs[s] * n >= 5]
    observed = [counts[s] for s in big] + [n - sum(counts[s] for s in big)]
    expected = [probs[s] * n for s in big] + [max(n - sum(probs[s] * n for s in big), 0.0)]
    if expected[-1] < 1e-9:  # nothing left over to pool
        observed, expected = observed[:-1], expected[:-1]
    scale = sum(observed) / sum(expected)  # the probabilities' rounding
    return float(stats.chisquare(observed, [e * scale for e in expected]).pvalue)


@pytest.mark.parametrize("warp", [{"temperature": 1.0}, {"temperature": 0.7, "top_k": 3, "top_p": 0.9}])
def test_sampled_tokens_are_distributed_as_the_models(warp):
    model, draft = small_pair()
    warp = {"top_k": None, "top_p": None, **warp}
    want, drafts = exact(model, **warp), exact(draft, **warp)
    assert 0.5 * sum(abs(want[s] - drafts[s]) for s in want) > 0.1  # the two differ
    got, seen = speculative(model, draft, [PROMPT] * DRAWS, 3, num_assistant_tokens=2,
                            generator=torch.Generator().manual_seed(0), **warp)
    assert 0.2 < seen.acceptance_rate < 0.9  # rejections and full acceptances both taken, many times
    counts = Counter(tuple(row) for row in got)
    # Seeded, so deterministic; the margin: p > 0.001 for the model's distribution, while the same draws are
    # p < 1e-9 for the draft's (what drawing the proposals without the rejection step would give): the check
    # tells the two apart by far.
    assert chi_square_p(counts, want) > 1e-3
    assert chi_square_p(counts, drafts) < 1e-9


def test_crop_forgets_positions_as_if_never_fed():
    model = gpt("llama-tiny")
    prompt, junk, more = torch.tensor([[5, 9, 12, 7]]), torch.tensor([[33, 8, 1]]), torch.tensor([[20, 21]])
    cropped, fresh = model.new_cache(12), model.new_cache(12)
    with torch.no_grad():
        model(prompt, cache=cropped)
        model(junk, cache=cropped)
        cropped.crop(4)
        assert cropped.length == 4
        got = model(more, cache=cropped)
        model(prompt, cache=fresh)
        want = model(more, cache=fresh)
    assert torch.equal(got, want)  # the same computation on the same keys: bit for bit
    for a, b in zip(cropped, fresh):
        assert a.self_attn.k is not None and b.self_attn.k is not None
        assert torch.equal(a.self_attn.k[:, :, :6], b.self_attn.k[:, :, :6])
    with pytest.raises(ValueError, match="length=7"):
        cropped.crop(7)  # more than it holds
    with pytest.raises(ValueError, match="length=-1"):
        cropped.crop(-1)


def test_crop_refuses_a_window_that_has_rolled():
    cache = KVCache(max_len=20, window=2)
    cache.append(torch.zeros(1, 1, 3, 4), torch.zeros(1, 1, 3, 4))
    cache.crop(2)  # not rolled yet: allowed
    for _ in range(4):
        cache.append(torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 1, 4))
    assert cache.start > 0
    with pytest.raises(ValueError, match="rolled"):
        cache.crop(cache.length - 1)


def test_bad_inputs_are_refused_naming_the_argument():
    model = gpt("gpt-tiny")
    with pytest.raises(ValueError, match=r"draft has a vocabulary of 32 tokens, the model 64"):
        speculative(model, aiayn.build(aiayn.preset("gpt-tiny", vocab_size=32, n_layers=1)), PROMPTS, 3)
    for k in (0, -1):
        with pytest.raises(ValueError, match="num_assistant_tokens"):
            speculative(model, model, PROMPTS, 3, num_assistant_tokens=k)
    with pytest.raises(ValueError, match="max_new_tokens"):
        speculative(model, model, PROMPTS, 0)
    with pytest.raises(ValueError, match="temperature"):
        speculative(model, model, PROMPTS, 3, temperature=-1.0)
    with pytest.raises(ValueError, match="prompts"):
        speculative(model, model, [[5], []], 3)
    with pytest.raises(ValueError, match="draft has a sliding window"):
        speculative(model, gpt("llama-tiny", attention_window=8), PROMPTS, 3)
    with pytest.raises(ValueError, match="draft: 80 positions exceed"):
        speculative(gpt("gpt-tiny", max_len=128), model, [[1] * 70], 10)
