"""The CPU speed tricks, kept apart from the plain paths they stand in for.

Each model computes the paper's steps as written; where one of these computes the same values faster, the
model calls it behind one switch, :data:`ENABLED` (nanoGPT's ``if self.flash:``). Set
``aiayn.layers.fast.ENABLED = False`` and every layer takes its plain path. Each trick agrees with its plain
path to float rounding (``tests/layers/test_fast.py``, ``tests/models/test_swin.py``); what it does to the
time and memory of a whole run is in ``docs/benchmarks.md``, the timings of single products in ``docs/kernels.md``.

    trick                          stands in for                  buys
    :func:`linear_onednn`          ``F.linear`` (Linear)          no gradient, a large matrix: oneDNN's inner
                                                                  product (one row on AVX2, 4 rows or more
                                                                  elsewhere), under ``torch.compile`` too (an
                                                                  opaque op)
    :func:`linear_few_rows`        ``F.linear`` (Linear)          few rows on AVX2 (decoding): the BLAS used the
                                                                  fast way round
    :func:`linear_reduced`         ``F.linear`` (Linear, int8)    one row in a compiled step: inductor's own
                                                                  kernel streaming the matrix, fused in the step
                                                                  (int8: weight-only, no opaque op)
    :func:`linear_packed`          ``F.linear`` (Linear)          2 to 256 rows on AVX2, no gradient, eager,
                                                                  and 2 rows or more by a large matrix in a
                                                                  compiled step (an opaque op): oneDNN's inner
                                                                  product over the weight reordered once into
                                                                  its blocked layout
    :func:`in_huge_pages`          the allocator's 4 KiB pages    a compiled CPU step: its weights read from
                                   (a model's weights)            2 MiB pages, far fewer address translations
                                                                  while the step streams them
    :func:`feedforward_no_grad`    ``FeedForward.forward``        no gradient: no hidden layer the size of the
                                                                  whole batch, so no fresh pages on every call
    :func:`window_attention`       ``SwinBlock``'s roll,          roll and partition as one gather; windows a
                                   partition, attend, reverse     group at a time, written straight back

They are CPU tricks: on a GPU :func:`linear_onednn`, :func:`linear_few_rows` and :func:`feedforward_no_grad` are
not taken, and :func:`window_attention` attends every window as one group. Under autocast each returns the dtype
of its plain path (CUDA's autocast runs LayerNorm in float32, so a Swin block's input is float32 there while its
attention's output is bf16 or fp16; CPU autocast keeps both in the lower precision).

Why sizes matter on the CPU: glibc's ``malloc`` maps a buffer above its threshold (at most 32 MiB) fresh from
the system on every call and pays a page fault per page; buffers the size of a group are reused instead.

Shapes: N rows (every leading dimension of ``x`` together), K in, O out; B batch, Hp x Wp a padded Swin map,
C channels, M window side, nW windows per image, T = M*M patches per window, heads the attention heads.
"""

from __future__ import annotations

import contextlib
import mmap
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.layers.vision import window_index

ENABLED = True  # the one switch: False runs every layer's plain path


