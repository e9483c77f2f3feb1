"""Positional information (section 3.5): sinusoidal encodings and learned position embeddings.

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

``layout="interleaved"`` is that formula (sin on even dimensions, cos on odd);
``layout="concat"`` puts all the sines first, then all the cosines, as tensor2tensor computes them and
The Illustrated Transformer draws them. Both hold the same numbers in a different order.

DETR (Carion et al., 2020, section 3.2 and appendix A.4) generalises them to images: half the channels
encode the row y, half the column x, each with the interleaved formula over C/2 dimensions, the
coordinates counted over the image's real pixels only (padding excluded) and scaled to (0, 2 pi].

Rotary position embeddings (RoPE; Su et al. 2021, section 3.4; Llama, Mistral) add nothing to the input:
attention rotates each pair of a query's and a key's dimensions by an angle proportional to the position,
so that q . k depends on the positions only through their difference (eq. 16):

    theta_i = base^(-2i / D)                         i = 0 .. D/2 - 1   (base: rope_theta, 10000)
    RoPE(x, m) = x * cos(m theta) + rotate_half(x) * sin(m theta)
    rotate_half([x1 | x2]) = [-x2 | x1]              the halves of the head dim D are the pairs (Llama's layout)

Llama 3.1 stretches the long wavelengths for a longer context (``rope_scaling`` with ``rope_type="llama3"``,
:func:`rope_frequencies`).

Shapes: B batch, T positions, C model dim, D head dim, H x W a feature map.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

LAYOUTS = ("interleaved", "concat")


def sinusoidal_encoding(n_positions: int, d_model: int, layout: str = "interleaved", start: int = 0) -> Tensor:
    """The ``(T, C)`` table of sinusoidal encodings for positions ``start .. start + T - 1``."""
    return sinusoids(torch.arange(start, start + n_positions), d_model, layout)


def sinusoids(positions: Tensor, d_model: int, layout: str = "interleaved") -> Tensor:
    """The ``(P, C)`` sinusoidal encodings of ``positions`` ``(P,)``, in any order (Transformer-XL encodes the
    relative distances S - 1 .. 0 with them, ``layout="concat"``)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r} must be one of {LAYOUTS}")
    if d_model % 2:
        raise ValueError(f"d_model={d_model} must be even for sinusoidal encodings")
    pos = positions.to(torch.float64)[:, None]  # (P, 1)
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))  # (C/2,)
    angles = pos * inv_freq.to(pos.device)  # (P, C/2)
    if layout == "concat":
        table = torch.cat([angles.sin(), angles.cos()], dim=-1)
    else:
        table = torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)  # sin, cos, sin, cos ...
    return table.float()  # computed in float64 so far positions stay exact


def sine_encoding_2d(mask: Tensor, d_model: int, temperature: float = 10000.0, normalize: bool = True,
                     scale: float = 2 * math.pi) -> Tensor:
    """DETR's 2-D sine encoding of a feature map: ``(B, H, W, C)``, channels ``[y (C/2) | x (C/2)]``.

        y = number of real rows at or above the position (1-based), x likewise along the row;
        normalised: y <- y / (y of the last row + 1e-6) * scale, so the real image spans (0, scale]
        PE_y(2i) = sin(y / temperature^(2i / (C/2))),  PE_y(2i+1) = cos(...)   (and PE_x likewise)

    Args:
        mask: ``(B, H, W)`` bool, ``True`` on real pixels, ``False`` on padding (positions in the padding
            get values too, but no one attends to them).
        d_model: channels C, a multiple of 4.
        temperature: the base of the wavelengths (10000 as in section 3.5 of the Transformer).
        normalize: scale the coordinates to ``(0, scale]`` (DETR does, so every image size spans the same
            range).

    Returns:
        ``(B, H, W, C)`` float32.
    """
    if d_model % 4:
        raise ValueError(f"d_model={d_model} must be a multiple of 4 for 2-D sine encodings")
    if mask.dim() != 3:
        raise ValueError(f"mask must be (B, H, W), got shape {tuple(mask.shape)}")
    real = mask.to(torch.float64)
    y, x = real.cumsum(1), real.cumsum(2)  # (B, H, W) each, 1-based coordinates over real pixels
    if normalize:
        y = y / (y[:, -1:, :] + 1e-6) * scale
        x = x / (x[:, :, -1:] + 1e-6) * scale
    half = d_model // 2
    inv_freq = temperature ** (-torch.arange(0, half, 2, dtype=torch.float64, device=mask.device) / half)  # (C/4,)

    def encode(coord: Tensor) -> Tensor:  # (B, H, W) -> (B, H, W, C/2): sin, cos, sin, cos ...
        angles = coord[..., None] * inv_freq  # (B, H, W, C/4)
        return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)

    return torch.cat([encode(y), encode(x)], dim=-1).float()  # (B, H, W, C)


