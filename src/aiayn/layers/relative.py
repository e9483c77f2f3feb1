"""Relative positional attention (Dai et al., 2019, "Transformer-XL", section 3.3), as a scorer of the shared
:class:`~aiayn.layers.MultiHeadAttention` (``score=``): its projections, its masks and the shared softmax step
(:func:`aiayn.layers.scoring.attend`) are the other families'.

The score of query i and key j replaces the absolute positions of the keys by the distance i - j:

    A_ij = q_i W_q^T W_kE x_j     (a) content        ->  (q_i + u) . k_j          u: global content bias
         + q_i W_q^T W_kR R_i-j   (b) position       ->  (q_i + v) . r_i-j        v: global position bias
         + u^T W_kE x_j           (c)                    r = W_kR R: the sinusoids R of the distances,
         + v^T W_kR R_i-j         (d)                    projected per layer (no bias)

scaled by 1 / sqrt(D). Computing (b) + (d) per pair would cost a (T, S, D) gather; instead each query meets every
distance S - 1 .. 0 once, ``BD_raw = (q + v) r^T`` ``(B, H, T, S)``, and the relative shift (the paper's appendix B)
slides row i left by T - 1 - i, so that column j holds distance i - j:

    BD[i, j] = BD_raw[i, j + T - 1 - i]       queries are the last T of S positions (a memory comes first)

done by padding a zero column, viewing the rows one longer and dropping the first: no copy of the scores. The
columns it fills for j > i + S - T (the future) hold other rows' values; the causal mask hides them.

Shapes: B batch, H heads, T queries, S keys (the memory's and the segment's), D head dim, C model dim.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from aiayn.layers.positional import sinusoids
from aiayn.layers.scoring import Scorer


def relative_shift(x: Tensor) -> Tensor:
    """``(B, H, T, S)`` scores of every query against the distances S - 1 .. 0 -> scores against the keys:
    ``out[..., i, j] = x[..., i, j + T - 1 - i]`` wherever ``j + T - 1 - i < S`` (the module's docstring)."""
    b, h, t, s = x.shape
    padded = torch.cat([x.new_zeros(b, h, t, 1), x], dim=-1)  # (B, H, T, 1 + S)
    return padded.view(b, h, s + 1, t)[:, :, 1:].reshape(b, h, t, s)  # each row moved by one more


class RelativeScore(Scorer):
    """Transformer-XL's score ``((q + u) . k + shift((q + v) . r)) / sqrt(D)`` (module docstring).

    Args:
        d_model: the width of the sinusoids R (the model's).
        n_heads, d_head: the attention's heads and their width.
        clamp_len: distances beyond it are encoded as ``clamp_len`` (``None``: none clamped).
        dropout: on the sinusoids before their projection (Transformer-XL drops them as it drops embeddings).
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int, clamp_len: int | None = None,
                 dropout: float = 0.0) -> None:
        super().__init__()
        self.d_model, self.n_heads, self.d_head, self.clamp_len = d_model, n_heads, d_head, clamp_len
        self.r_net = nn.Linear(d_model, n_heads * d_head, bias=False)  # W_kR
        self.u = nn.Parameter(torch.zeros(n_heads, d_head))  # the content bias, r_w_bias in the original code
        self.v = nn.Parameter(torch.zeros(n_heads, d_head))  # the position bias, r_r_bias
        self.dropout = nn.Dropout(dropout)

    def reset_parameters(self) -> None:
        nn.init.normal_(self.u, std=0.02)
        nn.init.normal_(self.v, std=0.02)

    def distances(self, s: int, device: torch.device) -> Tensor:
        """``(H, S, D)``: r for the distances S - 1 .. 0 (clamped at ``clamp_len``)."""
        d = torch.arange(s - 1, -1, -1, device=device)  # (S,)
        if self.clamp_len is not None:
            d = d.clamp(max=self.clamp_len)
        r = self.r_net(self.dropout(sinusoids(d, self.d_model, "concat").to(device, self.r_net.weight.dtype)))
        return r.view(s, self.n_heads, self.d_head).transpose(0, 1)  # (H, S, D)

    def forward(self, q: Tensor, k: Tensor) -> Tensor:  # (B, H, T, D), (B, H, S, D) -> (B, H, T, S)
        r = self.distances(k.size(-2), q.device)  # (H, S, D)
        content = (q + self.u[:, None]) @ k.transpose(-2, -1)  # (a) + (c): (B, H, T, S)
        position = relative_shift((q + self.v[:, None]) @ r.transpose(-2, -1))  # (b) + (d): (B, H, T, S)
        return (content + position) / math.sqrt(self.d_head)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, d_head={self.d_head}, clamp_len={self.clamp_len}"


__all__ = ["RelativeScore", "relative_shift"]
