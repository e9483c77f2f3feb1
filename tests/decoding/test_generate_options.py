"""The ``generate`` options people pass from ``transformers``: ``stop_strings`` with the tokenizer, ``streamer``
(``TextStreamer``, ``TextIteratorStreamer``), ``typical_p``, and ``return_dict_in_generate`` results read as a
``ModelOutput``; each against ``transformers``' own ``generate`` on the same random GPT-2 (built from a config)."""

import threading

import pytest
import torch
from tests.decoding.test_generate import V, gpt2, prompts

import aiayn
from aiayn.data.tokenizer import CharTokenizer
from aiayn.decoding.sampling import typical

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.parity, pytest.mark.usefixtures("one_thread")]  # see conftest.py

CHARS = "abcdefghijklmnopqrstuvwxyz .,;:!?0123456789'\"-="[: V - 4]  # 4 specials + 46 characters = V ids


def char_tokenizer():
    """A ``transformers`` tokenizer of the model's V ids, one character each (``PreTrainedTokenizerFast`` over our
    character tokenizer in ``tokenizers``' format: text joined without spaces)."""
    assert len(CHARS) == V - 4
    return transformers.PreTrainedTokenizerFast(tokenizer_object=CharTokenizer(list(CHARS)).to_tokenizers())


class Recorder:
    """A streamer that keeps what it is given."""

    def __init__(self):
        self.puts, self.ended = [], 0

    def put(self, value):
        self.puts.append(value.clone())

    def end(self):
        self.ended += 1


def test_typical_p_filters_as_transformers_typical_warper():
    logits = torch.randn(6, 40, generator=torch.Generator().manual_seed(0)) * 3
    logits[0, :30] = float("-inf")  # already filtered by top-k: -inf stays out of the entropy
    logits[1] = 0.0  # uniform: every distance 0, every token kept
    for mass in (0.2, 0.5, 0.9, 0.99):
        want = transformers.TypicalLogitsWarper(mass=mass)(None, logits.clone())
        assert torch.equal(typical(logits, mass), want)
        assert (typical(logits, mass) > float("-inf")).sum(-1).min() >= 1


@pytest.mark.parametrize("options", [{"typical_p": 0.5}, {"typical_p": 0.9, "temperature": 0.7, "top_k": 20},
                                     {"typical_p": 0.3, "top_p": 0.8, "top_k": 0}])
def test_sampling_with_typical_p_draws_transformers_tokens_from_its_scores(options):
    hf = gpt2()
    ours = aiayn.from_hf(hf)
    ids, mask = prompts()
    torch.manual_seed(7)
    want = hf.generate(ids, attention_mask=mask, do_sample=True, max_new_tokens=10, pad_token_id=0,
                       return_dict_in_generate=True, output_scores=True, **options)
    torch.manual_seed(7)  # the same draws from the global generator, as transformers draws
    got = ours.generate(ids, attention_mask=mask, do_sample=True, max_new_tokens=10, pad_token_id=0,
                        return_dict_in_generate=True, output_scores=True, **options)
    assert got.sequences.tolist() == want.sequences.tolist()
    for a, b in zip(got.scores, want.scores, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    kept = torch.stack(got.scores).isfinite().sum(-1).float()  # tokens kept per step and row
    assert kept.min() >= 1 and kept.mean() < (options.get("top_k") or V)  # the filter filtered


@pytest.mark.parametrize("stops", [1, 2], ids=["one-string", "two-strings"])
def test_stop_strings_end_rows_where_transformers_ends_them(stops):
    hf, tok = gpt2(eos=V + 10), char_tokenizer()  # no reachable end token: only the stop strings end rows
    ours = aiayn.from_hf(hf)
    ids, mask = prompts()
    free = hf.generate(ids, attention_mask=mask, max_new_tokens=16, do_sample=False, pad_token_id=0)[:, 6:]
    # strings the rows make: two characters of row 0 (spanning two tokens), one of row 2's later characters
    strings = [tok.decode(free[0, 3:5]), tok.decode(free[2, 9:10])][:stops]
    want = hf.generate(ids, attention_mask=mask, max_new_tokens=16, do_sample=False, pad_token_id=0,
                       stop_strings=strings, tokenizer=tok)
    got = ours.generate(ids, attention_mask=mask, max_new_tokens=16, pad_token_id=0, stop_strings=strings,
                        tokenizer=tok)
    assert got.tolist() == want.tolist()
    ended = (got[:, 6:] == 0).any(1)  # padded after its stop (0 is never made here: the prompts' padding)
    assert ended.any()
    for row in got[ended, 6:].tolist():  # each ended row's text ends with a stop string, before the length
        text = tok.decode([t for t in row if t])
        assert text.endswith(tuple(strings)) and len(text) < 16


def test_a_stop_string_that_lies_in_the_prompt_does_not_end_a_row():
    hf, tok = gpt2(eos=V + 10), char_tokenizer()
    ours = aiayn.from_hf(hf)
    ids = torch.tensor([[5, 9, 12, 7, 3, 4]])
    made = ours.generate(ids, max_new_tokens=8, pad_token_id=0, stop_strings=tok.decode(ids[0, 1:3]), tokenizer=tok)
    want = hf.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0, stop_strings=tok.decode(ids[0, 1:3]),
                       tokenizer=tok)
    assert made.tolist() == want.tolist()


