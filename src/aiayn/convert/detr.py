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

``num_batches_tracked`` counters of BatchNorm (which the frozen BatchNorm drops) are ignored. A timm
backbone, learned position embeddings or a dilated (DC5) backbone are refused by name.

Hugging Face's decoder differs from DETR's when ``auxiliary_loss=True``: it then feeds every layer the
LayerNorm-ed output of the one before (and normalises the last twice). Ours computes what DETR's
released code computes, so it equals Hugging Face's model exactly when ``auxiliary_loss=False``.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from aiayn.convert.common import Source, attention, linear, load_converted
from aiayn.models.detr import DETR, DetrConfig

BN = ("weight", "bias", "running_mean", "running_var")
ENCODER = [("norm1", "self_attn_layer_norm"),
           ("ff.fc1", "mlp.fc1"), ("ff.fc2", "mlp.fc2"),
           ("norm2", "final_layer_norm")]
DECODER = [("norm1", "self_attn_layer_norm"), ("norm2", "encoder_attn_layer_norm"), ("ff.fc1", "mlp.fc1"),
           ("ff.fc2", "mlp.fc2"), ("norm3", "final_layer_norm")]


def config(hf: dict[str, Any]) -> DetrConfig:
    """Our config for a ``DetrConfig`` (as a dict) with a ``ResNetConfig`` backbone."""
    bb = hf.get("backbone_config") or {}
    if hf.get("use_timm_backbone") or bb.get("model_type") != "resnet":
        raise ValueError(f"backbone {bb.get('model_type') or hf.get('backbone')!r}: only a Hugging Face ResNet "
                         f"backbone converts (DetrConfig(use_timm_backbone=False, backbone_config=ResNetConfig(...)))")
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
    labels = len(hf.get("id2label") or {}) or hf.get("num_labels", 91)
    return DetrConfig(
        num_classes=labels, num_queries=hf["num_queries"], d_model=hf["d_model"],
        n_heads=hf["encoder_attention_heads"], n_encoder_layers=hf["encoder_layers"],
        n_decoder_layers=hf["decoder_layers"], d_ff=hf["encoder_ffn_dim"], dropout=hf["dropout"],
        attention_dropout=hf["attention_dropout"], activation_dropout=hf["activation_dropout"],
        activation=hf["activation_function"], in_channels=hf.get("num_channels", bb.get("num_channels", 3)),
        backbone_block=bb["layer_type"], backbone_stem=bb["embedding_size"],
        backbone_widths=tuple(bb["hidden_sizes"]), backbone_depths=tuple(bb["depths"]),
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
    bb = "model.backbone.model"
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
    names = ("q_proj", "k_proj", "v_proj")
    for i in range(cfg.n_encoder_layers):
        ours, theirs = f"encoder.layers.{i}", f"model.encoder.layers.{i}"
        attention(src, f"{ours}.self_attn", f"{theirs}.self_attn", out, names=names,
                  out_proj=f"{theirs}.self_attn.o_proj")
        for a, b in ENCODER:
            linear(src, f"{ours}.{a}", f"{theirs}.{b}", out)
    for i in range(cfg.n_decoder_layers):
        ours, theirs = f"decoder.layers.{i}", f"model.decoder.layers.{i}"
        attention(src, f"{ours}.self_attn", f"{theirs}.self_attn", out, names=names,
                  out_proj=f"{theirs}.self_attn.o_proj")
        attention(src, f"{ours}.cross_attn", f"{theirs}.encoder_attn", out, names=names,
                  out_proj=f"{theirs}.encoder_attn.o_proj")
        for a, b in DECODER:
            linear(src, f"{ours}.{a}", f"{theirs}.{b}", out)
    linear(src, "decoder.norm", "model.decoder.layernorm", out)
    linear(src, "class_head", "class_labels_classifier", out)
    for k in range(3):
        linear(src, f"box_head.layers.{k}", f"bbox_predictor.layers.{k}", out)
    src.check_all_taken(ignore=("num_batches_tracked",))
    return load_converted(DETR(cfg), out, name)


__all__ = ["config", "convert"]
