"""DETR (Carion et al., 2020): a CNN, a Transformer, N object queries, and a set loss by bipartite matching.

    model.py        config, presets, the model                 backbone.py   ResNet with frozen BatchNorm
    boxes.py        box formats, IoU, generalised IoU          matcher.py    Hungarian matching (section 3.1)
    criterion.py    the set loss with auxiliary losses          postprocess.py  outputs -> scored boxes
"""

from aiayn.models.detr.model import DETR, MLP, PRESETS, DetrConfig

__all__ = ["DETR", "MLP", "PRESETS", "DetrConfig"]
