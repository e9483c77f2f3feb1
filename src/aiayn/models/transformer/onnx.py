"""The encoder-decoder as two ONNX graphs (:func:`aiayn.convert.onnx.to_onnx`): the encoder, giving every decoder
layer's cross-attention keys and values, and one decoding step over a cache passed in and out as tensors
(:class:`aiayn.convert.onnx.OnnxSeq2Seq` runs them)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor, nn

from aiayn.models.onnx import EXAMPLE, Past, cache_names, export_graph

if TYPE_CHECKING:
    from aiayn.layers.attention import MultiHeadAttention
    from aiayn.models.transformer.model import Transformer

SPEC = {"src_mask": "src_ids != config.pad_id"}  # what onnx.json tells a runner: how to mask the source


class _Encoder(nn.Module):
    """``src_ids (B, S)`` -> ``memory (B, S, C)`` and every decoder layer's cross-attention keys and values."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, src_ids: Tensor) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
        memory = self.model.encode(src_ids)  # (B, S, C)
        attns = [cast("MultiHeadAttention", layer.cross_attn) for layer in self.model.decoder.layers]
        return memory, [attn.project_kv(memory) for attn in attns]  # (B, H, S, D) each


class _Decoder(nn.Module):
    """One decoding step of :meth:`~aiayn.models.transformer.Transformer.decode` with its cache as tensors:
    ``tgt_ids (B, T)`` at positions ``P ..`` -> ``logits (B, T, V)`` and the cache with them appended."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, tgt_ids: Tensor, src_mask: Tensor, past: list[tuple[Tensor, Tensor]],
                cross: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
        model, cache = self.model, Past(past, cross)
        x = model.tgt_embed(tgt_ids, start=cache.length)  # (B, T, C)
        memory_mask = src_mask[:, None, None, :]  # (B, 1, 1, S), as padding_mask gives it
        # no memory: every layer reads its cross-attention keys/values from the cache
        x = model.decoder(x, memory_mask=memory_mask, is_causal=True, caches=cache)  # (B, T, C)
        return model.generator(x), cache.present()


def export(model: Transformer, folder: Path, opset: int | None) -> dict[str, Any]:
    cfg = model.cfg
    n, h, d = cfg.n_decoder_layers, cfg.n_heads, cfg.d_head
    b, t, p, s = (EXAMPLE[k] for k in ("batch", "new", "past", "src_len"))
    meta = torch.device("meta")
    past, cross, present = cache_names("past", n), cache_names("cross", n), cache_names("present", n)
    shapes: dict[str, list[int | str]] = {
        "src_ids": ["batch", "src_len"], "memory": ["batch", "src_len", cfg.d_model],
        "tgt_ids": ["batch", "new"], "src_mask": ["batch", "src_len"], "logits": ["batch", "new", cfg.tgt_vocab_size],
        **{name: ["batch", h, "past", d] for name in past}, **{name: ["batch", h, "src_len", d] for name in cross},
        **{name: ["batch", h, "past + new", d] for name in present},
    }

    def pairs(length: int) -> list[tuple[Tensor, Tensor]]:
        return [(torch.zeros(b, h, length, d, device=meta), torch.zeros(b, h, length, d, device=meta))
                for _ in range(n)]

    src = torch.zeros(b, s, dtype=torch.long, device=meta)
    encoder = export_graph(_Encoder, model, (src,), (["src_ids"], ["memory", *cross]), shapes, folder / "encoder.onnx",
                      opset)
    tgt, mask = torch.zeros(b, t, dtype=torch.long, device=meta), torch.ones(b, s, dtype=torch.bool, device=meta)
    decoder = export_graph(_Decoder, model, (tgt, mask, pairs(p), pairs(s)),
                      (["tgt_ids", "src_mask", *past, *cross], ["logits", *present]), shapes, folder / "decoder.onnx",
                      opset)
    return {"encoder": encoder, "decoder": decoder}


__all__ = ["export"]
