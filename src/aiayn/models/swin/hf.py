"""Swin (``SwinModel``, ``SwinForImageClassification``) -> our :class:`~aiayn.models.swin.Swin`.

    embeddings.patch_embeddings.projection / embeddings.norm     -> patch_embed.proj / patch_embed.norm
    encoder.layers.i.blocks.j.layernorm_before / layernorm_after -> stages.i.blocks.j.norm1 / norm2
    ....attention.{q,k,v}_proj, attention.o_proj                  -> stages.i.blocks.j.attn.in_proj (fused), out_proj
    ....attention.relative_position_bias.relative_position_bias_table -> stages.i.blocks.j.relative_position.table
    ....mlp.fc1, mlp.fc2                                           -> stages.i.blocks.j.ff.fc1, ff.fc2
    encoder.layers.i.downsample.norm / reduction                  -> stages.(i+1).merge.norm / reduction
    layernorm                                                      -> norm
    classifier                                                     -> head   (average of the map -> Linear)

Hugging Face merges patches at the end of a stage, the paper (and we) at the start of the next. Checkpoints
saved by transformers 4 name the attention ``attention.self.{query,key,value}``,
``attention.self.relative_position_bias_table``, ``attention.output.dense``, the MLP ``intermediate.dense``
and ``output.dense``; they convert as well, and their ``relative_position_index`` buffers (which follow from
the window size) are checked against ours and dropped. Models with a head keep the encoder under ``swin.``.
``SwinModel``'s pooler is an average with no weights: a ``SwinModel`` converts to a headless Swin
(``num_classes=0``) whose ``model(images)`` is ``pooler_output``.

:func:`export` reads the table the other way, writing the names ``save_pretrained`` writes (transformers 4's,
without the index buffers transformers 5 computes): ``SwinForImageClassification``, or ``SwinModel`` for a
headless Swin. It refuses a ``layer_norm_eps`` other than 1e-5, which Hugging Face's patch-embedding and
patch-merging norms could not follow.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from aiayn.layers.vision import relative_position_index
from aiayn.models.keys import Source, copy, fused, label_names, linear, load_converted, our_weights, refuse, split_qkv
from aiayn.models.swin.model import Swin, SwinConfig
from aiayn.models.vit.hf import ACTIVATIONS, _square

# (ours, theirs in transformers 5, theirs in transformers 4) per block
BLOCK = [("norm1", "layernorm_before", "layernorm_before"), ("norm2", "layernorm_after", "layernorm_after"),
         ("ff.fc1", "mlp.fc1", "intermediate.dense"), ("ff.fc2", "mlp.fc2", "output.dense"),
         ("attn.out_proj", "attention.o_proj", "attention.output.dense")]
QKV = {False: ("attention.q_proj", "attention.k_proj", "attention.v_proj"),
       True: ("attention.self.query", "attention.self.key", "attention.self.value")}
TABLE = {False: "attention.relative_position_bias.relative_position_bias_table",
         True: "attention.self.relative_position_bias_table"}


def config(hf: dict[str, Any], num_classes: int) -> SwinConfig:
    """Our config for a ``SwinConfig`` (as a dict) with ``num_classes`` classes (0: no head)."""
    if hf.get("use_absolute_embeddings", False):
        raise ValueError("use_absolute_embeddings=True: only Swin without absolute position embeddings converts")
    if not hf.get("qkv_bias", True):
        raise ValueError("qkv_bias=False: only Swin with query/key/value biases converts")
    if hf["hidden_act"] not in ACTIVATIONS or ACTIVATIONS[hf["hidden_act"]] != "gelu":
        raise ValueError(f"hidden_act={hf['hidden_act']!r}: only 'gelu' (Swin's) converts")
    # Hugging Face's patch-embedding and patch-merging norms keep LayerNorm's default eps, 1e-5; ours use one eps
    if hf["layer_norm_eps"] != 1e-5:
        raise ValueError(f"layer_norm_eps={hf['layer_norm_eps']}: only 1e-5 converts (every norm of ours uses it)")
    return SwinConfig(
        image_size=_square(hf, "image_size"), patch_size=_square(hf, "patch_size"), in_channels=hf["num_channels"],
        num_classes=num_classes, d_model=hf["embed_dim"], n_layers=tuple(hf["depths"]), n_heads=tuple(hf["num_heads"]),
        window_size=hf["window_size"], mlp_ratio=hf["mlp_ratio"], dropout=hf["hidden_dropout_prob"],
        attention_dropout=hf["attention_probs_dropout_prob"], drop_path=hf["drop_path_rate"],
        layer_norm_eps=hf["layer_norm_eps"],
    )


def convert(hf: dict[str, Any], tensors: dict[str, Tensor], name: str = "Swin") -> Swin:
    """Our :class:`Swin` computing what the Hugging Face Swin with config ``hf`` and weights ``tensors`` computes."""
    src = Source(tensors, name)
    pre = "swin." if "swin.layernorm.weight" in src else ""
    num_classes = src.tensors["classifier.weight"].size(0) if "classifier.weight" in src else 0
    cfg = config(hf, num_classes)
    legacy = f"{pre}encoder.layers.0.blocks.0.attention.self.query.weight" in src  # transformers 4 names
    out: dict[str, Tensor] = {}
    linear(src, "patch_embed.proj", f"{pre}embeddings.patch_embeddings.projection", out)
    linear(src, "patch_embed.norm", f"{pre}embeddings.norm", out)
    for i, depth in enumerate(cfg.n_layers):
        for j in range(depth):
            ours, theirs = f"stages.{i}.blocks.{j}", f"{pre}encoder.layers.{i}.blocks.{j}"
            q, k, v = (f"{theirs}.{n}" for n in QKV[legacy])
            out[f"{ours}.attn.in_proj.weight"] = fused(*(src.take(f"{p}.weight") for p in (q, k, v)))
            out[f"{ours}.attn.in_proj.bias"] = fused(*(src.take(f"{p}.bias") for p in (q, k, v)))
            out[f"{ours}.relative_position.table"] = src.take(f"{theirs}.{TABLE[legacy]}")
            for a, new, old in BLOCK:
                linear(src, f"{ours}.{a}", f"{theirs}.{old if legacy else new}", out)
            stored = f"{theirs}.attention.self.relative_position_index"
            if stored in src:
                _check_index(src, stored, cfg.window_size)
        if i > 0:
            linear(src, f"stages.{i}.merge.norm", f"{pre}encoder.layers.{i - 1}.downsample.norm", out)
            linear(src, f"stages.{i}.merge.reduction", f"{pre}encoder.layers.{i - 1}.downsample.reduction", out,
                   bias=False)
    linear(src, "norm", f"{pre}layernorm", out)
    if num_classes:
        linear(src, "head", "classifier", out)
    src.check_all_taken()
    return load_converted(Swin, cfg, out, src, hf)


def _check_index(src: Source, key: str, window: int) -> None:
    """The stored ``relative_position_index`` ``key`` must be ours for ``window`` (the config's window_size)."""
    stored = src.take(key).flatten()
    # its size first: ours has window^4 entries, which a config claiming a huge window would make huge
    if stored.numel() != window**4 or not stored.equal(relative_position_index(window).flatten().to(stored.dtype)):
        raise ValueError(f"{src.name}: {key} is not the relative position index of window {window} (window_size)")


def export(model: Swin) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """``(config, weights)`` of the Hugging Face Swin computing what ``model`` computes (see the module docstring)."""
    cfg = model.cfg
    if cfg.layer_norm_eps != 1e-5:
        refuse("layer_norm_eps", cfg.layer_norm_eps, "Hugging Face's patch-embedding and patch-merging LayerNorms "
               "keep PyTorch's 1e-5")
    config = {
        "model_type": "swin", "architectures": ["SwinForImageClassification" if cfg.num_classes else "SwinModel"],
        "image_size": cfg.image_size, "patch_size": cfg.patch_size, "num_channels": cfg.in_channels,
        "embed_dim": cfg.d_model, "depths": list(cfg.n_layers), "num_heads": list(cfg.n_heads),
        "window_size": cfg.window_size, "mlp_ratio": cfg.mlp_ratio, "qkv_bias": True, "hidden_act": "gelu",
        "hidden_dropout_prob": cfg.dropout, "attention_probs_dropout_prob": cfg.attention_dropout,
        "drop_path_rate": cfg.drop_path, "use_absolute_embeddings": False, "layer_norm_eps": cfg.layer_norm_eps,
        **label_names(cfg.num_classes),
    }
    src = our_weights(model, "our Swin")
    pre = "swin." if cfg.num_classes else ""
    out: dict[str, Tensor] = {}
    copy(src, f"{pre}embeddings.patch_embeddings.projection", "patch_embed.proj", out)
    copy(src, f"{pre}embeddings.norm", "patch_embed.norm", out)
    for i, depth in enumerate(cfg.n_layers):
        for j in range(depth):
            mine, theirs = f"stages.{i}.blocks.{j}", f"{pre}encoder.layers.{i}.blocks.{j}"
            q, k, v = (f"{theirs}.{n}" for n in QKV[True])
            split_qkv(src, f"{mine}.attn.in_proj", (q, k, v), out)
            out[f"{theirs}.{TABLE[True]}"] = src.take(f"{mine}.relative_position.table")
            for a, _, old in BLOCK:
                copy(src, f"{theirs}.{old}", f"{mine}.{a}", out)
        if i > 0:
            copy(src, f"{pre}encoder.layers.{i - 1}.downsample.norm", f"stages.{i}.merge.norm", out)
            copy(src, f"{pre}encoder.layers.{i - 1}.downsample.reduction", f"stages.{i}.merge.reduction", out,
                 bias=False)
    copy(src, f"{pre}layernorm", "norm", out)
    if cfg.num_classes:
        copy(src, "classifier", "head", out)
    src.check_all_taken()
    return config, out
