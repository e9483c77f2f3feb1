"""Hugging Face ``XLNetModel``, ``XLNetLMHeadModel``, ``XLNetForSequenceClassification`` <-> our :class:`XLNet`.

    word_embedding / mask_emb                   -> embed.tokens / mask_emb              ("transformer." before
    layer.l.rel_attn.q, k, v (C, H, D)           -> layers.l.self_attn.in_proj (3HD, C)    each, under a head)
    layer.l.rel_attn.o (C, H, D)                 -> layers.l.self_attn.out_proj (C, HD)
    layer.l.rel_attn.r (C, H, D)                 -> layers.l.self_attn.score.r_net (HD, C)
    layer.l.rel_attn.r_w_bias, r_r_bias, r_s_bias -> layers.l.self_attn.score.u, v, b
    layer.l.rel_attn.seg_embed                   -> layers.l.self_attn.score.segment
    layer.l.rel_attn.layer_norm                  -> layers.l.norm1
    layer.l.ff.layer_1, layer_2, layer_norm      -> layers.l.ff.fc1, ff.fc2, norm2
    lm_loss (its weight: the embedding)          -> lm_head (tied the same way)
    sequence_summary.summary, logits_proj        -> summary, classifier

``transformers``' ``mem_len`` of 0 or ``None`` keeps every position (ours ``None``); its ``clamp_len`` of 0 or less
clamps none (ours ``None``). ``bi_data`` (pre-training on both directions of a batch) is refused; so is a sequence
summary other than XLNet's own (the last token, a projection, tanh).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from aiayn.models.keys import Source, copy, hf_activation, label_names, linear, load_converted, our_weights
from aiayn.models.xlnet.model import XLNet, XLNetConfig

ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "relu": "relu", "silu": "silu", "swish": "silu"}
HF_CLASSES = {"none": "XLNetModel", "lm": "XLNetLMHeadModel", "classification": "XLNetForSequenceClassification"}
SUMMARY = {"summary_type": "last", "summary_use_proj": True, "summary_activation": "tanh"}
SPECIALS = {"pad_id": "pad_token_id", "bos_id": "bos_token_id", "eos_id": "eos_token_id"}
OURS = ("cls_id", "sep_id", "mask_id")  # not in XLNetConfig: kept under "aiayn" (XLNet's vocabulary's by default)
LAYER = [("norm1", "rel_attn.layer_norm"), ("ff.fc1", "ff.layer_1"), ("ff.fc2", "ff.layer_2"),
         ("norm2", "ff.layer_norm")]
SCORE = [("u", "r_w_bias"), ("v", "r_r_bias"), ("b", "r_s_bias"), ("segment", "seg_embed")]


def config(hf: dict[str, Any], head: str) -> XLNetConfig:
    """Our config for an ``XLNetConfig`` (as a dict) with the given head."""
    if hf.get("bi_data"):
        raise ValueError("bi_data=True (both directions in one batch, a pre-training option) does not convert")
    if hf["ff_activation"] not in ACTIVATIONS:
        raise ValueError(f"ff_activation={hf['ff_activation']!r} is not one of {sorted(ACTIVATIONS)}")
    odd = {k: hf.get(k) for k, v in (*SUMMARY.items(), ("summary_proj_to_labels", None)) if hf.get(k, v) != v}
    if head == "classification" and odd:
        raise ValueError(f"a sequence summary of {odd} does not convert: only XLNet's own ({SUMMARY})")
    if hf["n_head"] * hf["d_head"] != hf["d_model"]:
        raise ValueError(f"n_head * d_head = {hf['n_head']} * {hf['d_head']} must equal d_model={hf['d_model']}")
    clamp, mem = hf.get("clamp_len", -1), hf.get("mem_len")
    kept = {k: v for k, v in (hf.get("aiayn") or {}).items() if k in OURS}
    return XLNetConfig(
        vocab_size=hf["vocab_size"], d_model=hf["d_model"], n_heads=hf["n_head"], n_layers=hf["n_layer"],
        d_ff=hf["d_inner"], activation=ACTIVATIONS[hf["ff_activation"]], attn_type=hf.get("attn_type", "bi"),
        mem_len=mem or None, reuse_len=hf.get("reuse_len") or None, clamp_len=clamp if clamp > 0 else None,
        same_length=hf.get("same_length", False), dropout=hf["dropout"], layer_norm_eps=hf["layer_norm_eps"],
        head=head, num_labels=len(hf.get("id2label") or {}) or hf.get("num_labels", 2),
        **{ours: hf.get(theirs) for ours, theirs in SPECIALS.items()}, **kept,
    )


def _head(src: Source, hf: dict[str, Any]) -> str:
    if "lm_loss.bias" in src:
        return "lm"
    if "logits_proj.weight" in src:
        return "classification"
    if other := [c for c in hf.get("architectures") or [] if c not in HF_CLASSES.values()]:
        raise ValueError(f"{src.name}: {other[0]} cannot be converted (its head is not ours); "
                         f"known: {', '.join(HF_CLASSES.values())}")
    return "none"


def _heads(w: Tensor) -> Tensor:
    """``(C, H, D)`` (``transformers``' q, k, v, r) -> a ``Linear`` weight ``(HD, C)``."""
    return w.reshape(w.size(0), -1).t()


def convert(hf: dict[str, Any], tensors: dict[str, Tensor], name: str = "XLNet") -> XLNet:
    """Our :class:`XLNet` (with the head the weights carry) computing what the Hugging Face XLNet computes."""
    src = Source(tensors, name)
    cfg = config(hf, _head(src, hf))
    pre = "transformer." if "transformer.word_embedding.weight" in src else ""
    out: dict[str, Tensor] = {"embed.tokens.weight": src.take(f"{pre}word_embedding.weight"),
                              "mask_emb": src.take(f"{pre}mask_emb").reshape(-1)}
    for i in range(cfg.n_layers):
        mine, theirs = f"layers.{i}", f"{pre}layer.{i}"
        attn = f"{theirs}.rel_attn"
        qkv = [_heads(src.take(f"{attn}.{p}")) for p in "qkv"]
        out[f"{mine}.self_attn.in_proj.weight"] = torch.cat(qkv)
        out[f"{mine}.self_attn.out_proj.weight"] = src.take(f"{attn}.o").reshape(cfg.d_model, -1)
        out[f"{mine}.self_attn.score.r_net.weight"] = _heads(src.take(f"{attn}.r"))
        for a, b in SCORE:
            out[f"{mine}.self_attn.score.{a}"] = src.take(f"{attn}.{b}")
        for a, b in LAYER:
            linear(src, f"{mine}.{a}", f"{theirs}.{b}", out)
    if cfg.head == "lm":
        out["lm_head.bias"] = src.take("lm_loss.bias")
        out["lm_head.weight"] = out["embed.tokens.weight"]
        src.alias("lm_loss.weight", out["embed.tokens.weight"])
    if cfg.head == "classification":
        linear(src, "summary", "sequence_summary.summary", out)
        linear(src, "classifier", "logits_proj", out)
    src.check_all_taken()
    return load_converted(XLNet, cfg, out, src, hf)


def export(model: XLNet) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """``(config, weights)`` of the Hugging Face XLNet (``HF_CLASSES[head]``) computing what ``model`` computes."""
    cfg = model.cfg
    c, h, d = cfg.d_model, cfg.n_heads, cfg.d_head
    src = our_weights(model, "our XLNet")
    pre = "" if cfg.head == "none" else "transformer."
    out: dict[str, Tensor] = {f"{pre}word_embedding.weight": src.take("embed.tokens.weight"),
                              f"{pre}mask_emb": src.take("mask_emb").reshape(1, 1, c)}
    for i in range(cfg.n_layers):
        mine, attn = f"layers.{i}", f"{pre}layer.{i}.rel_attn"
        for p, w in zip("qkv", src.take(f"{mine}.self_attn.in_proj.weight").chunk(3)):
            out[f"{attn}.{p}"] = w.t().reshape(c, h, d)
        out[f"{attn}.o"] = src.take(f"{mine}.self_attn.out_proj.weight").reshape(c, h, d)
        out[f"{attn}.r"] = src.take(f"{mine}.self_attn.score.r_net.weight").t().reshape(c, h, d)
        for a, b in SCORE:
            out[f"{attn}.{b}"] = src.take(f"{mine}.self_attn.score.{a}")
        for a, b in LAYER:
            copy(src, f"{pre}layer.{i}.{b}", f"{mine}.{a}", out)
    if cfg.head == "lm":
        out["lm_loss.bias"] = src.take("lm_head.bias")
        src.alias("lm_head.weight", out[f"{pre}word_embedding.weight"])
    if cfg.head == "classification":
        copy(src, "sequence_summary.summary", "summary", out)
        copy(src, "logits_proj", "classifier", out)
    src.check_all_taken()
    config = {
        "model_type": "xlnet", "architectures": [HF_CLASSES[cfg.head]], "vocab_size": cfg.vocab_size,
        "d_model": c, "n_head": h, "d_head": d, "n_layer": cfg.n_layers, "d_inner": cfg.d_ff,
        "ff_activation": hf_activation(ACTIVATIONS, cfg.activation), "attn_type": cfg.attn_type,
        "mem_len": cfg.mem_len, "reuse_len": cfg.reuse_len, "clamp_len": cfg.clamp_len or -1, "bi_data": False,
        "same_length": cfg.same_length, "dropout": cfg.dropout, "layer_norm_eps": cfg.layer_norm_eps,
        "initializer_range": 0.02, "untie_r": True, "use_mems_eval": True, "use_mems_train": False,
        "summary_last_dropout": cfg.dropout, **SUMMARY, "tie_word_embeddings": True,
        **{theirs: getattr(cfg, ours) for ours, theirs in SPECIALS.items()},
        **label_names(cfg.num_labels if cfg.head == "classification" else 0),
        "aiayn": {k: getattr(cfg, k) for k in OURS},
    }
    return config, out


__all__ = ["convert", "export"]
