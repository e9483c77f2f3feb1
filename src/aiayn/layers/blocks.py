"""Encoder and decoder blocks and stacks (section 3.1), post-norm as the paper or pre-norm.

Every sub-layer is wrapped the same way:

    post-norm (paper):  x = LayerNorm(x + Dropout(Sublayer(x)))
    pre-norm:           x = x + Dropout(Sublayer(LayerNorm(x)))     (GPT-2, ViT; a final LayerNorm follows)

One block class per kind, with a ``norm_first`` flag and a single forward.

DETR (Carion et al., 2020, section 3.2, figure 10) passes positional encodings to every layer instead of
adding them once to the input: ``pos`` goes to the queries and keys of self-attention (and to the queries
of cross-attention), ``memory_pos`` to the keys of cross-attention, never to the values. Its decoder
keeps every layer's output, through the shared final LayerNorm, for the auxiliary losses
(:meth:`Stack.layer_outputs`). Without these arguments nothing changes.

Llama's decoder block is the pre-norm GPT block with ``norm="rmsnorm"`` (Zhang & Sennrich 2019: x / RMS(x)
times a gain, no centring, no bias), a SwiGLU feed-forward, grouped key/value heads, no biases, and rotary
positions passed to every layer (``rotary``).

Shapes: B batch, T target length, S source length, C model dim.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor, nn

from aiayn.layers.attention import MultiHeadAttention
from aiayn.layers.feedforward import FeedForward
from aiayn.layers.scoring import Scorer

NORMS = ("layernorm", "rmsnorm")


def norm_layer(kind: str, d_model: int, eps: float = 1e-5) -> nn.Module:
    """``nn.LayerNorm`` (``"layernorm"``) or ``nn.RMSNorm`` (``"rmsnorm"``: Llama, Mistral) over ``d_model``."""
    if kind == "layernorm":
        return nn.LayerNorm(d_model, eps=eps)
    if kind == "rmsnorm":
        return nn.RMSNorm(d_model, eps=eps)
    raise ValueError(f"norm={kind!r} must be one of {NORMS}")


class _Block(nn.Module):
    def __init__(self, d_model: int, dropout: float, norm_first: bool, eps: float) -> None:
        super().__init__()
        self.norm_first, self.eps = norm_first, eps
        self.dropout = nn.Dropout(dropout)

    def _sublayer(self, x: Tensor, norm: nn.Module, fn) -> Tensor:
        if self.norm_first:
            return x + self.dropout(fn(norm(x)))
        return norm(x + self.dropout(fn(x)))


class EncoderBlock(_Block):
    """Self-attention then feed-forward (section 3.1, "Encoder")."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        activation: str = "relu",
        norm_first: bool = False,
        eps: float = 1e-5,
        bias: bool = True,
        score: Scorer | None = None,
    ) -> None:
        super().__init__(d_model, dropout, norm_first, eps)
        self.self_attn = MultiHeadAttention(d_model, n_heads, attention_dropout, bias=bias, score=score)
        self.norm1 = nn.LayerNorm(d_model, eps=eps)
        self.ff = FeedForward(d_model, d_ff, activation_dropout, activation)
        self.norm2 = nn.LayerNorm(d_model, eps=eps)

    def forward(self, x: Tensor, *, mask: Tensor | None = None, is_causal: bool = False,
                pos: Tensor | None = None, mems: Tensor | None = None, context: Tensor | None = None,
                score_inputs: dict[str, Tensor] | None = None, targets: Tensor | None = None) -> Tensor:
        """``(B, S, C)`` -> ``(B, S, C)``; ``mask`` bool ``True`` = may attend, broadcastable to ``(B, H, S, S)``
        (padding: ``(B, 1, 1, S)``); ``is_causal``: causal without a materialised mask; ``pos`` ``(B, S, C)`` is added
        to the queries and keys of self-attention, not to the values (DETR); ``mems`` ``(B, M, C)``: the earlier
        segment's states, which self-attention also reads, as keys and values before ``x``'s (Transformer-XL's
        recurrence; the mask then covers ``(S, M + S)``). ``context`` ``(B, S', C)``: the keys' and values' states
        instead of ``x``'s (XLNet's query stream reads the content stream with its memory before it; not with ``mems``,
        ``is_causal`` or ``pos``); ``score_inputs``: a ``score``'s other inputs (:meth:`MultiHeadAttention.forward`);
        ``targets`` ``(B, K, T)`` one-hot rows, with ``context``: ``x`` holds ``K`` rows that attend from these of the
        ``T`` positions (XLNet's predictions; the projections have no biases, so placing the rows before them is placing
        the queries)."""
        if context is not None:
            if mems is not None or is_causal or pos is not None:
                raise ValueError("context= holds every key and value: put the memory in it, and give the mask "
                                 "instead of is_causal (no pos)")
            keys = self.norm1(context) if self.norm_first else context  # as the queries' states are

            def attend(h: Tensor) -> Tensor:
                at = h if targets is None else targets.transpose(1, 2) @ h  # (B, T, C): each row at its position
                out = self.self_attn(at, keys, mask=mask, score_inputs=score_inputs)[0]
                return out if targets is None else targets @ out  # back to the rows: (B, K, C)

            x = self._sublayer(x, self.norm1, attend)
        elif mems is None:
            x = self._sublayer(x, self.norm1, lambda h: self.self_attn(h, mask=mask, is_causal=is_causal, pos=pos,
                                                                       score_inputs=score_inputs)[0])
        else:
            before = self.norm1(mems) if self.norm_first else mems  # as the segment's states are, before attending
            x = self._sublayer(x, self.norm1, lambda h: self.self_attn(h, torch.cat([before, h], dim=1), mask=mask,
                                                                       is_causal=is_causal,
                                                                       score_inputs=score_inputs)[0])
        return self._sublayer(x, self.norm2, self.ff)


