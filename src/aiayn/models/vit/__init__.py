"""ViT (Dosovitskiy et al., 2021): the Transformer's encoder on image patches.

    model.py    ViTConfig, its presets (vit-b16, vit-l16, ...), the model
    hf.py       Hugging Face ViTModel and ViTForImageClassification, both ways
    counts.py   parameters and multiply-adds (section 3.1)
    onnx.py     pixels to logits as one ONNX graph
"""

from aiayn.models.family import Family
from aiayn.models.vit.model import PRESETS, ViT, ViTConfig, resize_positions

FAMILY = Family(name="vit", config=ViTConfig, model=ViT, presets=PRESETS, task="classify", inputs="image",
                hf_types=("vit",), hf="aiayn.models.vit.hf", counts="aiayn.models.vit.counts",
                onnx="aiayn.models.vit.onnx")

__all__ = ["FAMILY", "PRESETS", "ViT", "ViTConfig", "resize_positions"]
