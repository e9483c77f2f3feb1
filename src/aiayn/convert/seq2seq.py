"""Hugging Face's encoder-decoders -> our :class:`~aiayn.models.transformer.Transformer`: Marian (OPUS-MT)
and BART, which share one layout of weights.

Marian is the paper's model as deployed for hundreds of language pairs: post-norm, embeddings scaled by
sqrt(d_model), sinusoidal positions in the concatenated layout (all sines, then all cosines), SiLU
("swish"), a final logits bias, decoding started with the pad token. BART differs in learned positions
(2 unused rows first), a LayerNorm on the embeddings, no scaling, GELU, decoding started with ``</s>``.
Each difference is a field of our config, so the conversion is a key table:

    model.encoder.embed_tokens (or .shared)  -> src_embed.tokens      (one table when the weights are equal)
    model.decoder.embed_tokens (or .shared)  -> tgt_embed.tokens
    *.embed_positions                        -> Marian: checked against our sinusoidal table, not stored;
                                                BART: src_embed.positions / tgt_embed.positions
    *.layernorm_embedding (BART)             -> src_embed.norm / tgt_embed.norm
    *.layers.i.self_attn.{q,k,v}_proj        -> *.layers.i.self_attn.in_proj (fused, rows q | k | v)
    *.layers.i.self_attn.out_proj            -> *.layers.i.self_attn.out_proj
    decoder.layers.i.encoder_attn.*          -> decoder.layers.i.cross_attn.*
    self_attn_layer_norm / encoder_attn_layer_norm / final_layer_norm -> norm1 / norm2 / norm2 or norm3
    fc1, fc2                                 -> ff.fc1, ff.fc2
    lm_head, final_logits_bias               -> generator.weight, generator.bias
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

from aiayn.convert.common import Source, attention, linear, load_converted
from aiayn.layers.positional import sinusoidal_encoding
from aiayn.models.transformer import Transformer, TransformerConfig

ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh",
               "gelu_pytorch_tanh": "gelu_tanh"}

# (ours, theirs) per layer; attention entries map q/k/v/out_proj to our fused in_proj and out_proj.
ENCODER_LAYER = [("self_attn", "self_attn"), ("norm1", "self_attn_layer_norm"), ("ff.fc1", "fc1"),
                 ("ff.fc2", "fc2"), ("norm2", "final_layer_norm")]
DECODER_LAYER = [("self_attn", "self_attn"), ("norm1", "self_attn_layer_norm"), ("cross_attn", "encoder_attn"),
                 ("norm2", "encoder_attn_layer_norm"), ("ff.fc1", "fc1"), ("ff.fc2", "fc2"),
                 ("norm3", "final_layer_norm")]


def config(hf: dict[str, Any]) -> TransformerConfig:
    """Our config for a ``MarianConfig`` or ``BartConfig`` (as a dict)."""
    for ours, enc, dec in (("n_heads", "encoder_attention_heads", "decoder_attention_heads"),
                           ("d_ff", "encoder_ffn_dim", "decoder_ffn_dim")):
        if hf[enc] != hf[dec]:
            raise ValueError(f"{enc}={hf[enc]} and {dec}={hf[dec]} differ; our {ours} is one value for both")
    if hf["activation_function"] not in ACTIVATIONS:
        raise ValueError(f"activation_function={hf['activation_function']!r} is not one of {sorted(ACTIVATIONS)}")
    shared = hf.get("share_encoder_decoder_embeddings", True)
    tgt_vocab = hf["vocab_size"] if shared else (hf.get("decoder_vocab_size") or hf["vocab_size"])
    eos = hf["eos_token_id"][0] if isinstance(hf["eos_token_id"], list) else hf["eos_token_id"]
    bart = hf["model_type"] == "bart"
    return TransformerConfig(
        src_vocab_size=hf["vocab_size"], tgt_vocab_size=tgt_vocab, d_model=hf["d_model"],
        n_heads=hf["encoder_attention_heads"], n_encoder_layers=hf["encoder_layers"],
        n_decoder_layers=hf["decoder_layers"], d_ff=hf["encoder_ffn_dim"], dropout=hf["dropout"],
        attention_dropout=hf["attention_dropout"], activation_dropout=hf.get("activation_dropout", 0.0),
        activation=ACTIVATIONS[hf["activation_function"]],
        positional="learned" if bart else "sinusoidal-concat", positional_offset=2 if bart else 0,
        embed_norm=bart, max_len=hf["max_position_embeddings"], norm_first=False,
        scale_embedding=hf["scale_embedding"], share_embeddings=shared,
        tie_output=hf.get("tie_word_embeddings", True), pad_id=hf["pad_token_id"],
        bos_id=hf["decoder_start_token_id"], eos_id=eos,
    )


def convert(hf: dict[str, Any], tensors: dict[str, Tensor], name: str = "Marian") -> Transformer:
    """Our :class:`Transformer` computing what the ``MarianMTModel`` or ``BartModel`` /
    ``BartForConditionalGeneration`` with config ``hf`` and weights ``tensors`` computes."""
    src = Source(tensors, name)
    # Which tables are tied is read from the weights themselves: a config may say "shared" while the
    # checkpoint holds separate tables, and the modules use encoder/decoder.embed_tokens, not model.shared.
    shared = src.take("model.shared.weight") if "model.shared.weight" in src else None
    tables: list[Tensor] = []
    for side in ("encoder", "decoder"):
        key = f"model.{side}.embed_tokens.weight"
        embed = src.take(key) if key in src else shared
        if embed is None:
            raise ValueError(f"{name} has no weight {key!r} nor model.shared.weight (missing key)")
        tables.append(embed)
    enc, dec = tables
    head = src.take("lm_head.weight") if "lm_head.weight" in src else dec
    bias = src.take("final_logits_bias").reshape(-1) if "final_logits_bias" in src else None
    bart = hf["model_type"] == "bart"
    cfg = dataclasses.replace(config(hf), src_vocab_size=enc.size(0), tgt_vocab_size=dec.size(0),
                              share_embeddings=enc.shape == dec.shape and torch.equal(enc, dec),
                              tie_output=head.shape == dec.shape and torch.equal(head, dec),
                              # BART's bias is a zero buffer: our model then has none, as the preset
                              output_bias=not bart or (bias is not None and bool(bias.any())))
    out: dict[str, Tensor] = {"src_embed.tokens.weight": enc, "tgt_embed.tokens.weight": dec, "generator.weight": head}
    if cfg.output_bias:
        out["generator.bias"] = bias if bias is not None else torch.zeros(cfg.tgt_vocab_size)

    table_pe = sinusoidal_encoding(cfg.max_len, cfg.d_model, "concat")
    for side, ours in (("encoder", "src_embed"), ("decoder", "tgt_embed")):
        key = f"model.{side}.embed_positions.weight"
        if bart:
            out[f"{ours}.positions.weight"] = src.take(key)
            linear(src, f"{ours}.norm", f"model.{side}.layernorm_embedding", out)
        elif key in src and not torch.allclose(src.take(key), table_pe, atol=1e-5):
            raise ValueError(f"{name}: {key} is not the sinusoidal table (concatenated layout) we compute")

    for side, n_layers, table in (("encoder", cfg.n_encoder_layers, ENCODER_LAYER),
                                  ("decoder", cfg.n_decoder_layers, DECODER_LAYER)):
        for i in range(n_layers):
            for ours, theirs in table:
                copy = attention if ours.endswith("attn") else linear
                copy(src, f"{side}.layers.{i}.{ours}", f"model.{side}.layers.{i}.{theirs}", out)
    src.check_all_taken()
    return load_converted(Transformer(cfg), out, name)
