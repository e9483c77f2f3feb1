"""BERT (``BertModel``, ``BertForMaskedLM``, ``BertForPreTraining``, ``BertForSequenceClassification``)
-> our :class:`~aiayn.models.bert.BERT`.

    embeddings.word / position / token_type_embeddings   -> embed.tokens / embed.positions / embed.segments
    embeddings.LayerNorm                                  -> embed.norm
    encoder.layer.i.attention.self.{query,key,value}      -> encoder.layers.i.self_attn.in_proj (fused q | k | v)
    encoder.layer.i.attention.output.dense / LayerNorm    -> encoder.layers.i.self_attn.out_proj / norm1
    encoder.layer.i.intermediate.dense, output.dense      -> encoder.layers.i.ff.fc1, ff.fc2
    encoder.layer.i.output.LayerNorm                      -> encoder.layers.i.norm2
    pooler.dense                                          -> pooler
    cls.predictions.transform.dense / LayerNorm, bias     -> mlm.dense / mlm.norm, mlm.bias (decoder tied)
    cls.seq_relationship                                  -> nsp
    classifier                                            -> classifier
    embeddings.position_ids                               -> dropped (a buffer of older checkpoints)

Models with a head keep the encoder under ``bert.``; ``BertModel`` has no prefix.

:func:`export` reads the table the other way, to the class our head names (``HF_CLASSES``); the tied
decoder weight and bias are left out, as ``save_pretrained`` leaves them out. ``BertForMaskedLM`` has no
pooler, so an ``mlm`` model's pooler (which its head never uses) is not written and comes back zero. Our
[CLS] [SEP] [MASK] ids, which a Hugging Face config does not hold, go under the config's ``"aiayn"`` key,
which ``config`` reads back. Every config of ours is a BERT config except one without segment embeddings
(``type_vocab_size=0``), which is refused.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from aiayn.models.bert.model import BERT, BertConfig
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

ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu",
               "silu": "silu", "swish": "silu"}
# (ours, theirs) per layer besides attention
LAYER = [("norm1", "attention.output.LayerNorm"), ("ff.fc1", "intermediate.dense"), ("ff.fc2", "output.dense"),
         ("norm2", "output.LayerNorm")]
HF_CLASSES = {"none": "BertModel", "mlm": "BertForMaskedLM", "pretraining": "BertForPreTraining",
              "classification": "BertForSequenceClassification"}
SPECIALS = ("cls_id", "sep_id", "mask_id")


def config(hf: dict[str, Any], head: str) -> BertConfig:
    """Our config for a ``BertConfig`` (as a dict) with the given head."""
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"position_embedding_type={hf['position_embedding_type']!r}: only 'absolute' converts")
    if hf["hidden_act"] not in ACTIVATIONS:
        raise ValueError(f"hidden_act={hf['hidden_act']!r} is not one of {sorted(ACTIVATIONS)}")
    labels = len(hf.get("id2label") or {}) or hf.get("num_labels", 2)
    return BertConfig(
        vocab_size=hf["vocab_size"], max_len=hf["max_position_embeddings"], type_vocab_size=hf["type_vocab_size"],
        d_model=hf["hidden_size"], n_heads=hf["num_attention_heads"], n_layers=hf["num_hidden_layers"],
        d_ff=hf["intermediate_size"], dropout=hf["hidden_dropout_prob"],
        attention_dropout=hf["attention_probs_dropout_prob"], activation=ACTIVATIONS[hf["hidden_act"]],
        layer_norm_eps=hf["layer_norm_eps"], head=head, num_labels=labels, pad_id=hf.get("pad_token_id") or 0,
        **specials(hf),
    )


def specials(hf: dict[str, Any]) -> dict[str, int]:
    # A folder :func:`export` wrote keeps our ids. Otherwise: BERT's WordPiece vocabularies put [CLS] [SEP]
    # [MASK] at 101-103; smaller ones (ours, tests) follow aiayn.data.wordpiece's order, [CLS] 2, [SEP] 3, [MASK] 4.
    kept = {k: v for k, v in (hf.get("aiayn") or {}).items() if k in SPECIALS}
    return kept or ({} if hf["vocab_size"] > 103 else {"cls_id": 2, "sep_id": 3, "mask_id": 4})


def _head(src: Source) -> str:
    if "cls.seq_relationship.weight" in src:
        return "pretraining"
    if "cls.predictions.bias" in src:
        return "mlm"
    if "classifier.weight" in src:
        return "classification"
    return "none"


def check_bidirectional(hf: dict[str, Any], name: str, classes: dict[str, str], causal: str) -> None:
    """Refuse a causal model (``is_decoder``, the ``causal`` class) or a head other than ``classes`` (by its
    ``architectures``), naming them: what a BERT-shaped family refuses before reading a weight."""
    if hf.get("is_decoder"):
        raise ValueError(f"{name}: is_decoder=True ({causal}) attends causally; only the bidirectional model "
                         f"converts")
    if other := [c for c in hf.get("architectures") or [] if c not in classes.values()]:
        raise ValueError(f"{name}: {other[0]} cannot be converted (its head is not ours); "
                         f"known: {', '.join(classes.values())}")


def encoder_from_hf(src: Source, pre: str, n_layers: int, out: dict[str, Tensor]) -> None:
    """BERT's embeddings and encoder layers under ``pre`` (``"bert."``, ``"roberta."`` or ``""``) -> ours."""
    out["embed.tokens.weight"] = src.take(f"{pre}embeddings.word_embeddings.weight")
    out["embed.positions.weight"] = src.take(f"{pre}embeddings.position_embeddings.weight")
    out["embed.segments.weight"] = src.take(f"{pre}embeddings.token_type_embeddings.weight")
    linear(src, "embed.norm", f"{pre}embeddings.LayerNorm", out)
    for i in range(n_layers):
        ours, theirs = f"encoder.layers.{i}", f"{pre}encoder.layer.{i}"
        attention(src, f"{ours}.self_attn", f"{theirs}.attention.self", out, names=("query", "key", "value"),
                  out_proj=f"{theirs}.attention.output.dense")
        for a, b in LAYER:
            linear(src, f"{ours}.{a}", f"{theirs}.{b}", out)


