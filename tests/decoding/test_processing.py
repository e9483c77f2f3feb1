"""Repetition penalty, n-gram bans, a minimum length, n-best beams and the scores ``generate`` returns, against
``transformers``' own logits processors and ``generate`` (random weights from a config, no download)."""

import pytest
import torch

import aiayn
from aiayn.decoding.processing import Processing, ban_repeated_ngrams, penalise_repeats

transformers = pytest.importorskip("transformers")
pytestmark = [pytest.mark.parity, pytest.mark.usefixtures("one_thread")]  # see conftest.py

from tests.decoding.test_generate import SOURCES, V, gpt2, marian  # noqa: E402, F401  (fixtures)


def test_the_processors_equal_transformers():
    from transformers.generation.logits_process import (
        MinNewTokensLengthLogitsProcessor,
        NoRepeatNGramLogitsProcessor,
        RepetitionPenaltyLogitsProcessor,
    )

    gen = torch.Generator().manual_seed(0)
    seqs = torch.randint(0, 6, (8, 12), generator=gen)  # a small vocabulary: many repeats and repeated n-grams
    logits = torch.randn(8, 10, generator=gen) * 3
    for penalty in (0.7, 1.3, 2.0):
        want = RepetitionPenaltyLogitsProcessor(penalty)(seqs, logits.clone())
        assert torch.allclose(penalise_repeats(logits, seqs, penalty), want)
    for n in (1, 2, 3, 13):
        want = NoRepeatNGramLogitsProcessor(n)(seqs, logits.clone())
        assert torch.equal(ban_repeated_ngrams(logits, seqs, n), want), n
    assert torch.isinf(ban_repeated_ngrams(logits, seqs, 2)).any()  # the case is not trivial
    for made in (2, 5):
        hf = MinNewTokensLengthLogitsProcessor(prompt_length_to_skip=12 - made, min_new_tokens=4, eos_token_id=3)
        assert torch.equal(Processing(min_new_tokens=4, eos=(3,))(logits, seqs, made), hf(seqs, logits.clone()))


def test_padding_is_not_read_as_tokens():
    seqs = torch.tensor([[0, 0, 0, 4, 5, 4]])
    real = torch.tensor([[False, False, False, True, True, True]])
    logits = torch.ones(1, 8)
    assert penalise_repeats(logits, seqs, 2.0, real)[0, 0] == 1  # 0 is padding there, not a token
    assert penalise_repeats(logits, seqs, 2.0)[0, 0] == 0.5
    banned = ban_repeated_ngrams(logits, torch.tensor([[0, 4, 0]]), 2, torch.tensor([[False, True, True]]))
    assert torch.isfinite(banned).all()  # "0 4" starts in the padding: 4 may follow the real 0
    assert torch.isinf(ban_repeated_ngrams(logits, torch.tensor([[0, 4, 0]]), 2))[0, 4]  # as tokens, it may not


PROCESSING = {"repetition_penalty": 1.6, "no_repeat_ngram_size": 2, "min_new_tokens": 5}


@pytest.mark.parametrize("options", [{"num_beams": 1}, {"num_beams": 3}, {"num_beams": 3, "num_return_sequences": 3}],
                         ids=["greedy", "beams", "n-best"])
def test_gpt_processing_and_n_best_equal_transformers(options):
    hf = gpt2(eos=7)
    ours = aiayn.from_hf(hf)
    ids = torch.tensor([[5, 9, 12, 7, 3, 4], [8, 4, 1, 8, 4, 1]])  # not padded: transformers counts padding
    kw = {"max_new_tokens": 10, "return_dict_in_generate": True, "output_scores": True, **PROCESSING, **options}
    want = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, pad_token_id=7, **kw)
    got = ours.generate(ids, pad_token_id=7, **kw)
    assert got.sequences.tolist() == want.sequences.tolist()
    plain = ours.generate(ids, max_new_tokens=10, pad_token_id=7, **options)
    assert plain.tolist() != got.sequences.tolist()  # the processing changed the tokens
    if options["num_beams"] == 1:
        assert len(got.scores) == len(want.scores)
        assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(got.scores, want.scores))
        assert got.sequences_scores is None
    else:
        assert torch.allclose(got.sequences_scores, want.sequences_scores, atol=1e-5)


@pytest.mark.parametrize("options", [{"num_beams": 1}, {"num_beams": 4, "num_return_sequences": 2}],
                         ids=["greedy", "n-best"])
def test_seq2seq_processing_and_n_best_equal_transformers(options, marian):  # noqa: F811
    hf, pad = marian
    ours = aiayn.from_hf(hf)
    kw = {"max_new_tokens": 10, "return_dict_in_generate": True, "output_scores": True, **PROCESSING, **options}
    want = hf.generate(SOURCES, attention_mask=SOURCES.ne(pad).long(), do_sample=False, bad_words_ids=[[pad]], **kw)
    got = ours.generate(SOURCES, **kw)
    assert got.sequences.tolist() == want.sequences.tolist()
    if options["num_beams"] > 1:
        assert got.sequences.size(0) == 2 * SOURCES.size(0)
        assert torch.allclose(got.sequences_scores, want.sequences_scores, atol=1e-5)
        assert (got.sequences_scores.view(-1, 2)[:, 0] >= got.sequences_scores.view(-1, 2)[:, 1]).all()  # best first


def test_a_padded_prompt_is_processed_as_it_is_alone():
    ours = aiayn.from_hf(gpt2(eos=7))
    ids = torch.tensor([[5, 9, 12, 7, 3, 4], [0, 0, 8, 4, 1, 8]])
    mask = torch.tensor([[1] * 6, [0, 0, 1, 1, 1, 1]])
    for beams in (1, 2):
        both = ours.generate(ids, attention_mask=mask, max_new_tokens=8, pad_token_id=7, num_beams=beams,
                             **PROCESSING)
        alone = ours.generate(ids[1:, 2:], max_new_tokens=8, pad_token_id=7, num_beams=beams, **PROCESSING)
        assert both[1, 2:].tolist()[: alone.size(1)] == alone[0].tolist()


def test_bad_processing_is_named():
    ours = aiayn.from_hf(gpt2())
    ids = torch.tensor([[1, 2, 3]])
    for name, value in (("repetition_penalty", 0.0), ("no_repeat_ngram_size", -1), ("min_new_tokens", -2)):
        with pytest.raises(ValueError, match=name):
            ours.generate(ids, **{name: value})
    with pytest.raises(ValueError, match=r"num_return_sequences=3 needs .*num_beams=2"):
        ours.generate(ids, num_beams=2, num_return_sequences=3)
