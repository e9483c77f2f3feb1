"""Label-smoothed cross-entropy (section 5.4, epsilon_ls = 0.1).

The target distribution puts 1 - eps on the right token and spreads eps evenly over the other
V - 2 tokens, leaving out padding, which never receives mass; positions whose target is padding
are ignored. (``F.cross_entropy(label_smoothing=)`` spreads eps over all V tokens, padding included.)

Shapes: N positions, V vocabulary.
"""

from __future__ import annotations

from torch import Tensor


def label_smoothed_loss(logits: Tensor, target: Tensor, pad_id: int, epsilon: float = 0.1) -> tuple[Tensor, Tensor, int]:
    """Cross-entropy against the smoothed distribution, summed over non-padding positions.

    Args:
        logits: ``(..., V)`` unnormalised scores.
        target: ``(...)`` token ids; ``pad_id`` positions are ignored.
        pad_id: padding id.
        epsilon: smoothing mass.

    Returns:
        ``(loss_sum, nll_sum, n_tokens)``: the smoothed loss and the plain negative log-likelihood,
        both summed over the ``n_tokens`` non-padding positions (divide to average; ``nll`` gives
        perplexity).
    """
    if not 0.0 <= epsilon < 1.0:
        raise ValueError(f"epsilon={epsilon} must be in [0, 1)")
    if logits.shape[:-1] != target.shape:
        raise ValueError(f"logits {tuple(logits.shape)} must be target {tuple(target.shape)} plus a vocabulary dim")
    v = logits.size(-1)
    logp = logits.float().log_softmax(dim=-1).flatten(0, -2)  # (N, V)
    target = target.flatten()
    keep = target != pad_id
    logp, target = logp[keep], target[keep]
    nll = -logp.gather(1, target[:, None]).squeeze(1)  # (N,)
    loss = nll
    if epsilon > 0:
        others = -(logp.sum(dim=1) + nll - logp[:, pad_id])  # -sum of log p over tokens not target, not pad
        loss = (1.0 - epsilon) * nll + epsilon / (v - 2) * others
    return loss.sum(), nll.detach().sum(), int(keep.sum())


__all__ = ["label_smoothed_loss"]
