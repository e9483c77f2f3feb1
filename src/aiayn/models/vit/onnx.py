"""A ViT as one ONNX graph, pixels to logits (:func:`aiayn.convert.onnx.to_onnx`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from aiayn.models.onnx import EXAMPLE, export_graph

if TYPE_CHECKING:
    from aiayn.models.vit.model import ViT

class _ViT(nn.Module):
    """ViT needs no wrapper; this one only names the model ``model``, as the other graphs name it."""

    def __init__(self, model: ViT) -> None:
        super().__init__()
        self.model = model

    def forward(self, pixel_values: Tensor) -> Tensor:
        return self.model(pixel_values)


def export(model: ViT, folder: Path, opset: int | None) -> dict[str, Any]:
    cfg = model.cfg
    shapes: dict[str, list[int | str]] = {
        "pixel_values": ["batch", cfg.in_channels, cfg.image_size, cfg.image_size],
        "logits": ["batch", cfg.num_classes or cfg.d_model],
    }
    images = torch.zeros(EXAMPLE["batch"], cfg.in_channels, cfg.image_size, cfg.image_size, device="meta")
    graph = export_graph(_ViT, model, (images,), (["pixel_values"], ["logits"]), shapes, folder / "model.onnx", opset)
    return {"model": graph}


__all__ = ["export"]
