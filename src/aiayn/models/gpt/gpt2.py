"""GPT-2 (``GPT2LMHeadModel`` / ``GPT2Model`` / ``GPT2ForSequenceClassification``) -> our
:class:`~aiayn.models.gpt.GPT`.

GPT-2 stores its linear layers as ``Conv1D``: weights ``(in, out)``, the transpose of ``nn.Linear``'s.
Its ``c_attn`` is already the fused q | k | v projection our attention keeps as ``in_proj``.

    transformer.wte / wpe           -> embed.tokens / embed.positions
    h.i.ln_1, h.i.ln_2              -> decoder.layers.i.norm1, .norm3
    h.i.attn.c_attn (transposed)    -> decoder.layers.i.self_attn.in_proj
    h.i.attn.c_proj (transposed)    -> decoder.layers.i.self_attn.out_proj
    h.i.mlp.c_fc, c_proj (transp.)  -> decoder.layers.i.ff.fc1, ff.fc2
    ln_f                            -> decoder.norm
    lm_head                         -> lm_head (tied to wte unless the config unties it)
    score                           -> score (GPT2ForSequenceClassification; pad_token_id -> pad_id)
    h.i.attn.bias / masked_bias     -> dropped (causal-mask buffers of older checkpoints)

:func:`export` reads the table the other way: our GPT -> ``GPT2LMHeadModel`` (``lm_head`` written only when untied,
as ``save_pretrained`` writes it), or with ``head="classification"`` -> ``GPT2ForSequenceClassification`` (which
has no ``lm_head``: the output layer must be tied). A config with a Llama switch on (rotary positions, RMSNorm,
SwiGLU, grouped heads, no biases, a sliding window) is not a GPT-2 and is refused.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

from aiayn.models.gpt.model import GPT, LLAMA_SWITCHES, GPTConfig
from aiayn.models.keys import Source, copy, hf_activation, label_names, linear, load_converted, our_weights, refuse

ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh", "gelu": "gelu",
               "relu": "relu", "silu": "silu", "swish": "silu"}
# (ours, theirs, transpose) per block
BLOCK = [("norm1", "ln_1", False),
         ("self_attn.in_proj", "attn.c_attn", True), ("self_attn.out_proj", "attn.c_proj", True),
         ("norm3", "ln_2", False),
         ("ff.fc1", "mlp.c_fc", True), ("ff.fc2", "mlp.c_proj", True)]


def gpt_ends(hf: dict[str, Any]) -> dict[str, Any]:
    """Our ``eos_id`` and ``stop_ids`` for a decoder's ``eos_token_id``: one id, a list (Llama 3.1's chat models
    list three; the first is ``eos_id``), or none (no end token: generation runs to its length, as transformers').
    An id outside the vocabulary is no token the model can make, so none ends it: the small configs people test
    with keep GPT-2's 50256 beside a vocabulary of 1,000, and transformers runs them so."""
    eos = hf.get("eos_token_id")
    ids = [i for i in (list(eos) if isinstance(eos, list) else [] if eos is None else [eos]) if _inside(hf, i)]
    return {"eos_id": ids[0] if ids else None, "stop_ids": tuple(ids[1:])}


def pad_of(hf: dict[str, Any]) -> int | None:
    """A decoder config's ``pad_token_id``, ``None`` when it names no token of the vocabulary (as :func:`gpt_ends`)."""
    pad = hf.get("pad_token_id")
    return pad if pad is not None and _inside(hf, pad) else None


def _inside(hf: dict[str, Any], token: int) -> bool:
    return 0 <= token < hf["vocab_size"]


def hf_ends(cfg: Any) -> int | list[int] | None:
    """A decoder config's ``eos_token_id`` for our ``eos_id`` and ``stop_ids`` (the inverse of :func:`gpt_ends`)."""
    return [cfg.eos_id, *cfg.stop_ids] if cfg.stop_ids else cfg.eos_id


def config(hf: dict[str, Any]) -> GPTConfig:
    """Our config for a ``GPT2Config`` (as a dict)."""
    if not hf.get("scale_attn_weights", True) or hf.get("scale_attn_by_inverse_layer_idx", False):
        raise ValueError("only GPT-2's standard attention scaling (1/sqrt(d_head)) converts: scale_attn_weights "
                         "must be true and scale_attn_by_inverse_layer_idx false")
    if hf["activation_function"] not in ACTIVATIONS:
        raise ValueError(f"activation_function={hf['activation_function']!r} is not one of {sorted(ACTIVATIONS)}")
    if hf.get("embd_pdrop", hf["resid_pdrop"]) != hf["resid_pdrop"]:  # training only, but it would change it
        raise ValueError(f"embd_pdrop={hf['embd_pdrop']} and resid_pdrop={hf['resid_pdrop']} must agree: our GPT "
                         f"has one dropout (set both in config.json to the one to train with)")
    return GPTConfig(
        vocab_size=hf["vocab_size"], max_len=hf["n_positions"], d_model=hf["n_embd"], n_heads=hf["n_head"],
        n_layers=hf["n_layer"], d_ff=hf.get("n_inner") or 4 * hf["n_embd"], dropout=hf["resid_pdrop"],
        attention_dropout=hf["attn_pdrop"], activation=ACTIVATIONS[hf["activation_function"]],
        layer_norm_eps=hf["layer_norm_epsilon"], tie_output=hf.get("tie_word_embeddings", True),
        pad_id=pad_of(hf), **gpt_ends(hf),
    )


def convert(hf: dict[str, Any], tensors: dict[str, Tensor], name: str = "GPT-2") -> GPT:
    """Our :class:`GPT` computing what the GPT-2 with config ``hf`` and weights ``tensors`` computes."""
    cfg = config(hf)
    src = Source(tensors, name)
    if "score.weight" in src:  # GPT2ForSequenceClassification: a linear head on the last real token
        cfg = dataclasses.replace(cfg, head="classification", num_labels=src.tensors["score.weight"].shape[0])
    pre = "transformer." if "transformer.wte.weight" in src else ""
    out: dict[str, Tensor] = {"embed.tokens.weight": src.take(f"{pre}wte.weight"),
                              "embed.positions.weight": src.take(f"{pre}wpe.weight")}
    for i in range(cfg.n_layers):
        for ours, theirs, transpose in BLOCK:
            key = f"decoder.layers.{i}.{ours}"
            linear(src, key, f"{pre}h.{i}.{theirs}", out)
            if transpose:  # Conv1D (in, out) -> Linear (out, in)
                out[f"{key}.weight"] = out[f"{key}.weight"].t()
    linear(src, "decoder.norm", f"{pre}ln_f", out)
    if "lm_head.weight" in src:
        head = src.take("lm_head.weight")
        if cfg.tie_output and not torch.equal(head, out["embed.tokens.weight"]):
            raise ValueError(f"{name}: lm_head.weight differs from wte.weight but the config ties them")
        out["lm_head.weight"] = head
    elif cfg.tie_output:
        out["lm_head.weight"] = out["embed.tokens.weight"]
    if cfg.head == "classification":
        out["score.weight"] = src.take("score.weight")
    src.check_all_taken(ignore=(".attn.bias", ".attn.masked_bias"))
    return load_converted(GPT, cfg, out, src, hf)


def export(model: GPT) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """``(config, weights)`` of the ``GPT2LMHeadModel`` computing what our ``model`` computes (see the table)."""
    cfg = model.cfg
    gpt2 = GPTConfig()
    switched = [f"{name}={getattr(cfg, name)!r}" for name in LLAMA_SWITCHES
                if getattr(cfg, name) != getattr(gpt2, name)]
    if cfg.activation not in ACTIVATIONS.values():
        switched.append(f"activation={cfg.activation!r}")
    if switched:
        raise ValueError(f"our GPT with {', '.join(switched)} is not a GPT-2 and cannot be exported as one")
    config = {
        "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": cfg.vocab_size,
        "n_positions": cfg.max_len, "n_embd": cfg.d_model, "n_head": cfg.n_heads, "n_layer": cfg.n_layers,
        "n_inner": cfg.d_ff, "resid_pdrop": cfg.dropout, "embd_pdrop": cfg.dropout,
        "attn_pdrop": cfg.attention_dropout, "activation_function": hf_activation(ACTIVATIONS, cfg.activation),
        "layer_norm_epsilon": cfg.layer_norm_eps, "tie_word_embeddings": cfg.tie_output,
        "bos_token_id": cfg.eos_id, "eos_token_id": hf_ends(cfg),
        "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
    }
    classify = cfg.head == "classification"
    if classify:
        if not cfg.tie_output:
            refuse("tie_output", False, "GPT2ForSequenceClassification has no lm_head of its own (tie it)")
        config.update(architectures=["GPT2ForSequenceClassification"], pad_token_id=cfg.pad_id,
                      **label_names(cfg.num_labels))
    src = our_weights(model, "our GPT")
    out: dict[str, Tensor] = {"transformer.wte.weight": src.take("embed.tokens.weight"),
                              "transformer.wpe.weight": src.take("embed.positions.weight")}
    for i in range(cfg.n_layers):
        for mine, theirs, transpose in BLOCK:
            key = f"transformer.h.{i}.{theirs}"
            copy(src, key, f"decoder.layers.{i}.{mine}", out)
            if transpose:  # Linear (out, in) -> Conv1D (in, out)
                out[f"{key}.weight"] = out[f"{key}.weight"].t()
    copy(src, "transformer.ln_f", "decoder.norm", out)
    if cfg.tie_output:
        src.alias("lm_head.weight", out["transformer.wte.weight"])
    else:
        out["lm_head.weight"] = src.take("lm_head.weight")
    if classify:
        out["score.weight"] = src.take("score.weight")
    src.check_all_taken()
    return config, out
