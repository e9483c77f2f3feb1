"""RoBERTa (``RobertaModel``, ``RobertaForMaskedLM``, ``RobertaForSequenceClassification``) -> our
:class:`~aiayn.models.roberta.RoBERTa`, whose weights are named as BERT's (:mod:`aiayn.models.bert.hf`).

    embeddings.word / position / token_type_embeddings   -> embed.tokens / embed.positions / embed.segments
    embeddings.LayerNorm                                  -> embed.norm
    encoder.layer.i.attention.self.{query,key,value}      -> encoder.layers.i.self_attn.in_proj (fused q | k | v)
    encoder.layer.i.attention.output.dense / LayerNorm    -> encoder.layers.i.self_attn.out_proj / norm1
    encoder.layer.i.intermediate.dense, output.dense      -> encoder.layers.i.ff.fc1, ff.fc2
    encoder.layer.i.output.LayerNorm                      -> encoder.layers.i.norm2
    pooler.dense                                          -> pooler                    (RobertaModel)
    lm_head.dense / layer_norm, bias                      -> mlm.dense / mlm.norm, mlm.bias (decoder tied)
    classifier.dense, classifier.out_proj                 -> pooler, classifier        (the same tanh between)
    embeddings.position_ids                               -> dropped (a buffer of older checkpoints)

Models with a head keep the encoder under ``roberta.``; ``RobertaModel`` has no prefix.

:func:`export` reads the table the other way, to the class our head names (``HF_CLASSES``); the tied
decoder weight and bias are left out, as ``save_pretrained`` leaves them out. ``RobertaForMaskedLM`` has no
pooler, so an ``mlm`` model's pooler (which its head never uses) is not written and comes back zero. Our
``<s>`` ``</s>`` ``<mask>`` ids go under the config's ``"aiayn"`` key, which :func:`config` reads back; a config
without it gives ``bos_token_id``, ``eos_token_id`` and the last token of the vocabulary (RoBERTa's ``<mask>``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from aiayn.models.bert.hf import ACTIVATIONS, check_bidirectional, encoder_from_hf, encoder_to_hf, hf_config
from aiayn.models.keys import Source, copy, linear, load_converted, our_weights
from aiayn.models.roberta.model import RoBERTa, RobertaConfig

HF_CLASSES = {"none": "RobertaModel", "mlm": "RobertaForMaskedLM", "classification": "RobertaForSequenceClassification"}
SPECIALS = ("cls_id", "sep_id", "mask_id")


def config(hf: dict[str, Any], head: str) -> RobertaConfig:
    """Our config for a ``RobertaConfig`` (as a dict) with the given head.

    Raises:
        ValueError: a ``position_embedding_type`` other than ``"absolute"``, a ``hidden_act`` we do not have,
            or no ``pad_token_id`` (the positions are counted from it).
    """
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise ValueError(f"position_embedding_type={hf['position_embedding_type']!r}: only 'absolute' converts")
    if hf["hidden_act"] not in ACTIVATIONS:
        raise ValueError(f"hidden_act={hf['hidden_act']!r} is not one of {sorted(ACTIVATIONS)}")
    pad = hf.get("pad_token_id", 1)  # RobertaConfig's default
    if not isinstance(pad, int):
        raise ValueError(f"pad_token_id={pad!r}: RoBERTa counts its positions from the padding id, which must be "
                         f"a token id")
    labels = len(hf.get("id2label") or {}) or hf.get("num_labels", 2)
    return RobertaConfig(
        vocab_size=hf["vocab_size"], max_len=hf["max_position_embeddings"], type_vocab_size=hf["type_vocab_size"],
        d_model=hf["hidden_size"], n_heads=hf["num_attention_heads"], n_layers=hf["num_hidden_layers"],
        d_ff=hf["intermediate_size"], dropout=hf["hidden_dropout_prob"],
        attention_dropout=hf["attention_probs_dropout_prob"], activation=ACTIVATIONS[hf["hidden_act"]],
        layer_norm_eps=hf["layer_norm_eps"], head=head, num_labels=labels, pad_id=pad, **_specials(hf),
    )


def _specials(hf: dict[str, Any]) -> dict[str, int]:
    # A folder export wrote keeps our ids. Otherwise RoBERTa's BPE vocabulary: <s> is bos_token_id (0), </s>
    # eos_token_id (2), and <mask> its last token (50264 of 50265).
    kept = {k: v for k, v in (hf.get("aiayn") or {}).items() if k in SPECIALS}
    if kept:
        return kept
    bos, eos = hf.get("bos_token_id"), hf.get("eos_token_id")
    return {"cls_id": 0 if bos is None else bos, "sep_id": 2 if eos is None else eos, "mask_id": hf["vocab_size"] - 1}


def _head(src: Source) -> str:
    if "lm_head.bias" in src:
        return "mlm"
    if "classifier.out_proj.weight" in src:
        return "classification"
    return "none"


def convert(hf: dict[str, Any], tensors: dict[str, Tensor], name: str = "RoBERTa") -> RoBERTa:
    """Our :class:`RoBERTa` (with the head the weights carry) computing what the Hugging Face RoBERTa computes.

    Raises:
        ValueError: a causal RoBERTa (``is_decoder``), a head we do not have (``architectures``), a config
            :func:`config` refuses, or weights that are missing, left over or misshapen.
    """
    src = Source(tensors, name)
    check_bidirectional(hf, name, HF_CLASSES, "RobertaForCausalLM")
    cfg = config(hf, _head(src))
    pre = "roberta." if "roberta.embeddings.word_embeddings.weight" in src else ""
    out: dict[str, Tensor] = {}
    encoder_from_hf(src, pre, cfg.n_layers, out)
    if cfg.head == "classification":  # its dense -> tanh is our pooler
        linear(src, "pooler", "classifier.dense", out)
        linear(src, "classifier", "classifier.out_proj", out)
    elif f"{pre}pooler.dense.weight" in src:
        linear(src, "pooler", f"{pre}pooler.dense", out)
    else:  # RobertaForMaskedLM has no pooler; ours is then unused, left at zero (sized by the weights, not the
        d = out["embed.tokens.weight"].size(1)  # config: load_converted checks that one before allocating it)
        out["pooler.weight"], out["pooler.bias"] = torch.zeros(d, d), torch.zeros(d)
    if cfg.head == "mlm":
        linear(src, "mlm.dense", "lm_head.dense", out)
        linear(src, "mlm.norm", "lm_head.layer_norm", out)
        out["mlm.bias"] = src.take("lm_head.bias")
        src.alias("lm_head.decoder.bias", out["mlm.bias"])
        src.alias("lm_head.decoder.weight", out["embed.tokens.weight"])
        out["mlm.tokens.weight"] = out["embed.tokens.weight"]
    src.check_all_taken(ignore=("embeddings.position_ids",))
    return load_converted(RoBERTa, cfg, out, src, hf)


def export(model: RoBERTa) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """``(config, weights)`` of the Hugging Face RoBERTa (``HF_CLASSES[head]``) computing what ``model``
    computes. Every config of ours is expressible, so nothing is refused but an activation without a Hugging
    Face name."""
    cfg = model.cfg
    config = {**hf_config(cfg, "roberta", HF_CLASSES[cfg.head]), "bos_token_id": cfg.cls_id,
              "eos_token_id": cfg.sep_id}
    src = our_weights(model, "our RoBERTa")
    pre = "" if cfg.head == "none" else "roberta."
    out: dict[str, Tensor] = {}
    encoder_to_hf(src, pre, cfg.n_layers, out)
    if cfg.head == "none":
        copy(src, "pooler.dense", "pooler", out)
    elif cfg.head == "classification":
        copy(src, "classifier.dense", "pooler", out)
        copy(src, "classifier.out_proj", "classifier", out)
    else:  # RobertaForMaskedLM has no pooler; ours is unused
        for key in ("pooler.weight", "pooler.bias"):
            src.take(key)
        copy(src, "lm_head.dense", "mlm.dense", out)
        copy(src, "lm_head.layer_norm", "mlm.norm", out)
        out["lm_head.bias"] = src.take("mlm.bias")
        src.alias("mlm.tokens.weight", out["roberta.embeddings.word_embeddings.weight"])
    src.check_all_taken()
    return config, out
