"""Decoding checks its input ids once, at the entry, with errors that name the argument and the vocabulary.

The embedding checks ids on the CPU only (on an accelerator that read would stall every step), so an
out-of-range id must be caught here, before the loop, whatever the device.
"""

import sys

import pytest
import torch

import aiayn
from aiayn.decoding import beam_search, greedy, sample, stream
from aiayn.layers import embedding


def translator():
    torch.manual_seed(0)
    return aiayn.build("transformer-tiny", d_model=32, n_heads=4, d_ff=64).eval()  # vocabulary 64


def lm():
    torch.manual_seed(0)
    return aiayn.build("gpt-tiny", vocab_size=50, d_model=32, n_heads=4, n_layers=2, d_ff=64).eval()


@pytest.mark.parametrize("decode", [greedy, beam_search])
@pytest.mark.parametrize("bad, shown", [(64, 64), (-1, -1)])
def test_out_of_range_source_ids_are_refused_before_decoding(decode, bad, shown):
    src = torch.tensor([[5, 6, 7], [8, bad, 9]])
    with pytest.raises(ValueError, match=rf"src holds token id {shown}, outside the vocabulary \[0, 64\)"):
        decode(translator(), src, max_len=3)


@pytest.mark.parametrize("decode", [greedy, beam_search])
def test_a_source_that_is_not_batch_by_length_integers_is_refused(decode):
    with pytest.raises(ValueError, match=r"src must have shape \(batch, length\)"):
        decode(translator(), torch.tensor([5, 6, 7]), max_len=3)
    with pytest.raises(TypeError, match="src must hold integer token ids"):
        decode(translator(), torch.tensor([[5.0, 6.0]]), max_len=3)


def test_out_of_range_prompt_ids_are_refused_before_sampling():
    with pytest.raises(ValueError, match=r"prompt holds token id 50, outside the vocabulary \[0, 50\)"):
        sample(lm(), [[1, 2], [3, 50]], max_new_tokens=2)
    with pytest.raises(ValueError, match=r"prompt holds token id -3, outside the vocabulary \[0, 50\)"):
        sample(lm(), torch.tensor([[1, -3]]), max_new_tokens=2)
    with pytest.raises(ValueError, match=r"prompts holds token id 99, outside the vocabulary \[0, 50\)"):
        next(stream(lm(), [[99]], max_new_tokens=2))
    with pytest.raises(ValueError, match="every prompt needs at least one token"):
        sample(lm(), [[1], []], max_new_tokens=2)


def test_the_source_range_is_read_once_not_at_every_step(monkeypatch):
    """Spy on the one range check: greedy decoding asks it for ``src`` once; every step's embedding asks
    for its range on the CPU only, as ``values=ids.device.type == "cpu"``."""
    calls = []
    check = embedding.check_ids

    def spy(ids, vocab_size, name="ids", values=True):
        calls.append((name, values, ids.device.type))
        return check(ids, vocab_size, name, values)

    monkeypatch.setattr(embedding, "check_ids", spy)  # the name Embedding.forward looks up
    monkeypatch.setattr(sys.modules["aiayn.decoding.greedy"], "check_ids", spy)  # the module, not the function
    src = torch.tensor([[5, 6, 7, 8]])
    greedy(translator(), src, max_len=4)
    assert calls[0] == ("src", True, "cpu")
    assert [c for c in calls if c[0] == "src"] == [calls[0]]  # once, before the loop
    steps = [c for c in calls if c[0] == "ids"]
    assert len(steps) >= 2 and all(values == (device == "cpu") for _, values, device in steps)


def too_long(decode):
    """A call each decoding entry refuses after it has started (more positions than the model has)."""
    from aiayn.decoding.beam import beam_search_lm

    src, prompt = torch.tensor([[5, 6, 7]]), torch.tensor([[5, 6, 7]])
    return {"greedy": lambda m: greedy(m, src, max_len=0),
            "beam_search": lambda m: beam_search(m, src, max_len=0),
            "generate": lambda m: m.generate(prompt, max_new_tokens=10_000),
            "sample": lambda m: sample(m, [[5, 6, 7]], 10_000),
            "stream": lambda m: next(stream(m, [[5, 6, 7]], 10_000)),
            "beam_search_lm": lambda m: beam_search_lm(m, prompt, 10_000)}[decode]


@pytest.mark.parametrize("decode", ["greedy", "beam_search", "generate", "sample", "stream", "beam_search_lm"])
def test_a_refused_decoding_call_leaves_a_training_model_training(decode):
    # decoding switches dropout off while it runs; a call that fails part-way must still give the mode back,
    # or training would go on without dropout, silently
    model = (translator() if decode in ("greedy", "beam_search") else lm()).train()
    with pytest.raises(ValueError):
        too_long(decode)(model)
    assert model.training and all(m.training for m in model.modules())
