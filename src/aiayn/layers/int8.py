"""int8 weights for inference on CPUs: every ``Linear`` and every token table in 8 bits, one scale per row.

    weight (O, K) float32  ->  q = round(weight / s) in [-127, 127] (int8),  s = max|row| / 127  (one per row)
    Linear:     y = x W^T + b  computed as  int8(x) . q^T, rescaled        (fbgemm's dynamic int8 product)
    Embedding:  table[ids]     read as       q[ids] * s[ids]

A ``Linear`` becomes :class:`Int8Linear`: PyTorch's own dynamic quantization (``torch.ao``'s
``quantized::linear_dynamic``, the fbgemm kernel ``torch.ao.quantization.quantize_dynamic`` installs),
which quantizes its input on the fly (7 bits: ``reduce_range``, exact on CPUs with or without VNNI) and
multiplies in integers. Two things keep the input's rounding small, as LLM.int8 (Dettmers et al., 2022)
found they must for Transformers, whose activations carry a few channels far larger than the rest:

    outliers:  input channels with some |x| > OUTLIER (6.0, the paper's threshold) multiply in float32,
               by their columns of the (dequantized) weight; the rest in int8
    rows:      each input row is scaled to [-1, 1] before the int8 product and back after (the kernel
               quantizes per tensor; a row's scale no longer depends on the others)

Without them, all-MiniLM-L6-v2's int8 sentence embeddings fell to a cosine of 0.90 with float32's on short
sentences; with them it is >= 0.99 (``benchmarks/int8_quality.py``).

fbgemm's kernel was chosen over the alternatives PyTorch ships (oneDNN's ``qlinear_pointwise``, float32
``F.linear``, ``aten._weight_int8pack_mm``) by ``benchmarks/int8_kernels.py``; its timings are in
``docs/kernels.md``. Creating the quantized weight tensor warns of deprecation in PyTorch 2.13; the kernel has
no replacement that is as fast there, so the warning is silenced at that one call.

In a compiled decode step (:mod:`aiayn.layers.session`) each int8 product is one opaque operation,
``aiayn::int8_rows`` (:func:`opaque` registers the model's products): dynamo cannot trace fbgemm's packed
weights, and the outlier test reads a value, which would break the graph at every product. One row
(:data:`aiayn.layers.fast.REDUCE_ONE_ROW`, where it is faster: batch-1 generation) is instead inductor's own
multiply-and-sum over the plain int8 rows, ``x (q s)^T``, with the activations in float32 (weight-only int8, so no
outliers to take apart): faster there than fbgemm's product and its op's cost per call, and nearer the float
model. The compiled model then holds its int8 matrices twice (fbgemm's packed copy serves the eager prefill and
more rows).

A token table becomes :class:`Int8Embedding` (row-wise, as the output projection tied to it); a head that
multiplies by the table itself (BERT's masked LM, :func:`aiayn.layers.tied_linear`) uses the table's int8
rows. Memory: the int8 model holds a quarter of the float32 bytes of every quantized matrix, plus one float per
row.

Shapes: N rows (every leading dimension of ``x`` together), K in, O out, V vocabulary, C width.
"""

from __future__ import annotations

import copy
import itertools
import warnings
import weakref
from collections.abc import Callable

import torch
from torch import Tensor, nn

from aiayn.layers import fast
from aiayn.layers.embedding import Embedding
from aiayn.layers.fast import cpu_op

REDUCE_RANGE = True  # 7-bit activations: no int16 saturation in fbgemm's AVX2 kernel, the same result everywhere
OUTLIER = 6.0  # input channels beyond this magnitude multiply in float32 (LLM.int8's threshold)


def quantize_rows(weight: Tensor) -> tuple[Tensor, Tensor]:
    """Symmetric int8 per row: ``(O, K)`` float -> ``(q (O, K) int8, scale (O,) float32)`` with
    ``weight ~= q * scale[:, None]``; a row of zeros gets scale 1."""
    w = weight.detach().float()
    scale = w.abs().amax(dim=1) / 127
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return q, scale


def _pack(q: Tensor, scale: Tensor):
    """fbgemm's packed weight for ``linear_dynamic`` (the bias is added apart, after the rows' rescaling)."""
    with warnings.catch_warnings():  # quantized tensors are deprecated in 2.13; the kernel still takes one
        warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*")
        qw = torch._make_per_channel_quantized_tensor(q, scale.double(), torch.zeros_like(scale, dtype=torch.long), 0)
    return torch.ops.quantized.linear_prepack(qw, None)


