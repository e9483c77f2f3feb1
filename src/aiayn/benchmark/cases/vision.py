"""The vision cases: a classifier's forward pass in eval mode, without gradients, against Hugging Face's on the
same weights (ours converted with ``aiayn.from_hf``).

    swin-forward    swin-t, 224 px, batch 8     against SwinForImageClassification
    vit-forward     vit-b16, 224 px, batch 8    against ViTForImageClassification
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from aiayn.benchmark.cases.common import close, millions
from aiayn.benchmark.harness import Case, Side, Target
from aiayn.benchmark.peers.hf import vision_hf
from aiayn.convert import from_hf


def vision_forward(name: str, preset: str, peer: str, quick: bool, device: torch.device) -> Case:
    """Forward of ``preset`` in eval mode without gradients against Hugging Face's, on the same weights."""
    batch = 2 if quick else 8
    torch.manual_seed(0)
    hf = vision_hf(preset).eval()
    ours: Any = from_hf(hf).eval()  # a ViT or a Swin, by the preset
    hf, ours = hf.to(device), ours.to(device)
    cfg = ours.cfg
    images = torch.randn(batch, cfg.in_channels, cfg.image_size, cfg.image_size, device=device)

    def run_ours() -> Tensor:
        with torch.no_grad():
            return ours(images)

    def run_hf() -> Tensor:
        with torch.no_grad():
            return hf(pixel_values=images).logits

    checks = {peer: close("class logits", run_ours(), run_hf())}
    what = (f"{preset} forward ({millions(ours)} parameters), {cfg.image_size} px, batch "
            f"{batch}, eval, no gradients, against {peer} on the same weights")
    return Case(name, what, [Side("aiayn", run_ours), Side(peer, run_hf)], units=batch, unit="images",
                checks=checks, target=Target(1.2), extra={"preset": preset, "batch": batch})


def swin_forward(quick: bool, device: torch.device) -> Case:
    return vision_forward("swin-forward", "swin-tiny" if quick else "swin-t", "SwinForImageClassification", quick,
                          device)


def vit_forward(quick: bool, device: torch.device) -> Case:
    return vision_forward("vit-forward", "vit-tiny" if quick else "vit-b16", "ViTForImageClassification", quick,
                          device)


__all__ = ["swin_forward", "vision_forward", "vit_forward"]
