"""DETR (Carion et al., 2020): a CNN, a Transformer, N object queries, and a set loss by bipartite matching.

    model.py        config, presets, the model                 backbone.py   ResNet with frozen BatchNorm
    boxes.py        box formats, IoU, generalised IoU          matcher.py    Hungarian matching (section 3.1)
    criterion.py    the set loss with auxiliary losses          postprocess.py  outputs -> scored boxes
    hf.py           Hugging Face DetrForObjectDetection         counts.py     parameters and multiply-adds
"""

from aiayn.models.detr.backbone import ResNet
from aiayn.models.detr.model import DETR, MLP, PRESETS, DetrConfig
from aiayn.models.family import Family

FAMILY = Family(name="detr", config=DetrConfig, model=DETR, presets=PRESETS, task="detect", inputs="image",
                hf_types=("detr",), hf="aiayn.models.detr.hf", counts="aiayn.models.detr.counts", backbones=(ResNet,))

__all__ = ["DETR", "FAMILY", "MLP", "PRESETS", "DetrConfig"]
