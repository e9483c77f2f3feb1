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

:func:`export` reads the table the other way: a Transformer with ``positional="sinusoidal-concat"`` becomes a
``MarianMTModel``, one with ``positional="learned"`` a ``BartForConditionalGeneration``; token tables are
written as ``save_pretrained`` writes them (once, as ``model.shared``, when tied).

The paper's interleaved sinusoids (``positional="sinusoidal"``: sin, cos, sin, ... along the model dimension)
are Marian's concatenated ones (all sines, then all cosines) up to a fixed permutation of that dimension, so
such a model is exported as Marian too, by :func:`concat_positions`: the same network with the residual
stream's basis reordered in every weight that reads or writes it (``from_hf`` of the folder gives that
reordered model, which computes the same). What neither expresses is refused by name: pre-norm blocks, no
positions, a LayerNorm epsilon other
than 1e-5, BART without its 2 unused position rows, embedding LayerNorm or one shared token table, Marian
with an embedding LayerNorm. Without an output bias the file holds zeros there; ``from_hf`` then gives
Marian ``output_bias=True`` (it always has one), which computes the same.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import torch
from torch import Tensor

from aiayn.layers.positional import sinusoidal_encoding
from aiayn.models.keys import (
    Source,
    attention,
    copy,
    hf_activation,
    linear,
    load_converted,
    our_weights,
    refuse,
    split_attention,
)
from aiayn.models.transformer.model import Transformer, TransformerConfig

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

    for side, ours in (("encoder", "src_embed"), ("decoder", "tgt_embed")):
        key = f"model.{side}.embed_positions.weight"
        if bart:
            out[f"{ours}.positions.weight"] = src.take(key)
            linear(src, f"{ours}.norm", f"model.{side}.layernorm_embedding", out)
        elif key in src:  # the shape first: our table's follows the config, which may claim any size
            stored, wanted = src.take(key), (cfg.max_len, cfg.d_model)
            if tuple(stored.shape) != wanted:
                raise ValueError(f"{name}: {key} is {tuple(stored.shape)}, but the config's max_position_embeddings "
                                 f"and d_model make the sinusoidal table {wanted}")
            if not torch.allclose(stored, sinusoidal_encoding(*wanted, "concat"), atol=1e-5):
                raise ValueError(f"{name}: {key} is not the sinusoidal table (concatenated layout) we compute")

    for side, n_layers, table in (("encoder", cfg.n_encoder_layers, ENCODER_LAYER),
                                  ("decoder", cfg.n_decoder_layers, DECODER_LAYER)):
        for i in range(n_layers):
            for ours, theirs in table:
                copy = attention if ours.endswith("attn") else linear
                copy(src, f"{side}.layers.{i}.{ours}", f"model.{side}.layers.{i}.{theirs}", out)
    src.check_all_taken()
    return load_converted(Transformer, cfg, out, src, hf)


def _family(cfg: TransformerConfig) -> str:
    """``"marian"`` or ``"bart"``: the Hugging Face model that computes what ``cfg`` describes, or a refusal."""
    if cfg.norm_first:
        refuse("norm_first", True, "Marian and BART are post-norm (LayerNorm after each residual sum)")
    if cfg.cross_scoring != "scaled_dot":
        refuse("cross_scoring", cfg.cross_scoring, "Marian's and BART's encoder-decoder attention is scaled dot "
               "products")
    if cfg.layer_norm_eps != 1e-5:
        refuse("layer_norm_eps", cfg.layer_norm_eps, "Marian's and BART's LayerNorms keep PyTorch's 1e-5")
    if cfg.positional in ("sinusoidal", "sinusoidal-concat"):  # the first exported as concat_positions(model)
        if cfg.embed_norm:
            refuse("embed_norm", True, "Marian has no LayerNorm on the embeddings")
        return "marian"
    if cfg.positional == "learned":
        for field, wanted in (("positional_offset", 2), ("embed_norm", True), ("share_embeddings", True)):
            if getattr(cfg, field) != wanted:
                refuse(field, getattr(cfg, field), f"BART (learned positions) has {field}={wanted!r}")
        return "bart"
    refuse("positional", cfg.positional, "Marian and BART both add positions to the embeddings")


# How each weight meets the residual stream (the model dimension C), by the end of its name: "in" reads it (its
# columns index C), "out" writes it (its rows index C), "both" is a vector over C (a LayerNorm's gain and bias, an
# output projection's bias), "none" does not touch it (the biases of products that read it).
RESIDUAL_AXES = (
    (r"(src|tgt)_embed\.(tokens|positions)\.weight|generator\.weight", "in"),
    (r"(in_proj|ff\.fc1)\.weight", "in"),
    (r"(out_proj|ff\.fc2)\.weight", "out"),
    (r"(out_proj|ff\.fc2)\.bias|norm\d?\.(weight|bias)", "both"),
    (r"(in_proj|ff\.fc1|generator)\.bias", "none"),
)


