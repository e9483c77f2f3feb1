"""Scaled dot-product attention and multi-head attention (section 3.2), shared by every family.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V                         (eq. 1)
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,
        head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)

Two paths compute equation 1 (:func:`aiayn.layers.functional.scaled_dot_product_attention`): the fused
``torch.nn.functional.scaled_dot_product_attention`` (the default) and an explicit one that also returns the
weights. Weights are asked for explicitly
(``need_weights=True``) or collected for a whole model with :func:`record_attention`.

On CUDA the fused function picks its kernel from its arguments: flash only without a mask (``is_causal``
stands in for the causal one), memory-efficient with one. So a purely causal self-attention passes
``is_causal=True``, never a materialised mask, and padding stays a key-only ``(B, 1, 1, S)`` mask wherever
causality does not have to be folded into it. What each model passes is pinned in
``tests/layers/test_attention_kernels.py``. Nothing here reads a tensor value back to the host on an
accelerator (a stall per layer).

Two switches of Llama and Mistral live in :class:`MultiHeadAttention` (the plain path is unchanged without
them): ``n_kv_heads`` < ``n_heads`` (grouped-query attention, Ainslie et al. 2023; multi-query with one), where
each group of ``n_heads / n_kv_heads`` query heads shares one key/value head, so the projections and the cache
hold only the kv heads; and rotary positions (``rotary=(cos, sin)``, :class:`aiayn.layers.RotaryEmbedding`),
applied to the queries and keys before the keys are cached.

Shapes: B batch, H heads, Hkv key/value heads, T query length, S key length, D head dim (d_k), C model dim.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, cast

from torch import Tensor, nn

from aiayn.layers.functional import scaled_dot_product_attention
from aiayn.layers.linear import Linear
from aiayn.layers.masks import causal_mask, combine
from aiayn.layers.positional import apply_rotary

if TYPE_CHECKING:
    from aiayn.layers.scoring import Scorer

_recorders: list[dict[str, list[Tensor]]] = []


class MultiHeadAttention(nn.Module):
    """Multi-head attention (section 3.2.2), for self-attention and encoder-decoder attention.

    The projections W^Q, W^K, W^V of all heads are one ``(3C, C)`` matrix, ``in_proj``, laid out as
    ``torch.nn.MultiheadAttention`` and GPT-2's ``c_attn`` lay them out: one matmul for
    self-attention; for cross-attention the query rows apply to the decoder state and the key/value
    rows to the encoder output ("memory").

    DETR (Carion et al., 2020, section 3.2 and figure 10) adds positional encodings to the queries and keys
    of every attention but never to the values: ``pos`` is added to ``x`` before the query (and, in
    self-attention, key) projection, ``memory_pos`` to ``memory`` before the key projection. Without
    them self-attention stays one fused matmul.

    With ``n_kv_heads`` (grouped-query attention) ``in_proj`` is ``(C + 2 Hkv D, C)``: the query rows, then
    the key and the value rows of the kv heads; query head h reads kv head ``h // (n_heads / n_kv_heads)``.

    ``score``, a :class:`aiayn.layers.scoring.Scorer` (additive, bilinear, dot, hard attention), replaces
    equation 1 on the projected heads: its scores, then the shared mask and softmax step, always explicitly.
    Its own weights live under ``score.``; projections and caches are unchanged.
    """

    score: Scorer | None

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True,
                 n_kv_heads: int | None = None, score: Scorer | None = None) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if n_kv_heads <= 0 or n_heads % n_kv_heads:
            raise ValueError(f"n_kv_heads={n_kv_heads} must be a positive divisor of n_heads={n_heads}")
        self.d_model, self.n_heads, self.n_kv_heads, self.dropout = d_model, n_heads, n_kv_heads, dropout
        self.kv_dim = n_kv_heads * (d_model // n_heads)  # Hkv D; C without grouping
        self.in_proj = Linear(d_model, d_model + 2 * self.kv_dim, bias=bias)
        self.out_proj = Linear(d_model, d_model, bias=bias)
        self.score = score

    def _heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.view(b, t, -1, self.d_model // self.n_heads).transpose(1, 2)  # (B, H or Hkv, T, D)

    def _project(self, x: Tensor, rows: slice) -> Tensor:
        """``x`` ``(B, T, C)`` through the rows ``rows`` of ``in_proj`` (q: ``[:C]``, k: ``[C:2C]``, v: ``[2C:]``;
        with kv heads k: ``[C:C+kv]``, v: ``[C+kv:]``)."""
        return self.in_proj.rows(x, rows)

    def project_kv(self, memory: Tensor, memory_pos: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Keys and values of ``memory`` ``(B, S, C)``, each ``(B, Hkv, S, D)``; ``memory_pos`` ``(B, S, C)``, if
        given, is added to the keys' input only (DETR)."""
        c, kv = self.d_model, self.kv_dim
        if memory_pos is None:
            k, v = self._project(memory, slice(c, None)).split(kv, dim=-1)
        else:
            k, v = self._project(memory + memory_pos, slice(c, c + kv)), self._project(memory, slice(c + kv, None))
        return self._heads(k), self._heads(v)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        kv: tuple[Tensor, Tensor] | None = None,
        cache=None,
        pos: Tensor | None = None,
        memory_pos: Tensor | None = None,
        rotary: tuple[Tensor, Tensor] | None = None,
        score_inputs: dict[str, Tensor] | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``x`` to itself, or to ``memory`` (cross-attention): ``attn(x, memory, mask=m)``; every
        argument after ``memory`` is keyword-only.

        Args:
            x: ``(B, T, C)`` queries (and keys/values for self-attention).
            memory: ``(B, S, C)`` encoder output for cross-attention; ``None`` for self-attention.
            mask: bool ``True`` = may attend (or additive float), broadcastable to ``(B, H, T, S)``.
            is_causal: causal self-attention without a materialised mask.
            need_weights: also return the ``(B, H, T, S)`` attention weights.
            kv: precomputed ``(k, v)``, each ``(B, H, S, D)``, used instead of projecting
                ``memory`` (a decoding cache).
            cache: a :class:`aiayn.layers.kv_cache.KVCache` for self-attention: the new keys and
                values are appended and the queries attend to everything cached.
            pos: ``(B, T, C)`` (or broadcastable) positional encodings added to the queries' input, and in
                self-attention to the keys' input too; never to the values (DETR).
            memory_pos: ``(B, S, C)`` positional encodings added to the keys' input of cross-attention
                (not to the values); ignored when ``kv`` is given.
            rotary: ``(cos, sin)`` of :class:`aiayn.layers.RotaryEmbedding` for the new positions, ``(T, D)``
                or ``(B, 1, T, D)``: self-attention's queries and keys are rotated by them (RoPE) before the
                keys are cached.
            score_inputs: what else a ``score`` reads besides the queries and keys (XLNet's segments,
                :class:`aiayn.layers.relative.RelativeScore`).

        Returns:
            ``(out, weights)``: ``(B, T, C)`` and the weights or ``None``.
        """
        c, kv_dim = self.d_model, self.kv_dim
        if memory is None and kv is None:
            if pos is None:
                q, k, v = self.in_proj(x).split([c, kv_dim, kv_dim], dim=-1)
            else:  # DETR: positions on queries and keys, values from the content alone
                q, k = self._project(x + pos, slice(None, c + kv_dim)).split([c, kv_dim], dim=-1)
                v = self._project(x, slice(c + kv_dim, None))
            q, k, v = self._heads(q), self._heads(k), self._heads(v)  # (B, H, T, D), k and v (B, Hkv, T, D)
            if rotary is not None:  # RoPE: rotate queries and keys by their positions' angles
                q, k = apply_rotary(q, *rotary), apply_rotary(k, *rotary)
            if cache is not None:
                k, v = cache.append(k, v)  # (B, Hkv, S, D), S = positions cached so far
                t, s = q.size(2), k.size(2)
                # SDPA's is_causal puts the diagonal top-left, right only when T == S (the first call, on
                # an empty cache). Otherwise the queries are the last T of S positions: shift the diagonal
                # in a mask, or drop it for one query (it may attend to everything cached).
                if is_causal and (t != s or mask is not None):
                    mask = combine(mask, causal_mask(t, s, q.device)) if t > 1 else mask
                    is_causal = False
        else:
            q = self._heads(self._project(x if pos is None else x + pos, slice(None, c)))
            # kv is None here only if memory is not (the branch above)
            k, v = kv if kv is not None else self.project_kv(cast(Tensor, memory), memory_pos)
        record = bool(_recorders)
        if self.score is None:
            out, weights = scaled_dot_product_attention(
                q, k, v, mask, self.dropout if self.training else 0.0, is_causal, need_weights or record
            )
        else:  # another scoring function (aiayn.layers.scoring), always explicit
            out, weights = self.score.attend(q, k, v, mask, self.dropout if self.training else 0.0, is_causal,
                                             **(score_inputs or {}))
        if record:
            assert weights is not None  # asked for (need_weights or record)
            for rec in _recorders:
                rec.setdefault(getattr(self, "_aiayn_name", ""), []).append(weights.detach())
        out = out.transpose(1, 2).reshape(x.shape[0], x.shape[1], c)  # (B, T, C)
        return self.out_proj(out), (weights if need_weights else None)


@contextlib.contextmanager
def record_attention(model: nn.Module) -> Iterator[dict[str, list[Tensor]]]:
    """Collect the attention weights of every :class:`MultiHeadAttention` in ``model``.

    Inside the block attention takes the explicit path; each module's weights ``(B, H, T, S)`` are
    appended, one per call, under its qualified name (``"decoder.layers.0.cross_attn"``). A Swin block on
    its fast path (``aiayn.layers.fast.ENABLED``, no gradient) calls its attention once per group of windows
    (``aiayn.models.swin.CHUNK_TOKENS``), so its list holds the groups in order: ``torch.cat`` them for the
    whole batch::

        with record_attention(model) as rec:
            model(src, tgt)
        rec["decoder.layers.0.cross_attn"][0]   # (B, H, T, S)
    """
    for name, module in model.named_modules():
        if isinstance(module, MultiHeadAttention):
            module._aiayn_name = name
    rec: dict[str, list[Tensor]] = {}
    _recorders.append(rec)
    try:
        yield rec
    finally:
        _recorders.remove(rec)
