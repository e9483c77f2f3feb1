"""Every model family, once: a family is its folder (:mod:`aiayn.models.family`) and one line below.

Conversion, export, the pipelines, ``aiayn count``, activation checkpointing, ONNX export and the checkpoints
(:mod:`aiayn.models.checkpoint`) find a family here, by name, by config or by Hugging Face ``model_type``; none of
them names a family itself. So are a preset's config and a config's model found (:func:`preset`, :func:`build`),
and a config written down and read back (:func:`config_to_dict`, :func:`config_from_dict`).
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from torch import nn

from aiayn.models.config import override, suggest
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
    "transfo_xl",
    "xlnet",
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


_PRESETS: dict[str, Any] = {name: cfg for family in FAMILIES.values() for name, cfg in family.presets.items()}


def presets() -> list[str]:
    """Names of every preset."""
    return sorted(_PRESETS)


def preset(name: str, **overrides: Any) -> Any:
    """The frozen config of preset ``name``, with any field overridden.

    >>> preset("transformer-base", src_vocab_size=8000, tgt_vocab_size=8000).d_model
    512
    """
    if name not in _PRESETS:
        raise ValueError(f"unknown preset {name!r}{suggest(name, _PRESETS)} (presets: {', '.join(presets())})")
    return override(_PRESETS[name], **overrides)


def build(cfg_or_name: Any, **overrides: Any) -> nn.Module:
    """A model from a config, or from a preset name with overrides."""
    cfg = preset(cfg_or_name, **overrides) if isinstance(cfg_or_name, str) else override(cfg_or_name, **overrides)
    return family_of(cfg).model(cfg)


def config_to_dict(cfg: Any) -> dict[str, Any]:
    return {"family": family_of(cfg).name, **dataclasses.asdict(cfg)}


def config_from_dict(data: dict[str, Any]) -> Any:
    data = dict(data)
    family = data.pop("family", None)
    if family not in FAMILIES:
        raise ValueError(f"config names family {family!r}; known families: {', '.join(FAMILIES)}")
    config_type = FAMILIES[family].config
    known = {f.name for f in dataclasses.fields(config_type)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{config_type.__name__} config has unknown fields {unknown}")
    return config_type(**data)


__all__ = ["FAMILIES", "FAMILY_PACKAGES", "build", "config_from_dict", "config_to_dict", "family_of", "family_of_hf",
           "preset", "presets"]
