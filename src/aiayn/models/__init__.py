"""Model families: each file holds a config dataclass, its presets and the modules.

The registry maps a preset name to a config and a config type to its model, so
``aiayn.build("transformer-base")`` and ``aiayn.load(path)`` need no family-specific code. The model classes are
here too, each with ``from_pretrained`` / ``save_pretrained`` (:mod:`aiayn.models.pretrained`):
``aiayn.models.GPT.from_pretrained("runs/lm-dates")``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torch import nn

from aiayn.models import bart, bert, detr, gpt, swin, transformer, vit
from aiayn.models.bert import BERT
from aiayn.models.config import override, suggest
from aiayn.models.detr import DETR
from aiayn.models.gpt import GPT
from aiayn.models.swin import Swin
from aiayn.models.transformer import Transformer
from aiayn.models.vit import ViT

FAMILIES: dict[str, tuple[type, type[nn.Module]]] = {
    "transformer": (transformer.TransformerConfig, Transformer),
    "gpt": (gpt.GPTConfig, GPT),
    "bert": (bert.BertConfig, BERT),
    "vit": (vit.ViTConfig, ViT),
    "swin": (swin.SwinConfig, Swin),
    "detr": (detr.DetrConfig, DETR),
}
_PRESETS: dict[str, Any] = {**transformer.PRESETS, **gpt.PRESETS, **bert.PRESETS, **bart.PRESETS, **vit.PRESETS,
                           **swin.PRESETS, **detr.PRESETS}


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


def family_of(cfg: Any) -> str:
    for family, (config_type, _) in FAMILIES.items():
        if type(cfg) is config_type:
            return family
    raise TypeError(f"not a model config: {type(cfg).__name__}")


def build(cfg_or_name: Any, **overrides: Any) -> nn.Module:
    """A model from a config, or from a preset name with overrides."""
    cfg = preset(cfg_or_name, **overrides) if isinstance(cfg_or_name, str) else override(cfg_or_name, **overrides)
    return FAMILIES[family_of(cfg)][1](cfg)


def config_to_dict(cfg: Any) -> dict[str, Any]:
    return {"family": family_of(cfg), **dataclasses.asdict(cfg)}


def config_from_dict(data: dict[str, Any]) -> Any:
    data = dict(data)
    family = data.pop("family", None)
    if family not in FAMILIES:
        raise ValueError(f"config names family {family!r}; known families: {', '.join(FAMILIES)}")
    config_type = FAMILIES[family][0]
    known = {f.name for f in dataclasses.fields(config_type)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{config_type.__name__} config has unknown fields {unknown}")
    return config_type(**data)
