"""Measured time and memory of global attention against window attention as the map grows, beside the formulas.

Swin (Liu et al. 2021, section 3.2, eqs. 1 and 2) on an h x w map of C channels, windows of M x M:

    Omega(MSA)   = 4hwC^2 + 2(hw)^2 C        quadratic in the number of patches hw
    Omega(W-MSA) = 4hwC^2 + 2M^2 hw C        linear

in multiply-adds (:func:`aiayn.analysis.formulas.attention` and :func:`~aiayn.analysis.formulas.window_attention`).
The memory that grows the same way is the score matrix, 4 bytes x heads x T x S per attention: (hw)^2 for
global attention, hw M^2 for windows.

Both are measured on the package's own :class:`~aiayn.layers.MultiHeadAttention`, on its explicit path (the
scores are materialised, as the formula's memory assumes; ``F.scaled_dot_product_attention``'s fused CPU
kernel never holds them whole). Time: the median of ``repeats`` runs after one warm-up. Memory: the peak of the
bytes held by tensors the forward pass creates (:func:`peak_memory`), on any device.

Table 1 of Vaswani et al. 2017 (section 4, "Why self-attention") compares one layer of each kind over n
positions of d channels by its complexity, its sequential operations and the longest path between two
positions; :func:`layer_costs` measures forward + backward time and peak memory of one layer of each:

    layer                        per layer    sequential   max path     ours (forward multiply-adds)
    self-attention               O(n^2 d)     O(1)         O(1)         4nd^2 + 2n^2 d (explicit or fused)
    recurrent (nn.LSTM)          O(n d^2)     O(n)         O(n)         8nd^2
    convolutional (nn.Conv1d)    O(k n d^2)   O(1)         O(log_k n)   k n d^2
    restricted self-attention    O(r n d)     O(1)         O(n/r)       4nd^2 + 2nrd

So attention is cheaper than a recurrence while n < 2d (the paper's "n smaller than d", projections left
out), and a restricted neighbourhood of r keys makes attention linear in n. The times are wall-clock on
whatever machine runs them, shared or not: read the ratios between layers at one n and where the curves cross,
not the seconds (:func:`crossing`).

Shapes: B batch, T/S positions, C channels, M window side, n sequence length, d = C, H heads, D head dim,
r neighbourhood, k kernel.
"""

from __future__ import annotations

import functools
import math
import statistics
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from aiayn.analysis.formulas import attention, conv1d, lstm, restricted_attention, window_attention
from aiayn.layers import MultiHeadAttention
from aiayn.layers.vision import window_partition


