"""Model families: each is a folder (``models/<family>/``) whose :class:`~aiayn.models.family.Family` record is
listed once in :mod:`aiayn.models.registry`.

The registry maps a preset name to a config and a config type to its model, so
``aiayn.build("transformer-base")`` and ``aiayn.load(path)`` need no family-specific code. The model classes are
here too, each with ``from_pretrained`` / ``save_pretrained`` (:mod:`aiayn.models.pretrained`):
``aiayn.models.GPT.from_pretrained("runs/lm-dates")``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import nn

from aiayn.models.bert import BERT
from aiayn.models.config import override, suggest
from aiayn.models.detr import DETR
from aiayn.models.family import Family
from aiayn.models.gpt import GPT
from aiayn.models.registry import FAMILIES, family_of, family_of_hf
from aiayn.models.swin import Swin
from aiayn.models.transformer import Transformer
from aiayn.models.vit import ViT

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


__all__ = ["BERT", "DETR", "FAMILIES", "GPT", "Family", "Swin", "Transformer", "ViT", "build", "config_from_dict",
           "config_to_dict", "family_of", "family_of_hf", "override", "preset", "presets", "suggest"]