class _Opaque(nn.Module):
    """An int8 layer that :func:`opaque` can make one operation of a compiled graph: ``key``, a 0-dim buffer
    (not saved), is its number among the layers registered. A buffer, not an ``int`` attribute: the compiled
    step reads it as an input, so one graph serves every int8 model of its shapes, where dynamo would guard on
    an ``int`` and compile again for each new model. A copy is another layer: it is registered anew."""

    def __init__(self) -> None:
        super().__init__()
        self.key: Tensor | None
        self.register_buffer("key", None, persistent=False)

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_buffers"] = {**state["_buffers"], "key": None}  # the copy's products are its own
        return state

    def _opaque(self, x: Tensor, start: int, stop: int) -> Tensor | None:
        """Under ``torch.compile``, once registered: one row (:data:`~aiayn.layers.fast.REDUCE_ONE_ROW`) as
        inductor's own multiply-and-sum over the plain int8 rows (:func:`aiayn.layers.fast.linear_reduced`, the
        activations in float32), else the product as the one operation ``aiayn::int8_rows``."""
        if torch.compiler.is_compiling() and self.key is not None:  # eager: no buffer lookup
            plain = self._plain()
            if plain is not None and fast.reduced_suits(x, plain[0]):
                q, scale, bias = plain
                return fast.linear_reduced(x, q[start:stop], None if bias is None else bias[start:stop],
                                           scale[start:stop])
            return torch.ops.aiayn.int8_rows(x, self.key, start, stop)
        return None

    def _plain(self) -> tuple[Tensor, Tensor, Tensor | None] | None:
        """The int8 matrix ``(O, K)``, its scales ``(O,)`` and bias as plain tensors, where :func:`opaque` kept them."""
        return None

    _rows: Callable[[Tensor, int, int], Tensor]  # each layer's product by its rows start:stop