def concat_positions(model: Transformer) -> Transformer:
    """``model`` with the paper's interleaved sinusoids as Marian's concatenated ones: the same network.

    The interleaved table's dimension ``2i`` is the concatenated table's ``i`` (the sine of frequency ``i``) and
    ``2i + 1`` its ``C/2 + i`` (the cosine): with ``perm = [0, 2, 4, ..., 1, 3, 5, ...]``, ``concat = interleaved[:,
    perm]``. Every residual vector is then read in that order, ``x' = x[perm]``, which leaves each sublayer's result
    unchanged when every weight that reads the stream has its columns reordered (``W' = W[:, perm]``: token tables,
    the tied output, the q/k/v and first feed-forward products), every one that writes it its rows and bias
    (``W[perm]``: attention's output and the second feed-forward product) and each LayerNorm its gain and bias
    (a mean and a variance do not depend on the order). A model whose positions are not ``"sinusoidal"`` is
    returned as it is.

    Raises:
        ValueError: a weight whose relation to the model dimension is not in :data:`RESIDUAL_AXES` (named).
    """
    cfg = model.cfg
    if cfg.positional != "sinusoidal":
        return model
    c = cfg.d_model
    perm = torch.cat([torch.arange(0, c, 2), torch.arange(1, c, 2)])
    state = {}
    for key, value in model.state_dict().items():
        axis = next((a for pattern, a in RESIDUAL_AXES if re.search(rf"(^|\.)({pattern})$", key)), None)
        if axis is None:
            raise ValueError(f"concat_positions does not know how {key!r} meets the model dimension")
        state[key] = value[:, perm] if axis == "in" else value[perm] if axis in ("out", "both") else value
    out = Transformer(dataclasses.replace(cfg, positional="sinusoidal-concat"))
    out.load_state_dict(state)
    return out.to(next(model.parameters()).device).train(model.training)


def export(model: Transformer) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """``(config, weights)`` of the ``MarianMTModel`` or ``BartForConditionalGeneration`` computing what
    ``model`` computes (see the module docstring for what is refused)."""
    family = _family(model.cfg)
    model = concat_positions(model)
    cfg = model.cfg
    config: dict[str, Any] = {
        "model_type": family, "vocab_size": cfg.src_vocab_size, "d_model": cfg.d_model,
        "encoder_layers": cfg.n_encoder_layers, "decoder_layers": cfg.n_decoder_layers,
        "encoder_attention_heads": cfg.n_heads, "decoder_attention_heads": cfg.n_heads,
        "encoder_ffn_dim": cfg.d_ff, "decoder_ffn_dim": cfg.d_ff, "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0,
        "dropout": cfg.dropout, "attention_dropout": cfg.attention_dropout,
        "activation_dropout": cfg.activation_dropout, "activation_function": hf_activation(ACTIVATIONS, cfg.activation),
        "max_position_embeddings": cfg.max_len, "scale_embedding": cfg.scale_embedding,
        "tie_word_embeddings": cfg.tie_output, "is_encoder_decoder": True, "pad_token_id": cfg.pad_id,
        "eos_token_id": cfg.eos_id, "decoder_start_token_id": cfg.bos_id, "forced_eos_token_id": None,
    }
    if family == "marian":
        config.update(architectures=["MarianMTModel"], share_encoder_decoder_embeddings=cfg.share_embeddings,
                      decoder_vocab_size=cfg.tgt_vocab_size)
    else:
        config.update(architectures=["BartForConditionalGeneration"], forced_bos_token_id=None)

    src = our_weights(model, "our Transformer")
    enc, dec = src.take("src_embed.tokens.weight"), src.take("tgt_embed.tokens.weight")
    out: dict[str, Tensor] = {}
    # Hugging Face ties every table named here to model.shared (and lm_head to it) only when
    # tie_word_embeddings is set; otherwise each is a weight of its own and written.
    if cfg.share_embeddings:
        out["model.shared.weight"] = enc
    if not (cfg.share_embeddings and cfg.tie_output):
        out["model.encoder.embed_tokens.weight"], out["model.decoder.embed_tokens.weight"] = enc, dec
    if cfg.tie_output:
        src.alias("generator.weight", dec)
    else:
        out["lm_head.weight"] = src.take("generator.weight")
    bias = src.take("generator.bias") if cfg.output_bias else torch.zeros(cfg.tgt_vocab_size, dtype=dec.dtype)
    out["final_logits_bias"] = bias[None]  # (1, V)
    if family == "bart":
        for side, mine in (("encoder", "src_embed"), ("decoder", "tgt_embed")):
            out[f"model.{side}.embed_positions.weight"] = src.take(f"{mine}.positions.weight")
            copy(src, f"model.{side}.layernorm_embedding", f"{mine}.norm", out)

    for side, n_layers, table in (("encoder", cfg.n_encoder_layers, ENCODER_LAYER),
                                  ("decoder", cfg.n_decoder_layers, DECODER_LAYER)):
        for i in range(n_layers):
            for mine, theirs in table:
                a, b = f"{side}.layers.{i}.{mine}", f"model.{side}.layers.{i}.{theirs}"
                if mine.endswith("attn"):
                    split_attention(src, a, b, out)
                else:
                    copy(src, b, a, out)
    src.check_all_taken()
    return config, out
