"""Weights from Hugging Face models into aiayn models: each family's ``hf.py`` holds its key table both ways
(``aiayn.models.<family>.hf``); this package reads the folders, finds the family by the config's
``model_type`` (:func:`aiayn.models.registry.family_of_hf`) and writes Hugging Face folders (:mod:`.to_hf`).

A model module never imports conversion code; the families' ``hf.py`` are imported when a conversion asks.
Reading a ``transformers`` model object needs the ``hf`` extra; a local folder needs only safetensors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from aiayn.convert.common import hf_folder, read_hf
from aiayn.models.registry import FAMILIES, family_of_hf

# Hugging Face model_type -> the function converting it (every family's, from the registry)
CONVERTERS: dict[str, Callable[..., nn.Module]] = {t: f.from_hf for f in FAMILIES.values() for t in f.hf_types}


def from_hf(source: Any, revision: str | None = None) -> nn.Module:
    """An aiayn model computing what a Hugging Face model computes.

    Args:
        source: a ``transformers`` model (``MarianMTModel``, ``GPT2LMHeadModel``, ...), the path of a local Hugging
            Face folder (``config.json`` + ``model.safetensors``, its shards, or ``pytorch_model.bin``), or a model
            id (``"gpt2"``, ``"org/name"``), fetched into the Hugging Face cache and read from it offline.
        revision: a branch, tag or commit of a model id (``revision="no_timm"`` for DETR).

    Raises:
        ValueError: a model type we do not convert, or missing, unexpected or misshapen weights.
    """
    config, tensors, name = read_hf(source, revision)
    return family_of_hf(config.get("model_type"), name).from_hf(config, tensors, name)


__all__ = ["CONVERTERS", "from_hf", "hf_folder"]