class DecoderBlock(_Block):
    """Masked self-attention, encoder-decoder attention, feed-forward (section 3.1, "Decoder").

    With ``cross_attention=False`` it is the decoder-only (GPT) block. ``norm`` (a kind of :data:`NORMS`),
    ``n_kv_heads`` (grouped-query attention) and ``bias`` (of the attention and feed-forward linears) are
    Llama's switches; the defaults are the paper's block. ``cross_score`` (a :class:`aiayn.layers.scoring.Scorer`)
    scores the encoder-decoder attention otherwise than equation 1 (additive, bilinear, dot, hard).
    """

    cross_attn: MultiHeadAttention | None
    norm2: nn.Module | None

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        activation: str = "relu",
        norm_first: bool = False,
        eps: float = 1e-5,
        cross_attention: bool = True,
        norm: str = "layernorm",
        n_kv_heads: int | None = None,
        bias: bool = True,
        cross_score: Scorer | None = None,
    ) -> None:
        super().__init__(d_model, dropout, norm_first, eps)
        self.self_attn = MultiHeadAttention(d_model, n_heads, attention_dropout, bias=bias, n_kv_heads=n_kv_heads)
        self.norm1 = norm_layer(norm, d_model, eps)
        if cross_attention:
            self.cross_attn = MultiHeadAttention(d_model, n_heads, attention_dropout, bias=bias, n_kv_heads=n_kv_heads,
                                                 score=cross_score)
            self.norm2 = norm_layer(norm, d_model, eps)
        else:
            self.cross_attn = self.norm2 = None
        self.ff = FeedForward(d_model, d_ff, activation_dropout, activation, bias=bias)
        self.norm3 = norm_layer(norm, d_model, eps)

    def forward(
        self,
        x: Tensor,
        *,
        memory: Tensor | None = None,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        is_causal: bool = False,
        cache=None,
        pos: Tensor | None = None,
        memory_pos: Tensor | None = None,
        rotary: tuple[Tensor, Tensor] | None = None,
    ) -> Tensor:
        """``(B, T, C)`` decoder states -> ``(B, T, C)``; every argument after ``x`` is keyword-only.

        Args:
            memory: ``(B, S, C)`` encoder output for cross-attention; ``None`` without cross-attention, or
                when ``cache`` already holds its keys and values.
            self_mask: bool mask for self-attention (causal and padding combined), or use ``is_causal``.
            memory_mask: bool mask over the memory (source padding), ``(B, 1, 1, S)``.
            cache: a :class:`aiayn.layers.kv_cache.LayerCache` when decoding step by step.
            pos: ``(B, T, C)`` added to the queries and keys of self-attention and to the queries of
                cross-attention (DETR's object queries).
            memory_pos: ``(B, S, C)`` added to the keys of cross-attention (DETR's spatial encodings).
            rotary: ``(cos, sin)`` of the new positions, rotating self-attention's queries and keys (RoPE).
        """
        self_cache = None if cache is None else cache.self_attn
        x = self._sublayer(
            x, self.norm1,
            lambda h: self.self_attn(h, mask=self_mask, is_causal=is_causal, cache=self_cache, pos=pos,
                                     rotary=rotary)[0],
        )
        if self.cross_attn is not None:
            assert self.norm2 is not None  # built together with cross_attn
            kv = None if cache is None else cache.cross_kv(self.cross_attn, memory)
            x = self._sublayer(x, self.norm2, lambda h: self.cross_attn(h, memory, mask=memory_mask, kv=kv, pos=pos,
                                                                        memory_pos=memory_pos)[0])
        return self._sublayer(x, self.norm3, self.ff)


