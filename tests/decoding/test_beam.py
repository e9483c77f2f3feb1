import itertools

import pytest
import torch

import aiayn
from aiayn.decoding.beam import beam_search, gnmt_penalty, length_power
from aiayn.decoding.greedy import greedy

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py

# Four sentences of different lengths, two of them padded.
SRC = torch.tensor([[5, 6, 7, 8, 2], [9, 10, 2, 0, 0], [11, 12, 13, 14, 2], [3, 4, 2, 0, 0]])


def lp(length, alpha):
    """GNMT's length penalty (Wu et al. 2016, section 7, eq. 14), written here apart from the code under test."""
    return ((5 + length) / 6) ** alpha


def tiny_model(seed=3, eos_bias=0.0, vocab=30, **overrides):
    """A random model; ``eos_bias`` raises the logit of </s> so that hypotheses end.

    The output projection is untied: with a random tied one the model mostly repeats its last token (<s>), and
    every search finds the same sequence.
    """
    torch.manual_seed(seed)
    cfg = {"src_vocab_size": vocab, "tgt_vocab_size": vocab, "d_model": 32, "n_heads": 4,
           "tie_output": False} | overrides
    model = aiayn.build("transformer-tiny", **cfg).eval()
    model.generator.bias.data[model.cfg.eos_id] += eos_bias
    return model


def hypothesis(row, cfg):
    """The tokens of one output row: up to its </s>, or all of them when cut by max_len; nothing after but pad."""
    row = row.tolist()
    n = row.index(cfg.eos_id) + 1 if cfg.eos_id in row else len(row)
    assert all(t == cfg.pad_id for t in row[n:]), f"tokens after the hypothesis in {row}"
    assert cfg.pad_id not in row[:n], f"padding inside the hypothesis {row}"
    return row[:n]


@torch.no_grad()
def sequence_logprob(model, src, hyps):
    """Summed log-probability of ``hyps`` (N, n) given ``src`` (N, S), by the full model with teacher forcing."""
    bos = torch.full((hyps.size(0), 1), model.cfg.bos_id)
    logp = model(src, torch.cat([bos, hyps[:, :-1]], dim=1)).log_softmax(-1)  # (N, n, V)
    return logp.gather(-1, hyps[..., None])[..., 0].sum(-1)  # (N,)


@torch.no_grad()
def naive_beam_search(model, src_row, beam, alpha, max_len):
    """One sentence, the full model on every prefix, and no early stop: run to max_len, keep every finished one.

    Returns (summed log-prob, tokens) of the best hypothesis.
    """
    cfg = model.cfg
    live, finished = [(0.0, [])], []  # (summed log-prob, tokens after <s>)
    for _ in range(max_len):
        prefixes = torch.tensor([[cfg.bos_id] + tokens for _, tokens in live])
        logp = model(src_row.expand(len(live), -1), prefixes)[:, -1].log_softmax(-1).tolist()
        candidates = sorted(
            ((s + lp[v], tokens + [v]) for (s, tokens), lp in zip(live, logp)
             for v in range(len(lp)) if v != cfg.pad_id),
            key=lambda c: -c[0],
        )[: 2 * beam]
        finished += [c for c in candidates[:beam] if c[1][-1] == cfg.eos_id]
        live = [c for c in candidates if c[1][-1] != cfg.eos_id][:beam]
    return max(finished + live, key=lambda c: c[0] / lp(len(c[1]), alpha))


def test_beam_of_one_is_greedy():
    # With alpha = 0 a finished hypothesis cannot be beaten by the live one (whose log-prob is lower),
    # so one beam makes the same choice as greedy at every step; with alpha > 0 it may rightly go on.
    for seed, eos_bias in [(3, 0.0), (3, 1.5), (0, 1.0)]:
        model = tiny_model(seed, eos_bias)
        expected = greedy(model, SRC, max_len=12)
        for row in expected:
            hypothesis(row, model.cfg)  # greedy may emit pad; these models do not, so the comparison is fair
        assert torch.equal(beam_search(model, SRC, beam=1, length_penalty=0.0, max_len=12), expected)
    # the default max_len is S + 50 (section 6.1), as greedy's; here one sentence runs past 12 tokens
    model = tiny_model(3, 1.0)
    expected = greedy(model, SRC)
    assert max(len(hypothesis(row, model.cfg)) for row in expected) > 12
    assert torch.equal(beam_search(model, SRC, beam=1, length_penalty=0.0), expected)


def test_batched_equals_one_by_one():
    model = tiny_model(3, eos_bias=1.5)
    ids, scores = beam_search(model, SRC, beam=4, max_len=12, return_scores=True)
    lengths = set()
    for src, row, score in zip(SRC, ids, scores):
        alone, alone_score = beam_search(model, src[src != model.cfg.pad_id][None], beam=4, max_len=12,
                                         return_scores=True)
        assert hypothesis(row, model.cfg) == hypothesis(alone[0], model.cfg)
        torch.testing.assert_close(score, alone_score[0], atol=1e-4, rtol=1e-4)
        lengths.add(len(hypothesis(row, model.cfg)))
    assert len(lengths) > 1  # the batch mixes hypotheses of different lengths


