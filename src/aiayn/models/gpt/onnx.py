"""A GPT language model as one ONNX graph over a cache passed in and out as tensors
(:func:`aiayn.convert.onnx.to_onnx`; :class:`aiayn.convert.onnx.OnnxGPT` runs it)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor, nn

from aiayn.models.onnx import EXAMPLE, Past, cache_names, export_graph

if TYPE_CHECKING:
    from aiayn.layers.kv_cache import DecoderCache
    from aiayn.models.gpt.model import GPT

class _GPT(nn.Module):
    """:class:`~aiayn.models.gpt.GPT`'s forward with its cache as tensors."""

    def __init__(self, model: GPT) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor,
                past: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
        cache = Past(past)
        logits = self.model(input_ids, attention_mask=attention_mask, cache=cast("DecoderCache", cache))
        return logits, cache.present()


def export(model: GPT, folder: Path, opset: int | None) -> dict[str, Any]:
    cfg = model.cfg
    if cfg.head != "lm":
        raise ValueError(f"ONNX export takes a GPT language model (head='lm'); a head={cfg.head!r} GPT is not "
                         f"exported (its score layer would be left out)")
    n, h, d = cfg.n_layers, cfg.kv_heads, cfg.d_model // cfg.n_heads  # the cache holds the kv heads only
    b, t, p = (EXAMPLE[k] for k in ("batch", "new", "past"))
    meta = torch.device("meta")
    past, present = cache_names("past", n), cache_names("present", n)
    shapes: dict[str, list[int | str]] = {
        "input_ids": ["batch", "new"], "attention_mask": ["batch", "past + new"],
        "logits": ["batch", "new", cfg.vocab_size], **{name: ["batch", h, "past", d] for name in past},
        **{name: ["batch", h, "past + new", d] for name in present},
    }
    ids = torch.zeros(b, t, dtype=torch.long, device=meta)
    mask = torch.ones(b, p + t, dtype=torch.bool, device=meta)
    cache = [(torch.zeros(b, h, p, d, device=meta), torch.zeros(b, h, p, d, device=meta)) for _ in range(n)]
    names = (["input_ids", "attention_mask", *past], ["logits", *present])
    graph = export_graph(_GPT, model, (ids, mask, cache), names, shapes, folder / "model.onnx", opset)
    return {"model": graph}


__all__ = ["export"]
