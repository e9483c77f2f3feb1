"""What a model family is to the rest of the package: one :class:`Family` record, kept in its folder's
``__init__.py`` and listed once in :mod:`aiayn.models.registry`.

    models/<family>/
        __init__.py     FAMILY = Family(name, config, model, presets, task, ...) and the public names
        model.py        the config dataclass, its presets and the model, read as the paper gives it
        hf.py           the Hugging Face key tables both ways: convert(hf, tensors, name), export(model)
        counts.py       the closed-form counts: count(cfg, size), default_size(cfg), example(model, size, batch)
        onnx.py         (where there is one) export(model, folder, opset)

Conversion (``aiayn.from_hf``, ``to_hf``), ``aiayn count``, the pipelines, activation checkpointing and ONNX
export ask the record instead of testing classes: adding a family is its folder and one line in the registry.
The record names its modules rather than importing them, so ``import aiayn.models`` reads no conversion,
counting or ONNX code until one is asked for.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from torch import Tensor, nn

TASKS = ("translate", "generate", "embed", "classify", "detect")  # what a family's pipeline does with it
INPUTS = ("text", "image")


@dataclass(frozen=True)
class Family:
    """One model family.

    Args:
        name: its key in saved configs (``config.json``'s ``"family"``) and in the registry.
        config: its frozen config dataclass; ``type(cfg) is config`` picks the family of a config.
        model: its ``nn.Module`` class, built from a config.
        presets: named configs that reproduce its papers (``"bert-base"``).
        task: what :func:`aiayn.pipeline` does with one of its models (one of :data:`TASKS`); a text
            classifier of any family (a run with ``classes.json``) classifies instead.
        inputs: ``"text"`` (token ids, counted at ``seq_len``) or ``"image"`` (pixels, at ``image_size``).
        hf_types: the Hugging Face ``model_type`` values its ``hf`` module converts.
        hf: module with ``convert(hf_config, tensors, name)`` and ``export(model) -> (config, tensors)``.
        counts: module with ``count(cfg, size)``, ``default_size(cfg)`` and ``example(model, size, batch)``.
        onnx: module with ``export(model, folder, opset) -> graphs``; ``None``: no ONNX export.
        blocks: its own block classes that :func:`aiayn.training.activations.checkpoint_blocks` recomputes,
            besides the shared :class:`~aiayn.layers.EncoderBlock` and :class:`~aiayn.layers.DecoderBlock`.
        backbones: its own module classes whose parameters count as the ``"backbone"`` part in
            :func:`aiayn.analysis.params.parameter_table` (DETR's ResNet).
        tokens_loss: its language-model losses count tokens (a GPT with head ``"lm"``, the encoder-decoder),
            so training reports FLOPs per token and MFU.
    """

    name: str
    config: type
    model: type[nn.Module]
    presets: Mapping[str, Any]
    task: str
    inputs: str = "text"
    hf_types: tuple[str, ...] = ()
    hf: str | None = None
    counts: str | None = None
    onnx: str | None = None
    blocks: tuple[type[nn.Module], ...] = ()
    backbones: tuple[type[nn.Module], ...] = ()
    tokens_loss: bool = False

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"family {self.name}: task={self.task!r}, expected one of {TASKS}")
        if self.inputs not in INPUTS:
            raise ValueError(f"family {self.name}: inputs={self.inputs!r}, expected one of {INPUTS}")
        if self.hf_types and self.hf is None:
            raise ValueError(f"family {self.name}: hf_types {self.hf_types} need an hf module")

    def module(self, part: str) -> ModuleType:
        """The family's ``hf``, ``counts`` or ``onnx`` module, imported on first use.

        Raises:
            ValueError: the family has none (naming it and the part).
        """
        name = getattr(self, part)
        if name is None:
            raise ValueError(f"the {self.name} family has no {part} module")
        return importlib.import_module(name)

    def from_hf(self, hf: Mapping[str, Any], tensors: dict[str, Tensor], name: str) -> nn.Module:
        """Our model computing what the Hugging Face model (its config and weights) computes."""
        return self.module("hf").convert(hf, tensors, name)

    def to_hf(self, model: nn.Module) -> tuple[dict[str, Any], dict[str, Tensor]]:
        """``(config, weights)`` of the Hugging Face model computing what ``model`` computes."""
        return self.module("hf").export(model)


__all__ = ["INPUTS", "TASKS", "Family"]
