"""``model.generate`` with Hugging Face's arguments against ``transformers``' own ``generate`` (random weights from
a config, no download), and the sampling it adds to encoder-decoders against the model's probabilities."""

import pytest
import torch

import aiayn
from aiayn.decoding import greedy, sample
from aiayn.decoding.sampling import sample_seq2seq

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.parity, pytest.mark.usefixtures("one_thread")]  # see conftest.py

V = 50


def gpt2(eos=None):
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=64, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                                  embd_pdrop=0.0, attn_pdrop=0.0, initializer_range=0.3,
                                  eos_token_id=V - 1 if eos is None else eos, bos_token_id=V - 1)
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.2)
    return hf


def prompts():
    """Three prompts of 6, 3 and 5 tokens, padded on the left."""
    ids = torch.tensor([[5, 9, 12, 7, 3, 4], [0, 0, 0, 8, 4, 1], [0, 11, 2, 6, 6, 30]])
    mask = torch.tensor([[1] * 6, [0, 0, 0, 1, 1, 1], [0, 1, 1, 1, 1, 1]])
    return ids, mask


def a_common_eos():
    """A token the random model often predicts, as end-of-text, so rows end at different steps."""
    hf = gpt2()
    ids, mask = prompts()
    out = hf.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0,
                      eos_token_id=None)[:, 6:]
    return int(torch.mode(out.flatten()).values)


@pytest.fixture(scope="module")
def eos():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return a_common_eos()
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("options", [
    {"num_beams": 1},
    {"num_beams": 3},
    {"num_beams": 3, "length_penalty": 0.6, "early_stopping": True},
    {"num_beams": 4, "length_penalty": 0.8, "early_stopping": "never"},
    {"num_beams": 2, "length_penalty": 0.0},
], ids=["greedy", "beam-defaults", "beam-early", "beam-never", "beam-no-penalty"])
def test_gpt_generate_equals_transformers(options, eos):
    hf = gpt2(eos)
    ours = aiayn.from_hf(hf)
    ids, mask = prompts()
    expected = hf.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False, **options)
    got = ours.generate(ids, attention_mask=mask, max_new_tokens=12, **options)
    assert (expected[:, 6:] == eos).any(1).sum() >= 1, "some rows should end early"
    assert got.tolist() == expected.tolist()


@pytest.mark.parametrize("seed, first, beams", [(0, 0, 3), (2, 1, 2), (2, 2, 2)])
def test_several_end_tokens_keep_enough_live_beams_as_transformers_does(seed, first, beams):
    # three of the likeliest next tokens end a row: then more than K of the 2K best candidates can end, and K live
    # beams must still go on (transformers takes (1 + ends) K candidates; with 2K a row of each case differed)
    ids = torch.randint(2, V, (15, 4), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        ends = gpt2()(ids).logits[:, -1].mean(0).topk(first + 3).indices[first:].tolist()
    hf = gpt2(ends)
    ours = aiayn.from_hf(hf)
    assert ours.cfg.stop_ids == tuple(ends[1:])
    options = {"max_new_tokens": 8, "num_beams": beams, "pad_token_id": ends[0]}
    expected = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, **options)
    assert ours.generate(ids, **options).tolist() == expected.tolist()


def test_gpt_generate_max_length_counts_the_prompt_and_the_default_is_transformers_20_new_tokens():
    hf = gpt2()
    ours = aiayn.from_hf(hf)
    ids, mask = prompts()
    assert ours.generate(ids, attention_mask=mask).shape == hf.generate(ids, attention_mask=mask,
                                                                        do_sample=False).shape == (3, 6 + 20)
    assert ours.generate(ids, max_length=9).shape == (3, 9)


def test_gpt_sampling_is_the_sampler_with_transformers_default_top_k():
    ours = aiayn.from_hf(gpt2())
    ids = torch.tensor([[5, 9, 12], [8, 4, 1]])
    torch.manual_seed(0)
    wide = aiayn.build("gpt-tiny", vocab_size=400, d_model=32, n_heads=2, n_layers=1, d_ff=64).eval()  # V > 50
    for model in (ours, wide):
        got = model.generate(ids, do_sample=True, max_new_tokens=8, generator=torch.Generator().manual_seed(3))
        want = sample(model, ids, 8, temperature=1.0, top_k=50, generator=torch.Generator().manual_seed(3),
                      eos_id=model.cfg.eos_id)
        assert got.tolist() == want.tolist()
    unfiltered = sample(wide, ids, 8, temperature=1.0, generator=torch.Generator().manual_seed(3),
                        eos_id=wide.cfg.eos_id)
    assert got.tolist() != unfiltered.tolist()  # the default top_k=50 filters 400 tokens