def encoder_to_hf(src: Source, pre: str, n_layers: int, out: dict[str, Tensor]) -> None:
    """The inverse of :func:`encoder_from_hf`: our embeddings and encoder layers -> BERT's keys under ``pre``."""
    out[f"{pre}embeddings.word_embeddings.weight"] = src.take("embed.tokens.weight")
    out[f"{pre}embeddings.position_embeddings.weight"] = src.take("embed.positions.weight")
    out[f"{pre}embeddings.token_type_embeddings.weight"] = src.take("embed.segments.weight")
    copy(src, f"{pre}embeddings.LayerNorm", "embed.norm", out)
    for i in range(n_layers):
        mine, theirs = f"encoder.layers.{i}", f"{pre}encoder.layer.{i}"
        split_attention(src, f"{mine}.self_attn", f"{theirs}.attention.self", out, names=("query", "key", "value"),
                        out_proj=f"{theirs}.attention.output.dense")
        for a, b in LAYER:
            copy(src, f"{theirs}.{b}", f"{mine}.{a}", out)


def hf_config(cfg: BertConfig, model_type: str, architecture: str) -> dict[str, Any]:
    """The Hugging Face config of a BERT-shaped ``cfg``: the fields BertConfig and RobertaConfig share, our
    [CLS] [SEP] [MASK] ids under ``"aiayn"``."""
    if cfg.type_vocab_size == 0:
        refuse("type_vocab_size", 0, f"{architecture} always has token-type embeddings (DistilBERT has none)")
    return {
        "model_type": model_type, "architectures": [architecture], "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.max_len, "type_vocab_size": cfg.type_vocab_size, "hidden_size": cfg.d_model,
        "num_attention_heads": cfg.n_heads, "num_hidden_layers": cfg.n_layers, "intermediate_size": cfg.d_ff,
        "hidden_dropout_prob": cfg.dropout, "attention_probs_dropout_prob": cfg.attention_dropout,
        "classifier_dropout": None, "hidden_act": hf_activation(ACTIVATIONS, cfg.activation),
        "layer_norm_eps": cfg.layer_norm_eps, "position_embedding_type": "absolute", "pad_token_id": cfg.pad_id,
        **label_names(cfg.num_labels), "aiayn": {k: getattr(cfg, k) for k in SPECIALS},
    }


