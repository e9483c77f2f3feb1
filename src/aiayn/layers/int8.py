"""int8 weights for inference on CPUs: every ``Linear`` and every token table in 8 bits, one scale per row.

    weight (O, K) float32  ->  q = round(weight / s) in [-127, 127] (int8),  s = max|row| / 127  (one per row)
    Linear:     y = x W^T + b  computed as  int8(x) . q^T, rescaled        (fbgemm's dynamic int8 product)
    Embedding:  table[ids]     read as       q[ids] * s[ids]

A ``Linear`` becomes :class:`Int8Linear`: PyTorch's own dynamic quantization (``torch.ao``'s
``quantized::linear_dynamic``, the fbgemm kernel ``torch.ao.quantization.quantize_dynamic`` installs),
which quantizes each input on the fly (per tensor, 7 bits: ``reduce_range``, exact on CPUs with or without
VNNI) and multiplies in integers. Chosen over the alternatives PyTorch ships, measured on this machine's
2 cores (a row by GPT-2's 768 x 3072 matrix): fbgemm 64 us, float32 124 us, oneDNN's ``qlinear_pointwise``
215 us (a large fixed cost per call), ``aten._weight_int8pack_mm`` (what torchao's CPU int8 weight-only
path calls in eager mode) 1,400 us. torchao itself is not installable beside this CPU torch. Creating the
quantized weight tensor warns of deprecation in PyTorch 2.13; the kernel has no replacement that is as fast
here, so the warning is silenced at that one call.

A token table becomes :class:`Int8Embedding` (row-wise, as the output projection tied to it). Memory: the
int8 model holds a quarter of the float32 bytes of every quantized matrix, plus one float per row.

Shapes: N rows (every leading dimension of ``x`` together), K in, O out, V vocabulary, C width.
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch import Tensor, nn

from aiayn.layers.embedding import Embedding

REDUCE_RANGE = True  # 7-bit activations: no int16 saturation in fbgemm's AVX2 kernel, the same result everywhere


def quantize_rows(weight: Tensor) -> tuple[Tensor, Tensor]:
    """Symmetric int8 per row: ``(O, K)`` float -> ``(q (O, K) int8, scale (O,) float32)`` with
    ``weight ~= q * scale[:, None]``; a row of zeros gets scale 1."""
    w = weight.detach().float()
    scale = w.abs().amax(dim=1) / 127
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


def _pack(q: Tensor, scale: Tensor, bias: Tensor | None):
    """fbgemm's packed weight (and bias) for ``linear_dynamic``."""
    with warnings.catch_warnings():  # quantized tensors are deprecated in 2.13; the kernel still takes one
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*")
        qw = torch._make_per_channel_quantized_tensor(q, scale.double(), torch.zeros_like(scale, dtype=torch.long), 0)
    return torch.ops.quantized.linear_prepack(qw, None if bias is None else bias.detach().float().contiguous())