def test_a_finished_sentence_is_not_computed_any_further(monkeypatch):
    model = tiny_model(3, eos_bias=1.5)
    rows, real = [], model.decode
    monkeypatch.setattr(model, "decode", lambda tgt, *a, **k: rows.append(tgt.size(0)) or real(tgt, *a, **k))
    ids = beam_search(model, SRC, beam=4, max_len=12)
    alone = [beam_search(model, src[src != model.cfg.pad_id][None], beam=4, max_len=12) for src in SRC]
    assert rows[0] == 4 * 4 and rows == sorted(rows, reverse=True) and rows[-1] < rows[0], rows
    for row, one in zip(ids, alone):  # what each sentence returns does not depend on the others stopping
        assert hypothesis(row, model.cfg) == hypothesis(one[0], model.cfg)


def test_a_finished_row_leaves_greedy_decoding_and_the_result_stays(monkeypatch):
    model = tiny_model(3, eos_bias=1.5)
    rows, real = [], model.decode
    monkeypatch.setattr(model, "decode", lambda tgt, *a, **k: rows.append(tgt.size(0)) or real(tgt, *a, **k))
    ids = greedy(model, SRC, max_len=12)
    assert rows[0] == 4 and rows == sorted(rows, reverse=True) and rows[-1] < rows[0], rows
    monkeypatch.undo()
    for src, row in zip(SRC, ids):
        assert hypothesis(row, model.cfg) == hypothesis(greedy(model, src[src != model.cfg.pad_id][None], 12)[0],
                                                        model.cfg)
    assert torch.equal(ids, greedy(model, SRC, max_len=12, use_cache=False))


def test_early_stop_loses_nothing():
    # A large alpha favours long hypotheses, so finished short ones can be beaten later: stopping a sentence
    # is only right once no live beam can still win. With alpha = 2 the first two cases differ from stopping as
    # soon as a sentence has `beam` finished hypotheses.
    for seed, eos_bias, alpha in [(3, 1.0, 2.0), (0, 0.5, 2.0), (3, 1.5, 0.6)]:
        model = tiny_model(seed, eos_bias)
        ids, scores = beam_search(model, SRC, beam=3, length_penalty=alpha, max_len=12, return_scores=True)
        for src, row, score in zip(SRC, ids, scores):
            expected_score, expected = naive_beam_search(model, src[src != model.cfg.pad_id][None], 3, alpha, 12)
            assert hypothesis(row, model.cfg) == expected
            assert abs(float(score) - expected_score) < 1e-4


def test_cache_equals_recompute():
    for seed, eos_bias in [(3, 0.0), (3, 1.5), (0, 1.0)]:
        model = tiny_model(seed, eos_bias)
        cached, cached_scores = beam_search(model, SRC, beam=3, max_len=10, return_scores=True)
        full, full_scores = beam_search(model, SRC, beam=3, max_len=10, use_cache=False, return_scores=True)
        assert torch.equal(cached, full)
        torch.testing.assert_close(cached_scores, full_scores, atol=1e-5, rtol=1e-5)


def test_scores_are_the_model_log_prob_and_beat_greedy():
    model = tiny_model(3, eos_bias=1.5)
    cfg = model.cfg
    ids, scores = beam_search(model, SRC, beam=4, length_penalty=0.0, max_len=12, return_scores=True)
    greedy_ids = greedy(model, SRC, max_len=12)
    beam_total = greedy_total = 0.0
    for i in range(SRC.size(0)):
        hyp = torch.tensor([hypothesis(ids[i], cfg)])
        recomputed = sequence_logprob(model, SRC[i : i + 1], hyp)[0]
        torch.testing.assert_close(recomputed, scores[i], atol=1e-4, rtol=0)
        beam_total += float(recomputed)
        greedy_hyp = torch.tensor([hypothesis(greedy_ids[i], cfg)])
        greedy_total += float(sequence_logprob(model, SRC[i : i + 1], greedy_hyp)[0])
    assert beam_total >= greedy_total - 1e-5
    assert not torch.equal(ids, greedy_ids)  # the search did find something else


