"""Transformer-XL (Dai et al., 2019): segment-level recurrence and relative positions, on the shared blocks.

    model.py    TransfoXLConfig, its presets (transfo-xl-wt103, transfo-xl-char), the model
    hf.py       Hugging Face TransfoXLLMHeadModel (transformers 4.x) both ways
    counts.py   parameters and multiply-adds
"""

from aiayn.models.family import Family
from aiayn.models.transfo_xl.model import PRESETS, TransfoXL, TransfoXLConfig

FAMILY = Family(
    name="transfo-xl", config=TransfoXLConfig, model=TransfoXL, presets=PRESETS, task="generate",
    hf_types=("transfo-xl",), hf="aiayn.models.transfo_xl.hf", counts="aiayn.models.transfo_xl.counts",
)

__all__ = ["FAMILY", "PRESETS", "TransfoXL", "TransfoXLConfig"]
