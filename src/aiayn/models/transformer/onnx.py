"""The encoder-decoder as three ONNX graphs in the layout Hugging Face's Optimum exports (:func:`aiayn.convert.onnx.
to_onnx`; :class:`aiayn.convert.onnx.OnnxSeq2Seq` and ``optimum.onnxruntime.ORTModelForSeq2SeqLM`` run them):

    encoder_model.onnx            input_ids (B, S), attention_mask (B, S)   -> last_hidden_state (B, S, C)
    decoder_model.onnx            input_ids (B, T), encoder_attention_mask, -> logits (B, T, V),
      (the first step)            encoder_hidden_states (B, S, C)              present.i.decoder.key/value (B, H, T, D),
                                                                               present.i.encoder.key/value (B, H, S, D)
    decoder_with_past_model.onnx  input_ids (B, T), encoder_attention_mask, -> logits (B, T, V),
      (every later step)          past_key_values.i.decoder.key/value          present.i.decoder.key/value
                                  (B, H, P, D), past_key_values.i.encoder      (B, H, P + T, D)
                                  .key/value (B, H, S, D)

for every decoder layer i, ids and masks int64 (1: a real token). The first step projects each layer's
cross-attention keys and values from the memory once, as our cache does (:class:`~aiayn.layers.LayerCache`); the
later steps read them from their inputs and never see the memory itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor, nn

from aiayn.models.onnx import EXAMPLE, Past, export_graph

if TYPE_CHECKING:
    from aiayn.layers.attention import MultiHeadAttention
    from aiayn.models.transformer.model import Transformer

GRAPHS = {"encoder": "encoder_model.onnx", "decoder": "decoder_model.onnx",
          "decoder_with_past": "decoder_with_past_model.onnx"}


def cache_names(kind: str, layers: int, cross: bool = True) -> list[str]:
    """Optimum's names, layer by layer: ``past_key_values.i.decoder.key``, ``.decoder.value``, ``.encoder.key``,
    ``.encoder.value`` (``kind="past"``) or ``present.i...`` (``"present"``); ``cross=False``: the decoder's only."""
    prefix = "past_key_values" if kind == "past" else "present"
    sides = ("decoder", "encoder") if cross else ("decoder",)
    return [f"{prefix}.{i}.{side}.{part}" for i in range(layers) for side in sides for part in ("key", "value")]


class _Encoder(nn.Module):
    """``input_ids (B, S)``, ``attention_mask (B, S)`` -> the memory ``(B, S, C)``."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        model = self.model
        return model.encoder(model.src_embed(input_ids), mask=attention_mask.bool()[:, None, None, :])


class _Decoder(nn.Module):
    """The first step: target ids on an empty past, the memory read once into each layer's cross-attention keys
    and values, which come out with the step's own."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, encoder_attention_mask: Tensor,
                encoder_hidden_states: Tensor) -> tuple[Tensor, list[tuple[Tensor, ...]]]:
        model = self.model
        attns = [cast("MultiHeadAttention", layer.cross_attn) for layer in model.decoder.layers]
        cross = [attn.project_kv(encoder_hidden_states) for attn in attns]  # (B, H, S, D) each
        empty = cross[0][0][:, :, :0]  # (B, H, 0, D): nothing before the first step
        cache = Past([(empty, empty)] * len(attns), cross)
        logits = _step(model, input_ids, encoder_attention_mask, cache)
        return logits, [(*own, *kv) for own, kv in zip(cache.present(), cross)]


class _DecoderWithPast(nn.Module):
    """A later step: target ids at positions ``P ..``, the past keys and values (the decoder's and the
    cross-attention's) given -> logits and the decoder's keys and values with the new ones appended."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, encoder_attention_mask: Tensor,
                past: list[tuple[Tensor, Tensor, Tensor, Tensor]]) -> tuple[Tensor, list[tuple[Tensor, Tensor]]]:
        cache = Past([(k, v) for k, v, _, _ in past], [(ck, cv) for _, _, ck, cv in past])
        return _step(self.model, input_ids, encoder_attention_mask, cache), cache.present()


def _step(model: Transformer, ids: Tensor, mask: Tensor, cache: Past) -> Tensor:
    x = model.tgt_embed(ids, start=cache.length)  # (B, T, C)
    # no memory: every layer reads its cross-attention keys/values from the cache
    x = model.decoder(x, memory_mask=mask.bool()[:, None, None, :], is_causal=True, caches=cache)  # (B, T, C)
    return model.generator(x)


def export(model: Transformer, folder: Path, opset: int | None) -> dict[str, Any]:
    cfg = model.cfg
    n, h, d, c = cfg.n_decoder_layers, cfg.n_heads, cfg.d_head, cfg.d_model
    b, t, p, s = (EXAMPLE[k] for k in ("batch", "new", "past", "src_len"))
    meta = torch.device("meta")
    past, present, own = cache_names("past", n), cache_names("present", n), cache_names("present", n, cross=False)
    shapes: dict[str, list[int | str]] = {
        "input_ids": ["batch", "src_len"], "attention_mask": ["batch", "src_len"],
        "last_hidden_state": ["batch", "src_len", c], "encoder_attention_mask": ["batch", "src_len"],
        "encoder_hidden_states": ["batch", "src_len", c], "logits": ["batch", "new", cfg.tgt_vocab_size],
        **{name: ["batch", h, "src_len" if ".encoder." in name else "past", d] for name in past},
        **{name: ["batch", h, "src_len" if ".encoder." in name else "new", d] for name in present},
    }
    src, ones = torch.zeros(b, s, dtype=torch.long, device=meta), torch.ones(b, s, dtype=torch.long, device=meta)
    encoder = export_graph(_Encoder, model, (src, ones), (["input_ids", "attention_mask"], ["last_hidden_state"]),
                           shapes, folder / GRAPHS["encoder"], opset)
    tgt, memory = torch.zeros(b, t, dtype=torch.long, device=meta), torch.zeros(b, s, c, device=meta)
    first: dict[str, list[int | str]] = {**shapes, "input_ids": ["batch", "new"]}
    decoder = export_graph(_Decoder, model, (tgt, ones, memory),
                           (["input_ids", "encoder_attention_mask", "encoder_hidden_states"], ["logits", *present]),
                           first, folder / GRAPHS["decoder"], opset)
    quads = [tuple(torch.zeros(b, h, p if i < 2 else s, d, device=meta) for i in range(4)) for _ in range(n)]
    later: dict[str, list[int | str]] = {**first, **{name: ["batch", h, "past + new", d] for name in own}}
    with_past = export_graph(_DecoderWithPast, model, (tgt, ones, quads),
                             (["input_ids", "encoder_attention_mask", *past], ["logits", *own]), later,
                             folder / GRAPHS["decoder_with_past"], opset)
    _write_config(model, folder)
    return {"encoder": encoder, "decoder": decoder, "decoder_with_past": with_past}


def _write_config(model: Transformer, folder: Path) -> None:
    """``config.json``: the Marian or BART config ORTModelForSeq2SeqLM reads beside the graphs (none for a
    Transformer Hugging Face has no class for: its graphs still run in :class:`aiayn.convert.onnx.OnnxSeq2Seq`)."""
    from aiayn.io import write_json
    from aiayn.models.transformer import hf

    try:
        config, _ = hf.export(model)
    except ValueError:
        return
    write_json(folder / "config.json", {**config, "dtype": "float32", "use_cache": True})


__all__ = ["GRAPHS", "cache_names", "export"]
