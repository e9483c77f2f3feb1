"""DistilBERT (``DistilBertModel``, ``DistilBertForMaskedLM``, ``DistilBertForSequenceClassification``)
-> our :class:`~aiayn.models.distilbert.DistilBERT`, and back.

    embeddings.word_embeddings / position_embeddings      -> embed.tokens / embed.positions
    embeddings.LayerNorm                                  -> embed.norm
    transformer.layer.i.attention.{q_lin,k_lin,v_lin}     -> encoder.layers.i.self_attn.in_proj (fused q | k | v)
    transformer.layer.i.attention.out_lin                 -> encoder.layers.i.self_attn.out_proj
    transformer.layer.i.sa_layer_norm                     -> encoder.layers.i.norm1
    transformer.layer.i.ffn.lin1, ffn.lin2                -> encoder.layers.i.ff.fc1, ff.fc2
    transformer.layer.i.output_layer_norm                 -> encoder.layers.i.norm2
    vocab_transform / vocab_layer_norm, vocab_projector   -> mlm.dense / mlm.norm, mlm.bias (weight tied)
    pre_classifier, classifier                            -> pre_classifier, classifier
    embeddings.position_ids                               -> dropped (a buffer of older checkpoints)

Models with a head keep the encoder under ``distilbert.``; ``DistilBertModel`` has no prefix.

:func:`export` reads the table the other way, to the class our head names (``HF_CLASSES``); the tied
``vocab_projector.weight`` is left out, as ``save_pretrained`` leaves it out. Our [CLS] [SEP] [MASK] ids, which a
Hugging Face config does not hold, go under the config's ``"aiayn"`` key, which :func:`config` reads back.
Refused, by name: sinusoidal position tables (``sinusoidal_pos_embds=True``) when converting, and, when
exporting, a ``layer_norm_eps`` other than 1e-12 (Hugging Face's DistilBERT fixes it) or an activation it
does not name.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from aiayn.models.bert.hf import ACTIVATIONS, SPECIALS, specials
from aiayn.models.distilbert.model import DistilBERT, DistilBertConfig
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

LAYER_NORM_EPS = 1e-12  # every LayerNorm of Hugging Face's DistilBERT, fixed in its code
# (ours, theirs) per layer besides attention
LAYER = [("norm1", "sa_layer_norm"), ("ff.fc1", "ffn.lin1"), ("ff.fc2", "ffn.lin2"), ("norm2", "output_layer_norm")]
HF_CLASSES = {"none": "DistilBertModel", "mlm": "DistilBertForMaskedLM",
              "classification": "DistilBertForSequenceClassification"}


def config(hf: dict[str, Any], head: str) -> DistilBertConfig:
    """Our config for a ``DistilBertConfig`` (as a dict) with the given head."""
    if hf.get("sinusoidal_pos_embds"):
        raise ValueError("sinusoidal_pos_embds=True: only learned position tables convert (our DistilBERT "
                         "learns its positions)")
    if hf["activation"] not in ACTIVATIONS:
        raise ValueError(f"activation={hf['activation']!r} is not one of {sorted(ACTIVATIONS)}")
    labels = len(hf.get("id2label") or {}) or hf.get("num_labels", 2)
    return DistilBertConfig(
        vocab_size=hf["vocab_size"], max_len=hf["max_position_embeddings"], d_model=hf["dim"], n_heads=hf["n_heads"],
        n_layers=hf["n_layers"], d_ff=hf["hidden_dim"], dropout=hf["dropout"],
        attention_dropout=hf["attention_dropout"], activation=ACTIVATIONS[hf["activation"]],
        layer_norm_eps=LAYER_NORM_EPS, head=head, num_labels=labels,
        classifier_dropout=hf.get("seq_classif_dropout", 0.2), pad_id=hf.get("pad_token_id") or 0, **specials(hf),
    )


def _head(src: Source) -> str:
    if "vocab_projector.bias" in src:
        return "mlm"
    if "pre_classifier.weight" in src:
        return "classification"
    return "none"


def convert(hf: dict[str, Any], tensors: dict[str, Tensor], name: str = "DistilBERT") -> DistilBERT:
    """Our :class:`DistilBERT` (with the head the weights carry) computing what the Hugging Face one computes."""
    src = Source(tensors, name)
    if other := [c for c in hf.get("architectures") or [] if c not in HF_CLASSES.values()]:
        raise ValueError(f"{name}: {other[0]} cannot be converted (its head is not ours); "
                         f"known: {', '.join(HF_CLASSES.values())}")
    cfg = config(hf, _head(src))
    pre = "distilbert." if "distilbert.embeddings.word_embeddings.weight" in src else ""
    out: dict[str, Tensor] = {
        "embed.tokens.weight": src.take(f"{pre}embeddings.word_embeddings.weight"),
        "embed.positions.weight": src.take(f"{pre}embeddings.position_embeddings.weight"),
    }
    linear(src, "embed.norm", f"{pre}embeddings.LayerNorm", out)
    for i in range(cfg.n_layers):
        ours, theirs = f"encoder.layers.{i}", f"{pre}transformer.layer.{i}"
        attention(src, f"{ours}.self_attn", f"{theirs}.attention", out, names=("q_lin", "k_lin", "v_lin"),
                  out_proj=f"{theirs}.attention.out_lin")
        for a, b in LAYER:
            linear(src, f"{ours}.{a}", f"{theirs}.{b}", out)
    if cfg.head == "mlm":
        linear(src, "mlm.dense", "vocab_transform", out)
        linear(src, "mlm.norm", "vocab_layer_norm", out)
        out["mlm.bias"] = src.take("vocab_projector.bias")
        src.alias("vocab_projector.weight", out["embed.tokens.weight"])
        out["mlm.tokens.weight"] = out["embed.tokens.weight"]
    if cfg.head == "classification":
        linear(src, "pre_classifier", "pre_classifier", out)
        linear(src, "classifier", "classifier", out)
    src.check_all_taken(ignore=("embeddings.position_ids",))
    return load_converted(DistilBERT, cfg, out, src, hf)


def export(model: DistilBERT) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """``(config, weights)`` of the Hugging Face DistilBERT (``HF_CLASSES[head]``) computing what ``model`` computes.

    Raises:
        ValueError: ``layer_norm_eps`` other than 1e-12, or an activation Hugging Face does not name.
    """
    cfg = model.cfg
    if cfg.layer_norm_eps != LAYER_NORM_EPS:
        refuse("layer_norm_eps", cfg.layer_norm_eps, f"Hugging Face's DistilBERT fixes it at {LAYER_NORM_EPS}")
    config = {
        "model_type": "distilbert", "architectures": [HF_CLASSES[cfg.head]], "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.max_len, "sinusoidal_pos_embds": False, "dim": cfg.d_model,
        "n_heads": cfg.n_heads, "n_layers": cfg.n_layers, "hidden_dim": cfg.d_ff, "dropout": cfg.dropout,
        "attention_dropout": cfg.attention_dropout, "activation": hf_activation(ACTIVATIONS, cfg.activation),
        "seq_classif_dropout": cfg.classifier_dropout, "pad_token_id": cfg.pad_id, "tie_word_embeddings": True,
        **label_names(cfg.num_labels), "aiayn": {k: getattr(cfg, k) for k in SPECIALS},
    }
    src = our_weights(model, "our DistilBERT")
    pre = "" if cfg.head == "none" else "distilbert."
    out: dict[str, Tensor] = {
        f"{pre}embeddings.word_embeddings.weight": src.take("embed.tokens.weight"),
        f"{pre}embeddings.position_embeddings.weight": src.take("embed.positions.weight"),
    }
    copy(src, f"{pre}embeddings.LayerNorm", "embed.norm", out)
    for i in range(cfg.n_layers):
        mine, theirs = f"encoder.layers.{i}", f"{pre}transformer.layer.{i}"
        split_attention(src, f"{mine}.self_attn", f"{theirs}.attention", out, names=("q_lin", "k_lin", "v_lin"),
                        out_proj=f"{theirs}.attention.out_lin")
        for a, b in LAYER:
            copy(src, f"{theirs}.{b}", f"{mine}.{a}", out)
    if cfg.head == "mlm":
        copy(src, "vocab_transform", "mlm.dense", out)
        copy(src, "vocab_layer_norm", "mlm.norm", out)
        out["vocab_projector.bias"] = src.take("mlm.bias")
        src.alias("mlm.tokens.weight", out[f"{pre}embeddings.word_embeddings.weight"])
    if cfg.head == "classification":
        copy(src, "pre_classifier", "pre_classifier", out)
        copy(src, "classifier", "classifier", out)
    src.check_all_taken()
    return config, out
