"""Parameter counts by part: embeddings, attention, feed-forward, norms, backbone, output.

Counted on the meta device when built from a config, so no weights are allocated and the biggest presets
(``gpt3-175b``) count on a laptop. A parameter shared by two modules (tied embeddings) is counted once,
under the part of the module that registers it first.

What each part holds, for every family:

    embeddings    token, position and segment tables; ViT's [CLS] token and position table (parameters the
                  model holds itself); the patch projection (ViT, Swin) and Swin's patch-merging reduction;
                  DETR's 1x1 input projection and its object queries
    attention     every MultiHeadAttention (W^Q, W^K, W^V, W^O and biases) and Swin's relative position bias
    feed-forward  every position-wise FeedForward
    norms         every LayerNorm (and RMSNorm: Llama), wherever it sits (embeddings, blocks, heads, patch merging)
    backbone      DETR's ResNet (its frozen BatchNorm holds buffers, not parameters)
    output        what is left: the pre-softmax projection or its bias, BERT's pooler and heads, the classifier
                  of ViT and Swin, DETR's class and box heads
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from aiayn.layers import Embedding, FeedForward, MultiHeadAttention
from aiayn.layers.adaptive import AdaptiveEmbedding
from aiayn.layers.positional import LearnedPositionalEmbedding
from aiayn.layers.vision import PatchEmbedding, PatchMerging, RelativePositionBias
from aiayn.models.formulas import PARAMETER_PARTS as PARTS
from aiayn.models.registry import FAMILIES

# Which part a module's parameters belong to; the first match along the path from the model down wins,
# except that a LayerNorm or RMSNorm is always "norms". A family's own backbone (DETR's ResNet) is named by its
# record (Family.backbones), not here.
_OWNERS: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (tuple(backbone for family in FAMILIES.values() for backbone in family.backbones), "backbone"),
    ((MultiHeadAttention, RelativePositionBias), "attention"),
    (FeedForward, "feed-forward"),
    ((Embedding, AdaptiveEmbedding, nn.Embedding, LearnedPositionalEmbedding, PatchEmbedding, PatchMerging, nn.Conv2d),
     "embeddings"),
)


def count_parameters(model: nn.Module) -> int:
    """Every parameter counted once (tied weights once)."""
    return sum(p.numel() for p in model.parameters())


def module_part(path: list[nn.Module]) -> str | None:
    """The part of the module at the end of ``path`` (the modules from the model down to it), or ``None``."""
    if isinstance(path[-1], (nn.LayerNorm, nn.RMSNorm)):
        return "norms"
    for module in path[1:]:
        for kind, part in _OWNERS:
            if isinstance(module, kind):
                return part
    return None


def parameter_part(model: nn.Module, name: str) -> str:
    """The part of parameter ``name`` (a qualified name of ``model.named_parameters()``)."""
    *owners, _ = name.split(".")
    path = [model]
    for attr in owners:
        path.append(getattr(path[-1], attr))
    if len(path) == 1:  # held by the model itself: ViT's [CLS] token and position table
        return "embeddings"
    return module_part(path) or "output"


class _SkipInitOnMeta(TorchFunctionMode):
    """In-place ops on meta tensors (``normal_``, ``uniform_``, ``zero_``, ...: initialisation) do nothing.

    A meta tensor has a shape and no values, so initialising one computes nothing, yet PyTorch still traces
    each through its Python reference implementation: three quarters of building ``gpt3-175b`` on the meta
    device. ``requires_grad_`` still applies.
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        target = args[0] if args else kwargs.get("tensor")  # nn.init passes the tensor by keyword
        if (name.endswith("_") and not name.endswith("__") and name != "requires_grad_"
                and isinstance(target, torch.Tensor) and target.is_meta):
            return target
        return func(*args, **kwargs)


def build_on_meta(model_or_cfg: Any) -> nn.Module:
    """The model itself, or the model of a config (or preset name) built on the meta device: shapes, no weights."""
    if isinstance(model_or_cfg, nn.Module):
        return model_or_cfg
    from aiayn.models import build

    with torch.device("meta"), _SkipInitOnMeta():
        return build(model_or_cfg)


def parameter_table(model_or_cfg: Any) -> dict[str, int]:
    """Parameters per part (:data:`~aiayn.models.formulas.PARAMETER_PARTS`, in that order) of a model, or of a
    config or preset name counted on the meta device, plus ``total``. Parts sum to the total."""
    model = build_on_meta(model_or_cfg)
    counts = dict.fromkeys(PARTS, 0)
    for name, p in model.named_parameters():  # each parameter once, under its first name
        counts[parameter_part(model, name)] += p.numel()
    counts["total"] = count_parameters(model)
    return counts