class Int8Linear(nn.Module):
    """A ``Linear`` with int8 weights; ``forward`` and :meth:`rows` compute what the float layer's would,
    to int8 rounding.

    The packed weights are not parameters: an int8 model is for inference, built from a float one by
    :func:`quantize` (it is neither trained nor saved). Attention's cross-attention multiplies by its query
    rows and its key/value rows apart (:meth:`rows`): each slice is packed on first use, and once the
    slices cover every row the whole matrix is let go, so no weight is held twice.
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        q, scale = quantize_rows(linear.weight)
        bias = None if linear.bias is None else linear.bias.detach().float().contiguous()
        self._packs = {(0, self.out_features): _pack(q, scale, bias)}  # (first row, end row) -> packed
        self._tiling: list[tuple[int, int]] | None = None  # slices that stand for the whole, once it is dropped

    def forward(self, x: Tensor) -> Tensor:  # (..., K) -> (..., O)
        return self.rows(x, slice(None))

    def rows(self, x: Tensor, rows: slice) -> Tensor:
        """``x`` ``(..., K)`` through the output rows ``rows`` alone -> ``(..., len(rows))``."""
        if x.device.type != "cpu" or x.dtype != torch.float32:
            raise ValueError(f"int8 layers take float32 CPU tensors, got {x.dtype} on {x.device}")
        start, stop, _ = rows.indices(self.out_features)
        packed = self._packs.get((start, stop))
        if packed is None and self._tiling is not None:  # the tiles that make up these rows: no new copy
            tiles = [k for k in self._tiling if start <= k[0] and k[1] <= stop]
            if tiles and tiles[0][0] == start and tiles[-1][1] == stop:  # x is quantized alike for each tile
                return torch.cat([torch.ops.quantized.linear_dynamic(x, self._packs[k], REDUCE_RANGE)
                                  for k in tiles], dim=-1)
        if packed is None:
            packed = self._packs[(start, stop)] = self._slice(start, stop)
        return torch.ops.quantized.linear_dynamic(x, packed, REDUCE_RANGE)

    def _slice(self, start: int, stop: int):
        """Pack rows ``start:stop``; once the slices packed so far tile the matrix, drop the whole one."""
        q, scale, bias = self._unpacked()
        packed = _pack(q[start:stop], scale[start:stop], None if bias is None else bias[start:stop])
        if self._tiling is None:
            parts = sorted([k for k in self._packs if k != (0, self.out_features)] + [(start, stop)])
            if [a for a, _ in parts] == [0] + [b for _, b in parts[:-1]] and parts[-1][1] == self.out_features:
                self._tiling = parts
                del self._packs[(0, self.out_features)]
        return packed

    def _unpacked(self) -> tuple[Tensor, Tensor, Tensor | None]:
        """The int8 matrix ``(O, K)``, its scales ``(O,)`` and bias, from the whole packed matrix or its tiling."""
        keys = self._tiling or [(0, self.out_features)]
        parts = [torch.ops.quantized.linear_unpack(self._packs[k]) for k in keys]
        q = torch.cat([qw.int_repr() for qw, _ in parts])
        scale = torch.cat([qw.q_per_channel_scales().float() for qw, _ in parts])
        bias = None if parts[0][1] is None else torch.cat([b for _, b in parts])
        return q, scale, bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per row"


class Int8Embedding(nn.Module):
    """A token table in int8, one scale per token: ``forward(ids)`` reads ``q[ids] * scale[ids]``."""

    def __init__(self, table: nn.Embedding) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = table.num_embeddings, table.embedding_dim
        self.padding_idx = table.padding_idx
        q, scale = quantize_rows(table.weight)
        self.q: Tensor
        self.scale: Tensor
        self.register_buffer("q", q)
        self.register_buffer("scale", scale)

    def forward(self, ids: Tensor) -> Tensor:  # (...) -> (..., C)
        return self.q[ids].float() * self.scale[ids, None]

    @property
    def weight(self) -> Tensor:
        """The table in float32 ``(V, C)``, made on each read (for heads that multiply by the whole table)."""
        return self.q.float() * self.scale[:, None]


def quantize(model: nn.Module) -> nn.Module:
    """An int8 copy of a float32 CPU model for inference (the model itself is unchanged).

    Every ``nn.Linear`` (the output projection too, even when tied to the token table) becomes an
    :class:`Int8Linear` and every token table of an :class:`~aiayn.layers.Embedding` an
    :class:`Int8Embedding`; LayerNorms, positions, convolutions and biases stay float32. The copy is in
    ``eval`` mode.

    Raises:
        ValueError: the model is not on the CPU or not float32 (fbgemm's int8 kernels are CPU kernels).
    """
    for name, p in model.named_parameters():
        if p.device.type != "cpu" or p.dtype != torch.float32:
            raise ValueError(f"quantize='int8' needs a float32 model on the CPU; {name} is {p.dtype} on {p.device} "
                             f"(load with device='cpu')")
    model = copy.deepcopy(model).eval()
    tables = {id(m.tokens): Int8Embedding(m.tokens) for m in model.modules()
              if isinstance(m, Embedding) and isinstance(m.tokens, nn.Embedding)}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if id(child) in tables:
                setattr(parent, name, tables[id(child)])
            elif isinstance(child, nn.Linear):
                setattr(parent, name, Int8Linear(child))
    return model


def nbytes(model: nn.Module) -> int:
    """Bytes of the weights ``model`` holds: its parameters and buffers (a tensor shared by two modules counted
    once) plus, for every :class:`Int8Linear`, each packed matrix as one byte a weight, one float32 scale a row
    and its bias. fbgemm's own bookkeeping and padding are left out: resident memory is measured apart."""
    seen: set[int] = set()
    total = 0
    for t in [*model.parameters(), *model.buffers()]:
        if t.untyped_storage().data_ptr() not in seen:
            seen.add(t.untyped_storage().data_ptr())
            total += t.untyped_storage().nbytes()
    for m in model.modules():
        if isinstance(m, Int8Linear):
            for packed in m._packs.values():
                qw, bias = torch.ops.quantized.linear_unpack(packed)
                total += qw.numel() + 4 * qw.size(0) + (0 if bias is None else bias.numel() * bias.element_size())
    return total


def is_quantized(model: nn.Module) -> bool:
    """Whether :func:`quantize` made ``model``."""
    return any(isinstance(m, Int8Linear) for m in model.modules())


__all__ = ["REDUCE_RANGE", "Int8Embedding", "Int8Linear", "is_quantized", "nbytes", "quantize", "quantize_rows"]
