"""Weights from Hugging Face models into aiayn models: one key table per family.

Only this package (and the command line and tests) imports conversion code; models never do.
Reading a ``transformers`` model object needs the ``hf`` extra; a local folder needs only safetensors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from aiayn.convert import bert, detr, gpt2, llama, seq2seq, swin, vit
from aiayn.convert.common import hf_folder, read_hf

CONVERTERS: dict[str, Callable[..., nn.Module]] = {
    "marian": seq2seq.convert,
    "bart": seq2seq.convert,
    "gpt2": gpt2.convert,
    "llama": llama.convert,
    "mistral": llama.convert,
    "bert": bert.convert,
    "vit": vit.convert,
    "swin": swin.convert,
    "detr": detr.convert,
}


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
    kind = config.get("model_type")
    if kind not in CONVERTERS:
        raise ValueError(f"{name}: model_type {kind!r} cannot be converted; known: {', '.join(sorted(CONVERTERS))}")
    return CONVERTERS[kind](config, tensors, name)


__all__ = ["CONVERTERS", "from_hf", "hf_folder"]
