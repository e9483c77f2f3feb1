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

Shapes: B batch, T/S positions, C channels, M window side.
"""

from __future__ import annotations

import functools
import statistics
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from aiayn.analysis.formulas import attention, window_attention
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


__all__ = ["attention_costs", "peak_memory"]
