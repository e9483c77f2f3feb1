"""Label-smoothed cross-entropy (section 5.4, epsilon_ls = 0.1).

The target distribution puts 1 - eps on the right token and spreads eps evenly over the other
V - 2 tokens, leaving out padding, which never receives mass; positions whose target is padding
are ignored. (``F.cross_entropy(label_smoothing=)`` spreads eps over all V tokens, padding included.)

The loss is the cross-entropy H(q, p) against that target q, as fairseq and tensor2tensor take it. Some texts
write it as the KL divergence KL(q || p) = H(q, p) - H(q): the gradients are the same, and the cross-entropy is
higher by the target's entropy H(q) per token (:func:`smoothing_entropy`; 1.38 nats at eps 0.1, V 37000).

Shapes: N positions, V vocabulary.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Row losses ``-sum_j q_j log softmax(z)_j`` without materialising ``q`` or ``log softmax(z)``.

    With ``lse = logsumexp(z)`` and ``log p_j = z_j - lse`` the loss of a row is

        (1 - eps) * (lse - z_y) + eps / (V - 2) * ((V - 2) * lse - (sum_j z_j - z_y - z_pad))

    and its gradient is ``softmax(z) - q``, built in place from the forward pass's softmax. This is the same
    number as smoothing the target and taking the cross-entropy, at a third of the memory traffic
    (the loss was ~15% of a small model's training step when written with ``log_softmax`` and indexing).
    """

    @staticmethod
    def forward(ctx, z: Tensor, target: Tensor, keep: Tensor, pad_id: int, epsilon: float) -> tuple[Tensor, Tensor]:
        v = z.size(1)
        p = torch.softmax(z, dim=1)  # (N, V), kept for the gradient
        # lse = logsumexp(z) from what softmax already computed: at the row's largest logit m,
        # p_max = exp(m - lse), and p_max >= 1/V never underflows.
        lse = z.amax(dim=1) - p.amax(dim=1).log()  # (N,)
        z_y = z.gather(1, target[:, None]).squeeze(1)  # (N,)
        nll = (lse - z_y) * keep  # (N,) zero at padding
        loss = nll
        if epsilon > 0:
            others = (v - 2) * lse - (z.sum(dim=1) - z_y - z[:, pad_id])  # -sum of log p over non-target, non-pad
            loss = ((1.0 - epsilon) * (lse - z_y) + epsilon / (v - 2) * others) * keep
        ctx.save_for_backward(p, target, keep)
        ctx.pad_id, ctx.epsilon = pad_id, epsilon
        return loss.sum(), nll.sum()

    @staticmethod
    def backward(ctx, grad_loss: Tensor, grad_nll: Tensor):
        p, target, keep = ctx.saved_tensors
        grad = p.clone()  # softmax, turned into softmax - q in place (a copy, so backward may run twice)
        eps, v = ctx.epsilon, grad.size(1)
        off = eps / (v - 2) if eps > 0 else 0.0
        if off:
            grad.sub_(off)
            grad[:, ctx.pad_id] += off  # padding gets no mass in q
        grad.scatter_add_(1, target[:, None], torch.full_like(keep[:, None], off - (1.0 - eps)))
        grad.mul_((keep * grad_loss)[:, None])
        return grad, None, None, None, None


def label_smoothed_loss(logits: Tensor, target: Tensor, pad_id: int,
                        epsilon: float = 0.1) -> tuple[Tensor, Tensor, int | Tensor]:
    """Cross-entropy against the smoothed distribution, summed over non-padding positions.

    Args:
        logits: ``(..., V)`` unnormalised scores.
        target: ``(...)`` token ids; ``pad_id`` positions are ignored.
        pad_id: padding id.
        epsilon: smoothing mass.

    Returns:
        ``(loss_sum, nll_sum, n_tokens)``: the smoothed loss and the plain negative log-likelihood,
        both summed over the ``n_tokens`` non-padding positions (divide to average; ``nll`` gives
        perplexity). ``n_tokens`` is an ``int`` on the CPU and a 0-dim tensor on an accelerator, where
        reading it would wait for the device every batch (:func:`aiayn.training.fit` takes either).
    """
    if not 0.0 <= epsilon < 1.0:
        raise ValueError(f"epsilon={epsilon} must be in [0, 1)")
    if logits.shape[:-1] != target.shape:
        raise ValueError(f"logits {tuple(logits.shape)} must be target {tuple(target.shape)} plus a vocabulary dim")
    v = logits.size(-1)
    if not 0 <= pad_id < v:  # a negative id would index from the end: a real token taken for padding
        raise ValueError(f"pad_id={pad_id} must be a token id inside the vocabulary [0, {v})")
    if epsilon > 0 and v < 3:
        raise ValueError(f"epsilon={epsilon} spreads over the V - 2 tokens that are neither the target nor padding; "
                         f"the logits have V={v}")
    target = target.flatten()
    keep = target != pad_id
    z = logits.flatten(0, -2)  # (N, V)
    if z.dtype in (torch.float16, torch.bfloat16):
        z = z.float()  # the softmax over a large vocabulary in fp32
    loss, nll = _SmoothedCrossEntropy.apply(z, target, keep.to(z.dtype), pad_id, epsilon)
    n = keep.sum()
    return loss, nll.detach(), int(n) if n.device.type == "cpu" else n


def smoothing_entropy(vocab_size: int, epsilon: float = 0.1) -> float:
    """H(q) in nats: the entropy of the smoothed target of one token, 1 - eps on the right token and eps spread
    over the V - 2 others that are not padding. The smoothed cross-entropy exceeds KL(q || p) by this much."""
    if vocab_size < 3:
        raise ValueError(f"vocab_size={vocab_size} must be at least 3 (the target, padding and one other token)")
    if not 0.0 <= epsilon < 1.0:
        raise ValueError(f"epsilon={epsilon} must be in [0, 1)")
    if epsilon == 0:
        return 0.0
    return -(1 - epsilon) * math.log(1 - epsilon) - epsilon * math.log(epsilon / (vocab_size - 2))


__all__ = ["label_smoothed_loss", "smoothing_entropy"]
