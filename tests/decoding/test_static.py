"""Decoding over a static cache (:mod:`aiayn.decoding.static`): each step's logits equal the growing cache's,
and ``generate(..., compile=True)`` gives the eager tokens, compiling the step once for every generation of
that shape."""

import pytest
import torch

import aiayn
from aiayn.decoding.static import StaticGPT

pytestmark = pytest.mark.usefixtures("one_thread")

PROMPTS = torch.tensor([[5, 9, 12, 7, 3, 4], [0, 0, 0, 8, 4, 1], [0, 11, 2, 6, 6, 30]])
MASK = torch.tensor([[1] * 6, [0, 0, 0, 1, 1, 1], [0, 1, 1, 1, 1, 1]])  # padded on the left


def model(preset):
    torch.manual_seed(0)
    return aiayn.build(aiayn.preset(preset, vocab_size=64, max_len=64, eos_id=2)).eval()


@pytest.mark.parametrize("preset", ["gpt-tiny", "llama-tiny"])  # learned positions; RoPE with grouped kv heads
def test_each_step_over_the_static_cache_equals_the_growing_cache(preset):
    gpt, new = model(preset), 5
    real = torch.cat([MASK.bool(), torch.ones(3, new, dtype=torch.bool)], dim=1)  # (B, P + new)
    static = StaticGPT(gpt, real)
    cache = gpt.new_cache(real.size(1))
    ids = PROMPTS
    with torch.no_grad():
        want = gpt(ids, attention_mask=MASK, cache=cache)[:, -1]
        got = static.prefill(ids, MASK)
        for _ in range(new):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            token = want.argmax(-1)  # (B,)
            end = ids.size(1)
            ids = torch.cat([ids, token[:, None]], dim=1)
            want = gpt(token[:, None], attention_mask=real[:, : end + 1], cache=cache)[:, -1]
            got = static.step(token, end)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_compiled_generation_gives_the_eager_tokens_and_compiles_once():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()

    gpt = model("llama-tiny")
    eager = gpt.generate(PROMPTS, attention_mask=MASK, max_new_tokens=8, do_sample=False)
    compiled = gpt.generate(PROMPTS, attention_mask=MASK, max_new_tokens=8, do_sample=False, compile=True)
    assert torch.equal(compiled, eager)
    graphs = counters["stats"]["unique_graphs"]
    assert graphs >= 1 and not counters["graph_break"], dict(counters["graph_break"])  # one whole step
    draws = [gpt.generate(PROMPTS, attention_mask=MASK, max_new_tokens=8, do_sample=True, top_k=10,
                          generator=torch.Generator().manual_seed(7), compile=flag) for flag in (False, True)]
    assert torch.equal(draws[1], draws[0])
    assert counters["stats"]["unique_graphs"] == graphs  # the same shapes: nothing compiled again


def test_compile_is_refused_where_it_does_not_decode():
    gpt = model("gpt-tiny")
    with pytest.raises(ValueError, match="beam search"):
        gpt.generate(PROMPTS, attention_mask=MASK, max_new_tokens=2, num_beams=2, compile=True)
    with pytest.raises(ValueError, match="use_cache"):
        gpt.generate(PROMPTS, attention_mask=MASK, max_new_tokens=2, use_cache=False, compile=True)
    mistral = aiayn.build(aiayn.preset("llama-tiny", attention_window=4)).eval()
    with pytest.raises(ValueError, match="sliding window"):
        mistral.generate(PROMPTS, attention_mask=MASK, max_new_tokens=2, compile=True)
    transformer = aiayn.build(aiayn.preset("transformer-tiny")).eval()
    with pytest.raises(ValueError, match="encoder-decoders"):
        transformer.generate(PROMPTS + 3, max_new_tokens=2, compile=True)
