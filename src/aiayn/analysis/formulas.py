"""Closed-form parameter and multiply-add counts of any config, and of the layers section 4's Table 1 compares.

The conventions (one multiply-add per weight per position, only matmuls and convolutions, attention scores over the
full square) and the shared layers' formulas are in :mod:`aiayn.models.formulas`, which every family's
``counts.py`` (:mod:`aiayn.models.gpt.counts`, ...) adds up; they are named here too. :func:`counts` asks the
family of a config for its counts through the registry, so nothing here imports a family's folder.

Shapes: T query positions, S key positions, C d_model, F d_ff, V vocabulary, h heads of D = C/h, K classes,
P patch side, M window side, B batch (every MAC count is per example; ``counts(..., batch=B)`` multiplies).
"""

from __future__ import annotations

from typing import Any

from aiayn.models.formulas import (
    MAC_PARTS,
    NONE,
    PARAMETER_PARTS,
    Counts,
    attention,
    conv,
    decoder_layer,
    encoder_layer,
    feed_forward,
    layer_norm,
    linear,
    resnet,
    scorer,
    table,
    window_attention,
)


def resnet_classifier(depths: tuple[int, ...], image_size: int = 224, num_classes: int = 1000) -> Counts:
    """A bottleneck ResNet classifier (He et al. 2016, Table 1; torchvision's ``resnet50`` / ``resnet101``, the
    stride in the 3 x 3 conv): :func:`resnet` + its BatchNorms' gain and bias (2 per channel of every conv, in
    "norms") + global average pooling and a linear head 2048 -> ``num_classes``.

    ResNet-50 (``depths=(3, 4, 6, 3)``): 25,557,032 parameters, 4.09G multiply-adds at 224; ResNet-101
    (``(3, 4, 23, 3)``): 44,549,160 and 7.80G: the figures torchvision's model cards print.
    """
    widths = (256, 512, 1024, 2048)
    backbone, _ = resnet(3, 64, widths, depths, "bottleneck", image_size, image_size)
    bn, c_in = 64, 64  # the stem's BatchNorm; then each block's three (and its shortcut's)
    for i, (c_out, depth) in enumerate(zip(widths, depths)):
        for j in range(depth):
            shortcut = c_in != c_out or (i > 0 and j == 0)
            bn += 2 * (c_out // 4) + c_out + (c_out if shortcut else 0)
            c_in = c_out
    return backbone + Counts({"norms": 2 * bn}) + linear(1, widths[-1], num_classes)


# --- one layer of each kind over a sequence (Vaswani et al. 2017, section 4, Table 1) --------------------------


def lstm(t: int, c_in: int, c: int) -> Counts:
    """One LSTM layer (``torch.nn.LSTM``) over ``t`` steps: four gates, each a C_in x C map of the input and a
    C x C map of the previous state, 4(C_in + C)C + 8C parameters (PyTorch keeps two biases) and 4T(C_in + C)C
    multiply-adds: 8TC^2 with C_in = C, Table 1's O(n d^2), in T steps that wait for each other (O(n)
    sequential operations)."""
    return Counts({"backbone": 4 * (c_in + c) * c + 8 * c}, {"backbone": 4 * t * (c_in + c) * c})


def conv1d(t: int, c_in: int, c_out: int, k: int, bias: bool = True) -> Counts:
    """A 1-D convolution of kernel ``k`` with ``t`` outputs (``padding="same"``): k C_in C_out (+ C_out)
    parameters and T k C_in C_out multiply-adds, Table 1's O(k n d^2), all positions at once."""
    return Counts({"backbone": k * c_in * c_out + (c_out if bias else 0)}, {"backbone": t * k * c_in * c_out})


def restricted_attention(t: int, c: int, r: int, bias: bool = True) -> Counts:
    """Self-attention restricted to a neighbourhood of ``r`` positions around each query (Table 1's last row):
    the projections of all ``t`` positions as :func:`attention` (4TC^2), scores over r keys per query,
    2TrC (O(r n d)) instead of 2T^2 C."""
    full = attention(t, t, c, bias=bias)
    return Counts(full.parameters, {"attention projections": full.macs["attention projections"],
                                    "attention scores": 2 * t * min(r, t) * c})


# --- any config --------------------------------------------------------------------------------------------


def default_size(cfg: Any) -> int | tuple[int, int]:
    """What ``counts`` assumes when no size is given: a text family's ``max_len`` (its context), a vision
    family's ``(image_size, image_size)``, DETR's 800 x 1066 (each family's ``counts.default_size``)."""
    from aiayn.models import family_of

    return family_of(cfg).module("counts").default_size(cfg)


def counts(cfg_or_name: Any, seq_len: int | None = None, image_size: int | tuple[int, int] | None = None,
           batch: int = 1) -> Counts:
    """Parameters and forward multiply-adds, by part, of a config or preset name, from the formulas alone
    (the family's ``counts.count``: :mod:`aiayn.models.gpt.counts`, ...).

    Args:
        cfg_or_name: a model config or a preset name.
        seq_len: positions of a text family (the encoder-decoder: source and target each); default
            :func:`default_size`.
        image_size: a side or ``(height, width)`` for an image family (ViT, Swin, DETR); default
            :func:`default_size`.
        batch: examples per forward pass (multiplies the multiply-adds).

    Returns:
        :class:`Counts`; ``.flops`` is twice the multiply-adds.
    """
    from aiayn.models import family_of, preset

    cfg = preset(cfg_or_name) if isinstance(cfg_or_name, str) else cfg_or_name
    family = family_of(cfg)
    if not isinstance(batch, int) or batch <= 0:
        raise ValueError(f"batch={batch!r} must be a positive integer")
    image = family.inputs == "image"
    if image and seq_len is not None:
        raise ValueError(f"seq_len={seq_len} is for text models; a {family.name} config takes image_size")
    if not image and image_size is not None:
        raise ValueError(f"image_size={image_size} is for image models; a {family.name} config takes seq_len")
    size = check_size(image_size if image else seq_len, image, "image_size" if image else "seq_len")
    module = family.module("counts")
    return module.count(cfg, module.default_size(cfg) if size is None else size).batched(batch)


def check_size(size: Any, image: bool, name: str) -> int | tuple[int, int] | None:
    """``size`` as a text family takes it (a positive int) or an image family does (``(height, width)``, from a
    side or a pair); ``None`` stays ``None``. Raises a ``ValueError`` naming ``name``."""
    if size is None:
        return None
    if image:
        h, w = (size, size) if isinstance(size, int) else tuple(size)
        if not all(isinstance(v, int) and v > 0 for v in (h, w)):
            raise ValueError(f"{name}={size!r} must be a positive side or (height, width)")
        return h, w
    if not isinstance(size, int) or size <= 0:
        raise ValueError(f"{name}={size!r} must be a positive integer")
    return size


def as_dict(c: Counts) -> dict[str, Any]:
    """JSON-ready: parameters and multiply-adds by part, their totals, and the FLOPs (2 per multiply-add)."""
    return {"parameters": {**c.parameters, "total": c.total_parameters},
            "macs": {**c.macs, "total": c.total_macs}, "flops": c.flops}


__all__ = ["MAC_PARTS", "NONE", "PARAMETER_PARTS", "Counts", "as_dict", "attention", "check_size", "conv", "conv1d",
           "counts", "decoder_layer", "default_size", "encoder_layer", "feed_forward", "layer_norm", "linear", "lstm",
           "resnet", "resnet_classifier", "restricted_attention", "scorer", "table", "window_attention"]
