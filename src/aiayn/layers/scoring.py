"""Attention scoring functions other than equation 1's, and hard attention.

Every attention turns a score per (query, key) pair into weights with a softmax, then averages the values.
The paper (section 3.2.1) scales the dot product; the encoder-decoder models before it scored otherwise:

    dot          q . k                          Luong et al. (2015), "dot"
    scaled_dot   q . k / sqrt(D)                Vaswani et al. (2017), eq. 1
    bilinear     q W k^T, W learned per head    Luong et al. (2015), "general"
    additive     v^T tanh(W_q q + W_k k)        Bahdanau et al. (2015), the "concat" of Luong et al.

Section 3.2.1: "dot-product attention is much faster and more space-efficient in practice" than additive
attention, which needs a ``(B, H, T, S, A)`` tensor before its tanh; ``benchmarks/attention_scoring.py``
measures the ratio.

Here each scorer works per head on the already projected queries and keys ``(B, H, T, D)``, ``(B, H, S, D)``, so
it drops into :class:`aiayn.layers.MultiHeadAttention` (``score=``) with its projections, its key/value cache
and ``project_kv`` unchanged; the scores then take the shared step :func:`attend`:

    scores (B, H, T, S) -> mask (False -> -inf) -> softmax = p -> weights -> weights @ v

Weights are soft (``p``) or hard, one key per query (Xu et al., 2015, "Show, Attend and Tell", section 4.1):

    hard="argmax"   one-hot at argmax p. The gradient is p's (straight-through: weights = onehot + p - sg(p)),
                    so the scorer still learns.
    hard="sample"   one-hot at a key drawn from p, while training; at evaluation the argmax (the most probable
                    key), so decoding is deterministic. No gradient flows through the draw: the scorer learns
                    from the score-function (REINFORCE, Williams 1992) estimator, which needs the log p of each
                    draw. :func:`record_samples` collects them and :func:`reinforce_loss` makes the surrogate:

                        loss += -sum_b (r_b - baseline_b) * sum_{draws of b} log p(draw)     (r, baseline: no grad)

                    whose gradient is, in expectation, the gradient of E[r] (the recipe's reward is minus the
                    example's NLL; the baseline the mean reward of the other examples of the batch).

Masks follow the package's convention: bool, ``True`` = may attend, broadcastable to ``(B, H, T, S)``. A query
row with nothing to attend to gets zero weights and a zero output, as in :func:`scaled_dot_product_attention`.

Shapes: B batch, H heads, T query length, S key length, D head dim, A additive attention's hidden size.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.layers.functional import masked_softmax, repeat_kv
from aiayn.layers.masks import causal_mask

SCORINGS = ("scaled_dot", "dot", "additive", "bilinear", "hard-argmax", "hard-sample")
HARD = (None, "argmax", "sample")

_sample_recorders: list[list[Tensor]] = []


@contextlib.contextmanager
def record_samples() -> Iterator[list[Tensor]]:
    """Collect, while training, the log-probability of every key drawn by ``hard="sample"`` attention.

    Each call of such an attention appends ``(B, H, T)``: ``log p`` of the key drawn for each head and query,
    with its gradient (the score-function estimator differentiates it)::

        with record_samples() as log_probs:
            logits = model(src, tgt_in)
        per_example = sum(lp.sum(1) for lp in log_probs)  # (B, T): every layer and head of each target position
    """
    rec: list[Tensor] = []
    _sample_recorders.append(rec)
    try:
        yield rec
    finally:
        _sample_recorders.remove(rec)


def reinforce_loss(log_probs: Tensor, reward: Tensor) -> Tensor:
    """The score-function (REINFORCE) surrogate whose gradient estimates ``-grad E[reward]``.

    ``-sum_b (r_b - baseline_b) log_probs_b`` with the reward and the baseline held constant; the baseline of
    example b is the mean reward of the batch's other examples (leave-one-out: independent of b's draws, so
    the estimate stays unbiased while its variance drops), or 0 for a batch of one.

    Args:
        log_probs: ``(B,)`` summed log-probability of every draw example b made.
        reward: ``(B,)`` the reward of each example (e.g. minus its NLL).

    Returns:
        A scalar to add to the loss (add ``term - term.detach()`` to leave the loss's value unchanged).
    """
    if log_probs.shape != reward.shape or log_probs.dim() != 1:
        raise ValueError(f"log_probs and reward must both be (B,), got {tuple(log_probs.shape)} and "
                         f"{tuple(reward.shape)}")
    r = reward.detach()
    n = r.numel()
    baseline = (r.sum() - r) / (n - 1) if n > 1 else torch.zeros_like(r)
    return -((r - baseline) * log_probs).sum()


def attend(scores: Tensor, v: Tensor, mask: Tensor | None = None, hard: str | None = None,
           dropout_p: float = 0.0) -> tuple[Tensor, Tensor]:
    """The step every scorer shares: mask, softmax, soft or hard weights, average of the values.

    Args:
        scores: ``(B, H, T, S)``.
        v: ``(B, H, S, Dv)`` values.
        mask: bool, ``True`` = may attend, broadcastable to ``(B, H, T, S)``; or a float tensor added to the scores.
        hard: ``None`` (soft), ``"argmax"`` or ``"sample"`` (see the module's docstring); ``"sample"`` appends
            the log p of its draws to every :func:`record_samples` open.
        dropout_p: dropout on soft weights (training only; the caller passes 0 in eval).

    Returns:
        ``(out, weights)``: ``(B, H, T, Dv)`` and ``(B, H, T, S)``.
    """
    if hard not in HARD:
        raise ValueError(f"hard={hard!r} must be one of {HARD}")
    p, empty = masked_softmax(scores, mask)  # (B, H, T, S); empty rows attend everywhere until zeroed below
    if hard is None:
        weights = p
        drop = F.dropout(p, dropout_p) if dropout_p > 0 else p
    else:
        if hard == "argmax":
            index = p.argmax(dim=-1, keepdim=True)  # (B, H, T, 1)
        else:
            index = torch.multinomial(p.detach().flatten(0, -2), 1).view(*p.shape[:-1], 1)  # (B, H, T, 1)
            for rec in _sample_recorders:
                rec.append(p.gather(-1, index).squeeze(-1).clamp_min(1e-30).log())  # (B, H, T)
        one_hot = torch.zeros_like(p).scatter_(-1, index, 1.0)
        # argmax: straight-through (forward one-hot, backward p's gradient); sample: no gradient through the draw
        weights = one_hot + (p - p.detach()) if hard == "argmax" else one_hot
        drop = weights
    if empty is not None:
        weights = weights.masked_fill(empty, 0.0)
        drop = drop.masked_fill(empty, 0.0)
    return drop @ v, weights


class Scorer(nn.Module):
    """A scoring function: ``forward(q, k)`` gives the ``(B, H, T, S)`` scores, :meth:`attend` the attention.

    Args:
        hard: ``None`` for soft attention, ``"argmax"`` or ``"sample"`` for hard (module docstring);
            ``"sample"`` takes the argmax when the module is in eval mode.
    """

    def __init__(self, hard: str | None = None) -> None:
        super().__init__()
        if hard not in HARD:
            raise ValueError(f"hard={hard!r} must be one of {HARD}")
        self.hard = hard

    def reset_parameters(self) -> None:
        """Initialise the scorer's own weights (none by default)."""

    def attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout_p: float = 0.0,
               is_causal: bool = False, **inputs: Tensor) -> tuple[Tensor, Tensor]:
        """``(out, weights)`` for ``q`` ``(B, H, T, D)``, ``k`` ``(B, H or Hkv, S, D)``, ``v`` ``(B, H or Hkv, S, Dv)``;
        ``mask`` and ``is_causal`` as :func:`aiayn.layers.scaled_dot_product_attention` takes them (kv heads
        fewer than query heads are repeated for their groups); ``inputs``: what else the scorer's ``forward``
        reads (XLNet's segments). Returns ``(B, H, T, Dv)`` and ``(B, H, T, S)``."""
        k, v = repeat_kv(q, k, v)  # grouped-query attention: each kv head for its group of query heads
        if is_causal:
            mask = causal_mask(q.size(-2), k.size(-2), device=q.device)
        hard = "argmax" if self.hard == "sample" and not self.training else self.hard
        return attend(self(q, k, **inputs), v, mask, hard, dropout_p)

    def forward(self, q: Tensor, k: Tensor) -> Tensor:  # pragma: no cover - each scorer defines it
        raise NotImplementedError


class DotScore(Scorer):
    """``q . k`` (Luong et al., 2015, "dot"): equation 1 without the 1/sqrt(D)."""

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return q @ k.transpose(-2, -1)  # (B, H, T, S)


class ScaledDotScore(Scorer):
    """``q . k / sqrt(D)``: equation 1, computed explicitly (the default path calls the fused kernel instead)."""

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))  # (B, H, T, S)