class _LiveBytes(TorchDispatchMode):
    """Tracks the bytes of storages created by the ops run under it; a storage is freed when the last tensor
    that views it is collected. Kernel scratch space that no tensor returns is not seen."""

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0
        self._refs: dict[int, list[int]] = {}  # storage address -> [tensors viewing it, bytes]

    def _release(self, key: int) -> None:
        entry = self._refs.get(key)
        if entry is None:
            return
        entry[0] -= 1
        if entry[0] == 0:
            self.live -= entry[1]
            del self._refs[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.device.type == "meta":
                continue
            storage = t.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
            if not nbytes:
                continue
            if key in self._refs:
                self._refs[key][0] += 1
            else:
                self._refs[key] = [1, nbytes]
                self.live += nbytes
                self.peak = max(self.peak, self.live)
            weakref.finalize(t, self._release, key)
        return out


def peak_memory(fn: Callable[[], Any]) -> tuple[Any, int]:
    """``(fn(), peak bytes)``: the most bytes that tensors created while ``fn`` runs held at one time."""
    with _LiveBytes() as mode:
        result = fn()
    return result, mode.peak


def _seconds(fn: Callable[[], Any], repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@torch.no_grad()
def attention_costs(sides: Sequence[int] = (14, 28, 42, 56), channels: int = 96, heads: int = 3, window: int = 7,
                    repeats: int = 3, seed: int = 0, threads: int | None = 1) -> list[dict[str, float]]:
    """Time, peak memory and the formulas' multiply-adds and score bytes of one attention layer over a ``side``
    x ``side`` map, globally and in windows, for each side.

    Args:
        sides: map sides, multiples of ``window`` (Swin-T's stages at 224 px: 56, 28, 14, 7).
        channels: C (Swin-T's first stage: 96).
        heads: attention heads (Swin-T's first stage: 3).
        window: M.
        repeats: timed runs per measurement (the median is kept).
        threads: intra-op threads while timing (restored after); one by default, so that the times follow the
            arithmetic rather than thread scheduling (on a busy two-core machine, two threads made a 15M
            multiply-add layer 100 times slower); ``None`` keeps PyTorch's setting.

    Returns:
        one dict per side: ``side``, ``tokens`` (hw), ``{global,window}_{macs,score_bytes,seconds,bytes}``.
    """
    bad = [s for s in sides if s <= 0 or s % window]
    if bad:
        raise ValueError(f"sides={tuple(sides)} must be positive multiples of window={window}; not {bad}")
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _measure(sides, channels, heads, window, repeats, seed)
    finally:
        torch.set_num_threads(previous)


def _measure(sides: Sequence[int], channels: int, heads: int, window: int, repeats: int,
             seed: int) -> list[dict[str, float]]:
    torch.manual_seed(seed)
    mha = MultiHeadAttention(channels, heads).eval()
    rows = []
    for side in sides:
        hw = side * side
        x = torch.randn(1, side, side, channels)  # (1, h, w, C)
        tokens = x.view(1, hw, channels)  # (1, hw, C)
        windows = window_partition(x, window)  # (hw / M^2, M^2, C)
        inputs = {"global": tokens, "window": windows}
        formula = {"global": attention(hw, hw, channels), "window": window_attention(side, side, channels, window)}
        row: dict[str, float] = {"side": side, "tokens": hw, "window": window, "channels": channels, "heads": heads}
        for kind in ("global", "window"):
            keys = hw if kind == "global" else window * window
            row[f"{kind}_macs"] = formula[kind].total_macs
            row[f"{kind}_score_bytes"] = 4 * heads * hw * keys  # (B nW, H, T, S) float32 scores
            run = functools.partial(mha, inputs[kind], need_weights=True)
            row[f"{kind}_seconds"] = _seconds(run, repeats)
            row[f"{kind}_bytes"] = peak_memory(run)[1]
        rows.append(row)
    return rows


LAYERS = ("self-attention", "fused-attention", "recurrent", "convolutional", "restricted")


def band_mask(n: int, r: int, device: torch.device | str | None = None) -> Tensor:
    """Table 1's restricted self-attention as a dense mask: query i sees the ``r`` positions
    i - r//2 <= j < i - r//2 + r (fewer at the ends), both sides, no causality::

        n = 5, r = 3    j: 0 1 2 3 4
                    i=0    x x . . .
                    i=2    . x x x .

    Returns:
        ``(n, n)`` bool, ``True`` = may attend.
    """
    if n <= 0 or r <= 0:
        raise ValueError(f"n={n} and r={r} must be positive")
    offset = torch.arange(n, device=device)[None, :] - torch.arange(n, device=device)[:, None]  # (n, n): j - i
    return (offset >= -(r // 2)) & (offset < r - r // 2)


def local_attention(mha: MultiHeadAttention, x: Tensor, r: int) -> Tensor:
    """``mha(x, mask=band_mask(n, r))[0]`` computed in O(n r d): the queries in blocks of ``r``, each block
    against the 2r keys that hold every neighbourhood of its queries (a band mask inside), so the score
    matrices are ``(n/r, H, r, 2r)``, never ``(H, n, n)``. Twice the ideal 2nrd score multiply-adds, the price
    of blocks (Longformer's "sliding chunks" make the same trade)::

        keys   |....[ block q's 2r keys ]........|      block q's queries: positions q r .. q r + r - 1
        queries      [q r ... q r + r)

    Args:
        mha: the attention layer (its projections and heads).
        x: ``(B, n, C)``.
        r: the neighbourhood, as :func:`band_mask`'s.

    Returns:
        ``(B, n, C)``.
    """
    if r <= 0:
        raise ValueError(f"r={r} must be positive")
    b, n, c = x.shape
    half, blocks = r // 2, math.ceil(n / r)
    k, v = mha.project_kv(x)  # (B, Hkv, n, D) each
    right = (blocks + 1) * r - half - n  # pad so that the last block's 2r keys exist
    kb, vb = (F.pad(t, (0, 0, half, right)).unfold(2, 2 * r, r) for t in (k, v))  # (B, Hkv, nb, D, 2r)
    kb, vb = (t.permute(0, 2, 1, 4, 3).reshape(b * blocks, t.size(1), 2 * r, t.size(3)) for t in (kb, vb))
    q_pos = torch.arange(blocks * r, device=x.device).view(blocks, r, 1)  # (nb, r, 1) query positions
    k_pos = (torch.arange(blocks, device=x.device).view(blocks, 1, 1) * r - half
             + torch.arange(2 * r, device=x.device).view(1, 1, 2 * r))  # (nb, 1, 2r) key positions
    offset = k_pos - q_pos  # (nb, r, 2r)
    mask = (offset >= -half) & (offset < r - half) & (k_pos >= 0) & (k_pos < n)  # (nb, r, 2r)
    mask = mask.unsqueeze(0).expand(b, -1, -1, -1).reshape(b * blocks, 1, r, 2 * r)  # (B nb, 1, r, 2r)
    xq = F.pad(x, (0, 0, 0, blocks * r - n)).view(b * blocks, r, c)  # (B nb, r, C)
    out, _ = mha(xq, kv=(kb, vb), mask=mask, need_weights=True)  # (B nb, r, C); explicit path, as global
    return out.view(b, blocks * r, c)[:, :n]  # (B, n, C)


def _layers(d_model: int, heads: int, kernel: int, r: int) -> dict[str, tuple[Callable[[Tensor], Tensor], nn.Module]]:
    """One layer of each kind, ``(B, n, C) -> (B, n, C)``, and the module that owns its parameters."""
    rnn = nn.LSTM(d_model, d_model, batch_first=True)
    cnn = nn.Conv1d(d_model, d_model, kernel, padding="same")
    full, local = MultiHeadAttention(d_model, heads), MultiHeadAttention(d_model, heads)
    return {
        "self-attention": (lambda x: full(x, need_weights=True)[0], full),  # explicit: (H, n, n) scores held
        "fused-attention": (lambda x: full(x)[0], full),  # the models' default: F.scaled_dot_product_attention
        "recurrent": (lambda x: rnn(x)[0], rnn),
        "convolutional": (lambda x: cnn(x.transpose(1, 2)).transpose(1, 2), cnn),  # (B, C, n) for the conv
        "restricted": (lambda x: local_attention(local, x, r), local),
    }


def layer_formulas(n: int, d_model: int, kernel: int, r: int) -> dict[str, dict[str, float]]:
    """Per layer kind: forward multiply-adds (:mod:`aiayn.analysis.formulas`), sequential operations and the
    maximum path length between two positions (Table 1, with the constants of our layers)."""
    full = attention(n, n, d_model).total_macs
    macs = {"self-attention": full, "fused-attention": full, "recurrent": lstm(n, d_model, d_model).total_macs,
            "convolutional": conv1d(n, d_model, d_model, kernel).total_macs,
            "restricted": restricted_attention(n, d_model, r).total_macs}
    sequential = {"self-attention": 1, "fused-attention": 1, "recurrent": n, "convolutional": 1, "restricted": 1}
    # a stack of convolutions reaches n positions in ceil(log_k n) dilated layers (n/k without dilation)
    path = {"self-attention": 1, "fused-attention": 1, "recurrent": n,
            "convolutional": max(1, math.ceil(math.log(n, kernel) - 1e-9)), "restricted": math.ceil(n / r)}
    return {k: {"macs": macs[k], "sequential": sequential[k], "path": path[k]} for k in LAYERS}


def layer_costs(lengths: Sequence[int] = (64, 128, 256, 512, 1024, 2048, 4096), d_model: int = 256, heads: int = 4,
                kernel: int = 3, r: int = 64, batch: int = 1, repeats: int = 5, seed: int = 0,
                threads: int | None = 1, memory: bool = True) -> list[dict[str, float]]:
    """Forward + backward time and peak memory of one layer of each of Table 1's kinds (:data:`LAYERS`) as the
    sequence grows, beside the formulas.

    Layers: ``nn.LSTM(d, d)``, ``nn.Conv1d(d, d, kernel, padding="same")``, our
    :class:`~aiayn.layers.MultiHeadAttention` over all n positions on its explicit path (``self-attention``:
    the ``(H, n, n)`` scores are held, as the formula's memory assumes) and on its default fused path
    (``fused-attention``: ``F.scaled_dot_product_attention``, whose CPU kernel works in blocks and keeps no
    score matrix: the same multiply-adds, memory linear in n), and the same layer over a band of ``r``
    (:func:`local_attention`). At each n the layers are timed in turn, repeat
    by repeat (so a burst of load on a shared machine hits all of them), and the median is kept: read the
    ratios between layers and where their curves cross, not the absolute seconds.

    Args:
        lengths: the n to measure.
        d_model: d.
        heads: attention heads.
        kernel: k of the convolution.
        r: the restricted attention's neighbourhood.
        batch: B.
        repeats: timed runs per layer and n, after one warm-up.
        threads: intra-op threads while measuring (restored after); ``None`` keeps PyTorch's.
        memory: also measure the peak bytes (:func:`peak_memory`; slow for the LSTM's many small ops).

    Returns:
        one dict per n: ``n``, ``d_model``, ``heads``, ``kernel``, ``r``, ``batch``, and per layer kind
        ``{kind}_seconds`` (median forward + backward), ``{kind}_bytes`` (peak, with ``memory``),
        ``{kind}_macs`` (forward multiply-adds by formula, one example), ``{kind}_sequential``,
        ``{kind}_path``.
    """
    bad = [n for n in lengths if n <= 0]
    if not lengths or bad:
        raise ValueError(f"lengths={tuple(lengths)} must be positive (and not empty)")
    for name, value in (("d_model", d_model), ("heads", heads), ("kernel", kernel), ("r", r), ("batch", batch),
                        ("repeats", repeats)):
        if value <= 0:
            raise ValueError(f"{name}={value} must be positive")
    if d_model % heads:
        raise ValueError(f"d_model={d_model} must be divisible by heads={heads}")
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        torch.manual_seed(seed)
        fns = _layers(d_model, heads, kernel, r)
        return [_measure_layers(fns, n, d_model, heads, kernel, r, batch, repeats, memory) for n in lengths]
    finally:
        torch.set_num_threads(previous)


def _measure_layers(fns: dict[str, tuple[Callable[[Tensor], Tensor], nn.Module]], n: int, d_model: int,
                    heads: int, kernel: int, r: int, batch: int, repeats: int, memory: bool) -> dict[str, float]:
    x = torch.randn(batch, n, d_model, requires_grad=True)  # (B, n, C)
    grad = torch.randn(batch, n, d_model)  # d loss / d output, made outside the memory count

    def step(fn: Callable[[Tensor], Tensor], owner: nn.Module) -> None:
        owner.zero_grad(set_to_none=True)
        x.grad = None
        fn(x).backward(grad)

    runs = {kind: functools.partial(step, *fns[kind]) for kind in LAYERS}
    times: dict[str, list[float]] = {kind: [] for kind in LAYERS}
    for kind in LAYERS:
        runs[kind]()  # warm-up
    for _ in range(repeats):  # interleaved: every layer once per round
        for kind in LAYERS:
            t0 = time.perf_counter()
            runs[kind]()
            times[kind].append(time.perf_counter() - t0)
    row: dict[str, float] = {"n": n, "d_model": d_model, "heads": heads, "kernel": kernel, "r": r, "batch": batch}
    for kind, f in layer_formulas(n, d_model, kernel, r).items():
        row[f"{kind}_seconds"] = statistics.median(times[kind])
        if memory:
            row[f"{kind}_bytes"] = peak_memory(runs[kind])[1]
        row[f"{kind}_macs"] = f["macs"]
        row[f"{kind}_sequential"] = f["sequential"]
        row[f"{kind}_path"] = f["path"]
    return row


def crossing(xs: Sequence[float], a: Sequence[float], b: Sequence[float]) -> float | None:
    """The first x where the curve ``a`` overtakes (or falls below) ``b``, interpolated on log-log axes between
    the two points that bracket it; ``None`` if the order never changes."""
    for i in range(1, len(xs)):
        d0, d1 = math.log(a[i - 1] / b[i - 1]), math.log(a[i] / b[i])
        if d0 == 0:
            return float(xs[i - 1])
        if (d0 < 0) != (d1 < 0) or d1 == 0:
            frac = d0 / (d0 - d1)
            return math.exp(math.log(xs[i - 1]) + frac * (math.log(xs[i]) - math.log(xs[i - 1])))
    return None


__all__ = ["LAYERS", "attention_costs", "band_mask", "crossing", "layer_costs", "layer_formulas", "local_attention",
           "peak_memory"]
