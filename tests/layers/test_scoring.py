"""Attention scoring functions (dot, scaled dot, additive, bilinear) and hard attention (argmax, sampled with
REINFORCE), checked against equation 1's own path, hand-written formulas, and the distribution they sample."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import aiayn
from aiayn.decoding import greedy
from aiayn.layers import (
    SCORINGS,
    AdditiveScore,
    BilinearScore,
    DotScore,
    MultiHeadAttention,
    ScaledDotScore,
    causal_mask,
    make_scorer,
    padding_mask,
    record_samples,
    reinforce_loss,
    scaled_dot_product_attention,
)
from aiayn.layers.scoring import attend
from aiayn.recipes.translation import sampled_attention_loss

ROOT = Path(__file__).resolve().parents[2]


def qk(b=2, h=3, t=4, s=6, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, h, t, d, generator=g), torch.randn(b, h, s, d, generator=g)


def tiny(scoring, seed=0, **kw):
    torch.manual_seed(seed)
    cfg = aiayn.preset("transformer-tiny", d_model=32, n_heads=2, d_ff=64, dropout=0.0, cross_scoring=scoring, **kw)
    return aiayn.build(cfg)


# --- the scores ---------------------------------------------------------------------------------------------

def test_dot_equals_scaled_dot_with_queries_scaled_by_sqrt_d():
    q, k = qk(d=16)
    torch.testing.assert_close(DotScore()(q, k), ScaledDotScore()(q * math.sqrt(16), k))
    torch.testing.assert_close(ScaledDotScore()(q, k), q @ k.transpose(-2, -1) / 4)


def test_bilinear_with_the_identity_is_dot_and_starts_as_scaled_dot():
    q, k = qk()
    score = BilinearScore(n_heads=3, d_head=8)
    torch.testing.assert_close(score(q, k), ScaledDotScore()(q, k))  # W = I / sqrt(D) at initialisation
    with torch.no_grad():
        score.weight.copy_(torch.eye(8).expand(3, 8, 8))
    torch.testing.assert_close(score(q, k), DotScore()(q, k))
    with torch.no_grad():  # a different W per head: head h scores q W_h k^T
        score.weight.copy_(torch.randn(3, 8, 8))
    h = 1
    torch.testing.assert_close(score(q, k)[:, h], q[:, h] @ score.weight[h] @ k[:, h].transpose(-2, -1))


def test_additive_equals_bahdanaus_formula_written_out():
    torch.manual_seed(0)
    b, h, t, s, d, a = 1, 2, 2, 3, 2, 3
    q, k = torch.randn(b, h, t, d), torch.randn(b, h, s, d)
    score = AdditiveScore(n_heads=h, d_head=d, d_attn=a)
    got = score(q, k)
    assert got.shape == (b, h, t, s)
    wq, wk, v = score.w_q.tolist(), score.w_k.tolist(), score.v.tolist()
    for hh in range(h):
        for i in range(t):
            for j in range(s):
                # e_ij = v^T tanh(W_a s_i + U_a h_j), per head, in plain floats
                pre = [sum(q[0, hh, i, m].item() * wq[hh][m][n] + k[0, hh, j, m].item() * wk[hh][m][n]
                           for m in range(d)) for n in range(a)]
                want = sum(v[hh][n] * math.tanh(pre[n]) for n in range(a))
                assert got[0, hh, i, j].item() == pytest.approx(want, abs=1e-5)


@pytest.mark.parametrize("kind", ["none", "padding", "empty-row"])
def test_soft_attend_is_equation_1_on_scaled_dot_scores(kind):
    q, k = qk(t=5, s=5)
    v = torch.randn(2, 3, 5, 4)
    ids = torch.tensor([[5, 5, 5, 0, 0], [5, 5, 5, 5, 5]])
    mask = {"none": None, "padding": padding_mask(ids, 0),
            "empty-row": causal_mask(5) & torch.tensor([False, True, True, True, True])}[kind]
    out, weights = attend(ScaledDotScore()(q, k), v, mask)
    want, want_weights = scaled_dot_product_attention(q, k, v, mask, need_weights=True)
    torch.testing.assert_close(out, want, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(weights, want_weights, atol=1e-6, rtol=1e-6)
    assert not out.isnan().any()


# --- through MultiHeadAttention and the Transformer ------------------------------------------------------

@pytest.mark.parametrize("case", ["cross", "causal-self", "grouped"])
def test_scaled_dot_scorer_through_multi_head_attention_equals_the_default_path(case):
    torch.manual_seed(0)
    kv_heads = 2 if case == "grouped" else None
    plain = MultiHeadAttention(32, 4, n_kv_heads=kv_heads)
    scored = MultiHeadAttention(32, 4, n_kv_heads=kv_heads, score=ScaledDotScore())
    scored.load_state_dict(plain.state_dict())
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    if case == "causal-self":
        args = {"x": x, "is_causal": True}
    else:
        args = {"x": x, "memory": memory, "mask": padding_mask(torch.tensor([[4] * 5 + [0] * 2, [4] * 7]), 0)}
    want, _ = plain(**args)  # the fused kernel (SDPA, enable_gqa for grouped heads), not the explicit path
    got, weights = scored(**args, need_weights=True)
    torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
    assert weights is not None and weights.shape[:3] == (2, 4, 5)
    torch.testing.assert_close(plain(**args, need_weights=True)[1], weights, atol=1e-6, rtol=1e-6)


def test_scaled_dot_scorer_in_every_decoder_layer_equals_the_default_model():
    model = tiny("scaled_dot").eval()
    assert all(layer.cross_attn.score is None for layer in model.decoder.layers)  # the default: the fused kernel
    src = torch.tensor([[5, 6, 7, 8, 0, 0], [9, 10, 11, 12, 13, 14]])
    tgt = torch.tensor([[1, 20, 21, 22], [1, 23, 24, 25]])
    with torch.no_grad():
        want = model(src, tgt)
        for layer in model.decoder.layers:
            layer.cross_attn.score = ScaledDotScore()
        torch.testing.assert_close(model(src, tgt), want, atol=1e-6, rtol=1e-6)


def test_the_default_config_keeps_the_models_weights_and_a_scorer_adds_only_its_own():
    default = tiny("scaled_dot")
    base = set(default.state_dict())
    assert default.cfg.cross_scoring == "scaled_dot"
    for name in ("dot", "hard-argmax", "hard-sample"):
        assert set(tiny(name).state_dict()) == base
    additive, bilinear = set(tiny("additive").state_dict()), set(tiny("bilinear").state_dict())
    assert additive - base == {f"decoder.layers.{i}.cross_attn.score.{p}" for i in range(2)
                               for p in ("w_q", "w_k", "v")}
    assert bilinear - base == {f"decoder.layers.{i}.cross_attn.score.weight" for i in range(2)}
    # the model's Glorot initialisation leaves the scorer's own alone: bilinear starts at I / sqrt(D)
    w = tiny("bilinear").decoder.layers[0].cross_attn.score.weight
    torch.testing.assert_close(w, torch.eye(16).expand(2, 16, 16) / 4)


@pytest.mark.parametrize("scoring", SCORINGS)
def test_cached_decoding_equals_full_recompute(scoring):
    model = tiny(scoring, seed=1).eval()
    src = torch.tensor([[5, 6, 7, 8, 9, 0, 0], [9, 10, 11, 12, 13, 14, 15], [30, 31, 32, 0, 0, 0, 0]])
    tgt = torch.tensor([[1, 20, 21, 22, 23], [1, 23, 24, 25, 26], [1, 40, 41, 42, 43]])
    with torch.no_grad():
        memory = model.encode(src)
        full = model.decode(tgt, memory, src)
        cache = model.new_cache(tgt.size(1))
        steps = [model.decode(tgt[:, i : i + 1], memory, src, cache=cache) for i in range(tgt.size(1))]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    a, b = greedy(model, src, max_len=12), greedy(model, src, max_len=12, use_cache=False)
    assert a.size(1) > 1 and torch.equal(a, b)


def test_bad_scoring_names_are_refused():
    with pytest.raises(ValueError, match="cross_scoring='concat'"):
        aiayn.preset("transformer-tiny", cross_scoring="concat")
    with pytest.raises(ValueError, match="scoring='soft'"):
        make_scorer("soft", 2, 8)
    with pytest.raises(ValueError, match="hard='gumbel'"):
        ScaledDotScore(hard="gumbel")
    with pytest.raises(ValueError, match="log_probs and reward"):
        reinforce_loss(torch.zeros(3), torch.zeros(4))


# --- hard attention ------------------------------------------------------------------------------------------

def test_hard_argmax_is_one_hot_forward_and_the_soft_gradient_backward():
    torch.manual_seed(0)
    scores = torch.randn(2, 3, 4, 5, requires_grad=True)
    c = torch.randn(2, 3, 4, 5)
    eye = torch.eye(5)  # values = the identity: out is the weights
    out, weights = attend(scores, eye, hard="argmax")
    assert torch.equal(weights, torch.nn.functional.one_hot(scores.argmax(-1), 5).float())
    assert torch.equal(out, weights)
    (out * c).sum().backward()
    hard_grad = scores.grad.clone()
    scores.grad = None
    (scores.softmax(-1) * c).sum().backward()  # straight-through: the gradient soft attention would get
    torch.testing.assert_close(hard_grad, scores.grad)


def test_hard_argmax_never_picks_a_masked_key():
    scores = torch.tensor([[[[5.0, 1.0, 9.0]]]])
    mask = torch.tensor([True, True, False])
    _, weights = attend(scores, torch.eye(3), mask, hard="argmax")
    assert weights.tolist() == [[[[1.0, 0.0, 0.0]]]]


def draws(n=20000, seed=0):
    """n queries, all the same, over 4 keys: the scorer's softmax p and the keys it drew, with their log p."""
    torch.manual_seed(seed)
    q0 = torch.tensor([0.5, -1.0, 0.3, 0.8], requires_grad=True)
    k = torch.tensor([[1.0, 0.0, 0.5, 0.2], [0.0, 1.0, 0.0, 0.0], [-0.5, 0.5, 1.0, 1.0], [0.2, 0.2, 0.2, 0.2]])
    score = ScaledDotScore(hard="sample").train()
    q = q0.expand(1, 1, n, 4)
    with record_samples() as log_probs:
        _, weights = score.attend(q, k.expand(1, 1, 4, 4), torch.eye(4).expand(1, 1, 4, 4))
    p = ScaledDotScore()(q0.view(1, 1, 1, 4), k.view(1, 1, 4, 4)).softmax(-1).view(4)
    return q0, p, weights.view(n, 4), log_probs


