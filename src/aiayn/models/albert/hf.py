"""ALBERT (``AlbertModel``, ``AlbertForMaskedLM``, ``AlbertForPreTraining``, ``AlbertForSequenceClassification``)
-> our :class:`~aiayn.models.albert.ALBERT`.

    embeddings.word / position / token_type_embeddings    -> embed.tokens / embed.positions / embed.segments
    embeddings.LayerNorm                                   -> embed.norm
    encoder.embedding_hidden_mapping_in                    -> embed.project                    (E -> H)
    encoder.albert_layer_groups.0.albert_layers.0 (L):
        L.attention.{query,key,value}                      -> encoder.layers.0.self_attn.in_proj (fused q | k | v)
        L.attention.dense / LayerNorm                      -> encoder.layers.0.self_attn.out_proj / norm1
        L.ffn, L.ffn_output                                -> encoder.layers.0.ff.fc1, ff.fc2
        L.full_layer_layer_norm                            -> encoder.layers.0.norm2
    pooler                                                 -> pooler
    predictions.dense / LayerNorm, bias                    -> mlm.dense / mlm.norm, mlm.bias (decoder tied)
    sop_classifier.classifier                              -> nsp                              (sentence order)
    classifier                                             -> classifier
    embeddings.position_ids, embeddings.token_type_ids    -> dropped (buffers of older checkpoints)

Models with a head keep the encoder under ``albert.``; ``AlbertModel`` has no prefix. Every released ALBERT
shares one layer among all (``num_hidden_groups=1``, ``inner_group_num=1``); a config with several groups
or several layers per group is refused, naming the field.

:func:`export` reads the table the other way, to the class our head names (``HF_CLASSES``); the tied
decoder weight and bias are left out, as ``save_pretrained`` leaves them out. ``AlbertForMaskedLM`` has no
pooler, so an ``mlm`` model's pooler (which its head never uses) is not written and comes back zero. Our
[CLS] [SEP] [MASK] ids, which a Hugging Face config does not hold, go under the config's ``"aiayn"`` key,
which ``config`` reads back; without it they are ALBERT's (and aiayn's WordPiece) 2, 3 and 4. Every config of
ours is an ALBERT config, so nothing is refused; a ``pretraining`` model is written with ``num_labels`` 2 (the
sentence-order head's classes), whatever its own unused ``num_labels`` says.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from aiayn.models.albert.model import ALBERT, AlbertConfig
from aiayn.models.bert.hf import ACTIVATIONS
from aiayn.models.keys import (
    Source,
    attention,
    copy,
    hf_activation,
    label_names,
    linear,
    load_converted,
    our_weights,
    split_attention,
)

LAYER = "encoder.albert_layer_groups.0.albert_layers.0"  # the one layer, shared
# (ours, theirs) in the layer besides attention's projections
PARTS = [("norm1", "attention.LayerNorm"), ("ff.fc1", "ffn"), ("ff.fc2", "ffn_output"),
         ("norm2", "full_layer_layer_norm")]
HF_CLASSES = {"none": "AlbertModel", "mlm": "AlbertForMaskedLM", "pretraining": "AlbertForPreTraining",
              "classification": "AlbertForSequenceClassification"}
SPECIALS = ("cls_id", "sep_id", "mask_id")


def config(hf: dict[str, Any], head: str) -> AlbertConfig:
    """Our config for an ``AlbertConfig`` (as a dict) with the given head.

    Raises:
        ValueError: several layer groups or layers per group, relative positions, or an activation we do not
            have (naming the field and its value).
    """
    for field in ("num_hidden_groups", "inner_group_num"):
        if hf.get(field, 1) != 1:
            raise ValueError(f"{field}={hf[field]}: only 1 converts (one layer shared by all, as every released "
                             f"ALBERT)")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"position_embedding_type={hf['position_embedding_type']!r}: only 'absolute' converts")
    if hf["hidden_act"] not in ACTIVATIONS:
        raise ValueError(f"hidden_act={hf['hidden_act']!r} is not one of {sorted(ACTIVATIONS)}")
    labels = len(hf.get("id2label") or {}) or hf.get("num_labels", 2)
    kept = {k: v for k, v in (hf.get("aiayn") or {}).items() if k in SPECIALS}  # a folder export wrote
    return AlbertConfig(
        vocab_size=hf["vocab_size"], max_len=hf["max_position_embeddings"], type_vocab_size=hf["type_vocab_size"],
        embedding_size=hf["embedding_size"], d_model=hf["hidden_size"], n_heads=hf["num_attention_heads"],
        n_layers=hf["num_hidden_layers"], d_ff=hf["intermediate_size"], dropout=hf["hidden_dropout_prob"],
        attention_dropout=hf["attention_probs_dropout_prob"], classifier_dropout=hf.get("classifier_dropout_prob", 0.1),
        activation=ACTIVATIONS[hf["hidden_act"]], layer_norm_eps=hf["layer_norm_eps"], head=head, num_labels=labels,
        pad_id=hf.get("pad_token_id") or 0, **kept,
    )


def _head(src: Source) -> str:
    if "sop_classifier.classifier.weight" in src:
        return "pretraining"
    if "predictions.bias" in src:
        return "mlm"
    if "classifier.weight" in src:
        return "classification"
    return "none"


def convert(hf: dict[str, Any], tensors: dict[str, Tensor], name: str = "ALBERT") -> ALBERT:
    """Our :class:`ALBERT` (with the head the weights carry) computing what the Hugging Face ALBERT computes.

    Raises:
        ValueError: a head we do not compute (``AlbertForTokenClassification``, ...), a config :func:`config`
            refuses, a sentence-order head of other than 2 classes, or missing, unexpected or misshapen weights.
    """
    src = Source(tensors, name)
    if other := [c for c in hf.get("architectures") or [] if c not in HF_CLASSES.values()]:
        raise ValueError(f"{name}: {other[0]} cannot be converted (its head is not ours); "
                         f"known: {', '.join(HF_CLASSES.values())}")
    cfg = config(hf, _head(src))
    pre = "albert." if "albert.embeddings.word_embeddings.weight" in src else ""
    out: dict[str, Tensor] = {
        "embed.tokens.weight": src.take(f"{pre}embeddings.word_embeddings.weight"),
        "embed.positions.weight": src.take(f"{pre}embeddings.position_embeddings.weight"),
        "embed.segments.weight": src.take(f"{pre}embeddings.token_type_embeddings.weight"),
    }
    linear(src, "embed.norm", f"{pre}embeddings.LayerNorm", out)
    linear(src, "embed.project", f"{pre}encoder.embedding_hidden_mapping_in", out)
    ours, theirs = "encoder.layers.0", f"{pre}{LAYER}"
    attention(src, f"{ours}.self_attn", f"{theirs}.attention", out, names=("query", "key", "value"),
              out_proj=f"{theirs}.attention.dense")
    for a, b in PARTS:
        linear(src, f"{ours}.{a}", f"{theirs}.{b}", out)
    if f"{pre}pooler.weight" in src:
        linear(src, "pooler", f"{pre}pooler", out)
    else:  # AlbertForMaskedLM has no pooler; ours is then unused, left at zero (sized by the weights, not the
        h = out["embed.project.weight"].size(0)  # config: load_converted checks that one before allocating it)
        out["pooler.weight"], out["pooler.bias"] = torch.zeros(h, h), torch.zeros(h)
    if cfg.head in ("pretraining", "mlm"):
        linear(src, "mlm.dense", "predictions.dense", out)
        linear(src, "mlm.norm", "predictions.LayerNorm", out)
        out["mlm.bias"] = src.take("predictions.bias")
        src.alias("predictions.decoder.bias", out["mlm.bias"])
        src.alias("predictions.decoder.weight", out["embed.tokens.weight"])
        out["mlm.tokens.weight"] = out["embed.tokens.weight"]
    if cfg.head == "pretraining":
        if (classes := src.tensors["sop_classifier.classifier.weight"].size(0)) != 2:
            raise ValueError(f"{name}: its sentence-order head has {classes} classes (num_labels={classes}); "
                             f"ours, BERT's next-sentence head, has 2")
        linear(src, "nsp", "sop_classifier.classifier", out)
    if cfg.head == "classification":
        linear(src, "classifier", "classifier", out)
    src.check_all_taken(ignore=("embeddings.position_ids", "embeddings.token_type_ids"))
    return load_converted(ALBERT, cfg, out, src, hf)


def export(model: ALBERT) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """``(config, weights)`` of the Hugging Face ALBERT (``HF_CLASSES[head]``) computing what ``model`` computes."""
    cfg = model.cfg
    config = {
        "model_type": "albert", "architectures": [HF_CLASSES[cfg.head]], "vocab_size": cfg.vocab_size,
        "embedding_size": cfg.embedding_size, "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layers,
        "num_hidden_groups": 1, "inner_group_num": 1, "num_attention_heads": cfg.n_heads,
        "intermediate_size": cfg.d_ff, "hidden_act": hf_activation(ACTIVATIONS, cfg.activation),
        "hidden_dropout_prob": cfg.dropout, "attention_probs_dropout_prob": cfg.attention_dropout,
        "classifier_dropout_prob": cfg.classifier_dropout, "max_position_embeddings": cfg.max_len,
        "type_vocab_size": cfg.type_vocab_size, "layer_norm_eps": cfg.layer_norm_eps, "pad_token_id": cfg.pad_id,
        "bos_token_id": cfg.cls_id, "eos_token_id": cfg.sep_id, "tie_word_embeddings": True,
        # AlbertForPreTraining sizes its sentence-order head by num_labels: 2, whatever ours says (it has no use)
        **label_names(2 if cfg.head == "pretraining" else cfg.num_labels),
        "aiayn": {k: getattr(cfg, k) for k in SPECIALS},
    }
    src = our_weights(model, "our ALBERT")
    pre = "" if cfg.head == "none" else "albert."
    out: dict[str, Tensor] = {
        f"{pre}embeddings.word_embeddings.weight": src.take("embed.tokens.weight"),
        f"{pre}embeddings.position_embeddings.weight": src.take("embed.positions.weight"),
        f"{pre}embeddings.token_type_embeddings.weight": src.take("embed.segments.weight"),
    }
    copy(src, f"{pre}embeddings.LayerNorm", "embed.norm", out)
    copy(src, f"{pre}encoder.embedding_hidden_mapping_in", "embed.project", out)
    mine, theirs = "encoder.layers.0", f"{pre}{LAYER}"
    split_attention(src, f"{mine}.self_attn", f"{theirs}.attention", out, names=("query", "key", "value"),
                    out_proj=f"{theirs}.attention.dense")
    for a, b in PARTS:
        copy(src, f"{theirs}.{b}", f"{mine}.{a}", out)
    if cfg.head == "mlm":  # AlbertForMaskedLM has no pooler; ours is unused
        for key in ("pooler.weight", "pooler.bias"):
            src.take(key)
    else:
        copy(src, f"{pre}pooler", "pooler", out)
    if cfg.head in ("pretraining", "mlm"):
        copy(src, "predictions.dense", "mlm.dense", out)
        copy(src, "predictions.LayerNorm", "mlm.norm", out)
        out["predictions.bias"] = src.take("mlm.bias")
        src.alias("mlm.tokens.weight", out[f"{pre}embeddings.word_embeddings.weight"])
    if cfg.head == "pretraining":
        copy(src, "sop_classifier.classifier", "nsp", out)
    if cfg.head == "classification":
        copy(src, "classifier", "classifier", out)
    src.check_all_taken()
    return config, out


__all__ = ["HF_CLASSES", "config", "convert", "export"]
