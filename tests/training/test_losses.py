import math

import pytest
import torch

from aiayn.training import label_smoothed_loss, noam_lr, noam_optimizer


def test_label_smoothing_against_a_hand_worked_distribution():
    # V = 5, pad = 0, eps = 0.1: the target gets 0.9, the three other non-pad tokens 0.1 / 3 each, pad 0.
    logits = torch.tensor([[0.5, 1.0, 2.0, -1.0, 0.0]])
    logp = logits.log_softmax(-1)[0]
    q = torch.tensor([0.0, 0.1 / 3, 0.9, 0.1 / 3, 0.1 / 3])
    loss, nll, n = label_smoothed_loss(logits, torch.tensor([2]), pad_id=0, epsilon=0.1)
    assert n == 1
    torch.testing.assert_close(loss, -(q * logp).sum())
    torch.testing.assert_close(nll, -logp[2])


def test_padding_positions_are_ignored_and_eps_zero_is_cross_entropy():
    logits = torch.randn(2, 3, 7)
    target = torch.tensor([[3, 4, 0], [5, 0, 0]])
    loss, nll, n = label_smoothed_loss(logits, target, pad_id=0, epsilon=0.0)
    assert n == 3
    expected = torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=0,
                                                 reduction="sum")
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(nll, expected)
    # logits at padded positions do not matter
    changed = logits.clone()
    changed[0, 2] += 100
    changed[1, 1:] -= 50
    torch.testing.assert_close(label_smoothed_loss(changed, target, 0, 0.1)[0],
                               label_smoothed_loss(logits, target, 0, 0.1)[0])


def test_the_smoothed_optimum_puts_no_mass_on_padding():
    logits = torch.zeros(1, 6, requires_grad=True)
    opt = torch.optim.SGD([logits], lr=2.0)
    for _ in range(2000):
        opt.zero_grad()
        label_smoothed_loss(logits, torch.tensor([3]), pad_id=0, epsilon=0.1)[0].backward()
        opt.step()
    p = logits.softmax(-1)[0]
    assert p[0] < 0.01  # padding is pushed down, never a target
    assert abs(p[3] - 0.9) < 0.01 and abs(p[1] - 0.025) < 0.005


def test_noam_schedule_peaks_at_warmup():
    d, warmup = 512, 4000
    peak = d**-0.5 * warmup**-0.5
    assert math.isclose(noam_lr(warmup, d, warmup), peak)
    assert noam_lr(warmup - 1, d, warmup) < peak and noam_lr(warmup + 1, d, warmup) < peak
    assert math.isclose(noam_lr(100, d, warmup), d**-0.5 * 100 * warmup**-1.5)  # linear warm-up
    assert math.isclose(noam_lr(16000, d, warmup), d**-0.5 * 16000**-0.5)  # inverse square root decay


def test_noam_optimizer_is_adam_with_the_paper_betas_and_follows_the_schedule():
    model = torch.nn.Linear(2, 2)
    opt, sched = noam_optimizer(model, d_model=512, warmup=10)
    assert isinstance(opt, torch.optim.Adam)
    group = opt.param_groups[0]
    assert group["betas"] == (0.9, 0.98) and group["eps"] == 1e-9
    rates = []
    for _ in range(20):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert rates[0] == pytest.approx(noam_lr(1, 512, 10))
    assert max(rates) == pytest.approx(rates[9]) == pytest.approx(512**-0.5 * 10**-0.5)


@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3])
def test_loss_and_gradient_equal_the_smoothed_distribution_written_out(epsilon):
    # The reference builds q explicitly and takes -sum q log softmax: what the paper describes.
    torch.manual_seed(0)
    logits = torch.randn(3, 4, 11, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([[3, 4, 0, 0], [5, 1, 10, 0], [2, 2, 2, 7]])
    q = torch.full((3, 4, 11), epsilon / 9, dtype=torch.float64)
    q[..., 0] = 0.0
    q.scatter_(2, target[..., None], 1 - epsilon)
    q[target == 0] = 0.0
    expected = -(q * logits.log_softmax(-1)).sum()
    (expected_grad,) = torch.autograd.grad(expected, logits)
    loss, _nll, n = label_smoothed_loss(logits, target, pad_id=0, epsilon=epsilon)
    (grad,) = torch.autograd.grad(loss, logits)
    assert n == 9
    torch.testing.assert_close(loss, expected)
    torch.testing.assert_close(grad, expected_grad)
    assert torch.autograd.gradcheck(lambda z: label_smoothed_loss(z, target, 0, epsilon)[0], (logits,))


def test_warmup_then_cosine_to_a_tenth():
    from aiayn.training import warmup_cosine

    assert warmup_cosine(0, 10, 110) == 0.1 and warmup_cosine(9, 10, 110) == 1.0
    assert warmup_cosine(10, 10, 110) == 1.0
    assert math.isclose(warmup_cosine(60, 10, 110), 0.1 + 0.9 * 0.5)  # halfway down the cosine
    assert math.isclose(warmup_cosine(110, 10, 110), 0.1) and math.isclose(warmup_cosine(500, 10, 110), 0.1)


def test_smoothed_cross_entropy_is_kl_plus_the_targets_entropy_with_the_same_gradient():
    from aiayn.training.losses import smoothing_entropy

    v, eps, pad = 11, 0.1, 0
    z = torch.randn(6, v, dtype=torch.float64, requires_grad=True)
    target = torch.tensor([3, 4, 5, 1, 9, 10])
    q = torch.full((6, v), eps / (v - 2), dtype=torch.float64)
    q[:, pad] = 0.0
    q[torch.arange(6), target] = 1 - eps
    entropy = -(q[q > 0] * q[q > 0].log()).sum() / 6  # by hand, per token
    assert smoothing_entropy(v, eps) == pytest.approx(float(entropy))
    loss, _, n = label_smoothed_loss(z, target, pad_id=pad, epsilon=eps)
    kl = torch.nn.functional.kl_div(z.log_softmax(-1), q, reduction="sum")
    assert float(loss - kl) / n == pytest.approx(smoothing_entropy(v, eps))
    (g_loss,), (g_kl,) = torch.autograd.grad(loss, z), torch.autograd.grad(kl, z)
    torch.testing.assert_close(g_loss, g_kl)
    assert smoothing_entropy(v, 0.0) == 0.0
    with pytest.raises(ValueError, match="vocab_size"):
        smoothing_entropy(2)
