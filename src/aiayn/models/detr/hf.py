"""DETR (``DetrForObjectDetection`` with a Hugging Face ``ResNetConfig`` backbone) -> our
:class:`~aiayn.models.detr.DETR`.

    model.backbone.model.embedder.embedder.{convolution, normalization}   -> backbone.conv1, backbone.bn1
    ...encoder.stages.s.layers.j.layer.k.{convolution, normalization}     -> backbone.stages.s.j.conv{k+1}, bn{k+1}
    ...encoder.stages.s.layers.j.shortcut.{convolution, normalization}    -> backbone.stages.s.j.downsample.0, .1
    model.input_projection                                                -> input_proj
    model.query_position_embeddings                                       -> query_embed
    model.encoder.layers.i.self_attn.{q,k,v}_proj, o_proj                 -> encoder.layers.i.self_attn.in_proj
                                                                             (q | k | v), out_proj
    model.encoder.layers.i.self_attn_layer_norm, final_layer_norm         -> encoder.layers.i.norm1, norm2
    model.encoder.layers.i.mlp.fc1, fc2                                   -> encoder.layers.i.ff.fc1, ff.fc2
    model.decoder.layers.i.self_attn, encoder_attn                        -> decoder.layers.i.self_attn, cross_attn
    model.decoder.layers.i.{self_attn, encoder_attn, final}_layer_norm    -> decoder.layers.i.norm1, norm2, norm3
    model.decoder.layernorm                                               -> decoder.norm
    class_labels_classifier, bbox_predictor.layers.k                      -> class_head, box_head.layers.k

Checkpoints on disk (saved by transformers 4, or by 5, which renames on saving and loading) name the backbone
``model.backbone.conv_encoder.model``, the attention output ``out_proj`` and the MLP ``fc1``, ``fc2``
directly under the layer; they convert as well. ``num_batches_tracked`` counters of BatchNorm (which the
frozen BatchNorm drops) are ignored. A timm backbone (the main revision of facebook/detr-resnet-50; its
``no_timm`` revision holds the same weights with a Hugging Face ResNet), learned position embeddings or a
dilated (DC5) backbone are refused by name.

Hugging Face's decoder differs from DETR's when ``auxiliary_loss=True``: it then feeds every layer the
LayerNorm-ed output of the one before (and normalises the last twice). Ours computes what DETR's
released code computes, so it equals Hugging Face's model exactly when ``auxiliary_loss=False``.

:func:`export` reads the table the other way, writing the on-disk names, with ``auxiliary_loss=False``.
It refuses pre-norm layers (``norm_first``) and a ``layer_norm_eps`` other than 1e-5, which Hugging Face's
DETR cannot express. ``backbone_frozen_stages``, which only says what training updates, goes under the
config's ``"aiayn"`` key, which ``config`` reads back.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from aiayn.models.detr.model import DETR, DetrConfig
from aiayn.models.keys import (
    Source,
    attention,
    copy,
    hf_activation,
    label_names,
    linear,
    load_converted,
    our_weights,
    refuse,
    split_attention,
)
from aiayn.models.transformer.hf import ACTIVATIONS

BN = ("weight", "bias", "running_mean", "running_var")
# (ours, theirs in transformers 5's modules, theirs on disk) per layer, besides attention
ENCODER = [("norm1", "self_attn_layer_norm", "self_attn_layer_norm"),
           ("ff.fc1", "mlp.fc1", "fc1"), ("ff.fc2", "mlp.fc2", "fc2"),
           ("norm2", "final_layer_norm", "final_layer_norm")]
DECODER = [("norm1", "self_attn_layer_norm", "self_attn_layer_norm"),
           ("norm2", "encoder_attn_layer_norm", "encoder_attn_layer_norm"),
           ("ff.fc1", "mlp.fc1", "fc1"), ("ff.fc2", "mlp.fc2", "fc2"),
           ("norm3", "final_layer_norm", "final_layer_norm")]
ATTENTION = {"encoder": [("self_attn", "self_attn")],
             "decoder": [("self_attn", "self_attn"), ("cross_attn", "encoder_attn")]}  # (ours, theirs)
BACKBONE = {False: "model.backbone.model", True: "model.backbone.conv_encoder.model"}
OUT_PROJ = {False: "o_proj", True: "out_proj"}
EXTRAS = ("backbone_frozen_stages",)  # kept under the config's "aiayn" key: no Hugging Face field says it


def config(hf: dict[str, Any]) -> DetrConfig:
    """Our config for a ``DetrConfig`` (as a dict) with a ``ResNetConfig`` backbone."""
    bb = hf.get("backbone_config") or {}
    if hf.get("use_timm_backbone") or bb.get("model_type") == "timm_backbone":
        timm = hf.get("backbone") or bb.get("backbone")
        raise ValueError(f"use_timm_backbone=True (timm's {timm!r}): only a Hugging Face ResNet backbone converts. For "
                         f"facebook/detr-resnet-50 or -101 load revision=\"no_timm\" (from_pretrained(name, "
                         f"revision=\"no_timm\"), or snapshot_download(name, revision=\"no_timm\") for a folder): "
                         f"the same weights with a transformers ResNet backbone")
    if bb.get("model_type") != "resnet":
        raise ValueError(f"backbone {bb.get('model_type') or hf.get('backbone')!r}: only a Hugging Face ResNet "
                         f"backbone converts (DetrConfig(use_timm_backbone=False, backbone_config=ResNetConfig(...)))")
    if hf["activation_function"] not in ACTIVATIONS:
        raise ValueError(f"activation_function={hf['activation_function']!r} is not one of {sorted(ACTIVATIONS)}")
    n = len(bb["depths"])
    checks = {
        "position_embedding_type": (hf.get("position_embedding_type", "sine"), "sine"),
        "dilation": (bool(hf.get("dilation")), False),
        "backbone_config.hidden_act": (bb.get("hidden_act", "relu"), "relu"),
        "backbone_config.downsample_in_first_stage": (bb.get("downsample_in_first_stage", False), False),
        "backbone_config.downsample_in_bottleneck": (bb.get("downsample_in_bottleneck", False), False),
        "backbone_config.out_indices": (list(bb.get("out_indices") or [n]), [n]),
        "encoder_attention_heads == decoder_attention_heads": (hf["encoder_attention_heads"],
                                                               hf["decoder_attention_heads"]),
        "encoder_ffn_dim == decoder_ffn_dim": (hf["encoder_ffn_dim"], hf["decoder_ffn_dim"]),
    }
    for name, (got, wanted) in checks.items():
        if got != wanted:
            raise ValueError(f"{name}: {got!r} cannot be converted (wanted {wanted!r})")
    # transformers leaves id2label out of config.json when it holds PretrainedConfig's default, 2 labels
    labels = len(hf.get("id2label") or {}) or hf.get("num_labels", 2)
    extras = {k: v for k, v in (hf.get("aiayn") or {}).items() if k in EXTRAS}
    return DetrConfig(
        num_classes=labels, num_queries=hf["num_queries"], d_model=hf["d_model"],
        n_heads=hf["encoder_attention_heads"], n_encoder_layers=hf["encoder_layers"],
        n_decoder_layers=hf["decoder_layers"], d_ff=hf["encoder_ffn_dim"], dropout=hf["dropout"],
        attention_dropout=hf["attention_dropout"], activation_dropout=hf["activation_dropout"],
        activation=ACTIVATIONS[hf["activation_function"]],
        in_channels=hf.get("num_channels", bb.get("num_channels", 3)), backbone_block=bb["layer_type"],
        backbone_stem=bb["embedding_size"], backbone_widths=tuple(bb["hidden_sizes"]),
        backbone_depths=tuple(bb["depths"]), **extras,
    )


def _conv_bn(src: Source, conv: str, bn: str, theirs: str, out: dict[str, Tensor]) -> None:
    """``theirs.convolution`` / ``theirs.normalization`` -> our conv ``conv`` and frozen BatchNorm ``bn``."""
    out[f"{conv}.weight"] = src.take(f"{theirs}.convolution.weight")
    for name in BN:
        out[f"{bn}.{name}"] = src.take(f"{theirs}.normalization.{name}")


def convert(hf: dict[str, Any], tensors: dict[str, Tensor], name: str = "DETR") -> DETR:
    """Our :class:`DETR` computing what Hugging Face's ``DetrForObjectDetection`` computes."""
    cfg = config(hf)
    src = Source(tensors, name)
    if "class_labels_classifier.weight" not in src:
        raise ValueError(f"{name} has no class_labels_classifier: only DetrForObjectDetection converts, not DetrModel")
    saved = f"{BACKBONE[True]}.embedder.embedder.convolution.weight" in src  # the names on disk
    bb = BACKBONE[saved]
    out: dict[str, Tensor] = {}
    _conv_bn(src, "backbone.conv1", "backbone.bn1", f"{bb}.embedder.embedder", out)
    for s, depth in enumerate(cfg.backbone_depths):
        for j in range(depth):
            ours, theirs = f"backbone.stages.{s}.{j}", f"{bb}.encoder.stages.{s}.layers.{j}"
            for k in range(3 if cfg.backbone_block == "bottleneck" else 2):
                _conv_bn(src, f"{ours}.conv{k + 1}", f"{ours}.bn{k + 1}", f"{theirs}.layer.{k}", out)
            if f"{theirs}.shortcut.convolution.weight" in src:
                _conv_bn(src, f"{ours}.downsample.0", f"{ours}.downsample.1", f"{theirs}.shortcut", out)
    linear(src, "input_proj", "model.input_projection", out)
    out["query_embed.weight"] = src.take("model.query_position_embeddings.weight")
    names, o = ("q_proj", "k_proj", "v_proj"), OUT_PROJ[saved]
    for side, n_layers, table in (("encoder", cfg.n_encoder_layers, ENCODER),
                                  ("decoder", cfg.n_decoder_layers, DECODER)):
        for i in range(n_layers):
            ours, theirs = f"{side}.layers.{i}", f"model.{side}.layers.{i}"
            for a, b in ATTENTION[side]:
                attention(src, f"{ours}.{a}", f"{theirs}.{b}", out, names=names, out_proj=f"{theirs}.{b}.{o}")
            for a, new, old in table:
                linear(src, f"{ours}.{a}", f"{theirs}.{old if saved else new}", out)
    linear(src, "decoder.norm", "model.decoder.layernorm", out)
    linear(src, "class_head", "class_labels_classifier", out)
    for k in range(3):
        linear(src, f"box_head.layers.{k}", f"bbox_predictor.layers.{k}", out)
    src.check_all_taken(ignore=("num_batches_tracked",))
    return load_converted(DETR, cfg, out, src, hf)


