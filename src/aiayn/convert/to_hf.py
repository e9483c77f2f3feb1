"""aiayn models -> Hugging Face folders: the inverse of :func:`aiayn.convert.from_hf`.

    GPT          -> GPT2LMHeadModel, or GPT2ForSequenceClassification with head="classification"  (convert/gpt2.py)
                    or, with any Llama switch on, LlamaForCausalLM / MistralForCausalLM  (convert/llama.py)
    BERT         -> BertModel, BertForMaskedLM, BertForPreTraining or BertForSequenceClassification,
                    by the model's head                   (convert/bert.py)
    Transformer  -> MarianMTModel (sinusoidal positions, concatenated layout)
                    or BartForConditionalGeneration (learned positions)       (convert/seq2seq.py)
    ViT          -> ViTForImageClassification, or ViTModel without a head    (convert/vit.py)
    Swin         -> SwinForImageClassification, or SwinModel without a head  (convert/swin.py)
    DETR         -> DetrForObjectDetection with a Hugging Face ResNet backbone (convert/detr.py)

Each family's file holds its key table both ways: ``convert`` reads Hugging Face weights, ``export``
writes them, with the names ``save_pretrained`` writes (transformers 4's, which transformers 5 renames on
loading), so either version loads the folder. A config Hugging Face cannot express (pre-norm Marian,
interleaved sinusoids, ...) is refused with a ``ValueError`` naming the field. ``aiayn.from_hf`` of the
folder gives back the model, config and weights, except where the family's ``export`` docstring says.

The helpers below serve every family's ``export``; this module imports the families only when called.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import torch
from torch import Tensor, nn

from aiayn.convert.common import Source
from aiayn.io import atomic_write, write_json

Export = Callable[[Any], tuple[dict[str, Any], dict[str, Tensor]]]


def our_weights(model: nn.Module, name: str) -> Source:
    """Our state dict as a :class:`Source`, so an export refuses weights of ours it leaves behind."""
    return Source(dict(model.state_dict()), name)


def copy(src: Source, theirs: str, ours: str, out: dict[str, Tensor], bias: bool = True) -> None:
    """``ours.weight`` (and ``.bias``) -> ``theirs.weight`` (and ``.bias``); also LayerNorm."""
    out[f"{theirs}.weight"] = src.take(f"{ours}.weight")
    if bias:
        out[f"{theirs}.bias"] = src.take(f"{ours}.bias")


def split_qkv(src: Source, ours: str, theirs: tuple[str, str, str], out: dict[str, Tensor]) -> None:
    """Our fused projection ``ours`` (``.weight`` and ``.bias``, rows q | k | v) -> the three ``theirs``:
    the inverse of :func:`aiayn.convert.common.fused`."""
    for kind in ("weight", "bias"):
        for name, part in zip(theirs, src.take(f"{ours}.{kind}").chunk(3), strict=True):
            out[f"{name}.{kind}"] = part


def split_attention(src: Source, ours: str, theirs: str, out: dict[str, Tensor],
                    names: tuple[str, str, str] = ("q_proj", "k_proj", "v_proj"), out_proj: str | None = None) -> None:
    """Our ``ours.in_proj`` and ``ours.out_proj`` -> separate ``theirs.<names>`` and ``theirs.out_proj`` (or the
    full prefix ``out_proj``): the inverse of :func:`aiayn.convert.common.attention`."""
    q, k, v = (f"{theirs}.{n}" for n in names)
    split_qkv(src, f"{ours}.in_proj", (q, k, v), out)
    copy(src, out_proj or f"{theirs}.out_proj", f"{ours}.out_proj", out)


def hf_activation(table: dict[str, str], activation: str, field: str = "activation") -> str:
    """The first Hugging Face name that ``table`` (Hugging Face name -> ours) maps to ``activation``."""
    for theirs, mine in table.items():
        if mine == activation:
            return theirs
    known = sorted(set(table.values()))
    raise ValueError(f"{field}={activation!r} has no Hugging Face equivalent here (known: {known})")


def label_names(n: int) -> dict[str, Any]:
    """``id2label`` / ``label2id`` for ``n`` classes, as ``PretrainedConfig(num_labels=n)`` writes them; none
    for 0 (a model without a head)."""
    if not n:
        return {}
    return {"id2label": {str(i): f"LABEL_{i}" for i in range(n)}, "label2id": {f"LABEL_{i}": i for i in range(n)}}


def refuse(field: str, value: Any, why: str) -> NoReturn:
    """Raise the ``ValueError`` every export raises for a config Hugging Face cannot express."""
    raise ValueError(f"{field}={value!r} cannot be exported to Hugging Face: {why}")


def _gpt(model: Any) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """A GPT with any of Llama's switches on (aiayn.models.gpt's docstring) goes to Llama, else to GPT-2."""
    from aiayn.convert import gpt2, llama
    from aiayn.layers.feedforward import GATED
    from aiayn.models.gpt import GPTConfig

    cfg, plain = model.cfg, GPTConfig()
    switched = cfg.activation in GATED or any(getattr(cfg, f) != getattr(plain, f) for f in (
        "positional", "norm", "n_kv_heads", "bias", "attention_window"))
    if switched and cfg.head != "lm":
        refuse("head", cfg.head, "only a GPT-2 (no Llama switch on) exports with a classification head, as "
                                 "GPT2ForSequenceClassification")
    return (llama.export if switched else gpt2.export)(model)


def _exporters() -> list[tuple[type, Export]]:
    from aiayn.convert import bert, detr, seq2seq, swin, vit
    from aiayn.models.bert import BERT
    from aiayn.models.detr import DETR
    from aiayn.models.gpt import GPT
    from aiayn.models.swin import Swin
    from aiayn.models.transformer import Transformer
    from aiayn.models.vit import ViT

    return [(GPT, _gpt), (BERT, bert.export), (Transformer, seq2seq.export), (ViT, vit.export),
            (Swin, swin.export), (DETR, detr.export)]


def to_hf(model: nn.Module, folder: str | os.PathLike) -> Path:
    """Write ``model`` as a Hugging Face folder that ``transformers`` and :func:`aiayn.from_hf` load.

    Args:
        model: a GPT, BERT, Transformer (Marian- or BART-shaped), ViT, Swin or DETR of ours.
        folder: created if missing; its ``config.json`` and ``model.safetensors`` are replaced atomically
            (each file is whole, old or new, whatever happens while writing).

    Returns:
        ``folder``, holding ``config.json`` (with ``model_type`` and ``architectures`` naming the
        ``transformers`` class) and ``model.safetensors`` (contiguous tensors of their own, tied weights
        written once, as ``save_pretrained`` writes them).

    Raises:
        TypeError: not a model of ours.
        ValueError: a config Hugging Face cannot express; the message names the field and its value.
    """
    export = next((fn for cls, fn in _exporters() if isinstance(model, cls)), None)
    if export is None:
        raise TypeError(f"to_hf takes an aiayn GPT, BERT, Transformer, ViT, Swin or DETR, got {type(model).__name__}")
    config, tensors = export(model)
    # their own contiguous storage: safetensors refuses views of one buffer (q, k, v of our in_proj, tied tables)
    tensors = {k: v.detach().to("cpu").clone(memory_format=torch.contiguous_format) for k, v in tensors.items()}
    config["dtype"] = str(next(iter(tensors.values())).dtype).removeprefix("torch.")
    folder = Path(folder)
    from safetensors.torch import save_file

    atomic_write(folder / "model.safetensors", lambda tmp: save_file(tensors, tmp, metadata={"format": "pt"}))
    write_json(folder / "config.json", config)
    return folder


__all__ = ["copy", "hf_activation", "label_names", "our_weights", "refuse", "split_attention", "split_qkv", "to_hf"]
