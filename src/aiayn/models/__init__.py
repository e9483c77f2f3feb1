"""Model families: each is a folder (``models/<family>/``) whose :class:`~aiayn.models.family.Family` record is
listed once in :mod:`aiayn.models.registry`.

The registry maps a preset name to a config and a config type to its model, so
``aiayn.build("transformer-base")`` and ``aiayn.load(path)`` need no family-specific code. The model classes are
here too, each with ``from_pretrained`` / ``save_pretrained`` (:mod:`aiayn.models.pretrained`):
``aiayn.models.GPT.from_pretrained("runs/lm-dates")``.
"""

from __future__ import annotations

from aiayn.models.bert import BERT
from aiayn.models.config import override, suggest
from aiayn.models.detr import DETR
from aiayn.models.family import Family
from aiayn.models.gpt import GPT
from aiayn.models.registry import (
    FAMILIES,
    build,
    config_from_dict,
    config_to_dict,
    family_of,
    family_of_hf,
    preset,
    presets,
)
from aiayn.models.swin import Swin
from aiayn.models.transformer import Transformer
from aiayn.models.vit import ViT

__all__ = ["BERT", "DETR", "FAMILIES", "GPT", "Family", "Swin", "Transformer", "ViT", "build", "config_from_dict",
           "config_to_dict", "family_of", "family_of_hf", "override", "preset", "presets", "suggest"]
