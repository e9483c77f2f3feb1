"""Measured multiply-adds of a real forward pass, by part, to check the formulas of :mod:`aiayn.analysis.formulas`.

``torch.utils.flop_counter.FlopCounterMode`` sees every aten op a forward pass runs, with the module that ran
it, and counts the FLOPs of matmuls and convolutions (2 per multiply-add; biases ignored). Two things need
care:

* It knows no formula for ``aten._scaled_dot_product_flash_attention_for_cpu``, the kernel that
  ``F.scaled_dot_product_attention`` takes on the CPU (with or without a mask, causal or not): out of the box
  attention scores count 0 there (the CUDA kernels are counted). :func:`measure` adds that op with the same
  formula PyTorch uses for the CUDA kernels, two batched matmuls (B H T D)(B H D S) and (B H T S)(B H S Dv),
  and ``explicit_attention=True`` instead measures the explicit path (``q @ k^T``, softmax, ``@ v``, as
  :func:`aiayn.layers.record_attention` forces), whose matmuls are plain ``bmm``; the tests hold the two equal.
* It counts per module, each module's total including its children. A part is the sum over the outermost
  modules of its kind (:func:`aiayn.analysis.params.module_part`); inside a ``MultiHeadAttention`` the
  ``mm``/``addmm`` ops are the projections and the batched ones (``bmm``, SDPA) the scores. What no part
  claims is "output" (the heads).

Shapes: B batch, T/S positions, H heads, D head dim.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from aiayn.analysis.formulas import Counts, check_size
from aiayn.analysis.params import module_part, parameter_table
from aiayn.layers import MultiHeadAttention, record_attention

aten = torch.ops.aten
_PROJECTIONS = {aten.mm, aten.addmm}


def sdpa_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    """FLOPs of a fused attention kernel: scores (B H T D)(B H D S), then weights (B H T S)(B H S Dv), full
    square (a causal kernel could skip half; PyTorch's formula for its CUDA kernels counts it all too)."""
    b, h, t, d = query_shape
    s, dv = key_shape[-2], value_shape[-1]
    return 2 * b * h * t * s * d + 2 * b * h * t * s * dv


def onednn_linear_flops(x_shape, w_shape, *args, out_shape=None, **kwargs) -> int:
    """FLOPs of oneDNN's inner product (``aiayn.layers.linear`` for one row): ``x`` (..., K) by ``W`` (M, K)."""
    return 2 * math.prod(x_shape) * w_shape[0]


# Kernels FlopCounterMode has no formula for (as of PyTorch 2.13): the CPU fused attention, oneDNN's linear.
KERNEL_FLOPS = {op: formula for op, formula in (
    (getattr(aten, "_scaled_dot_product_flash_attention_for_cpu", None), sdpa_flops),
    (getattr(torch.ops.mkldnn, "_linear_pointwise", None), onednn_linear_flops),
) if op is not None}


def example_forward(model: nn.Module, seq_len: int | None = None, image_size: int | tuple[int, int] | None = None,
                    batch: int = 1) -> Callable[[], Any]:
    """A forward pass of ``model`` on made-up inputs, the one the formulas count (its family's
    ``counts.example``): text ids that are never padding, or random images. Defaults as
    :func:`aiayn.analysis.formulas.default_size`.

    Returns:
        a function of no arguments that runs it.
    """
    from aiayn.models import family_of

    cfg: Any = model.cfg  # the config of any family
    family = family_of(cfg)
    image = family.inputs == "image"
    size = check_size(image_size if image else seq_len, image, "image_size" if image else "seq_len")
    module = family.module("counts")
    return module.example(model, module.default_size(cfg) if size is None else size, batch)


def measured_macs(model: nn.Module, forward: Callable[[], Any], explicit_attention: bool = False) -> dict[str, int]:
    """Multiply-adds (FLOPs / 2) of running ``forward`` (a pass of ``model``), by part of :data:`MAC_PARTS`.

    Args:
        model: the model ``forward`` runs (its modules name the parts).
        forward: a function of no arguments, e.g. from :func:`example_forward`.
        explicit_attention: take attention's explicit path (as ``record_attention`` does) instead of
            ``F.scaled_dot_product_attention``.
    """
    root = type(model).__name__
    modules = {f"{root}.{name}" if name else root: m for name, m in model.named_modules()}
    recording = record_attention(model) if explicit_attention else contextlib.nullcontext()
    # Not under no_grad: FlopCounterMode's module tracker hooks the outputs' gradients, and fails on a
    # parameter's slice (learned positions) that no_grad leaves requiring grad without a grad_fn.
    with recording, FlopCounterMode(display=False, custom_mapping=KERNEL_FLOPS) as counter:
        forward()
    flops = counter.get_flop_counts()
    parts = dict.fromkeys(("embeddings", "attention projections", "attention scores", "feed-forward", "backbone"), 0)
    claimed: list[str] = []
    for name in sorted(flops, key=lambda n: n.count(".")):  # outer modules first
        if name not in modules or any(name.startswith(c + ".") for c in claimed):
            continue
        path = [modules[p] for p in _prefixes(name)]
        part = module_part(path)
        if part is None or part == "norms":
            continue
        claimed.append(name)
        if isinstance(path[-1], MultiHeadAttention):
            for op, n in flops[name].items():
                parts["attention projections" if op in _PROJECTIONS else "attention scores"] += n
        else:
            parts[part] += sum(flops[name].values())
    total = sum(flops.get("Global", {}).values())
    parts["output"] = total - sum(parts.values())
    return {p: n // 2 for p, n in parts.items()}


def _prefixes(name: str) -> list[str]:
    """``"A.b.c"`` -> ``["A", "A.b", "A.b.c"]``."""
    pieces = name.split(".")
    return [".".join(pieces[: i + 1]) for i in range(len(pieces))]


def measure(model: nn.Module, seq_len: int | None = None, image_size: int | tuple[int, int] | None = None,
            batch: int = 1, explicit_attention: bool = False) -> Counts:
    """Parameters (counted module by module) and multiply-adds (measured by ``FlopCounterMode``) of a real
    forward pass of ``model`` on made-up inputs (:func:`example_forward`). Use small models: it runs them.

    Returns:
        :class:`~aiayn.analysis.formulas.Counts`, comparable part by part with
        :func:`~aiayn.analysis.formulas.counts` of the model's config.
    """
    was_training = model.training
    model.eval()
    try:
        macs = measured_macs(model, example_forward(model, seq_len, image_size, batch), explicit_attention)
    finally:
        model.train(was_training)
    table = parameter_table(model)
    table.pop("total")
    return Counts(table, macs)


__all__ = ["KERNEL_FLOPS", "example_forward", "measure", "measured_macs", "onednn_linear_flops", "sdpa_flops"]
