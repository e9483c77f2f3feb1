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

XLNet (Yang et al., 2019) reads the same score in both directions (``bidirectional``): the distances run on to
-(T - 1), a key after the query, L = S + T - 1 of them, and the same shift takes the first S columns. It adds a
term for segments (section 2.5, "relative segment encodings"): whether query i and key j lie in the same segment
(sentence A or B), not which, each choice a learned vector per head ``s_0``, ``s_1``:

    A_ij += (q_i + b) . s_[seg(i) != seg(j)]         b: a third global bias

Shapes: B batch, H heads, T queries, S keys (the memory's and the segment's), L distances, D head dim, C model dim.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from aiayn.layers.positional import sinusoids
from aiayn.layers.scoring import Scorer


def relative_shift(x: Tensor, keys: int | None = None) -> Tensor:
    """``(B, H, T, L)`` scores of every query against the distances S - 1, S - 2, ... (L of them) -> scores
    against the ``keys`` S (default L): ``out[..., i, j] = x[..., i, j + T - 1 - i]`` wherever
    ``j + T - 1 - i < L`` (the module's docstring)."""
    b, h, t, n = x.shape
    s = n if keys is None else keys
    padded = torch.cat([x.new_zeros(b, h, t, 1), x], dim=-1)  # (B, H, T, 1 + L)
    shifted = padded.view(b, h, n + 1, t)[:, :, 1:].reshape(b, h, t, n)  # each row moved by one more
    return shifted if s == n else shifted[..., :s]


class RelativeScore(Scorer):
    """Transformer-XL's score ``((q + u) . k + shift((q + v) . r)) / sqrt(D)`` (module docstring).

    Args:
        d_model: the width of the sinusoids R (the model's).
        n_heads, d_head: the attention's heads and their width.
        clamp_len: distances beyond it (either way) are encoded as ``clamp_len`` (``None``: none clamped).
        dropout: on the sinusoids before their projection (Transformer-XL drops them as it drops embeddings).
        bidirectional: distances of keys after the query too (XLNet's ``attn_type="bi"``), else only those
            before it and itself (a causal model's: the others are masked anyway).
        segments: XLNet's relative segment term; its ``forward`` then takes ``segments``.
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int, clamp_len: int | None = None,
                 dropout: float = 0.0, *, bidirectional: bool = False, segments: bool = False) -> None:
        super().__init__()
        self.d_model, self.n_heads, self.d_head, self.clamp_len = d_model, n_heads, d_head, clamp_len
        self.bidirectional = bidirectional
        self.r_net = nn.Linear(d_model, n_heads * d_head, bias=False)  # W_kR
        self.u = nn.Parameter(torch.zeros(n_heads, d_head))  # the content bias, r_w_bias in the original code
        self.v = nn.Parameter(torch.zeros(n_heads, d_head))  # the position bias, r_r_bias
        if segments:
            self.b = nn.Parameter(torch.zeros(n_heads, d_head))  # the segment bias, r_s_bias
            self.segment = nn.Parameter(torch.zeros(2, n_heads, d_head))  # s_0 (same segment), s_1 (other)
        self.segments = segments
        self.dropout = nn.Dropout(dropout)

    def reset_parameters(self) -> None:
        for p in (self.u, self.v, *((self.b, self.segment) if self.segments else ())):
            nn.init.normal_(p, std=0.02)

    def distances(self, t: int, s: int, device: torch.device) -> Tensor:
        """``(H, L, D)``: r for the distances S - 1, S - 2, ... down to 0, or to -(T - 1) when
        ``bidirectional`` (clamped at ``clamp_len`` either way)."""
        d = torch.arange(s - 1, -t if self.bidirectional else -1, -1, device=device)  # (L,)
        if self.clamp_len is not None:
            d = d.clamp(-self.clamp_len, self.clamp_len)
        r = self.r_net(self.dropout(sinusoids(d, self.d_model, "concat").to(device, self.r_net.weight.dtype)))
        return r.view(d.numel(), self.n_heads, self.d_head).transpose(0, 1)  # (H, L, D)

    def forward(self, q: Tensor, k: Tensor, segments: Tensor | None = None) -> Tensor:
        """``q`` ``(B, H, T, D)``, ``k`` ``(B, H, S, D)`` -> ``(B, H, T, S)``; ``segments`` bool ``(B, T, S)``:
        ``True`` where query and key lie in different segments (only with ``segments=True``; ``None``: no
        segment term, as ``transformers`` leaves it without ``token_type_ids``)."""
        t, s = q.size(-2), k.size(-2)
        r = self.distances(t, s, q.device)  # (H, L, D)
        content = (q + self.u[:, None]) @ k.transpose(-2, -1)  # (a) + (c): (B, H, T, S)
        position = relative_shift((q + self.v[:, None]) @ r.transpose(-2, -1), s)  # (b) + (d): (B, H, T, S)
        scores = content + position
        if segments is not None:
            if not self.segments:
                raise ValueError("segments given to a RelativeScore built without segments=True")
            e = (q + self.b[:, None]) @ self.segment.permute(1, 2, 0)  # (B, H, T, 2): same, other
            scores = scores + torch.where(segments[:, None], e[..., 1:], e[..., :1])
        return scores / math.sqrt(self.d_head)

    def extra_repr(self) -> str:
        return (f"n_heads={self.n_heads}, d_head={self.d_head}, clamp_len={self.clamp_len}, "
                f"bidirectional={self.bidirectional}, segments={self.segments}")


__all__ = ["RelativeScore", "relative_shift"]