class BilinearScore(Scorer):
    """``q W_h k^T`` with a learned ``(D, D)`` matrix ``W_h`` per head (Luong et al., 2015, "general").

    Starts at ``W_h = I / sqrt(D)``, which is scaled dot-product attention; ``weight`` is ``(H, D, D)``.
    """

    def __init__(self, n_heads: int, d_head: int, hard: str | None = None) -> None:
        super().__init__(hard)
        self.weight = nn.Parameter(torch.empty(n_heads, d_head, d_head))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        with torch.no_grad():
            self.weight.copy_(torch.eye(self.weight.size(-1)) / math.sqrt(self.weight.size(-1)))

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return (q @ self.weight) @ k.transpose(-2, -1)  # (B, H, T, D) @ (H, D, D) -> (B, H, T, D); -> (B, H, T, S)


class AdditiveScore(Scorer):
    """``v_h^T tanh(W_q q + W_k k)`` per head (Bahdanau et al., 2015, appendix A.1.2: ``v_a^T tanh(W_a s + U_a h)``).

    ``w_q``, ``w_k`` are ``(H, D, A)``, ``v`` is ``(H, A)``; no biases, as in the paper. Initialised as
    ``nn.Linear`` initialises (uniform in +-1/sqrt(fan in)).
    """

    def __init__(self, n_heads: int, d_head: int, d_attn: int | None = None, hard: str | None = None) -> None:
        super().__init__(hard)
        d_attn = d_head if d_attn is None else d_attn
        self.w_q = nn.Parameter(torch.empty(n_heads, d_head, d_attn))
        self.w_k = nn.Parameter(torch.empty(n_heads, d_head, d_attn))
        self.v = nn.Parameter(torch.empty(n_heads, d_attn))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        d, a = self.w_q.shape[1:]
        nn.init.uniform_(self.w_q, -1 / math.sqrt(d), 1 / math.sqrt(d))
        nn.init.uniform_(self.w_k, -1 / math.sqrt(d), 1 / math.sqrt(d))
        nn.init.uniform_(self.v, -1 / math.sqrt(a), 1 / math.sqrt(a))

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        qa, ka = q @ self.w_q, k @ self.w_k  # (B, H, T, A), (B, H, S, A)
        hidden = torch.tanh(qa.unsqueeze(-2) + ka.unsqueeze(-3))  # (B, H, T, S, A): what dot products avoid
        return (hidden @ self.v[:, None, :, None]).squeeze(-1)  # (B, H, T, S, A) @ (H, 1, A, 1) -> (B, H, T, S)

    def extra_repr(self) -> str:
        return f"heads={self.w_q.size(0)}, d_head={self.w_q.size(1)}, d_attn={self.w_q.size(2)}"


def make_scorer(name: str, n_heads: int, d_head: int) -> Scorer | None:
    """The scorer named ``name`` (one of :data:`SCORINGS`) for attention with ``n_heads`` heads of ``d_head``.

    ``"scaled_dot"`` gives ``None``: :class:`aiayn.layers.MultiHeadAttention`'s own path (the fused kernel),
    which :class:`ScaledDotScore` computes explicitly. ``"hard-argmax"`` and ``"hard-sample"`` score by scaled
    dot products and attend to one key.
    """
    if name == "scaled_dot":
        return None
    if name == "dot":
        return DotScore()
    if name == "additive":
        return AdditiveScore(n_heads, d_head)
    if name == "bilinear":
        return BilinearScore(n_heads, d_head)
    if name in ("hard-argmax", "hard-sample"):
        return ScaledDotScore(hard=name.removeprefix("hard-"))
    raise ValueError(f"scoring={name!r} must be one of {SCORINGS}")


__all__ = ["HARD", "SCORINGS", "AdditiveScore", "BilinearScore", "DotScore", "ScaledDotScore", "Scorer", "attend",
           "make_scorer", "record_samples", "reinforce_loss"]
