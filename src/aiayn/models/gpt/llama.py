"""Llama and Mistral (``LlamaForCausalLM`` / ``MistralForCausalLM``) -> our :class:`~aiayn.models.gpt.GPT`
with Llama's switches on (rotary positions, RMSNorm, SwiGLU, grouped heads, no biases; Mistral's window).

Hugging Face's checkpoints already lay the rotary pairs out as (i, i + D/2) (``rotate_half``), as ours does, so
no row is permuted; q, k and v are stacked into our fused ``in_proj`` (k and v have the kv heads' rows only).

    model.embed_tokens                  -> embed.tokens
    layers.i.input_layernorm            -> decoder.layers.i.norm1
    layers.i.self_attn.q|k|v_proj       -> decoder.layers.i.self_attn.in_proj (rows q, then k, then v)
    layers.i.self_attn.o_proj           -> decoder.layers.i.self_attn.out_proj
    layers.i.post_attention_layernorm   -> decoder.layers.i.norm3
    layers.i.mlp.gate_proj|up_proj      -> decoder.layers.i.ff.gate, ff.fc1
    layers.i.mlp.down_proj              -> decoder.layers.i.ff.fc2
    model.norm                          -> decoder.norm
    lm_head                             -> lm_head (tied to the tokens when the config ties them)
    *.rotary_emb.inv_freq               -> dropped (recomputed from the config)

:func:`export` reads the table the other way: our GPT with Llama's switches -> ``LlamaForCausalLM``, or
``MistralForCausalLM`` when it has an ``attention_window`` (``lm_head`` written only when untied). The rope
settings are written both as transformers 4 reads them (``rope_theta``, ``rope_scaling``) and as transformers 5
does (``rope_parameters``). What Llama cannot express is refused: learned positions, LayerNorm, an ungated or
non-SwiGLU feed-forward, residual dropout (Llama has only attention dropout), and biases in Mistral.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from aiayn.models.gpt.gpt2 import gpt_ends, hf_ends
from aiayn.models.gpt.model import GPT, GPTConfig
from aiayn.models.keys import Source, copy, fused, linear, load_converted, our_weights, refuse

# what our GPT must hold for Hugging Face's Llama to compute it: (field, value Llama has, why)
LLAMA = [("positional", "rope", "Llama has rotary positions, no learned table"),
         ("norm", "rmsnorm", "Llama normalises with RMSNorm"),
         ("activation", "swiglu", "Llama's MLP is SwiGLU (a silu gate times the up projection)"),
         ("dropout", 0.0, "Llama has no residual or embedding dropout (only attention_dropout)")]

# (ours, theirs, has a bias when the config says so) per block
BLOCK = [("norm1", "input_layernorm", False), ("self_attn.out_proj", "self_attn.o_proj", True),
         ("norm3", "post_attention_layernorm", False), ("ff.gate", "mlp.gate_proj", True),
         ("ff.fc1", "mlp.up_proj", True), ("ff.fc2", "mlp.down_proj", True)]


def _rope(hf: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """``(rope_theta, rope_scaling)`` from ``rope_parameters`` (transformers 5) or ``rope_theta`` and
    ``rope_scaling`` (transformers 4 and the hub's config.json files)."""
    params = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
    theta = float(params.pop("rope_theta", hf.get("rope_theta", 10000.0)))
    kind = params.get("rope_type", params.get("type", "default"))
    if kind == "default":
        return theta, None
    if kind != "llama3":
        raise ValueError(f"rope type {kind!r} cannot be converted; only the default and 'llama3' can")
    params.setdefault("original_max_position_embeddings", hf["max_position_embeddings"])  # as transformers does
    keys = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
    if missing := [k for k in keys if k not in params]:
        raise ValueError(f"rope scaling of type 'llama3' needs {missing}; the config gives {sorted(params)}")
    return theta, {"rope_type": "llama3", **{k: params[k] for k in keys}}


def config(hf: dict[str, Any]) -> GPTConfig:
    """Our config for a ``LlamaConfig`` or ``MistralConfig`` (as a dict)."""
    if hf.get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act={hf['hidden_act']!r}: only SwiGLU's silu gate converts")
    d, heads = hf["hidden_size"], hf["num_attention_heads"]
    if hf.get("head_dim") not in (None, d // heads):
        raise ValueError(f"head_dim={hf['head_dim']} must be hidden_size / num_attention_heads = {d // heads}")
    attention_bias, mlp_bias = hf.get("attention_bias", False), hf.get("mlp_bias", False)
    if attention_bias != mlp_bias:
        raise ValueError(f"attention_bias={attention_bias} and mlp_bias={mlp_bias} must agree (one bias switch)")
    theta, scaling = _rope(hf)
    return GPTConfig(
        vocab_size=hf["vocab_size"], max_len=hf["max_position_embeddings"], d_model=d, n_heads=heads,
        n_layers=hf["num_hidden_layers"], d_ff=hf["intermediate_size"], dropout=0.0,
        attention_dropout=hf.get("attention_dropout", 0.0), activation="swiglu", layer_norm_eps=hf["rms_norm_eps"],
        tie_output=hf.get("tie_word_embeddings", False), **gpt_ends(hf),
        positional="rope", rope_theta=theta, rope_scaling=scaling, norm="rmsnorm",
        n_kv_heads=hf.get("num_key_value_heads") or heads, bias=attention_bias,
        attention_window=hf.get("sliding_window") if hf.get("model_type") == "mistral" else None,
    )


def convert(hf: dict[str, Any], tensors: dict[str, Tensor], name: str = "Llama") -> GPT:
    """Our :class:`GPT` computing what the Llama or Mistral with config ``hf`` and weights ``tensors`` computes."""
    cfg = config(hf)
    src = Source(tensors, name)
    pre = "model." if "model.embed_tokens.weight" in src else ""
    out: dict[str, Tensor] = {"embed.tokens.weight": src.take(f"{pre}embed_tokens.weight")}
    for i in range(cfg.n_layers):
        theirs, ours = f"{pre}layers.{i}", f"decoder.layers.{i}"
        qkv = [f"{theirs}.self_attn.{p}_proj" for p in "qkv"]
        out[f"{ours}.self_attn.in_proj.weight"] = fused(*(src.take(f"{p}.weight") for p in qkv))
        if cfg.bias:
            out[f"{ours}.self_attn.in_proj.bias"] = fused(*(src.take(f"{p}.bias") for p in qkv))
        for mine, theirs_name, biased in BLOCK:
            linear(src, f"{ours}.{mine}", f"{theirs}.{theirs_name}", out, bias=biased and cfg.bias)
    linear(src, "decoder.norm", f"{pre}norm", out, bias=False)
    if "lm_head.weight" in src:
        head = src.take("lm_head.weight")
        if cfg.tie_output and not torch.equal(head, out["embed.tokens.weight"]):
            raise ValueError(f"{name}: lm_head.weight differs from embed_tokens.weight but the config ties them")
        out["lm_head.weight"] = head
    elif cfg.tie_output:
        out["lm_head.weight"] = out["embed.tokens.weight"]
    src.check_all_taken(ignore=(".rotary_emb.inv_freq",))
    return load_converted(GPT, cfg, out, src, hf)


def export(model: GPT) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """``(config, weights)`` of the ``LlamaForCausalLM`` (``MistralForCausalLM`` with an ``attention_window``)
    computing what our ``model`` computes (see the table).

    Raises:
        ValueError: a switch Llama cannot express (see the module docstring); the message names the field.
    """
    cfg = model.cfg
    for field, wanted, why in LLAMA:
        if getattr(cfg, field) != wanted:
            refuse(field, getattr(cfg, field), f"{why}; Llama needs {field}={wanted!r}")
    mistral = cfg.attention_window is not None
    if mistral and cfg.bias:
        refuse("bias", cfg.bias, "Mistral (the Llama with a sliding window) has no biases")
    scaling = None if cfg.rope_scaling is None else dict(cfg.rope_scaling)
    config: dict[str, Any] = {
        "model_type": "mistral" if mistral else "llama",
        "architectures": ["MistralForCausalLM" if mistral else "LlamaForCausalLM"],
        "vocab_size": cfg.vocab_size, "max_position_embeddings": cfg.max_len, "hidden_size": cfg.d_model,
        "num_attention_heads": cfg.n_heads, "num_key_value_heads": cfg.kv_heads, "num_hidden_layers": cfg.n_layers,
        "intermediate_size": cfg.d_ff, "head_dim": cfg.d_model // cfg.n_heads, "hidden_act": "silu",
        "rms_norm_eps": cfg.layer_norm_eps, "attention_dropout": cfg.attention_dropout,
        "tie_word_embeddings": cfg.tie_output, "eos_token_id": hf_ends(cfg),
        "rope_theta": cfg.rope_theta, "rope_scaling": scaling,
        "rope_parameters": {"rope_type": "default", **(scaling or {}), "rope_theta": cfg.rope_theta},
    }
    if mistral:
        config["sliding_window"] = cfg.attention_window
    else:
        config.update(attention_bias=cfg.bias, mlp_bias=cfg.bias, pretraining_tp=1)
    src = our_weights(model, "our GPT")
    out: dict[str, Tensor] = {"model.embed_tokens.weight": src.take("embed.tokens.weight")}
    d_kv = cfg.kv_heads * (cfg.d_model // cfg.n_heads)
    for i in range(cfg.n_layers):
        ours, theirs = f"decoder.layers.{i}", f"model.layers.{i}"
        for kind in ("weight", "bias") if cfg.bias else ("weight",):  # rows q (C), k (kv heads), v (kv heads)
            qkv = src.take(f"{ours}.self_attn.in_proj.{kind}").split([cfg.d_model, d_kv, d_kv])
            for p, part in zip("qkv", qkv, strict=True):
                out[f"{theirs}.self_attn.{p}_proj.{kind}"] = part
        for mine, theirs_name, biased in BLOCK:
            copy(src, f"{theirs}.{theirs_name}", f"{ours}.{mine}", out, bias=biased and cfg.bias)
    copy(src, "model.norm", "decoder.norm", out, bias=False)
    if cfg.tie_output:
        src.alias("lm_head.weight", out["model.embed_tokens.weight"])
    else:
        out["lm_head.weight"] = src.take("lm_head.weight")
    src.check_all_taken()
    return config, out
