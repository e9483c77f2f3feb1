"""Input embeddings (section 3.4): token embeddings times sqrt(d_model), plus positions, then dropout.

Shapes: B batch, T length, C model dim, V vocabulary.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.layers.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, readable

POSITIONAL = ("sinusoidal", "sinusoidal-concat", "learned", "none")


def check_ids(ids: Tensor, vocab_size: int, name: str = "ids", values: bool = True) -> None:
    """Refuse token ids that are not a ``(B, T)`` integer tensor within ``[0, vocab_size)``.

    Args:
        ids: the tensor to check.
        vocab_size: V; every id must lie in ``[0, V)``.
        name: the argument named in the error.
        values: also check the range. That reads ``ids.min()`` and ``ids.max()`` back to the host: free on
            the CPU, a stall on an accelerator, where it belongs once at the entry of a public call (the
            decoding functions), not in a forward run every step.

    Raises:
        TypeError: not a tensor, or not integers.
        ValueError: not ``(B, T)``, empty, or (``values``) an id outside the vocabulary.
    """
    if not isinstance(ids, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(ids).__name__}")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer token ids (torch.long), got dtype {ids.dtype}")
    if ids.dim() != 2:
        raise ValueError(f"{name} must have shape (batch, length), got {tuple(ids.shape)}")
    if ids.numel() == 0:
        raise ValueError(f"{name} is empty, shape {tuple(ids.shape)}")
    if not values:
        return
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= vocab_size:
        bad = lo if lo < 0 else hi
        raise ValueError(f"{name} holds token id {bad}, outside the vocabulary [0, {vocab_size})")


class Embedding(nn.Module):
    """``dropout(tokens(ids) * scale + positions)``; ``scale`` is sqrt(d_model) in the Transformer.

    Args:
        vocab_size, d_model: table size.
        max_len: positions for learned embeddings (sinusoidal ones extend past it).
        positional: ``"sinusoidal"`` (interleaved sin/cos, the paper's formula), ``"sinusoidal-concat"``,
            ``"learned"`` or ``"none"``.
        dropout: P_drop applied to the sum (section 5.4).
        scale: multiply token embeddings by sqrt(d_model) (section 3.4).
        tokens: an existing ``nn.Embedding`` to share (source/target sharing).
        offset: learned positions start at this row (BART's tables keep 2 unused rows first).
        segments: number of segment (token type) embeddings added to the sum (BERT: 2); 0 for none.
        norm_eps: LayerNorm the sum before dropout with this epsilon (BERT, BART); ``None`` for none.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        max_len: int = 1024,
        positional: str = "sinusoidal",
        dropout: float = 0.1,
        scale: bool = True,
        padding_idx: int | None = None,
        tokens: nn.Embedding | None = None,
        offset: int = 0,
        segments: int = 0,
        norm_eps: float | None = None,
    ) -> None:
        super().__init__()
        if positional not in POSITIONAL:
            raise ValueError(f"positional={positional!r} must be one of {POSITIONAL}")
        if tokens is None:
            tokens = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
            # N(0, 1/C) so that tokens * sqrt(C) has unit variance, as tensor2tensor and fairseq do.
            nn.init.normal_(tokens.weight, std=d_model**-0.5)
            if padding_idx is not None:
                nn.init.zeros_(tokens.weight[padding_idx])
        self.tokens = tokens
        self.scale = math.sqrt(d_model) if scale else 1.0
        if positional == "learned":
            self.positions: nn.Module | None = LearnedPositionalEmbedding(max_len, d_model, offset)
        elif positional.startswith("sinusoidal"):
            layout = "concat" if positional == "sinusoidal-concat" else "interleaved"
            self.positions = SinusoidalPositionalEncoding(d_model, max_len, layout)
        else:
            self.positions = None
        self.segments = nn.Embedding(segments, d_model) if segments else None
        self.norm = nn.LayerNorm(d_model, eps=norm_eps) if norm_eps is not None else None
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids: Tensor, start: int = 0, position_ids: Tensor | None = None,
                segment_ids: Tensor | None = None) -> Tensor:
        """``(B, T)`` ids at positions ``start ..`` (or at ``position_ids`` ``(B, T)``, for rows padded
        on the left), in segments ``segment_ids`` ``(B, T)`` (default 0) -> ``(B, T, C)``.

        The ids' range is checked on the CPU only: on an accelerator reading it back would stall every
        forward (every decoding step); the public decoding calls check it once before their loop.
        """
        check_ids(ids, self.tokens.num_embeddings, values=readable(ids))
        x = self.tokens(ids)
        if self.scale != 1.0:
            x = x * self.scale
        if self.positions is not None:
            x = x + self.positions(ids.size(1), start, position_ids)
        if self.segments is not None:
            if segment_ids is None:
                segment_ids = torch.zeros_like(ids)
            else:
                check_ids(segment_ids, self.segments.num_embeddings, "segment_ids (token_type_ids)",
                          values=readable(ids))
                if segment_ids.shape != ids.shape:
                    raise ValueError(f"segment_ids must be shaped as ids {tuple(ids.shape)}, got "
                                     f"{tuple(segment_ids.shape)}")
            x = x + self.segments(segment_ids)
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x)


def tied_linear(x: Tensor, table: nn.Embedding, bias: Tensor | None = None) -> Tensor:
    """``x`` ``(..., C)`` times the token table's transpose, plus ``bias`` -> ``(..., V)``: the logits of an output
    tied to the input embedding (BERT's masked-LM head). An int8 table (:func:`aiayn.layers.int8.quantize`)
    multiplies in int8 instead of making the float table again on every call."""
    int8 = getattr(table, "linear", None)
    return F.linear(x, table.weight, bias) if int8 is None else int8(x, bias)
