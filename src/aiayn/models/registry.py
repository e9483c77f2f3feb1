"""Every model family, once: a family is its folder (:mod:`aiayn.models.family`) and one line below.

Conversion, export, the pipelines, ``aiayn count``, activation checkpointing and ONNX export find a family here,
by name, by config or by Hugging Face ``model_type``; none of them names a family itself.
"""

from __future__ import annotations

import importlib
from typing import Any

from aiayn.models.family import Family

FAMILY_PACKAGES = (  # aiayn.models.<package>, each with its FAMILY record
    "transformer",
    "gpt",
    "bert",
    "vit",
    "swin",
    "detr",
    "roberta",
    "distilbert",
    "albert",
)

FAMILIES: dict[str, Family] = {
    family.name: family for family in (importlib.import_module(f"aiayn.models.{p}").FAMILY for p in FAMILY_PACKAGES)
}


def family_of(cfg: Any) -> Family:
    """The family whose config class ``cfg`` is an instance of (exactly: a subclass is another family).

    Raises:
        TypeError: not a config of ours.
    """
    for family in FAMILIES.values():
        if type(cfg) is family.config:
            return family
    raise TypeError(f"not a model config: {type(cfg).__name__}")


def family_of_hf(model_type: Any, name: str = "the model") -> Family:
    """The family that converts Hugging Face models of ``model_type``.

    Raises:
        ValueError: no family does (naming ``name`` and the types that convert).
    """
    for family in FAMILIES.values():
        if model_type in family.hf_types:
            return family
    known = sorted(t for f in FAMILIES.values() for t in f.hf_types)
    raise ValueError(f"{name}: model_type {model_type!r} cannot be converted; known: {', '.join(known)}")


__all__ = ["FAMILIES", "FAMILY_PACKAGES", "family_of", "family_of_hf"]