def convert(hf: dict[str, Any], tensors: dict[str, Tensor], name: str = "BERT") -> BERT:
    """Our :class:`BERT` (with the head the weights carry) computing what the Hugging Face BERT computes."""
    src = Source(tensors, name)
    check_bidirectional(hf, name, HF_CLASSES, "BertLMHeadModel")
    cfg = config(hf, _head(src))
    pre = "bert." if "bert.embeddings.word_embeddings.weight" in src else ""
    out: dict[str, Tensor] = {}
    encoder_from_hf(src, pre, cfg.n_layers, out)
    if f"{pre}pooler.dense.weight" in src:
        linear(src, "pooler", f"{pre}pooler.dense", out)
    else:  # BertForMaskedLM has no pooler; ours is then unused, left at zero (sized by the weights, not the
        d = out["embed.tokens.weight"].size(1)  # config: load_converted checks that one before allocating it)
        out["pooler.weight"], out["pooler.bias"] = torch.zeros(d, d), torch.zeros(d)
    if cfg.head in ("pretraining", "mlm"):
        linear(src, "mlm.dense", "cls.predictions.transform.dense", out)
        linear(src, "mlm.norm", "cls.predictions.transform.LayerNorm", out)
        out["mlm.bias"] = src.take("cls.predictions.bias")
        src.alias("cls.predictions.decoder.bias", out["mlm.bias"])
        src.alias("cls.predictions.decoder.weight", out["embed.tokens.weight"])
        out["mlm.tokens.weight"] = out["embed.tokens.weight"]
    if cfg.head == "pretraining":
        linear(src, "nsp", "cls.seq_relationship", out)
    if cfg.head == "classification":
        linear(src, "classifier", "classifier", out)
    src.check_all_taken(ignore=("embeddings.position_ids",))
    return load_converted(BERT, cfg, out, src, hf)


def export(model: BERT) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """``(config, weights)`` of the Hugging Face BERT (``HF_CLASSES[head]``) computing what ``model`` computes."""
    cfg = model.cfg
    config = hf_config(cfg, "bert", HF_CLASSES[cfg.head])
    src = our_weights(model, "our BERT")
    pre = "" if cfg.head == "none" else "bert."
    out: dict[str, Tensor] = {}
    encoder_to_hf(src, pre, cfg.n_layers, out)
    if cfg.head == "mlm":  # BertForMaskedLM has no pooler; ours is unused
        for key in ("pooler.weight", "pooler.bias"):
            src.take(key)
    else:
        copy(src, f"{pre}pooler.dense", "pooler", out)
    if cfg.head in ("pretraining", "mlm"):
        copy(src, "cls.predictions.transform.dense", "mlm.dense", out)
        copy(src, "cls.predictions.transform.LayerNorm", "mlm.norm", out)
        out["cls.predictions.bias"] = src.take("mlm.bias")
        src.alias("mlm.tokens.weight", out[f"{pre}embeddings.word_embeddings.weight"])
    if cfg.head == "pretraining":
        copy(src, "cls.seq_relationship", "nsp", out)
    if cfg.head == "classification":
        copy(src, "classifier", "classifier", out)
    src.check_all_taken()
    return config, out
