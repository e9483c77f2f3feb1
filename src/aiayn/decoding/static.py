"""A static key/value cache and a decode step compiled once (gpt-fast's design), for a GPT.

The growing cache (:mod:`aiayn.layers.kv_cache`) hands attention the filled positions only, so each step has
other shapes than the last and nothing can be compiled or captured. Here the buffers are allocated once for the
whole generation, the prompt and every new token, and every decode step has the same shapes: the new key and
value are written at a position held in a tensor (``index_copy_``), and the one new query attends over the whole
buffer, a mask hiding the columns not yet written (and each row's left padding):

    columns:   0 1 2 3 4 5 6 7 8 9            B rows, the prompts padded on the left to P = 4
    row 0      . p p p a a | . . .            p: prompt (written by the prefill, eager)
    row 1      p p p p b b | . . .            a, b: made so far; the step writes column 6 in every row
    mask       0 1 1 1 1 1 1 0 0 0  (row 0)   and attends over all 10, the mask hiding padding and the future

The prefill runs the model's own path on the prompt with the growing cache and copies what it cached into the
buffers; then :meth:`StaticGPT.step` runs the one-token step, eager or through ``torch.compile`` (inductor's C++
on a CPU, ``mode="reduce-overhead"``, i.e. CUDA graphs, on a GPU). The step is a function of tensors alone (the
position is a tensor), so it is compiled once per batch size and buffer length and reused by every later
generation of that shape in the process. The cost of a step follows the buffer, prompt plus new tokens, not the
model's ``max_len``: at most twice what the filled columns cost.

Shapes: B batch, P prompt length (padded), L = P + new tokens, H kv heads, D head dim, V vocabulary.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from aiayn.layers.kv_cache import DecoderCache


class StaticKVCache:
    """One self-attention layer's ``(B, H, L, D)`` key and value buffers; :meth:`append` writes the new ones at
    ``index`` (a ``(T,)`` tensor of columns, shared by every layer) and returns the whole buffers."""

    def __init__(self, k: Tensor, v: Tensor, index: Tensor) -> None:
        self.k, self.v, self.index = k, v, index

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        self.k.index_copy_(2, self.index, k)
        self.v.index_copy_(2, self.index, v)
        return self.k, self.v


class _Layer:
    """What a decoder block reads of its cache: ``self_attn`` (a GPT has no cross-attention)."""

    def __init__(self, self_attn: StaticKVCache) -> None:
        self.self_attn, self.cross = self_attn, None


def _step(model: Any, layers: list[_Layer], token: Tensor, index: Tensor, real: Tensor, positions: Tensor,
          columns: Tensor) -> Tensor:
    """The logits ``(B, V)`` of ``token`` ``(B, 1)`` at column ``index`` ``(1,)``: a function of tensors, the same
    shapes at every step, so that ``torch.compile`` compiles it once."""
    mask = (real & (columns <= index))[:, None, None, :]  # (B, 1, 1, L): written columns of real tokens
    position_ids = positions.index_select(1, index)  # (B, 1): positions count real tokens only
    x = model.embed(token, position_ids=position_ids)  # (B, 1, C)
    rotary = None if model.rotary is None else model.rotary(1, 0, position_ids)
    hidden = model.decoder(x, self_mask=mask, is_causal=False, caches=layers, rotary=rotary)  # (B, 1, C)
    return model.lm_head(hidden[:, -1])  # (B, V)


_compiled: dict[str, Any] = {}  # torch.compile of _step, by device type: compiled once per process and shape


def compiled_step(device: torch.device) -> Any:
    """``torch.compile(_step)`` for ``device``: inductor's default mode on a CPU, CUDA graphs on a GPU."""
    mode = "reduce-overhead" if device.type == "cuda" else None
    if device.type not in _compiled:
        _compiled[device.type] = torch.compile(_step, mode=mode, dynamic=False)
    return _compiled[device.type]


class StaticGPT:
    """A GPT's decoding over a static cache: :meth:`prefill` the prompts, then :meth:`step` one token at a time.

    Args:
        model: a :class:`aiayn.models.GPT` (no sliding window: its rolling buffer is the growing cache's).
        real: ``(B, L)`` bool, ``True`` from each row's first prompt token on (prompts padded on the left), over
            the prompt and every new token.
        compile: run :meth:`step` through ``torch.compile`` (:func:`compiled_step`); ``False``: the same step
            eagerly (what the compiled one is tested equal to).
    """

    def __init__(self, model: nn.Module, real: Tensor, compile: bool = False) -> None:
        cfg: Any = getattr(model, "cfg", None)
        if not hasattr(model, "new_cache") or hasattr(model, "encode") or cfg is None:
            raise ValueError(f"a static cache decodes a GPT, not a {type(model).__name__}")
        if cfg.attention_window is not None:
            raise ValueError("a GPT with a sliding window (attention_window) decodes with its rolling cache: "
                             "compile=False")
        if real.size(1) > cfg.max_len:
            raise ValueError(f"the prompt and the new tokens are {real.size(1)} positions; the model has "
                             f"{cfg.max_len} (max_len)")
        self.model, self.real = model, real
        self.positions = (real.long().cumsum(-1) - 1).clamp(min=0)  # (B, L)
        self.columns = torch.arange(real.size(1), device=real.device)  # (L,)
        self.index = torch.zeros(1, dtype=torch.long, device=real.device)
        self.layers: list[_Layer] = []
        self.run = compiled_step(real.device) if compile else _step

    def prefill(self, ids: Tensor, attention_mask: Tensor | None) -> Tensor:
        """The logits ``(B, V)`` of the last prompt position; ``ids`` ``(B, P)``, the prompts (eager, the
        model's own path, with the growing cache whose keys and values then fill the buffers)."""
        model: Any = self.model
        b, p = ids.shape
        cache = DecoderCache(len(model.decoder.layers), p)
        hidden = model.features(ids, attention_mask=attention_mask, cache=cache)  # (B, P, C)
        total = self.real.size(1)
        for layer in cache:
            k, v = layer.self_attn.k, layer.self_attn.v  # (B, H, P, D)
            assert k is not None and v is not None  # the prefill filled them
            kb, vb = k.new_zeros(b, k.size(1), total, k.size(3)), v.new_zeros(b, v.size(1), total, v.size(3))
            kb[:, :, :p], vb[:, :, :p] = k[:, :, :p], v[:, :, :p]
            self.layers.append(_Layer(StaticKVCache(kb, vb, self.index)))
        return model.lm_head(hidden[:, -1])

    def step(self, token: Tensor, column: int) -> Tensor:
        """The logits ``(B, V)`` after ``token`` ``(B,)``, written at ``column`` (the prompt's length, then one
        more each step)."""
        if not self.layers:
            raise RuntimeError("prefill the prompts first")
        self.index.fill_(column)
        return self.run(self.model, self.layers, token[:, None], self.index, self.real, self.positions, self.columns)


__all__ = ["StaticGPT", "StaticKVCache", "compiled_step"]
