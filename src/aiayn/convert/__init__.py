"""Weights from Hugging Face models into aiayn models: one key table per family.

Only this package (and the command line and tests) imports conversion code; models never do.
Reading a ``transformers`` model object needs the ``hf`` extra; a local folder needs only safetensors.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from aiayn.convert import bert, detr, gpt2, seq2seq, swin, vit
from aiayn.convert.common import read_hf

CONVERTERS: dict[str, Callable[..., nn.Module]] = {
    "marian": seq2seq.convert,
    "bart": seq2seq.convert,
    "gpt2": gpt2.convert,
    "bert": bert.convert,
    "vit": vit.convert,
    "swin": swin.convert,
    "detr": detr.convert,
}


def from_hf(source: Any) -> nn.Module:
    """An aiayn model computing what a Hugging Face model computes.

    Args:
        source: a ``transformers`` model (``MarianMTModel``, ``GPT2LMHeadModel``, ...) or the path of a local Hugging
            Face folder (``config.json`` + ``model.safetensors`` or ``pytorch_model.bin``).

    Raises:
        ValueError: a model type we do not convert, or missing, unexpected or misshapen weights.
    """
    config, tensors, name = read_hf(source)
    kind = config.get("model_type")
    if kind not in CONVERTERS:
        raise ValueError(f"{name}: model_type {kind!r} cannot be converted; known: {', '.join(sorted(CONVERTERS))}")
    return CONVERTERS[kind](config, tensors, name)


__all__ = ["CONVERTERS", "from_hf"]