def test_stop_strings_refuse_beams_and_a_missing_tokenizer():
    ours = aiayn.from_hf(gpt2())
    ids = torch.tensor([[5, 9, 12]])
    with pytest.raises(ValueError, match="pass tokenizer= to generate"):
        ours.generate(ids, stop_strings=["ab"])
    with pytest.raises(ValueError, match=r"stop_strings .* num_beams > 1"):
        ours.generate(ids, stop_strings=["ab"], tokenizer=char_tokenizer(), num_beams=2)
    with pytest.raises(ValueError, match="stop_strings must be a non-empty string"):
        ours.generate(ids, stop_strings=[""], tokenizer=char_tokenizer())


@pytest.mark.parametrize("sampling", [False, True], ids=["greedy", "sampling"])
def test_a_streamer_gets_what_transformers_gives_it(sampling):
    hf = gpt2(eos=a_token_it_makes())
    ours = aiayn.from_hf(hf)
    ids, mask = prompts()
    mine, theirs = Recorder(), Recorder()
    torch.manual_seed(3)
    hf.generate(ids, attention_mask=mask, max_new_tokens=10, do_sample=sampling, pad_token_id=0, streamer=theirs)
    torch.manual_seed(3)
    out = ours.generate(ids, attention_mask=mask, max_new_tokens=10, do_sample=sampling, pad_token_id=0,
                        streamer=mine)
    assert [p.tolist() for p in mine.puts] == [p.tolist() for p in theirs.puts] and mine.ended == theirs.ended == 1
    assert torch.equal(torch.cat([mine.puts[0], torch.stack(mine.puts[1:], 1)], 1), out)  # the prompt, then each step


def a_token_it_makes():
    """A token the random GPT-2 makes in row 1 of the prompts, as its end token: rows end at different steps."""
    ids, mask = prompts()
    return int(gpt2().generate(ids, attention_mask=mask, max_new_tokens=10, do_sample=False, pad_token_id=0)[1, 9])


def test_text_streamer_prints_and_text_iterator_streamer_yields_the_new_text(capsys):
    tok = char_tokenizer()
    ours = aiayn.from_hf(gpt2(eos=V + 10))
    ids = torch.tensor([[5, 9, 12, 7]])
    out = ours.generate(ids, max_new_tokens=12, streamer=transformers.TextStreamer(tok, skip_prompt=True))
    text = tok.decode(out[0, 4:])
    assert capsys.readouterr().out == text + "\n"
    streamer = transformers.TextIteratorStreamer(tok, skip_prompt=True)
    worker = threading.Thread(target=ours.generate, args=(ids,), kwargs={"max_new_tokens": 12, "streamer": streamer})
    worker.start()
    pieces = list(streamer)  # what a web server sends as it comes
    worker.join(timeout=60)
    assert "".join(pieces) == text and len(text) == 12


def test_an_encoder_decoder_streams_its_start_token_then_each_step():
    model = aiayn.build("transformer-tiny", n_encoder_layers=1, n_decoder_layers=1).eval()
    src = torch.tensor([[5, 9, 12, 2], [8, 4, 2, 0]])
    seen = Recorder()
    out = model.generate(src, max_new_tokens=5, streamer=seen)
    assert seen.puts[0].tolist() == [[model.cfg.bos_id]] * 2 and seen.ended == 1
    assert torch.equal(torch.cat([seen.puts[0], torch.stack(seen.puts[1:], 1)], 1), out)


def test_a_streamer_is_refused_with_beams_and_ended_when_decoding_fails():
    ours = aiayn.from_hf(gpt2())
    with pytest.raises(ValueError, match=r"streamer .* num_beams > 1"):
        ours.generate(torch.tensor([[5, 9]]), num_beams=2, streamer=Recorder())
    with pytest.raises(TypeError, match=r"put\(ids\) and end\(\)"):
        ours.generate(torch.tensor([[5, 9]]), streamer=object())

    class Failing(Recorder):
        def put(self, value):
            super().put(value)
            if len(self.puts) == 3:
                raise RuntimeError("the client went away")

    failing = Failing()
    with pytest.raises(RuntimeError, match="went away"):
        ours.generate(torch.tensor([[5, 9]]), max_new_tokens=8, streamer=failing)
    assert failing.ended == 1  # a reader waiting on the streamer is told it is over


def test_return_dict_in_generate_reads_as_a_model_output():
    hf = gpt2()
    ours = aiayn.from_hf(hf)
    ids, mask = prompts()
    got = ours.generate(ids, attention_mask=mask, max_new_tokens=5, pad_token_id=0, return_dict_in_generate=True,
                        output_scores=True)
    want = hf.generate(ids, attention_mask=mask, max_new_tokens=5, do_sample=False, pad_token_id=0,
                       return_dict_in_generate=True, output_scores=True)
    assert got.keys() == [k for k in want.keys() if k not in ("past_key_values", "cache")] == ["sequences", "scores"]
    assert got["sequences"] is got.sequences and got[0] is got.sequences and got.to_tuple()[1] is got.scores
    assert list(got) == got.keys() and "scores" in got and "sequences_scores" not in got
    assert dict(got).keys() == {"sequences", "scores"} and torch.equal(got["sequences"], want["sequences"])
    with pytest.raises(KeyError, match="sequences_scores"):
        got["sequences_scores"]
    beams = ours.generate(ids, attention_mask=mask, max_new_tokens=5, pad_token_id=0, num_beams=2,
                          return_dict_in_generate=True, output_scores=True)
    assert beams.keys() == ["sequences", "sequences_scores"] and len(beams.to_tuple()) == 2
