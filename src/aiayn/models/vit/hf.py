"""ViT (``ViTModel``, ``ViTForImageClassification``) -> our :class:`~aiayn.models.vit.ViT`.

    embeddings.cls_token / position_embeddings            -> cls_token / positions
    embeddings.patch_embeddings.projection                -> patch_embed.proj
    layers.i.layernorm_before / layernorm_after           -> encoder.layers.i.norm1 / norm2
    layers.i.attention.{q,k,v}_proj, attention.o_proj     -> encoder.layers.i.self_attn.in_proj (fused), out_proj
    layers.i.mlp.fc1, mlp.fc2                             -> encoder.layers.i.ff.fc1, ff.fc2
    layernorm                                             -> encoder.norm
    classifier                                            -> head   (ViTForImageClassification: [CLS] -> Linear)
    pooler.dense                                          -> dropped (ViTModel, see below)

Checkpoints saved by transformers 4 name the layers the older way, which converts as well:
``encoder.layer.i.attention.attention.{query,key,value}``, ``attention.output.dense``,
``intermediate.dense``, ``output.dense``. Models with a head keep the encoder under ``vit.``.

The one rule beyond the table: ``ViTModel`` adds a pooler, ``tanh(Linear([CLS]))``, by default
(``add_pooling_layer=True``). ``ViTForImageClassification`` never uses it (its head reads the [CLS] token of
the final LayerNorm), and neither does our ViT, so ``pooler.dense.*`` are the only weights a conversion
leaves out. A ``ViTModel`` converts to a headless ViT (``num_classes=0``) whose ``model(images)`` is
``last_hidden_state[:, 0]``, not ``pooler_output``.

:func:`export` reads the table the other way, writing the names ``save_pretrained`` writes (transformers 4's,
which transformers 5 renames on loading): ``ViTForImageClassification``, or ``ViTModel`` for a headless ViT.
Having no pooler to write, a headless one loads into ``ViTModel.from_pretrained(folder,
add_pooling_layer=False)``; without that argument Hugging Face adds a pooler of random weights. Every
config of ours is a ViT config, so nothing is refused.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from aiayn.models.keys import (
    Source,
    attention,
    copy,
    fused,
    hf_activation,
    label_names,
    linear,
    load_converted,
    our_weights,
    split_attention,
)
from aiayn.models.vit.model import ViT, ViTConfig

ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu",
               "silu": "silu", "swish": "silu"}
# (ours, theirs in transformers 5, theirs in transformers 4) per layer, besides attention
LAYER = [("norm1", "layernorm_before", "layernorm_before"), ("norm2", "layernorm_after", "layernorm_after"),
         ("ff.fc1", "mlp.fc1", "intermediate.dense"), ("ff.fc2", "mlp.fc2", "output.dense")]
QKV = {False: ("attention.q_proj", "attention.k_proj", "attention.v_proj"),
       True: ("attention.attention.query", "attention.attention.key", "attention.attention.value")}
OUT = {False: "attention.o_proj", True: "attention.output.dense"}


def _square(hf: dict[str, Any], key: str) -> int:
    value = hf[key]
    if isinstance(value, (list, tuple)):
        if len(set(value)) != 1:
            raise ValueError(f"{key}={value}: only square images and patches convert")
        value = value[0]
    return int(value)


def config(hf: dict[str, Any], num_classes: int) -> ViTConfig:
    """Our config for a ``ViTConfig`` (as a dict) with ``num_classes`` classes (0: no head)."""
    if hf["hidden_act"] not in ACTIVATIONS:
        raise ValueError(f"hidden_act={hf['hidden_act']!r} is not one of {sorted(ACTIVATIONS)}")
    head_dim = hf.get("head_dim")
    if head_dim is not None and head_dim * hf["num_attention_heads"] != hf["hidden_size"]:
        raise ValueError(f"head_dim={head_dim} x num_attention_heads={hf['num_attention_heads']} must equal "
                         f"hidden_size={hf['hidden_size']}")
    return ViTConfig(
        image_size=_square(hf, "image_size"), patch_size=_square(hf, "patch_size"), in_channels=hf["num_channels"],
        num_classes=num_classes, d_model=hf["hidden_size"], n_heads=hf["num_attention_heads"],
        n_layers=hf["num_hidden_layers"], d_ff=hf["intermediate_size"], dropout=hf["hidden_dropout_prob"],
        attention_dropout=hf["attention_probs_dropout_prob"], activation=ACTIVATIONS[hf["hidden_act"]],
        layer_norm_eps=hf["layer_norm_eps"],
    )


def convert(hf: dict[str, Any], tensors: dict[str, Tensor], name: str = "ViT") -> ViT:
    """Our :class:`ViT` computing what the Hugging Face ViT with config ``hf`` and weights ``tensors`` computes."""
    src = Source(tensors, name)
    pre = "vit." if "vit.embeddings.cls_token" in src else ""
    num_classes = src.tensors["classifier.weight"].size(0) if "classifier.weight" in src else 0
    cfg = config(hf, num_classes)
    legacy = f"{pre}encoder.layer.0.layernorm_before.weight" in src  # transformers 4 names
    out: dict[str, Tensor] = {
        "cls_token": src.take(f"{pre}embeddings.cls_token"),
        "positions": src.take(f"{pre}embeddings.position_embeddings"),
    }
    linear(src, "patch_embed.proj", f"{pre}embeddings.patch_embeddings.projection", out)
    for i in range(cfg.n_layers):
        ours = f"encoder.layers.{i}"
        theirs = f"{pre}encoder.layer.{i}" if legacy else f"{pre}layers.{i}"
        qkv, o = QKV[legacy], f"{theirs}.{OUT[legacy]}"
        if hf.get("qkv_bias", True):
            attention(src, f"{ours}.self_attn", theirs, out, names=qkv, out_proj=o)
        else:  # no q/k/v biases: ours are zero, which computes the same (as many as the weights have rows)
            out[f"{ours}.self_attn.in_proj.weight"] = fused(*(src.take(f"{theirs}.{n}.weight") for n in qkv))
            out[f"{ours}.self_attn.in_proj.bias"] = torch.zeros(out[f"{ours}.self_attn.in_proj.weight"].size(0))
            linear(src, f"{ours}.self_attn.out_proj", o, out)
        for a, new, old in LAYER:
            linear(src, f"{ours}.{a}", f"{theirs}.{old if legacy else new}", out)
    linear(src, "encoder.norm", f"{pre}layernorm", out)
    if num_classes:
        linear(src, "head", "classifier", out)
    src.check_all_taken(ignore=("pooler.dense.weight", "pooler.dense.bias"))
    return load_converted(ViT, cfg, out, src, hf)


def export(model: ViT) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """``(config, weights)`` of the Hugging Face ViT computing what ``model`` computes (see the module docstring)."""
    cfg = model.cfg
    config = {
        "model_type": "vit", "architectures": ["ViTForImageClassification" if cfg.num_classes else "ViTModel"],
        "image_size": cfg.image_size, "patch_size": cfg.patch_size, "num_channels": cfg.in_channels,
        "hidden_size": cfg.d_model, "num_attention_heads": cfg.n_heads, "num_hidden_layers": cfg.n_layers,
        "intermediate_size": cfg.d_ff, "hidden_dropout_prob": cfg.dropout,
        "attention_probs_dropout_prob": cfg.attention_dropout, "hidden_act": hf_activation(ACTIVATIONS, cfg.activation),
        "layer_norm_eps": cfg.layer_norm_eps, "qkv_bias": True, **label_names(cfg.num_classes),
    }
    src = our_weights(model, "our ViT")
    pre = "vit." if cfg.num_classes else ""
    out: dict[str, Tensor] = {f"{pre}embeddings.cls_token": src.take("cls_token"),
                              f"{pre}embeddings.position_embeddings": src.take("positions")}
    copy(src, f"{pre}embeddings.patch_embeddings.projection", "patch_embed.proj", out)
    for i in range(cfg.n_layers):
        mine, theirs = f"encoder.layers.{i}", f"{pre}encoder.layer.{i}"
        split_attention(src, f"{mine}.self_attn", theirs, out, names=QKV[True], out_proj=f"{theirs}.{OUT[True]}")
        for a, _, old in LAYER:
            copy(src, f"{theirs}.{old}", f"{mine}.{a}", out)
    copy(src, f"{pre}layernorm", "encoder.norm", out)
    if cfg.num_classes:
        copy(src, "classifier", "head", out)
    src.check_all_taken()
    return config, out