def test_finds_the_best_of_every_hypothesis_when_the_beam_holds_them_all():
    vocab, max_len = 6, 3
    src = torch.tensor([[3, 4, 5, 2], [5, 2, 0, 0]])
    winners_end = set()
    # biases chosen so that the winners are sometimes an ended hypothesis, sometimes one cut by max_len
    for seed, eos_bias, alpha in [(3, -2.0, 0.6), (3, -2.5, 0.0), (5, -2.0, 0.6), (6, -1.0, 0.0)]:
        model = tiny_model(seed, eos_bias, vocab=vocab, d_model=16, n_heads=2)
        cfg = model.cfg
        words = [v for v in range(vocab) if v not in (cfg.pad_id, cfg.eos_id)]  # <s> may be emitted, pad may not
        # every hypothesis: n words then </s> (n < max_len), or max_len words cut without </s>
        by_length = [[list(w) + [cfg.eos_id] for w in itertools.product(words, repeat=n)] for n in range(max_len)]
        by_length[-1] += [list(w) for w in itertools.product(words, repeat=max_len)]
        n_hyps = sum(map(len, by_length))  # 1 + 4 + 16 + (16 + 64) = 101
        ids, scores = beam_search(model, src, beam=n_hyps, length_penalty=alpha, max_len=max_len,
                                  return_scores=True)
        for i in range(src.size(0)):
            best = max(
                ((float(logp) / lp(len(h), alpha), h, float(logp))
                 for group in by_length
                 for h, logp in zip(group, sequence_logprob(model, src[i].expand(len(group), -1), torch.tensor(group))))
            )
            assert hypothesis(ids[i], cfg) == best[1]
            assert abs(float(scores[i]) - best[2]) < 1e-4
            winners_end.add(best[1][-1] == cfg.eos_id)
    assert winners_end == {True, False}  # both ended and cut hypotheses won somewhere


def test_bad_arguments_raise():
    model = tiny_model()
    with pytest.raises(ValueError, match="beam"):
        beam_search(model, SRC, beam=0)
    with pytest.raises(ValueError, match="max_len"):
        beam_search(model, SRC, max_len=0)


@pytest.mark.parametrize(("length", "alpha", "expected"), [
    (1, 0.6, 1.0), (1, 1.0, 1.0),  # (5 + 1) / 6 = 1, whatever alpha
    (7, 0.6, 1.515716566510398), (7, 1.0, 2.0),  # (5 + 7) / 6 = 2: 2 ** 0.6
    (20, 0.6, 2.354362083745639), (20, 1.0, 25 / 6),  # (5 + 20) / 6 = 25 / 6
    (20, 0.0, 1.0),  # alpha = 0: plain log-probability
])
def test_gnmt_penalty_is_wu_et_als_formula_at_hand_computed_values(length, alpha, expected):
    # lp(Y) = (5 + |Y|)^alpha / (5 + 1)^alpha (Wu et al. 2016, eq. 14)
    assert gnmt_penalty(length, alpha) == pytest.approx(expected, rel=1e-12)
    assert length_power(length, alpha) == pytest.approx(length**alpha, rel=1e-12)  # fairseq / Hugging Face's



@pytest.mark.parametrize("A, K, V", [(3, 4, 1000), (2, 3, 301), (1, 1, 200), (4, 2, 129)])
def test_the_top_k_over_the_best_blocks_takes_the_candidates_of_the_top_k_over_all(monkeypatch, A, K, V):
    """``beam.BLOCK``: the ``n`` best of the ``K*V`` candidates found among the ``n`` blocks of tokens whose best is
    highest are those of ``torch.topk`` over all of them (values and indices: random scores have no ties), with
    a last block shorter than the others, beams at -inf (step 1: only beam 0 is live) and tokens banned."""
    from aiayn.decoding import beam

    torch.manual_seed(V)
    logp = torch.randn(A * K, V).log_softmax(-1)
    logp[:, 7] = float("-inf")
    live = torch.randn(A, K)
    live[0, 1:] = float("-inf")
    n = min(2 * K, K * V)
    expected = (live.view(-1, 1) + logp).view(A, K * V).topk(n, dim=1)
    monkeypatch.setattr(beam, "BLOCK", 64)
    got = beam._best(logp, live, n)
    assert torch.equal(got[0], expected.values) and torch.equal(got[1], expected.indices)
    # ties: every score one of a few values; the same scores, and each index names a candidate of that score
    logp = torch.randint(0, 3, (A * K, V)).float()
    expected = (live.view(-1, 1) + logp).view(A, K * V).topk(n, dim=1)
    got = beam._best(logp, live, n)
    assert torch.equal(got[0], expected.values)
    assert torch.equal((live.view(-1, 1) + logp).view(A, K * V).gather(1, got[1]), got[0])


def test_beam_search_over_the_best_blocks_finds_the_hypotheses_of_the_search_over_all(monkeypatch):
    """The whole search with a vocabulary of several blocks: the same hypotheses and scores either way."""
    from aiayn.decoding import beam

    model = tiny_model(3, vocab=300)
    monkeypatch.setattr(beam, "BLOCK", None)
    every = beam_search(model, SRC, beam=4, max_len=12, return_scores=True, num_return_sequences=2)
    monkeypatch.setattr(beam, "BLOCK", 64)
    blocks = beam_search(model, SRC, beam=4, max_len=12, return_scores=True, num_return_sequences=2)
    assert torch.equal(every[0], blocks[0]) and torch.equal(every[1], blocks[1])
    assert every[0].size(1) > 2  # hypotheses of several tokens
