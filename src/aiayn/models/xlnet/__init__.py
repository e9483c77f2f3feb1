"""XLNet (Yang et al., 2019): the permutation language model with two-stream attention on Transformer-XL's
backbone, on the shared blocks.

    model.py    XLNetConfig, its presets (xlnet-base-cased, xlnet-large-cased, xlnet-tiny), the model
    hf.py       Hugging Face XLNetModel, XLNetLMHeadModel and XLNetForSequenceClassification both ways
    counts.py   parameters and multiply-adds
"""

from aiayn.models.family import Family
from aiayn.models.xlnet.model import HEADS, PRESETS, XLNet, XLNetConfig

FAMILY = Family(
    name="xlnet", config=XLNetConfig, model=XLNet, presets=PRESETS, task="embed", hf_types=("xlnet",),
    hf="aiayn.models.xlnet.hf", counts="aiayn.models.xlnet.counts",
)

__all__ = ["FAMILY", "HEADS", "PRESETS", "XLNet", "XLNetConfig"]