def readable(t: Tensor) -> bool:
    """Whether a check may read ``t``'s values back: on the CPU, where it is free, and not while
    ``torch.compile`` traces (a read would break the graph; a compiled step's inputs are checked before it
    runs). On an accelerator a read would stall every call."""
    return t.device.type == "cpu" and not torch.compiler.is_compiling()


def _last(position_ids: Tensor) -> int | None:
    """``position_ids.max() + 1`` where it may be read (:func:`readable`), else ``None``."""
    return int(position_ids.max()) + 1 if readable(position_ids) else None


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed encodings, no parameters; works for any length (the table grows on demand)."""

    table: Tensor  # a buffer

    def __init__(self, d_model: int, max_len: int = 1024, layout: str = "interleaved") -> None:
        super().__init__()
        self.d_model, self.layout = d_model, layout
        self.register_buffer("table", sinusoidal_encoding(max_len, d_model, layout), persistent=False)

    def forward(self, t: int, start: int = 0, position_ids: Tensor | None = None) -> Tensor:
        """Encodings ``(T, C)`` of positions ``start .. start + t - 1``, or ``(B, T, C)`` of ``position_ids``.

        ``position_ids`` on an accelerator must lie within the table (``max_len`` or the longest length seen
        so far): growing it for them would read their maximum back to the host, a stall every forward.
        """
        end = start + t if position_ids is None else _last(position_ids)
        if end is not None and end > self.table.size(0):  # past the longest length seen so far: extend, never refuse
            n = max(end, 2 * self.table.size(0))
            self.table = sinusoidal_encoding(n, self.d_model, self.layout).to(self.table.device)
        return self.table[start : start + t] if position_ids is None else self.table[position_ids]


class LearnedPositionalEmbedding(nn.Module):
    """One learned vector per position, the alternative of section 3.5 (and GPT, BERT, ViT)."""

    def __init__(self, max_len: int, d_model: int, offset: int = 0) -> None:
        super().__init__()
        self.max_len, self.offset = max_len, offset  # position p reads row p + offset (BART: offset 2)
        self.weight = nn.Parameter(torch.empty(max_len + offset, d_model))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, t: int, start: int = 0, position_ids: Tensor | None = None) -> Tensor:
        """Vectors ``(T, C)`` of positions ``start .. start + t - 1``, or ``(B, T, C)`` of ``position_ids``.

        ``position_ids`` are checked against ``max_len`` on the CPU only (reading them back would stall an
        accelerator every forward; :class:`aiayn.models.GPT` checks its own once where they could exceed it).
        """
        end = start + t if position_ids is None else _last(position_ids)
        if end is not None and end > self.max_len:
            raise ValueError(
                f"sequence of {end} positions is longer than the {self.max_len} learned positions "
                f"(max_len); use a shorter input or sinusoidal positions"
            )
        if position_ids is None:
            return self.weight[self.offset + start : self.offset + start + t]
        return self.weight[position_ids + self.offset]


def rope_frequencies(head_dim: int, theta: float = 10000.0, scaling: dict | None = None) -> Tensor:
    """The ``(D/2,)`` float64 rotation frequencies theta_i = ``theta``^(-2i / D) of RoPE.

    ``scaling`` with ``rope_type="llama3"`` (Llama 3.1; ``factor``, ``low_freq_factor``, ``high_freq_factor``,
    ``original_max_position_embeddings`` L, as Hugging Face's ``rope_scaling``) divides the frequencies whose
    wavelength 2 pi / theta_i exceeds L / low_freq_factor by ``factor``, keeps those below L / high_freq_factor,
    and interpolates in between, smoothly in L / wavelength.
    """
    if head_dim % 2:
        raise ValueError(f"head dim {head_dim} must be even for rotary embeddings")
    inv_freq = theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)  # (D/2,)
    if scaling is None:
        return inv_freq
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind != "llama3":
        raise ValueError(f"rope_scaling rope_type={kind!r} is not supported; only 'llama3'")
    try:
        factor, low, high, context = (float(scaling[k]) for k in ("factor", "low_freq_factor", "high_freq_factor",
                                                                   "original_max_position_embeddings"))
    except KeyError as e:
        raise ValueError(f"llama3 scaling needs {e.args[0]!r}") from None
    except (TypeError, ValueError):
        raise ValueError("llama3 scaling's factor, low_freq_factor, high_freq_factor and "
                         "original_max_position_embeddings must be numbers") from None
    if not (factor > 0 and context > 0 and 0 <= low < high):
        raise ValueError(f"llama3 scaling needs factor > 0, original_max_position_embeddings > 0 and "
                         f"0 <= low_freq_factor < high_freq_factor, got {factor}, {context}, {low}, {high}")
    wavelen = 2 * math.pi / inv_freq
    smooth = ((context / wavelen - low) / (high - low)).clamp(0.0, 1.0)  # 0: long waves, 1: short waves
    return (1 - smooth) * inv_freq / factor + smooth * inv_freq


def rotate_half(x: Tensor) -> Tensor:
    """``[x1 | x2]`` -> ``[-x2 | x1]`` over the last dimension: the 90-degree turn of every pair (i, i + D/2)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate ``x`` ``(B, H, T, D)`` by the angles of its positions: ``x cos + rotate_half(x) sin``.

    ``cos`` and ``sin`` come from :class:`RotaryEmbedding`: ``(T, D)`` or ``(B, 1, T, D)``, float32; they are
    cast to ``x``'s dtype, so a bfloat16 model keeps bfloat16 queries and keys (as Hugging Face's Llama does).
    """
    return x * cos.to(x.dtype) + rotate_half(x) * sin.to(x.dtype)


class RotaryEmbedding(nn.Module):
    """The cosines and sines of RoPE for the positions of a batch; no parameters (the frequencies are a buffer).

    Args:
        head_dim: D, the dimension of one attention head.
        theta: the base of the wavelengths (Llama 2 and Mistral: 10000; Llama 3: 500000).
        scaling: Llama 3.1's frequency scaling (:func:`rope_frequencies`), or ``None``.
    """

    inv_freq: Tensor  # a buffer, float32 whatever the model's dtype (see _apply)

    def __init__(self, head_dim: int, theta: float = 10000.0, scaling: dict | None = None) -> None:
        super().__init__()
        self.register_buffer("inv_freq", rope_frequencies(head_dim, theta, scaling).float(), persistent=False)
        self._frequencies = (head_dim, theta, scaling)

    def _apply(self, fn, recurse=True):
        """``model.half()`` or ``.to(torch.bfloat16)`` would round the frequencies, and the angles of late
        positions with them (bfloat16 keeps 8 bits: position 4,000 would turn by a wrong angle); they stay float32
        on whatever device ``fn`` moved them to."""
        super()._apply(fn, recurse)
        if self.inv_freq.is_floating_point() and self.inv_freq.dtype != torch.float32:
            exact = rope_frequencies(*self._frequencies).float()
            self.inv_freq = exact.to(self.inv_freq.device)
        return self

    def forward(self, t: int, start: int = 0, position_ids: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(cos, sin)``, each ``(T, D)`` for positions ``start .. start + t - 1``, or ``(B, 1, T, D)`` for
        ``position_ids`` ``(B, T)`` (rows padded on the left); they broadcast over the heads of ``(B, H, T, D)``."""
        if position_ids is None:
            pos = torch.arange(start, start + t, device=self.inv_freq.device, dtype=torch.float32)  # (T,)
        else:
            pos = position_ids.float()[:, None, :]  # (B, 1, T)
        angles = pos[..., None] * self.inv_freq  # (T, D/2) or (B, 1, T, D/2)
        angles = torch.cat([angles, angles], dim=-1)  # (..., D): pair (i, i + D/2) turns by one angle
        return angles.cos(), angles.sin()
