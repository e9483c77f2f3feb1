"""A GPT language model as one ONNX graph over a cache passed in and out as tensors, in the shape Hugging Face's
Optimum gives a decoder (:func:`aiayn.convert.onnx.to_onnx`; :class:`aiayn.convert.onnx.OnnxGPT` and
``optimum.onnxruntime.ORTModelForCausalLM`` run it):

    input_ids (B, T) int64, attention_mask (B, P + T) int64, position_ids (B, T) int64,
    past_key_values.i.key / .value (B, H, P, D)            -> logits (B, T, V), present.i.key / .value (B, H, P + T, D)

``position_ids`` are what ``transformers`` computes from the mask (``cumsum - 1``, rows padded on the left), the
model's own positions for every real token; a first step passes a past of length 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor, nn

from aiayn.io import write_json
from aiayn.models.gpt import hf
from aiayn.models.onnx import EXAMPLE, Past, export_graph

if TYPE_CHECKING:
    from aiayn.layers.kv_cache import DecoderCache
    from aiayn.models.gpt.model import GPT


def cache_names(kind: str, layers: int) -> list[str]:
    """Optimum's names: ``past_key_values.i.key``/``.value`` in (``kind="past"``), ``present.i.key``/``.value`` out."""
    prefix = "past_key_values" if kind == "past" else "present"
    return [f"{prefix}.{i}.{part}" for i in range(layers) for part in ("key", "value")]


class _GPT(nn.Module):
    """:class:`~aiayn.models.gpt.GPT`'s forward with its cache as tensors and its positions given."""

    def __init__(self, model: GPT) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor, position_ids: Tensor,
                past: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
        cache = Past(past)
        _, mask, is_causal, start = self.model.positions_and_mask(input_ids, attention_mask,
                                                                  cast("DecoderCache", cache))
        hidden = self.model.hidden(input_ids, position_ids=position_ids, start=start, mask=mask, is_causal=is_causal,
                                   caches=cache)
        return self.model.lm_head(hidden), cache.present()


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
        "input_ids": ["batch", "new"], "attention_mask": ["batch", "past + new"], "position_ids": ["batch", "new"],
        "logits": ["batch", "new", cfg.vocab_size], **{name: ["batch", h, "past", d] for name in past},
        **{name: ["batch", h, "past + new", d] for name in present},
    }
    ids = torch.zeros(b, t, dtype=torch.long, device=meta)
    mask = torch.ones(b, p + t, dtype=torch.long, device=meta)
    positions = torch.zeros(b, t, dtype=torch.long, device=meta)
    cache = [(torch.zeros(b, h, p, d, device=meta), torch.zeros(b, h, p, d, device=meta)) for _ in range(n)]
    names = (["input_ids", "attention_mask", "position_ids", *past], ["logits", *present])
    graph = export_graph(_GPT, model, (ids, mask, positions, cache), names, shapes, folder / "model.onnx", opset)
    config, _ = hf.export(model)  # what ORTModelForCausalLM reads beside the graph (the weights are in it)
    write_json(folder / "config.json", {**config, "dtype": "float32", "use_cache": True})
    return {"model": graph}


__all__ = ["cache_names", "export"]