class Int8Linear(_Opaque):
    """A ``Linear`` with int8 weights; ``forward`` and :meth:`rows` compute what the float layer's would,
    to int8 rounding.

    The packed weights are not parameters: an int8 model is for inference, built from a float one by
    :func:`quantize` (it is neither trained nor saved). Attention's cross-attention multiplies by its query
    rows and its key/value rows apart (:meth:`rows`): each slice is packed on first use, and once the
    slices cover every row the whole matrix is let go (the whole product is then made of the slices'), so no
    weight is held twice.
    """

    def __init__(self, linear: nn.Linear, rows: tuple[Tensor, Tensor] | None = None) -> None:
        """``linear`` in int8; ``rows``: its weight already in int8, ``(q, scale)`` of :func:`quantize_rows`
        (a token table's, for the output tied to it), so the weight is not read."""
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        q, scale = rows if rows is not None else quantize_rows(linear.weight)
        self._bias = None if linear.bias is None else linear.bias.detach().float().contiguous()
        self._packs = {(0, self.out_features): _pack(q, scale)}  # (first row, end row) -> packed
        self._tiling: list[tuple[int, int]] | None = None  # slices that stand for the whole, once it is dropped
        self._columns: dict[int, Tensor] = {}  # input channel -> its weight column (O,) in float32, once needed
        self.plain_q: Tensor | None  # the int8 matrix (O, K) and its scales (O,) as tensors, once keep_plain() ran
        self.plain_scale: Tensor | None
        self.register_buffer("plain_q", None, persistent=False)
        self.register_buffer("plain_scale", None, persistent=False)

    def forward(self, x: Tensor) -> Tensor:  # (..., K) -> (..., O)
        return self.rows(x, slice(None))

    def rows(self, x: Tensor, rows: slice) -> Tensor:
        """``x`` ``(..., K)`` through the output rows ``rows`` alone -> ``(..., len(rows))``."""
        start, stop, _ = rows.indices(self.out_features)
        opaque = self._opaque(x, start, stop)
        return self._rows(x, start, stop) if opaque is None else opaque

    def _rows(self, x: Tensor, start: int, stop: int) -> Tensor:
        if x.device.type != "cpu" or x.dtype != torch.float32:
            raise ValueError(f"int8 layers take float32 CPU tensors, got {x.dtype} on {x.device}")
        flat = x.reshape(-1, self.in_features)  # (N, K)
        if flat.size(0) == 0:  # no rows (amax refuses an empty tensor): an empty answer, as nn.Linear's
            return x.new_zeros(*x.shape[:-1], stop - start)
        size = flat.abs()  # (N, K)
        peak = size.amax(1, keepdim=True)  # (N, 1) each row's largest input
        outliers = None
        if float(peak.max()) > OUTLIER:  # the one read of a value per call: channels to take apart
            outliers = (size.amax(0) > OUTLIER).nonzero()[:, 0]  # (n,)
            small = flat.index_fill(1, outliers, 0.0)
            peak = size.index_fill(1, outliers, 0.0).amax(1, keepdim=True)
        else:
            small = flat
        scale = None
        if small.size(0) > 1:  # one row: the kernel's own per-tensor scale is the row's
            scale = peak.clamp(min=1e-12)  # (N, 1)
            small = small / scale
        y = self._int8(small, start, stop)  # (N, O')
        if scale is not None:
            y.mul_(scale)
        if outliers is not None:
            y.addmm_(flat[:, outliers], self._float_columns(outliers)[start:stop].t())
        if self._bias is not None:
            y.add_(self._bias[start:stop])
        return y.view(*x.shape[:-1], stop - start)

    def _int8(self, x: Tensor, start: int, stop: int) -> Tensor:
        """fbgemm's int8 product of ``x`` ``(N, K)`` by the weight rows ``start:stop``."""
        packed = self._packs.get((start, stop))
        if packed is None and self._tiling is not None:  # the tiles that make up these rows: no new copy
            tiles = [k for k in self._tiling if start <= k[0] and k[1] <= stop]
            if tiles and tiles[0][0] == start and tiles[-1][1] == stop:  # x is quantized alike for each tile
                return torch.cat([torch.ops.quantized.linear_dynamic(x, self._packs[k], REDUCE_RANGE)
                                  for k in tiles], dim=-1)
        if packed is None:
            packed = self._packs[(start, stop)] = self._slice(start, stop)
        return torch.ops.quantized.linear_dynamic(x, packed, REDUCE_RANGE)

    def _float_columns(self, channels: Tensor) -> Tensor:
        """The weight's columns ``channels`` in float32, ``(O, n)``; each dequantized once, on first need."""
        wanted = channels.tolist()
        if any(c not in self._columns for c in wanted):
            q, scale = self._unpacked()
            for c in wanted:
                self._columns.setdefault(c, q[:, c].float() * scale)
        return torch.stack([self._columns[c] for c in wanted], dim=1)

    def _slice(self, start: int, stop: int):
        """Pack rows ``start:stop``; once the slices packed so far tile the matrix, drop the whole one."""
        q, scale = self._unpacked()
        packed = _pack(q[start:stop], scale[start:stop])
        if self._tiling is None:
            parts = sorted([k for k in self._packs if k != (0, self.out_features)] + [(start, stop)])
            if [a for a, _ in parts] == [0] + [b for _, b in parts[:-1]] and parts[-1][1] == self.out_features:
                self._tiling = parts
                del self._packs[(0, self.out_features)]
        return packed

    def _unpacked(self) -> tuple[Tensor, Tensor]:
        """The int8 matrix ``(O, K)`` and its scales ``(O,)``, from the whole packed matrix or its tiling."""
        keys = self._tiling or [(0, self.out_features)]
        parts = [torch.ops.quantized.linear_unpack(self._packs[k])[0] for k in keys]
        scales = [qw.q_per_channel_scales().float() for qw in parts]
        return torch.cat([qw.int_repr() for qw in parts]), torch.cat(scales)

    def _plain(self) -> tuple[Tensor, Tensor, Tensor | None] | None:
        if self.plain_q is None or self.plain_scale is None:
            return None
        return self.plain_q, self.plain_scale, self._bias

    def keep_plain(self) -> None:
        """Keep the int8 matrix and its scales as plain tensors (non-persistent buffers) beside fbgemm's packed copy,
        for the one-row products of a compiled step (:meth:`_opaque`): one byte more a weight."""
        if self.plain_q is None:
            q, scale = self._unpacked()
            self.register_buffer("plain_q", q, persistent=False)
            self.register_buffer("plain_scale", scale, persistent=False)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per row"