@pytest.fixture(scope="module")
def marian():
    """A tiny Marian, trained for a few seconds to reverse its input, and its pad id."""
    from tests.convert.test_marian import PAD, reverser

    return reverser(), PAD


SOURCES = torch.tensor([[5, 9, 12, 7, 3, 0], [8, 4, 0, 40, 40, 40], [11, 2, 6, 6, 0, 40]])


@pytest.mark.parametrize("options", [
    {"num_beams": 1},
    {"num_beams": 4},
    {"num_beams": 4, "length_penalty": 0.6, "early_stopping": True},
    {"num_beams": 3, "length_penalty": 1.5, "early_stopping": "never"},
], ids=["greedy", "beam-defaults", "beam-early", "beam-never"])
def test_seq2seq_generate_equals_transformers(options, marian):
    hf, pad = marian
    ours = aiayn.from_hf(hf)
    mask = SOURCES.ne(pad).long()
    expected = hf.generate(SOURCES, attention_mask=mask, max_new_tokens=10, do_sample=False,
                           bad_words_ids=[[pad]], **options)
    got = ours.generate(SOURCES, attention_mask=mask, max_new_tokens=10, **options)
    assert got.tolist() == expected.tolist()


def test_seq2seq_sampling_draws_from_the_model_distribution(marian):
    hf, pad = marian
    ours = aiayn.from_hf(hf)
    src = SOURCES[:1].expand(4000, -1)
    first = sample_seq2seq(ours, src, max_len=1, temperature=1.5, generator=torch.Generator().manual_seed(0))[:, 0]
    with torch.no_grad():
        logits = ours.decode(torch.full((1, 1), ours.cfg.bos_id), ours.encode(src[:1]), src[:1])[0, -1]
    logits[pad] = float("-inf")
    probs = (logits / 1.5).softmax(-1)
    seen = torch.bincount(first, minlength=probs.numel()).float() / first.numel()
    assert probs.max() < 0.9, "the distribution should not be one token"
    # 4,000 draws: a frequency's standard error is at most 0.008; 0.04 is five of them
    assert (seen - probs).abs().max() < 0.04


def test_seq2seq_sampling_with_top_k_1_is_greedy_and_a_seed_repeats(marian):
    hf, _ = marian
    ours = aiayn.from_hf(hf)
    assert sample_seq2seq(ours, SOURCES, 10, top_k=1).tolist() == greedy(ours, SOURCES, 10).tolist()
    a = ours.generate(SOURCES, do_sample=True, max_new_tokens=10, generator=torch.Generator().manual_seed(5))
    b = ours.generate(SOURCES, do_sample=True, max_new_tokens=10, generator=torch.Generator().manual_seed(5))
    assert a.tolist() == b.tolist() and a[:, 0].eq(ours.cfg.bos_id).all()


def test_bad_arguments_are_named(marian):
    hf, _ = marian
    ours = aiayn.from_hf(hf)
    with pytest.raises(TypeError, match="epsilon_cutoff"):
        ours.generate(SOURCES, epsilon_cutoff=0.01)
    with pytest.raises(ValueError, match="beam sampling"):
        ours.generate(SOURCES, do_sample=True, num_beams=2)
    with pytest.raises(ValueError, match="attention_mask"):
        ours.generate(SOURCES, attention_mask=torch.ones_like(SOURCES))
    with pytest.raises(ValueError, match="decoder_start_token_id=3"):
        ours.generate(SOURCES, decoder_start_token_id=3)
    eos = ours.cfg.eos_id  # its own end, as an id or a list of it alone (transformers' list form), is no change
    assert torch.equal(ours.generate(SOURCES, eos_token_id=[eos]), ours.generate(SOURCES))
    assert torch.equal(ours.generate(SOURCES, eos_token_id=eos), ours.generate(SOURCES))
    with pytest.raises(ValueError, match=rf"eos_token_id=\[{eos}, 5\]: this model's is {eos}"):
        ours.generate(SOURCES, eos_token_id=[eos, 5])
    with pytest.raises(ValueError, match="early_stopping"):
        ours.generate(SOURCES, num_beams=2, early_stopping="sometimes")
    with pytest.raises(ValueError, match="early_stopping=0"):  # 0 == False, but not the heuristic asked for
        ours.generate(SOURCES, num_beams=2, early_stopping=0)
    gpt = aiayn.from_hf(gpt2())
    with pytest.raises(ValueError, match="padded on the left"):
        gpt.generate(torch.tensor([[1, 2, 3]]), attention_mask=torch.tensor([[1, 1, 0]]))
    with pytest.raises(ValueError, match="max_length=2"):
        gpt.generate(torch.tensor([[1, 2, 3]]), max_length=2)
    for beams in (1, 2):  # beam search refuses what greedy refuses
        with pytest.raises(ValueError, match="padded on the left"):
            gpt.generate(torch.tensor([[1, 2, 3]]), attention_mask=torch.tensor([[1, 1, 0]]), num_beams=beams)
        with pytest.raises(ValueError, match="at least one token"):
            gpt.generate(torch.tensor([[1, 2], [3, 4]]), attention_mask=torch.tensor([[1, 1], [0, 0]]),
                         num_beams=beams)
    for cache in (True, False):  # 60 + 10 positions of 64, refused before any step, with the cache or without
        with pytest.raises(ValueError, match="70 positions exceed the model's 64 learned positions"):
            gpt.generate(torch.ones(1, 60, dtype=torch.long), max_new_tokens=10, use_cache=cache)
    with pytest.raises(ValueError, match=r"top_p must be in \(0, 1\]"):
        gpt.generate(torch.tensor([[1, 2, 3]]), do_sample=True, top_p=1.5)
    bart = aiayn.build("bart-tiny", max_len=8).eval()  # learned positions: 8 target tokens at most
    for beams in (1, 2):
        with pytest.raises(ValueError, match=r"max_len=30 target tokens .* exceed the decoder's 8 learned positions"):
            bart.generate(torch.tensor([[5, 6, 7]]), max_new_tokens=30, num_beams=beams)


