"""Hugging Face ``TransfoXLLMHeadModel`` (``transformers`` 4.x; removed in 5) <-> our :class:`TransfoXL`.

    transformer.word_emb.emb_layers.i / emb_projs.i     -> embed.emb_layers.i / embed.emb_projs.i
    transformer.layers.l.dec_attn.qkv_net / o_net       -> layers.l.self_attn.in_proj / out_proj (no biases)
    transformer.layers.l.dec_attn.r_net                 -> layers.l.self_attn.score.r_net
    transformer.layers.l.dec_attn.r_w_bias / r_r_bias   -> layers.l.self_attn.score.u / v (with untie_r=False
                                                           the model's transformer.r_w_bias / r_r_bias, copied
                                                           into every layer)
    transformer.layers.l.dec_attn.layer_norm            -> layers.l.norm1
    transformer.layers.l.pos_ff.CoreNet.0 / CoreNet.3   -> layers.l.ff.fc1 / ff.fc2
    transformer.layers.l.pos_ff.layer_norm              -> layers.l.norm2
    crit.cluster_weight / cluster_bias                  -> softmax.cluster_weight / cluster_bias
    crit.out_layers.i.bias                              -> softmax.out_layers.i.bias (weights tied to emb_layers.i)
    crit.out_projs.i                                    -> softmax.out_projs.i (tied to emb_projs where tie_projs)
    transformer.pos_emb.inv_freq                        -> dropped (the sinusoids are computed)

``transformers`` 5 no longer has the class; ``transformers==4.46.3`` does (``benchmarks/transfo_xl_parity.py``
compares the two). Its ``clamp_len`` of 0 or less means no clamp, as ours ``None``.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from aiayn.models.keys import Source, load_converted, our_weights, refuse
from aiayn.models.transfo_xl.model import TransfoXL, TransfoXLConfig

LAYER = [("self_attn.in_proj.weight", "dec_attn.qkv_net.weight"),
         ("self_attn.out_proj.weight", "dec_attn.o_net.weight"),
         ("self_attn.score.r_net.weight", "dec_attn.r_net.weight"), ("norm1.weight", "dec_attn.layer_norm.weight"),
         ("norm1.bias", "dec_attn.layer_norm.bias"), ("ff.fc1.weight", "pos_ff.CoreNet.0.weight"),
         ("ff.fc1.bias", "pos_ff.CoreNet.0.bias"), ("ff.fc2.weight", "pos_ff.CoreNet.3.weight"),
         ("ff.fc2.bias", "pos_ff.CoreNet.3.bias"), ("norm2.weight", "pos_ff.layer_norm.weight"),
         ("norm2.bias", "pos_ff.layer_norm.bias")]


def config(hf: dict[str, Any]) -> TransfoXLConfig:
    """Our config for a ``TransfoXLConfig`` (as a dict)."""
    if hf.get("attn_type", 0) != 0:
        raise ValueError(f"attn_type={hf['attn_type']}: only Transformer-XL's relative attention (0) converts")
    if hf["n_head"] * hf["d_head"] != hf["d_model"]:
        raise ValueError(f"n_head * d_head = {hf['n_head']} * {hf['d_head']} must equal d_model={hf['d_model']}")
    if hf.get("sample_softmax", -1) > 0:
        raise ValueError("sample_softmax > 0 (a sampled softmax) does not convert")
    shared = hf.get("tie_projs") or []
    clamp = hf.get("clamp_len", 1000)
    return TransfoXLConfig(
        vocab_size=hf["vocab_size"], d_model=hf["d_model"], n_heads=hf["n_head"], n_layers=hf["n_layer"],
        d_ff=hf["d_inner"], d_embed=None if hf["d_embed"] == hf["d_model"] else hf["d_embed"],
        cutoffs=tuple(hf["cutoffs"]), div_val=hf["div_val"], tie_projs=any(shared), mem_len=hf["mem_len"],
        clamp_len=clamp if clamp > 0 else None, same_length=hf["same_length"], dropout=hf["dropout"],
        attention_dropout=hf["dropatt"], norm_first=hf["pre_lnorm"], layer_norm_eps=hf["layer_norm_epsilon"],
        eos_id=hf.get("eos_token_id"),
    )


def convert(hf: dict[str, Any], tensors: dict[str, Tensor], name: str = "Transformer-XL") -> TransfoXL:
    """Our :class:`TransfoXL` computing what the ``TransfoXLLMHeadModel`` computes."""
    cfg = config(hf)
    if hf.get("tie_word_embeddings", True) is False:
        raise ValueError(f"{name}: tie_word_embeddings=False (an output table of its own) does not convert")
    src = Source(tensors, name)
    out: dict[str, Tensor] = {}
    emb = "transformer.word_emb"
    n_tables = 1 if cfg.div_val == 1 else len(cfg.cutoffs) + 1
    for i in range(n_tables):
        out[f"embed.emb_layers.{i}.weight"] = src.take(f"{emb}.emb_layers.{i}.weight")
        out[f"softmax.out_layers.{i}.weight"] = out[f"embed.emb_layers.{i}.weight"]
        src.alias(f"crit.out_layers.{i}.weight", out[f"embed.emb_layers.{i}.weight"])
        out[f"softmax.out_layers.{i}.bias"] = src.take(f"crit.out_layers.{i}.bias")
    for i in range(len([k for k in tensors if k.startswith(f"{emb}.emb_projs.")])):
        out[f"embed.emb_projs.{i}"] = src.take(f"{emb}.emb_projs.{i}")
    for i in range(len([k for k in tensors if k.startswith("crit.out_projs.")])):
        out[f"softmax.out_projs.{i}"] = src.take(f"crit.out_projs.{i}")
    if cfg.cutoffs:
        out["softmax.cluster_weight"] = src.take("crit.cluster_weight")
        out["softmax.cluster_bias"] = src.take("crit.cluster_bias")
    for layer in range(cfg.n_layers):
        ours, theirs = f"layers.{layer}", f"transformer.layers.{layer}"
        for a, b in LAYER:
            out[f"{ours}.{a}"] = src.take(f"{theirs}.{b}")
        for mine, bias in (("u", "r_w_bias"), ("v", "r_r_bias")):  # per layer; with untie_r=False, the model's
            key = f"{theirs}.dec_attn.{bias}"  # (which a saved model also stores under every layer's name)
            out[f"{ours}.self_attn.score.{mine}"] = src.take(key if key in src else f"transformer.{bias}")
            src.alias(f"transformer.{bias}", out[f"{ours}.self_attn.score.{mine}"])
    src.check_all_taken(ignore=("pos_emb.inv_freq",))
    return load_converted(TransfoXL, cfg, out, src, hf)


def export(model: TransfoXL) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """``(config, tensors)`` of the ``TransfoXLLMHeadModel`` computing what ``model`` computes."""
    cfg = model.cfg
    if cfg.eos_id is None:
        refuse("eos_id", None, "TransfoXLConfig always names an end-of-text token (eos_token_id)")
    src = our_weights(model, "TransfoXL")
    out: dict[str, Tensor] = {}
    for k, v in src.tensors.items():
        if k.startswith("embed."):
            out[f"transformer.word_emb.{k[len('embed.'):]}"] = v
        elif k.startswith("softmax."):
            out[f"crit.{k[len('softmax.'):]}"] = v
    for layer in range(cfg.n_layers):
        ours, theirs = f"layers.{layer}", f"transformer.layers.{layer}"
        for a, b in LAYER:
            out[f"{theirs}.{b}"] = src.tensors[f"{ours}.{a}"]
        out[f"{theirs}.dec_attn.r_w_bias"] = src.tensors[f"{ours}.self_attn.score.u"]
        out[f"{theirs}.dec_attn.r_r_bias"] = src.tensors[f"{ours}.self_attn.score.v"]
    hf = {
        "model_type": "transfo-xl", "architectures": ["TransfoXLLMHeadModel"], "vocab_size": cfg.vocab_size,
        "cutoffs": list(cfg.cutoffs), "d_model": cfg.d_model, "d_embed": cfg.width, "n_head": cfg.n_heads,
        "d_head": cfg.d_head, "d_inner": cfg.d_ff, "div_val": cfg.div_val, "pre_lnorm": cfg.norm_first,
        "n_layer": cfg.n_layers, "mem_len": cfg.mem_len, "clamp_len": cfg.clamp_len or -1,
        "same_length": cfg.same_length, "proj_share_all_but_first": cfg.tie_projs, "attn_type": 0,
        "sample_softmax": -1, "adaptive": True, "dropout": cfg.dropout, "dropatt": cfg.attention_dropout,
        "untie_r": True, "init": "normal", "init_range": 0.01, "proj_init_std": 0.01, "init_std": 0.02,
        "layer_norm_epsilon": cfg.layer_norm_eps, "eos_token_id": cfg.eos_id, "tie_word_embeddings": True,
        "tie_projs": [False] + [cfg.tie_projs] * len(cfg.cutoffs),
    }
    return hf, out


__all__ = ["convert", "export"]