class Int8Embedding(_Opaque):
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
        self._product: Int8Linear | None = None  # the tied output's product, once used

    def forward(self, ids: Tensor) -> Tensor:  # (...) -> (..., C)
        return self.q[ids].float() * self.scale[ids, None]

    def linear(self, x: Tensor, bias: Tensor | None = None) -> Tensor:
        """``x`` ``(..., C)`` times the table's transpose, plus ``bias`` -> ``(..., V)``: an output tied to the
        table (:func:`aiayn.layers.tied_linear`), multiplied in int8 as an :class:`Int8Linear` of the same
        rows, packed on first use."""
        out = self._opaque(x, 0, self.num_embeddings)
        out = self._rows(x, 0, self.num_embeddings) if out is None else out
        return out if bias is None else out + bias

    def _rows(self, x: Tensor, start: int, stop: int) -> Tensor:
        if self._product is None:
            shape = nn.Linear(self.embedding_dim, self.num_embeddings, bias=False, device="meta")
            self._product = Int8Linear(shape, rows=(self.q, self.scale))
        return self._product.rows(x, slice(start, stop))

    def _plain(self) -> tuple[Tensor, Tensor, Tensor | None] | None:
        return self.q, self.scale, None

    @property
    def weight(self) -> Tensor:
        """The table in float32 ``(V, C)``, made on each read."""
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


_OPAQUE: weakref.WeakValueDictionary[int, _Opaque] = weakref.WeakValueDictionary()  # key -> layer
_keys = itertools.count()


def _int8_rows(x: Tensor, key: Tensor, start: int, stop: int) -> Tensor:
    """The product of ``x`` ``(..., K)`` by the int8 rows ``start:stop`` of the layer :func:`opaque` registered as
    ``key`` (a 0-dim tensor), one operation to ``torch.compile`` -> ``(..., stop - start)``."""
    layer = _OPAQUE.get(int(key))
    if layer is None:
        raise RuntimeError(f"int8 layer {int(key)} is gone: compile the model that opaque() registered")
    return layer._rows(x, start, stop)


cpu_op("int8_rows(Tensor x, Tensor key, int start, int stop) -> Tensor", _int8_rows,
       lambda x, key, start, stop: x.new_empty((*x.shape[:-1], stop - start)))


def opaque(model: nn.Module) -> nn.Module:
    """Make each int8 product of ``model`` one opaque operation (``aiayn::int8_rows``) when ``torch.compile``
    traces it, instead of a graph break at every product; eager calls are unchanged. Where a compiled step's one
    row takes inductor's own multiply-and-sum (:data:`aiayn.layers.fast.REDUCE_ONE_ROW`), each layer also keeps its
    int8 matrix as a plain tensor (:meth:`Int8Linear.keep_plain`). Returns ``model``."""
    for m in model.modules():
        if isinstance(m, _Opaque) and m.key is None:  # a copy comes without its original's key
            k = next(_keys)
            m.key = torch.tensor(k)
            _OPAQUE[k] = m
        if isinstance(m, Int8Linear) and fast.REDUCE_ONE_ROW:
            m.keep_plain()
    return model


def nbytes(model: nn.Module) -> int:
    """Bytes of the weights ``model`` holds: its parameters and buffers (a tensor shared by two modules counted
    once) plus, for every :class:`Int8Linear`, each packed matrix as one byte a weight, one float32 scale a row,
    its bias and the float32 columns its outlier channels use. fbgemm's own bookkeeping and padding are left out:
    resident memory is measured apart."""
    seen: set[int] = set()
    total = 0
    for t in [*model.parameters(), *model.buffers()]:
        if t.untyped_storage().data_ptr() not in seen:
            seen.add(t.untyped_storage().data_ptr())
            total += t.untyped_storage().nbytes()
    for m in model.modules():
        if isinstance(m, Int8Linear):
            for packed in m._packs.values():
                qw = torch.ops.quantized.linear_unpack(packed)[0]
                total += qw.numel() + 4 * qw.size(0)
            extra = ([] if m._bias is None else [m._bias]) + list(m._columns.values())
            total += sum(t.numel() * t.element_size() for t in extra)
    return total


def is_quantized(model: nn.Module) -> bool:
    """Whether :func:`quantize` made ``model``."""
    return any(isinstance(m, Int8Linear) for m in model.modules())


__all__ = ["REDUCE_RANGE", "Int8Embedding", "Int8Linear", "is_quantized", "nbytes", "opaque", "quantize",
           "quantize_rows"]