def test_hard_sample_draws_keys_as_the_softmax_says_and_takes_the_argmax_in_eval():
    _, p, weights, log_probs = draws()
    assert ((weights == 0) | (weights == 1)).all() and (weights.sum(-1) == 1).all()  # one key each
    freq = weights.mean(0)
    assert (freq - p).abs().max() < 0.015  # 20,000 draws: a standard error of at most 0.0036
    [lp] = log_probs
    index = weights.argmax(-1)
    torch.testing.assert_close(lp.view(-1), p.log()[index])  # log p of each drawn key, for REINFORCE
    score = ScaledDotScore(hard="sample").eval()
    q, k = qk()
    with record_samples() as none:
        _, w = score.attend(q, k, torch.eye(6).expand(2, 3, 6, 6))
    assert none == [] and torch.equal(w, torch.nn.functional.one_hot(score(q, k).argmax(-1), 6).float())


def test_reinforce_gradient_matches_the_gradient_of_the_expected_reward():
    reward = torch.tensor([1.0, -2.0, 0.5, 3.0])  # R(key)
    q0, p, weights, log_probs = draws()
    drawn = weights.argmax(-1)
    surrogate = reinforce_loss(log_probs[0].view(-1), reward[drawn]) / len(drawn)  # each draw an "example"
    (estimate,) = torch.autograd.grad(-surrogate, q0)
    (exact,) = torch.autograd.grad((p * reward).sum(), q0)  # d/dq E_{j ~ p}[R(j)]
    assert exact.norm() > 0.15  # not a trivial zero
    torch.testing.assert_close(estimate, exact, atol=0.08 * exact.norm().item(), rtol=0)  # ~2% of it in 20,000 draws