def cpuinfo(field: str) -> str:
    """The first value of ``field`` in ``/proc/cpuinfo`` (``vendor_id``: ``GenuineIntel``, ``AuthenticAMD``;
    ``model name``), else ``""``."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


FEW_ROWS = 256  # at most this many rows take the swapped product (CPU, AVX2); more keep F.linear
ONEDNN_MIN = 1 << 20  # from this many weights a product needing no gradient takes oneDNN's (CPU)
_ONEDNN = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")
# Which product is fastest depends on the CPU (benchmarks/linear_kernels.py; the timings are in docs/kernels.md):
# on AVX2, F.linear hands few rows to the BLAS the slow way round and (W x^T)^T is faster, and oneDNN wins for
# one row; on AVX-512 F.linear is mostly faster than the swapped product, and oneDNN's inner product beats it
# for 4 to 1,024 rows by a matrix of ONEDNN_MIN weights or more (most for an output layer over a large
# vocabulary). For 1 to 3 rows it depends on the vendor: on an Intel Xeon MKL's matrix-vector product
# (F.linear) streams a GPT-2 step's weights at 23 GB/s against oneDNN's 18 (--streamed), while on an AMD EPYC,
# where MKL takes a slower path, oneDNN's one-row products made GPT-2 generation 1.44x Hugging Face's F.linear.
SWAP_FEW_ROWS = torch.backends.cpu.get_cpu_capability() == "AVX2"
ONEDNN_MIN_ROWS = 4 if cpuinfo("vendor_id") == "GenuineIntel" else 1  # off AVX2, the fewest rows oneDNN takes

# the activations of aiayn.layers.feedforward.ACTIVATIONS, overwriting their input
IN_PLACE: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": F.relu_,
    "gelu": torch.ops.aten.gelu_,
    "gelu_tanh": lambda x: torch.ops.aten.gelu_(x, approximate="tanh"),
    "silu": lambda x: F.silu(x, inplace=True),
}


def needs_grad(*tensors: Tensor | None) -> bool:
    """Whether autograd will record an operation on any of ``tensors`` (``None`` entries are skipped)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _rows(x: Tensor) -> int:
    return x.numel() // max(x.size(-1), 1)


def _compiling() -> bool:
    """Under ``torch.compile`` oneDNN's product goes in as an opaque op (:func:`linear_onednn`), the packed one as
    another (:func:`linear_packed`, which finds the blocked copy when it runs) and the swapped one as the operations
    it is (from 2 rows)."""
    return torch.compiler.is_compiling()