def test_num_return_sequences_draws_each_input_that_many_times_in_transformers_order():
    hf = gpt2()
    ours = aiayn.from_hf(hf)
    ids, mask = prompts()
    greedy_rows = ours.generate(ids, attention_mask=mask, max_new_tokens=6, pad_token_id=0)
    # top_k=1 draws the greedy token: row i * 3 + j is input i's, whatever the generator
    drawn = ours.generate(ids, attention_mask=mask, max_new_tokens=6, pad_token_id=0, do_sample=True, top_k=1,
                          num_return_sequences=3, generator=torch.Generator().manual_seed(0))
    assert torch.equal(drawn, greedy_rows.repeat_interleave(3, dim=0))
    wide = ours.generate(ids, attention_mask=mask, max_new_tokens=6, pad_token_id=0, do_sample=True,
                         temperature=2.0, top_k=None, num_return_sequences=4,
                         generator=torch.Generator().manual_seed(0))
    assert wide.shape == (12, 12) and torch.equal(wide[:, :6], ids.repeat_interleave(4, dim=0))
    assert all(len({tuple(r) for r in wide[i * 4:(i + 1) * 4, 6:].tolist()}) > 1 for i in range(3))  # 4 draws each
    for model in (hf, ours):  # greedy gives one sequence per input, in transformers as here
        with pytest.raises(ValueError, match="num_return_sequences"):
            model.generate(ids, attention_mask=mask, max_new_tokens=3, pad_token_id=0, num_return_sequences=2)


def test_assistant_model_gives_greedy_tokens_and_refuses_what_it_does_not_run():
    torch.manual_seed(0)
    model = aiayn.build(aiayn.preset("gpt-tiny", vocab_size=64, max_len=64, eos_id=2)).eval()
    torch.manual_seed(1)
    draft = aiayn.build(aiayn.preset("gpt-tiny", vocab_size=64, max_len=64, eos_id=2, n_layers=1)).eval()
    ids, mask = torch.tensor([[5, 9, 12, 7], [0, 0, 8, 4]]), torch.tensor([[1, 1, 1, 1], [0, 0, 1, 1]])
    plain = model.generate(ids, attention_mask=mask, max_new_tokens=12)
    assert torch.equal(model.generate(ids, attention_mask=mask, max_new_tokens=12, assistant_model=draft,
                                      num_assistant_tokens=3), plain)  # left-padded rows: each decoded alone
    for refused, match in [({"num_beams": 2}, "num_beams"), ({"compile": True}, "compile"),
                           ({"repetition_penalty": 1.2}, "repetition_penalty")]:
        with pytest.raises(ValueError, match=match):
            model.generate(ids, attention_mask=mask, max_new_tokens=2, assistant_model=draft, **refused)
    transformer = aiayn.build(aiayn.preset("transformer-tiny")).eval()
    with pytest.raises(ValueError, match="encoder-decoder"):
        transformer.generate(ids + 3, max_new_tokens=2, assistant_model=draft)