def test_reinforce_loss_uses_the_other_examples_mean_as_baseline():
    log_probs = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    reward = torch.tensor([3.0, 0.0, 6.0])
    loss = reinforce_loss(log_probs, reward)
    # baselines (0 + 6) / 2 = 3, (3 + 6) / 2 = 4.5, (3 + 0) / 2 = 1.5: advantages 0, -4.5, 4.5
    assert loss.item() == pytest.approx(-(0 * -1 + -4.5 * -2 + 4.5 * -0.5))
    loss.backward()
    assert log_probs.grad.tolist() == pytest.approx([0.0, 4.5, -4.5])
    assert reinforce_loss(torch.tensor([-1.0]), torch.tensor([5.0])).item() == 5.0  # one example: baseline 0


def test_the_recipes_loss_trains_the_sampled_attentions_queries_only_through_reinforce():
    model = tiny("hard-sample").train()
    src = torch.tensor([[5, 6, 7, 8, 9, 0], [9, 10, 11, 12, 13, 14]])
    tgt_in = torch.tensor([[1, 20, 21, 22], [1, 23, 24, 0]])
    tgt_out = torch.tensor([[20, 21, 22, 2], [23, 24, 2, 0]])
    query_rows = model.decoder.layers[0].cross_attn.in_proj.weight
    plain, _, n = aiayn.training.label_smoothed_loss(model(src, tgt_in), tgt_out, 0, 0.1)
    plain.backward()
    assert n == 7 and query_rows.grad[:32].abs().max() == 0  # no gradient through a sampled key
    model.zero_grad()
    loss, nll, n = sampled_attention_loss(model, (src, tgt_in, tgt_out), 0, 0.1)
    loss.backward()
    assert n == 7 and query_rows.grad[:32].abs().max() > 0
    assert torch.isfinite(loss) and nll > 0


# --- the experiment ------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_attention_scoring_benchmark_quick(tmp_path):
    script = ROOT / "benchmarks" / "attention_scoring.py"
    if not script.is_file():
        pytest.skip("benchmarks/ is not next to the tests")
    env = {**os.environ, "TMPDIR": str(tmp_path), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    run = subprocess.run([sys.executable, str(script), "--quick", "--out", str(tmp_path / "out")], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=240, check=False)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    saved = json.loads((tmp_path / "out" / "attention_scoring.json").read_text())
    assert [r["scoring"] for r in saved["summary"]] == ["scaled_dot", "hard-sample"]  # --quick's
    for row in saved["summary"]:
        assert 0 <= row["val_exact_match"] <= 1 and 0 <= row["test_exact_match"] <= 1 and row["train_tokens_per_s"] > 0
    assert {s["scoring"] for s in saved["scorer_speed"]} >= {"dot", "additive"}
    assert all(s["ratio_to_dot"] > 0 for s in saved["scorer_speed"])
