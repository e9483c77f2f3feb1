"""The Swin Transformer (Liu et al., 2021): attention in shifted windows, a hierarchy of patch merges.

    model.py    SwinConfig, its presets (swin-t, swin-s, swin-b, ...), its block, stage and model
    hf.py       Hugging Face SwinModel and SwinForImageClassification, both ways
    counts.py   parameters and multiply-adds (section 3)
"""

from aiayn.models.family import Family
from aiayn.models.swin.model import PRESETS, Swin, SwinBlock, SwinConfig, SwinStage

FAMILY = Family(name="swin", config=SwinConfig, model=Swin, presets=PRESETS, task="classify", inputs="image",
                hf_types=("swin",), hf="aiayn.models.swin.hf", counts="aiayn.models.swin.counts",
                blocks=(SwinBlock,))

__all__ = ["FAMILY", "PRESETS", "Swin", "SwinBlock", "SwinConfig", "SwinStage"]