def onednn_suits(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> bool:
    """Whether :func:`linear_onednn` applies: a float32 CPU product by a matrix of at least ``ONEDNN_MIN``
    weights that needs no gradient (oneDNN's op has no backward) and that autocast would not have run in a lower
    precision; one row on AVX2 (:data:`SWAP_FEW_ROWS`), ``ONEDNN_MIN_ROWS`` or more elsewhere."""
    rows = _rows(x)
    return (_ONEDNN and x.device.type == "cpu" and x.dtype == weight.dtype == torch.float32
            and weight.numel() >= ONEDNN_MIN and (rows == 1 if SWAP_FEW_ROWS else rows >= ONEDNN_MIN_ROWS)
            and not needs_grad(x, weight, bias) and not torch.is_autocast_enabled("cpu"))


_LIBRARY = torch.library.Library("aiayn", "DEF")  # the package's own ops (cpu_op)


def cpu_op(schema: str, kernel: Callable[..., Tensor], fake: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """``kernel`` as the op ``aiayn::<name>`` of ``schema`` (``"name(Tensor x, int n) -> Tensor"``), which
    ``torch.compile`` calls as it stands (an opaque step of its graph); ``fake`` gives its output's shape from
    the inputs' (what tracing needs). For ops that take no gradient: it is registered at the dispatcher's CPU key
    directly. ``torch.library.custom_op`` wraps each call in Python (autograd, aliasing checks): around a one-row
    int8 product by a 3,072 x 768 matrix it took 210 us a call where this took 169 and the kernel alone 138, on the
    AMD EPYC (``benchmarks/op_overhead.py``, ``docs/kernels.md``); a decode step calls one per product. Returns
    the op."""
    name = schema.split("(", 1)[0]
    _LIBRARY.define(schema)
    _LIBRARY.impl(name, kernel, "CPU")
    torch.library.register_fake(f"aiayn::{name}", fake, lib=_LIBRARY)
    return getattr(torch.ops.aiayn, name).default


def _onednn_kernel(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """oneDNN's inner product ``(N, K)`` by ``(O, K)`` as an op ``torch.compile`` calls as it stands: inductor
    lowers ``mkldnn._linear_pointwise`` only for the weights its freezing packed (constants, which a model trained
    further would leave stale), and its own product ran GPT-2's decoding at 0.64x this one when one row took oneDNN's
    everywhere (off AVX2 one row now keeps ``F.linear``, which inductor calls as the BLAS's product, as eager does)."""
    return torch.ops.mkldnn._linear_pointwise(x, weight.contiguous(), bias, "none", [], "")


_onednn_op = cpu_op("linear_onednn(Tensor x, Tensor weight, Tensor? bias) -> Tensor", _onednn_kernel,
                    lambda x, weight, bias: x.new_empty(x.size(0), weight.size(0)))


def linear_onednn(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(x, weight, bias)`` by oneDNN's inner product (:func:`onednn_suits`), which streams a large
    matrix faster than the BLAS's product where it applies; shapes as :func:`aiayn.layers.linear.linear`'s
    (``(..., K)`` by ``(O, K)`` gives a contiguous ``(..., O)``). Under ``torch.compile`` through
    :func:`_onednn_op` (eager PyTorch calls the kernel directly: the op's dispatch costs microseconds)."""
    flat = x.reshape(-1, x.size(-1))
    if _compiling():
        out = _onednn_op(flat, weight, bias)
    else:
        out = torch.ops.mkldnn._linear_pointwise(flat, weight.contiguous(), bias, "none", [], "")
    return out.view(*x.shape[:-1], weight.size(0))


COMPILED_FEW_ROWS = 32  # a compiled step takes the swapped product for 2 to this many rows (0: never; linear_suits)
PACK_ROWS = 16  # the rows oneDNN's blocked layout is chosen for (a batch of decoding rows); any number works
PACK_MIN = 1 << 19  # from this many weights (2 MiB, more than a core's L2) few rows on AVX2 take the packed product
_PACKABLE = _ONEDNN and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
_packs: dict[tuple, tuple[weakref.ref, int, Tensor]] = {}  # where a weight lies -> (its owner, version, blocked copy)
_packs_lock = threading.Lock()


def packed_suits(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> bool:
    """Whether :func:`linear_packed` applies eagerly: a float32 CPU product that needs no gradient, outside autocast
    and ``torch.compile`` (there: :func:`packed_compiled_suits`), by a weight that counts its changes (not one made
    under ``torch.inference_mode``, which has no version counter to say it changed)."""
    return (_PACKABLE and x.device.type == "cpu" and x.dtype == weight.dtype == torch.float32
            and not needs_grad(x, weight, bias) and not torch.is_autocast_enabled("cpu") and not _compiling()
            and not weight.is_inference())


def packed_few_rows(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> bool:
    """Whether the rules give a product :func:`linear_packed`: where the swapped product would apply
    (:func:`linear_suits`: few rows on AVX2, eager), to 2 rows or more (one row takes oneDNN's plain product or the
    swapped one, as before: the packed one was no faster) by a matrix of at least :data:`PACK_MIN` weights, needing
    no gradient. Measured inside decoding on the AVX2 EPYC (``benchmarks/packed_in_decoding.py``): GPT-2-shaped at
    batch 16 ran faster with it; the Marian-shaped model's smaller matrices, which a cache holds, did not (its
    8,000-token output layer did), hence :data:`PACK_MIN`."""
    return (linear_suits(x, weight) and _rows(x) > 1 and weight.numel() >= PACK_MIN
            and packed_suits(x, weight, bias))


def packed_weight(weight: Tensor) -> Tensor:
    """``weight`` ``(O, K)`` in oneDNN's blocked layout, made on first need and kept while the tensor that owns
    its memory lives (a view, as ``Linear.rows`` passes, shares its owner's copy); made again when the weight
    changes in place (an optimizer's step, ``load_state_dict``: its version counter moves). One copy of the
    matrix more in memory, for each weight that takes this kernel."""
    where = (weight.untyped_storage().data_ptr(), weight.storage_offset(), *weight.shape, *weight.stride())
    owner = weight if weight._base is None else weight._base
    held = _packs.get(where)
    if held is not None and held[0]() is owner and held[1] == weight._version:
        return held[2]
    blocked = torch.ops.mkldnn._reorder_linear_weight(weight.detach().contiguous(), PACK_ROWS)
    with _packs_lock:
        if held is None or held[0]() is not owner:  # a new owner: its copies go when it does
            weakref.finalize(owner, _packs.pop, where, None)
        _packs[where] = (weakref.ref(owner), weight._version, blocked)
    return blocked


def linear_packed(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(x, weight, bias)`` by oneDNN's inner product over :func:`packed_weight` (:func:`packed_suits`):
    without the reorder oneDNN makes of a plain matrix at every call (``benchmarks/linear_kernels.py --streamed``
    times it beside the others); shapes as :func:`aiayn.layers.linear.linear`'s. Under ``torch.compile``
    (:func:`packed_compiled_suits`) through :func:`_packed_op`, which finds the blocked copy when it runs."""
    flat = x.reshape(-1, x.size(-1))
    if _compiling():
        out = _packed_op(flat, weight, bias)
    else:
        out = torch.ops.mkldnn._linear_pointwise(flat, packed_weight(weight), bias, "none", [], "")
    return out.view(*x.shape[:-1], weight.size(0))


def _held_pack(weight: Tensor) -> Tensor | None:
    """The blocked copy of ``weight`` as a compiled graph passes it: a parameter as itself (its copy made, or made
    again, here: :func:`packed_weight`); a slice of one as a fresh view that knows no base, whose copy is the one
    made for that memory (eagerly, where the slice has its base) while the owner lives and has not changed since;
    else ``None`` (a weight made under ``torch.inference_mode`` has no version counter to say it changed)."""
    if not weight.is_inference() and (isinstance(weight, nn.Parameter) or weight._base is not None):
        return packed_weight(weight)
    held = _packs.get((weight.untyped_storage().data_ptr(), weight.storage_offset(), *weight.shape,
                       *weight.stride()))
    owner = None if held is None else held[0]()
    if held is None or owner is None or owner.untyped_storage().data_ptr() != weight.untyped_storage().data_ptr():
        return None
    return held[2] if held[1] == owner._version else None


def _packed_kernel(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """:func:`linear_packed` as an op of a compiled graph: over the weight's blocked copy where one is found
    (:func:`_held_pack`), else oneDNN's product over the plain matrix (the same values)."""
    blocked = _held_pack(weight)
    if blocked is None:
        return _onednn_kernel(x, weight, bias)
    return torch.ops.mkldnn._linear_pointwise(x, blocked, bias, "none", [], "")


_packed_op = cpu_op("linear_packed(Tensor x, Tensor weight, Tensor? bias) -> Tensor", _packed_kernel,
                    lambda x, weight, bias: x.new_empty(x.size(0), weight.size(0)))

# A compiled step's products of 2 rows or more by a matrix of COMPILED_PACK_MIN weights or more over the blocked copy
# (an opaque op: packed_compiled_suits). The switch, and the rules' choice; with AIAYN_KERNELS=measure (the default)
# aiayn.layers.kernels.prepare_compiled sets it by timing on the machine that runs. On the AMD EPYC with AVX-512
# (benchmarks/compiled_step_switches.py --switch packed, results/amd-epyc-avx512/compiled_step_packed.json) it made
# compiled GPT-2 and Llama-shaped 124M generation at batch 16 1.42x and 1.40x faster, and the Marian-shaped
# translation 1.34x (greedy) and 1.17x (beam 4), with its 256 x 1,024 matrices packed; with eager's PACK_MIN only its
# output layer was, and it gained 1.08x and 1.05x (that file at bd70d1a): hence a threshold of its own, 2^16 weights.
PACK_COMPILED = True
COMPILED_PACK_MIN = 1 << 16


def packed_compiled_suits(x: Tensor, weight: Tensor, bias: Tensor | None = None, forced: bool = False) -> bool:
    """Whether a compiled step's product takes :func:`linear_packed` (:data:`PACK_COMPILED`): float32 on the CPU,
    2 rows or more (one row streams the matrix: :func:`linear_reduced` or oneDNN's plain product), a matrix of at
    least :data:`COMPILED_PACK_MIN` weights, no gradient, outside autocast (a weight made under
    ``torch.inference_mode``, which tracing cannot ask about, gets oneDNN's product over the plain matrix when the op
    runs: :func:`_held_pack`). ``forced``: whatever the switch, rows and size (``AIAYN_KERNELS=packed``)."""
    return (_PACKABLE and _compiling() and x.device.type == "cpu" and x.dtype == weight.dtype == torch.float32
            and (forced or (ENABLED and PACK_COMPILED and _rows(x) >= 2 and weight.numel() >= COMPILED_PACK_MIN))
            and not needs_grad(x, weight, bias) and not torch.is_autocast_enabled("cpu"))


def linear_suits(x: Tensor, weight: Tensor) -> bool:
    """Whether :func:`linear_few_rows` applies: on an AVX2 CPU (:data:`SWAP_FEW_ROWS`), 1 to ``FEW_ROWS`` rows,
    ``x`` and ``weight`` of one dtype (else autocast or an error is ``F.linear``'s to handle); under
    ``torch.compile`` only 2 to :data:`COMPILED_FEW_ROWS` rows: with inductor's own product (``F.linear``'s
    layout) the AMD EPYC's compiled Marian-shaped greedy step (16 rows) took 1.13x the time it takes with the
    swapped one and GPT-2's at batch 16 1.31x, but beam 4's (64 rows) 0.82x (``benchmarks/packed_in_decoding.py
    --compile``: ``amd-epyc/compiled_few_rows.json``, ``..._beam_64_rows.json``); one row keeps it as before."""
    rows = _rows(x)
    return (SWAP_FEW_ROWS and x.device.type == "cpu" and 0 < rows <= FEW_ROWS and x.dtype == weight.dtype
            and (1 < rows <= COMPILED_FEW_ROWS or not _compiling()))


def linear_few_rows(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(x, weight, bias)`` for the few rows of decoding, computed the way an AVX2 CPU's BLAS does it
    fastest.

    ``F.linear`` hands ``x W^T`` to the BLAS with the large matrix as the transposed right operand, which for
    few rows is far from the BLAS's best there; ``(W x^T)^T`` is the same product, and faster below ``FEW_ROWS``
    rows.

    Args:
        x: ``(..., K)``, 1 to ``FEW_ROWS`` rows in all (:func:`linear_suits`).
        weight: ``(O, K)``.
        bias: ``(O,)`` or ``None``.

    Returns:
        ``(..., O)``, contiguous as ``F.linear``'s (fused attention needs it).
    """
    rows = _rows(x)
    flat = x.reshape(rows, x.size(-1)).t()  # (K, N)
    out = weight @ flat if bias is None else torch.addmm(bias[:, None], weight, flat)  # (O, N)
    return out.t().contiguous().view(*x.shape[:-1], weight.size(0))  # (..., O)


# A compiled step's one-row products as the multiply-and-sum they are (linear_reduced), which inductor writes as a
# kernel of its own streaming the matrix once. The switch, and the rules' choice; with AIAYN_KERNELS=measure (the
# default) aiayn.layers.kernels.prepare_compiled sets it by timing on the machine that runs. On an AMD EPYC with
# AVX-512 (Zen 4; benchmarks/reduced_products.py, results/amd-epyc-avx512/) a Llama-shaped 124M step's 61
# one-row products took 0.76x the time of oneDNN's op in float32 and 0.69x fbgemm's op in int8, and its
# generation 0.77x and 0.67x; GPT-2 124M's generation 0.75x and 0.76x.
REDUCE_ONE_ROW = True


_realized = cpu_op("realized(Tensor x) -> Tensor", lambda x: x.clone(), lambda x: torch.empty_like(x))


def reduced_suits(x: Tensor, weight: Tensor) -> bool:
    """Whether :func:`linear_reduced` applies: one float32 CPU row under ``torch.compile`` (where :data:`ENABLED`
    and :data:`REDUCE_ONE_ROW`), by a float32 or int8 matrix, needing no gradient (eager, the multiply-and-sum would
    make the whole ``(O, K)`` product in memory)."""
    return (ENABLED and REDUCE_ONE_ROW and _compiling() and x.device.type == "cpu" and x.dtype == torch.float32
            and weight.dtype in (torch.float32, torch.int8) and _rows(x) == 1 and not needs_grad(x, weight))


def linear_reduced(x: Tensor, weight: Tensor, bias: Tensor | None = None, scale: Tensor | None = None) -> Tensor:
    """``F.linear(x, weight, bias)`` for one row, written as the multiply-and-sum it is, ``(x[None, :] * W).sum(-1)``:
    inductor compiles that to one loop over the matrix, each weight read once and multiplied as it streams by (a
    matrix-vector kernel of its own, vectorized for the CPU it runs on), with no call into a library between the
    step's other kernels. An int8 ``weight`` ``(O, K)`` with its per-row ``scale`` ``(O,)`` is read as int8 and widened
    in the loop: ``x (q s)^T = (x q^T) s``, the activations in float32 (weight-only int8, as gpt-fast's).

    Under ``torch.compile`` the row is first made whole by an opaque copy (``aiayn::realized``): else inductor
    computes what made it (a LayerNorm, GELU, the bias) inside the product's loop, once for every output and
    weight, which made GPT-2's int8 step at batch 1 slower than with fbgemm's products, where it is now faster
    (``benchmarks/reduced_products.py`` measures the GPT-2 and Llama-shaped steps).

    Args:
        x: ``(..., K)``, one row in all (:func:`reduced_suits`).
        weight: ``(O, K)``, float32, or int8 with ``scale``.
        bias: ``(O,)`` or ``None``.
        scale: ``(O,)`` the int8 rows' scales, or ``None`` for a float32 ``weight``.

    Returns:
        ``(..., O)``.
    """
    if _compiling():
        x = _realized(x)
    w = weight if scale is None else weight.to(x.dtype)
    y = (x.unsqueeze(-2) * w).sum(-1)  # (..., O)
    if scale is not None:
        y = y * scale
    return y if bias is None else y + bias


# A compiled CPU step reads its model's weights from memory in 2 MiB pages (in_huge_pages) rather than the
# allocator's 4 KiB ones: a batch-1 step streams every weight once, and each 4 KiB page is an address translation
# the TLB misses (in a VM, a nested page walk). On the AMD EPYC with AVX-512 (benchmarks/huge_pages.py,
# results/amd-epyc-avx512/huge_pages.json, 9 rounds) compiled generation ran 1.15x faster for GPT-2 124M in float32
# and 1.02-1.06x for the others measured, the tokens the same; eager decoding is left as it is (1.02x, one run).
HUGE_PAGES = True

HUGE_PAGE = 2 << 20  # bytes: an x86 transparent huge page (the arena is aligned to it)
_arenas: list[tuple[int, int, weakref.ref]] = []  # (start, end, the mmap) of the memory in_huge_pages made


def huge_pages_available() -> bool:
    """Whether this system can back memory by transparent huge pages on request: Linux with ``madvise`` and its
    transparent huge pages not switched off (``/sys/kernel/mm/transparent_hugepage/enabled`` not ``[never]``)."""
    if not sys.platform.startswith("linux") or not hasattr(mmap, "MADV_HUGEPAGE"):
        return False
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return "[never]" not in f.read()
    except OSError:
        return False


def _in_arena(ptr: int) -> bool:
    _arenas[:] = [a for a in _arenas if a[2]() is not None]
    return any(start <= ptr < end for start, end, _ in _arenas)


def in_huge_pages(module: nn.Module) -> int:
    """Move ``module``'s CPU parameters and buffers into memory backed by transparent huge pages (anonymous
    mappings of at most :data:`HUGE_BLOCK` bytes each, ``madvise(MADV_HUGEPAGE)``, aligned to 2 MiB): the same
    values, the same tensor objects (each gets the new memory as its ``.data``), ties and views kept (a storage
    shared by several moves once). Tensors already moved stay where they are, so calling it again costs a scan; a
    block is freed when the last tensor in it is. While a block is filled its tensors' old memory is still held, so
    moving needs at most one block more than the model. A tensor that held the old memory apart from the module
    (``w = layer.weight.data``, taken before) no longer shares it, and the module must not be running on another
    thread meanwhile (its old memory is freed as each tensor moves). Plain strided tensors move; quantized ones,
    subclasses and inference tensors stay. Does nothing where :func:`huge_pages_available` is false or the module
    holds nothing on the CPU. Returns the bytes moved.

    With 4 KiB pages a step that streams 500 MB of weights crosses 120,000 pages, each an address translation the
    CPU's TLB cannot hold (a nested walk in a VM); in 2 MiB pages, 250."""
    if not huge_pages_available():
        return 0
    storages: dict[int, list[Tensor]] = {}  # the storage's address -> the tensors in it
    for t in [*module.parameters(), *module.buffers()]:
        if (type(t) in (Tensor, nn.Parameter) and t.device.type == "cpu" and t.layout == torch.strided
                and not t.is_quantized and not t.is_inference() and t.untyped_storage().nbytes()):
            ptr = t.untyped_storage().data_ptr()
            if not _in_arena(ptr):
                storages.setdefault(ptr, []).append(t)
    blocks: list[list[int]] = [[]]  # storages by block, in the module's order
    filled = 0
    for ptr, tensors in storages.items():
        n = _padded(tensors[0].untyped_storage().nbytes())
        if filled and filled + n > HUGE_BLOCK:
            blocks.append([])
            filled = 0
        blocks[-1].append(ptr)
        filled += n
    moved = 0
    for block in blocks:
        if block:
            moved += _move_block([storages[ptr] for ptr in block])
    return moved


HUGE_BLOCK = 256 << 20  # bytes of one mapping in_huge_pages fills (a larger storage gets one of its own)


def _padded(nbytes: int) -> int:
    return -(-nbytes // 64) * 64  # each storage starts at a 64-byte boundary


def _move_block(storages: list[list[Tensor]]) -> int:
    """Copy each storage (the tensors sharing it) into one new mapping in huge pages, and point its tensors there."""
    total = sum(_padded(ts[0].untyped_storage().nbytes()) for ts in storages)
    arena = mmap.mmap(-1, total + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    with contextlib.suppress(OSError):  # refused (a sandbox, a kernel without them): 4 KiB pages still serve
        arena.madvise(mmap.MADV_HUGEPAGE)
    raw = torch.frombuffer(arena, dtype=torch.uint8)  # keeps the mapping alive while a tensor lies in it
    at = (-raw.data_ptr()) % HUGE_PAGE  # the first 2 MiB boundary
    moved = 0
    for tensors in storages:
        old = tensors[0].untyped_storage()
        nbytes = old.nbytes()
        raw[at : at + nbytes].copy_(torch.empty(0, dtype=torch.uint8).set_(old))
        for t in tensors:
            size = t.element_size()
            t.data = torch.empty(0, dtype=t.dtype).set_(raw.untyped_storage(), (at // size) + t.storage_offset(),
                                                       t.shape, t.stride())
        at += _padded(nbytes)
        moved += nbytes
    _arenas.append((raw.data_ptr(), raw.data_ptr() + raw.numel(), weakref.ref(arena)))
    return moved


def feedforward_no_grad(x: Tensor, fc1: Callable[[Tensor], Tensor], activation: str,
                        fc2: Callable[[Tensor], Tensor], chunk_rows: int) -> Tensor:
    """``fc2(activation(fc1(x)))`` when no gradient is needed, in less memory.

    The hidden layer, ``d_ff`` wide, is the largest activation of a block. Here the activation overwrites
    it (nothing keeps it for a backward pass), and more than ``chunk_rows`` positions go through in groups
    of that many, each group's output written into one output tensor: buffers the size of a group are reused
    from one call to the next.

    Args:
        x: ``(..., C)``; it is not overwritten.
        fc1: the first layer, ``(..., C) -> (..., F)``.
        activation: a key of :data:`IN_PLACE`.
        fc2: the rest, ``(..., F) -> (..., C)`` (:class:`aiayn.layers.FeedForward` gives its dropout, then ``fc2``).
        chunk_rows: positions per group.

    Returns:
        ``(..., C)``.
    """
    activation_ = IN_PLACE[activation]
    rows = x.numel() // x.size(-1)
    if rows <= chunk_rows:
        return fc2(activation_(fc1(x)))
    flat = x.reshape(rows, -1)  # (N, C)
    out: Tensor | None = None  # (N, C), in the groups' dtype (autocast's), as the plain path returns
    for i in range(0, rows, chunk_rows):
        y = fc2(activation_(fc1(flat[i : i + chunk_rows])))
        if out is None:
            out = x.new_empty(rows, y.size(-1), dtype=y.dtype)
        out[i : i + chunk_rows] = y
    assert out is not None  # more than chunk_rows rows
    return out.view(*x.shape[:-1], -1)


def window_attention(attn: Callable[..., tuple[Tensor, Any]], x: Tensor, mask: Tensor, window: int, shift: int,
                     chunk_tokens: int) -> Tensor:
    """Swin's roll, window partition, attention, window reverse and roll back, as one gather and one scatter.

    One index into the flattened map does the roll and the partition together (:func:`aiayn.layers.vision.
    window_index`). Without gradients the windows are attended ``chunk_tokens`` patches' worth at a time,
    each group's output written straight back to its place in the map, so no buffer is the size of the
    whole batch of windows twice over; with gradients they go as one group (groups would keep every
    activation anyway). The gather is written as the inverse scatter, so that its gradient is a gather too
    (``index_select``'s would add the rows up one by one).

    Args:
        attn: ``attn(windows, mask=mask)[0]`` attends ``(N, T, C)`` windows (the block's
            :class:`aiayn.layers.MultiHeadAttention`).
        x: ``(B, Hp, Wp, C)``, the normalised map padded to multiples of ``window``.
        mask: additive float mask ``(nW, heads, T, T)`` (a window's bias and its region mask, row-major
            windows) or ``(1, heads, T, T)`` (the bias alone, the same for every window).
        window: M.
        shift: the cyclic shift s (0: W-MSA).
        chunk_tokens: patches per group of windows without gradients.

    Returns:
        ``(B, Hp, Wp, C)``, equal to the plain path's result.
    """
    b, hp, wp, c = x.shape
    t = window * window
    nw = hp * wp // t
    index = window_index(hp, wp, window, shift, x.device)  # (Hp * Wp,) for one image, then all of them
    index = (torch.arange(b, device=x.device)[:, None] * index.numel() + index).flatten()  # (B * Hp * Wp,)
    x = x.reshape(-1, c)  # (B * Hp * Wp, C)
    windows = torch.empty_like(x).index_copy_(0, index.argsort(), x).view(-1, t, c)  # (B * nW, T, C)
    out: Tensor | None = None  # (B * Hp * Wp, C), in the attention's dtype, not x's (see below)
    n = windows.size(0)
    step = n if needs_grad(x, mask) or x.device.type != "cpu" else max(1, chunk_tokens // t)  # groups: CPU only
    for i in range(0, n, step):  # windows i, i + 1, ..., images major
        rows = slice(i, min(i + step, n))
        group_mask = mask if mask.size(0) == 1 else mask[torch.arange(rows.start, rows.stop, device=x.device) % nw]
        y = attn(windows[rows], mask=group_mask)[0]  # (windows, T, C)
        if out is None:  # under CUDA autocast x is float32 (LayerNorm runs in float32) and y bf16/fp16
            out = x.new_empty(x.shape, dtype=y.dtype)
        out.index_copy_(0, index[rows.start * t : rows.stop * t], y.view(-1, c))  # back where they came from
    assert out is not None  # a map holds at least one window
    return out.view(b, hp, wp, c)


__all__ = [
    "COMPILED_PACK_MIN",
    "ENABLED",
    "FEW_ROWS",
    "HUGE_PAGES",
    "IN_PLACE",
    "ONEDNN_MIN",
    "PACK_COMPILED",
    "REDUCE_ONE_ROW",
    "SWAP_FEW_ROWS",
    "cpuinfo",
    "feedforward_no_grad",
    "huge_pages_available",
    "in_huge_pages",
    "linear_few_rows",
    "linear_onednn",
    "linear_reduced",
    "linear_suits",
    "needs_grad",
    "onednn_suits",
    "packed_compiled_suits",
    "reduced_suits",
    "window_attention",
]