def export(model: DETR) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """``(config, weights)`` of the ``DetrForObjectDetection`` computing what ``model`` computes (module docstring)."""
    cfg = model.cfg
    if cfg.norm_first:
        refuse("norm_first", True, "Hugging Face's DETR is post-norm (LayerNorm after each residual sum)")
    if cfg.layer_norm_eps != 1e-5:
        refuse("layer_norm_eps", cfg.layer_norm_eps, "Hugging Face's DETR LayerNorms keep PyTorch's 1e-5")
    n = len(cfg.backbone_depths)
    backbone = {
        "model_type": "resnet", "num_channels": cfg.in_channels, "embedding_size": cfg.backbone_stem,
        "hidden_sizes": list(cfg.backbone_widths), "depths": list(cfg.backbone_depths),
        "layer_type": cfg.backbone_block, "hidden_act": "relu", "downsample_in_first_stage": False,
        "downsample_in_bottleneck": False, "out_features": [f"stage{n}"], "out_indices": [n],
    }
    config = {
        "model_type": "detr", "architectures": ["DetrForObjectDetection"], "use_timm_backbone": False,
        "use_pretrained_backbone": False, "backbone": None, "backbone_config": backbone,
        "num_channels": cfg.in_channels, "num_queries": cfg.num_queries, "d_model": cfg.d_model,
        "encoder_layers": cfg.n_encoder_layers, "decoder_layers": cfg.n_decoder_layers,
        "encoder_attention_heads": cfg.n_heads, "decoder_attention_heads": cfg.n_heads,
        "encoder_ffn_dim": cfg.d_ff, "decoder_ffn_dim": cfg.d_ff, "encoder_layerdrop": 0.0, "decoder_layerdrop": 0.0,
        "dropout": cfg.dropout, "attention_dropout": cfg.attention_dropout,
        "activation_dropout": cfg.activation_dropout, "activation_function": hf_activation(ACTIVATIONS, cfg.activation),
        "auxiliary_loss": False, "position_embedding_type": "sine", "dilation": False,
        **label_names(cfg.num_classes), "aiayn": {k: getattr(cfg, k) for k in EXTRAS},
    }
    src = our_weights(model, "our DETR")
    bb = BACKBONE[True]
    out: dict[str, Tensor] = {}
    _bn_conv(src, "backbone.conv1", "backbone.bn1", f"{bb}.embedder.embedder", out)
    for s, depth in enumerate(cfg.backbone_depths):
        for j in range(depth):
            mine, theirs = f"backbone.stages.{s}.{j}", f"{bb}.encoder.stages.{s}.layers.{j}"
            for k in range(3 if cfg.backbone_block == "bottleneck" else 2):
                _bn_conv(src, f"{mine}.conv{k + 1}", f"{mine}.bn{k + 1}", f"{theirs}.layer.{k}", out)
            if f"{mine}.downsample.0.weight" in src:
                _bn_conv(src, f"{mine}.downsample.0", f"{mine}.downsample.1", f"{theirs}.shortcut", out)
    copy(src, "model.input_projection", "input_proj", out)
    out["model.query_position_embeddings.weight"] = src.take("query_embed.weight")
    for side, n_layers, table in (("encoder", cfg.n_encoder_layers, ENCODER),
                                  ("decoder", cfg.n_decoder_layers, DECODER)):
        for i in range(n_layers):
            mine, theirs = f"{side}.layers.{i}", f"model.{side}.layers.{i}"
            for a, b in ATTENTION[side]:
                split_attention(src, f"{mine}.{a}", f"{theirs}.{b}", out, out_proj=f"{theirs}.{b}.{OUT_PROJ[True]}")
            for a, _, old in table:
                copy(src, f"{theirs}.{old}", f"{mine}.{a}", out)
    copy(src, "model.decoder.layernorm", "decoder.norm", out)
    copy(src, "class_labels_classifier", "class_head", out)
    for k in range(3):
        copy(src, f"bbox_predictor.layers.{k}", f"box_head.layers.{k}", out)
    src.check_all_taken()
    return config, out


def _bn_conv(src: Source, conv: str, bn: str, theirs: str, out: dict[str, Tensor]) -> None:
    """Our conv ``conv`` and frozen BatchNorm ``bn`` -> ``theirs.convolution`` / ``theirs.normalization``."""
    out[f"{theirs}.convolution.weight"] = src.take(f"{conv}.weight")
    for name in BN:
        out[f"{theirs}.normalization.{name}"] = src.take(f"{bn}.{name}")


__all__ = ["config", "convert", "export"]
