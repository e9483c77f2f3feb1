"""aiayn models -> Hugging Face folders: the inverse of :func:`aiayn.convert.from_hf`.

    GPT          -> GPT2LMHeadModel, or GPT2ForSequenceClassification with head="classification"
                    or, with any Llama switch on, LlamaForCausalLM / MistralForCausalLM  (models/gpt/hf.py)
    BERT         -> BertModel, BertForMaskedLM, BertForPreTraining or BertForSequenceClassification,
                    by the model's head                   (models/bert/hf.py)
    Transformer  -> MarianMTModel (sinusoidal positions, concatenated layout)
                    or BartForConditionalGeneration (learned positions)       (models/transformer/hf.py)
    ViT          -> ViTForImageClassification, or ViTModel without a head    (models/vit/hf.py)
    Swin         -> SwinForImageClassification, or SwinModel without a head  (models/swin/hf.py)
    DETR         -> DetrForObjectDetection with a Hugging Face ResNet backbone (models/detr/hf.py)
    ...          -> whatever the family's record (aiayn.models.registry) says

Each family's ``hf.py`` holds its key table both ways: ``convert`` reads Hugging Face weights, ``export``
writes them, with the names ``save_pretrained`` writes (transformers 4's, which transformers 5 renames on
loading), so either version loads the folder. A config Hugging Face cannot express (pre-norm Marian,
interleaved sinusoids, ...) is refused with a ``ValueError`` naming the field. ``aiayn.from_hf`` of the
folder gives back the model, config and weights, except where the family's ``export`` docstring says.

The key tables' helpers are in :mod:`aiayn.models.keys`; this module finds the family of a model by its
config and writes what its ``export`` gives.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from aiayn.io import atomic_write, write_json
from aiayn.models.registry import FAMILIES, family_of

Export = Callable[[Any], tuple[dict[str, Any], dict[str, Tensor]]]


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
    try:
        family = family_of(getattr(model, "cfg", None))
    except TypeError:
        family = None
    if family is None or family.hf is None:
        having = ", ".join(f.model.__name__ for f in FAMILIES.values() if f.hf is not None)
        raise TypeError(f"to_hf takes an aiayn model of a family that converts ({having}), got "
                        f"{type(model).__name__}")
    config, tensors = family.to_hf(model)
    # their own contiguous storage: safetensors refuses views of one buffer (q, k, v of our in_proj, tied tables)
    tensors = {k: v.detach().to("cpu").clone(memory_format=torch.contiguous_format) for k, v in tensors.items()}
    config["dtype"] = str(next(iter(tensors.values())).dtype).removeprefix("torch.")
    folder = Path(folder)
    from safetensors.torch import save_file

    atomic_write(folder / "model.safetensors", lambda tmp: save_file(tensors, tmp, metadata={"format": "pt"}))
    write_json(folder / "config.json", config)
    return folder


__all__ = ["to_hf"]