class Stack(nn.Module):
    """N blocks, then a final LayerNorm (or ``norm`` of :data:`NORMS`) when the blocks are pre-norm (post-norm
    ends normalised; DETR's post-norm decoder has one all the same, shared by the outputs of every layer)."""

    def __init__(self, blocks: list[nn.Module], d_model: int, final_norm: bool, eps: float = 1e-5,
                 norm: str = "layernorm") -> None:
        super().__init__()
        self.layers = nn.ModuleList(blocks)
        self.norm = norm_layer(norm, d_model, eps) if final_norm else None

    def _outputs(self, x: Tensor, caches, block_kwargs: dict[str, Any]) -> Iterator[Tensor]:
        for i, layer in enumerate(self.layers):
            if caches is not None:
                x = layer(x, cache=caches[i], **block_kwargs)
            else:
                x = layer(x, **block_kwargs)
            yield x

    def forward(self, x: Tensor, *, caches=None, **block_kwargs: Any) -> Tensor:
        """``(B, T, C)`` -> ``(B, T, C)`` through every block, then the final norm if there is one.

        Args:
            x: the blocks' input.
            caches: a :class:`aiayn.layers.kv_cache.DecoderCache` (or anything indexable by layer), block ``i``
                getting ``cache=caches[i]``; ``None``: no cache.
            block_kwargs: passed by name to every block, e.g. ``mask=`` (encoder) or ``memory=``,
                ``memory_mask=``, ``is_causal=`` (decoder): ``decoder(x, memory=m, memory_mask=mm, is_causal=True)``.
        """
        for h in self._outputs(x, caches, block_kwargs):
            x = h
        return x if self.norm is None else self.norm(x)

    def layer_outputs(self, x: Tensor, *, caches=None, **block_kwargs: Any) -> list[Tensor]:
        """The output of every block, each through the final LayerNorm when there is one; the last equals
        ``forward``'s (arguments as there). DETR decodes every layer's output with the shared heads for its
        auxiliary losses (section 3.2, "Auxiliary decoding losses"); the layers themselves see the un-normalised
        states."""
        return [h if self.norm is None else self.norm(h) for h in self._outputs(x, caches, block_kwargs)]
