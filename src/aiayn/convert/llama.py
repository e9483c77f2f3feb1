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
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from aiayn.convert.common import Source, fused, linear, load_converted
from aiayn.models.gpt import GPT, GPTConfig

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
    keys = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
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
    eos = hf.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list) else eos
    return GPTConfig(
        vocab_size=hf["vocab_size"], max_len=hf["max_position_embeddings"], d_model=d, n_heads=heads,
        n_layers=hf["num_hidden_layers"], d_ff=hf["intermediate_size"], dropout=0.0,
        attention_dropout=hf.get("attention_dropout", 0.0), activation="swiglu", layer_norm_eps=hf["rms_norm_eps"],
        tie_output=hf.get("tie_word_embeddings", False), eos_id=hf["vocab_size"] - 1 if eos is None else eos,
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
    return load_converted(GPT(cfg), out, name)
