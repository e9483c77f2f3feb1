"""DETR (Carion et al., 2020, "End-to-End Object Detection with Transformers"): detection as set prediction.

    images (B, 3, H0, W0), pixel_mask (B, H0, W0)
      -> ResNet, stride 32 (frozen BatchNorm)                    features (B, C_b, H, W), H = H0/32
      -> 1x1 conv to d_model, flatten                            src (B, HW, C)
      -> 2-D sine encodings of the real positions                pos (B, HW, C)
      -> N x EncoderBlock, pos added to queries and keys         memory (B, HW, C)
    object queries: zeros (B, Q, C), learned query_pos (Q, C)
      -> M x DecoderBlock: self-attention (query_pos on q, k), cross-attention (query_pos on q, pos on k)
      -> each layer's output through the shared final LayerNorm  (M, B, Q, C)
      -> class head Linear(C, K + 1), the last class "no object"; box head MLP(C, C, 4), sigmoid
    returns {"logits": (B, Q, K+1), "boxes": (B, Q, 4) normalised (cx, cy, w, h),
             "aux": [{"logits", "boxes"} of decoder layers 1 .. M-1]}

Section 3.2 and figure 10 give the architecture: the positional encodings are added in every attention
layer, to queries and keys but never to values, and the decoder's intermediate outputs feed the same
heads for the auxiliary losses (the loss, the matching and post-processing live in
:mod:`~aiayn.models.detr.criterion`, :mod:`~aiayn.models.detr.matcher`, :mod:`~aiayn.models.detr.postprocess`).
The blocks are the Transformer's own post-norm :class:`~aiayn.layers.EncoderBlock` and
:class:`~aiayn.layers.DecoderBlock`.

Shapes: B batch, Q object queries, K classes, C d_model, H x W the feature map, M decoder layers.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.layers import DecoderBlock, EncoderBlock, Stack, sine_encoding_2d
from aiayn.layers.feedforward import ACTIVATIONS
from aiayn.models.config import check_choice, check_divisible, check_positive, check_probability
from aiayn.models.detr.backbone import BLOCKS, ResNet
from aiayn.models.outputs import ObjectDetectionOutput
from aiayn.models.pretrained import PretrainedMixin


@dataclass(frozen=True)
class DetrConfig:
    """Sizes of DETR; defaults are DETR-R50 (section 4, table 1: 41M parameters, 91 COCO class ids).

    ``num_classes`` K counts the real classes; the class head has K + 1 outputs, the last "no object".
    The backbone is a ResNet: ``backbone_block`` ("basic" or "bottleneck"), the stem's channels, then the
    width and depth of each stage; with 4 stages its stride is 32. ``backbone_frozen_stages``: the stem and
    that many first stages are not trained (DETR: 1, its ResNet being pre-trained on ImageNet; -1 trains
    everything, for a backbone learnt from scratch).
    """

    num_classes: int = 91
    num_queries: int = 100
    d_model: int = 256
    n_heads: int = 8
    n_encoder_layers: int = 6
    n_decoder_layers: int = 6
    d_ff: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.1  # DETR's feed-forward drops inside too (linear2(dropout(relu(linear1))))
    activation: str = "relu"
    norm_first: bool = False
    layer_norm_eps: float = 1e-5
    in_channels: int = 3
    backbone_block: str = "bottleneck"
    backbone_stem: int = 64
    backbone_widths: tuple[int, ...] = (256, 512, 1024, 2048)
    backbone_depths: tuple[int, ...] = (3, 4, 6, 3)
    backbone_frozen_stages: int = 1

    def __post_init__(self) -> None:
        for name in ("backbone_widths", "backbone_depths"):  # a checkpoint's JSON gives lists
            object.__setattr__(self, name, tuple(getattr(self, name)))
        check_positive(self, "num_classes", "num_queries", "d_model", "n_heads", "n_encoder_layers",
                       "n_decoder_layers", "d_ff", "in_channels", "backbone_stem")
        check_divisible(self, "d_model", "n_heads")
        if self.d_model % 4:
            raise ValueError(f"d_model={self.d_model} must be a multiple of 4 (2-D sine encodings: y and x, sin "
                             f"and cos)")
        check_probability(self, "dropout", "attention_dropout", "activation_dropout")
        check_choice(self, "activation", tuple(ACTIVATIONS))
        check_choice(self, "backbone_block", tuple(BLOCKS))
        widths, depths = self.backbone_widths, self.backbone_depths
        if not widths or len(widths) != len(depths):
            raise ValueError(f"backbone_widths={widths} and backbone_depths={depths} must be non-empty and of one "
                             f"length (one entry per stage)")
        for name, values in (("backbone_widths", widths), ("backbone_depths", depths)):
            if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
                raise ValueError(f"{name}={values} must hold positive integers")
        if not -1 <= self.backbone_frozen_stages <= len(depths):
            raise ValueError(f"backbone_frozen_stages={self.backbone_frozen_stages} must be in [-1, {len(depths)}] "
                             f"(-1: train all; 0: freeze the stem; k: the stem and the first k stages)")
        if self.backbone_block == "bottleneck" and any(w % 4 for w in widths):
            raise ValueError(f"backbone_widths={widths} must be multiples of 4 for bottleneck blocks (width/4 inside)")

    @property
    def stride(self) -> int:
        """Pixels per feature-map position: 32 for four stages."""
        return 4 * 2 ** (len(self.backbone_depths) - 1)


PRESETS = {
    # Table 1 of the paper, DETR with a ResNet-50: 41,524,768 parameters, 41,302,368 of them trained (the stem
    # and stage 1 are frozen; DETR's main.py counts these, the paper's "41M"), as Hugging Face's
    # DetrForObjectDetection with 91 labels counts. Frozen BatchNorm holds buffers, not parameters.
    "detr-r50": DetrConfig(),
    # For tests and the CPU job on the synthetic shapes (aiayn.data.detection): a ResNet-18-shaped backbone,
    # 4 stages of one basic block with few channels, stride 32; 2 + 2 layers of width 64.
    "detr-tiny": DetrConfig(num_classes=4, num_queries=8, d_model=64, n_heads=4, n_encoder_layers=2,
                            n_decoder_layers=2, d_ff=256, dropout=0.0, activation_dropout=0.0, backbone_block="basic",
                            backbone_stem=16, backbone_widths=(16, 32, 64, 128), backbone_depths=(1, 1, 1, 1),
                            backbone_frozen_stages=-1),
}


class MLP(nn.Module):
    """``n_layers`` linear layers with ReLU between: DETR's box head (section 3.2, "Prediction FFNs")."""

    def __init__(self, d_in: int, d_hidden: int, d_out: int, n_layers: int) -> None:
        super().__init__()
        sizes = [d_in] + [d_hidden] * (n_layers - 1) + [d_out]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(sizes))

    def forward(self, x: Tensor) -> Tensor:  # (..., d_in) -> (..., d_out)
        for i, layer in enumerate(self.layers):
            x = layer(x) if i == len(self.layers) - 1 else F.relu(layer(x))
        return x


def feature_mask(pixel_mask: Tensor | None, features: Tensor) -> tuple[Tensor, Tensor | None]:
    """The real positions of the feature map and the encoder's mask, from the pixels' mask.

    Args:
        pixel_mask: ``(B, H0, W0)``, ``True``/1 on real pixels, or ``None``: all real.
        features: ``(B, C_b, H, W)``, the backbone's map (its size and device are read).

    Returns:
        ``(real, key_mask)``: ``real`` ``(B, H, W)`` bool, the pixel mask downsampled to the map by nearest
        neighbour as DETR does (all ``True`` without one), for the sine encodings; ``key_mask``
        ``(B, 1, 1, HW)`` bool, ``True`` = may attend, or ``None`` without a pixel mask (nothing to hide).
    """
    b, h, w = features.size(0), *features.shape[-2:]
    if pixel_mask is None:
        return torch.ones(b, h, w, dtype=torch.bool, device=features.device), None
    real = F.interpolate(pixel_mask[None].float(), size=(h, w))[0].bool()  # (B, H, W)
    return real, real.flatten(1)[:, None, None, :]  # (B, 1, 1, HW)


class DETR(PretrainedMixin, nn.Module):
    """DETR; ``forward(images, pixel_mask=None)`` returns ``{"logits", "boxes", "aux"}`` (module docstring)."""

    def __init__(self, cfg: DetrConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.backbone = ResNet(cfg.in_channels, cfg.backbone_stem, cfg.backbone_widths, cfg.backbone_depths,
                               cfg.backbone_block, cfg.backbone_frozen_stages)
        self.input_proj = nn.Conv2d(self.backbone.out_channels, cfg.d_model, kernel_size=1)
        self.query_embed = nn.Embedding(cfg.num_queries, cfg.d_model)
        block: dict[str, Any] = {"d_model": cfg.d_model, "n_heads": cfg.n_heads, "d_ff": cfg.d_ff,
                                 "dropout": cfg.dropout, "attention_dropout": cfg.attention_dropout,
                                 "activation_dropout": cfg.activation_dropout, "activation": cfg.activation,
                                 "norm_first": cfg.norm_first, "eps": cfg.layer_norm_eps}
        self.encoder = Stack([EncoderBlock(**block) for _ in range(cfg.n_encoder_layers)], cfg.d_model,
                             final_norm=cfg.norm_first, eps=cfg.layer_norm_eps)
        # The decoder always ends with a LayerNorm, shared by every layer's output (the auxiliary heads).
        self.decoder = Stack([DecoderBlock(**block) for _ in range(cfg.n_decoder_layers)], cfg.d_model,
                             final_norm=True, eps=cfg.layer_norm_eps)
        self.class_head = nn.Linear(cfg.d_model, cfg.num_classes + 1)
        self.box_head = MLP(cfg.d_model, cfg.d_model, 4, 3)
        for name, p in self.named_parameters():  # DETR's transformer: Xavier-uniform matrices
            if p.dim() > 1 and name.startswith(("encoder.", "decoder.")):
                nn.init.xavier_uniform_(p)

    def forward(self, images: Tensor, pixel_mask: Tensor | None = None) -> dict[str, Tensor | list[dict[str, Tensor]]]:
        """Class logits and boxes of every object query, from the last decoder layer and from the others.

        Args:
            images: ``(B, in_channels, H0, W0)`` normalised pixels; images of different sizes are padded
                (at the bottom and right) to one size.
            pixel_mask: ``(B, H0, W0)``, ``True``/1 on real pixels, ``False``/0 on padding; ``None``: all real.

        Returns:
            ``{"logits": (B, Q, K+1), "boxes": (B, Q, 4), "aux": [{"logits", "boxes"}] * (M - 1)}``; boxes
            are (cx, cy, w, h) relative to each image's real size, in [0, 1].
        """
        self._check(images, pixel_mask)
        features = self.backbone(images)  # (B, C_b, H, W)
        src = self.input_proj(features).flatten(2).transpose(1, 2)  # (B, HW, C)
        real, key_mask = feature_mask(pixel_mask, features)  # (B, H, W), (B, 1, 1, HW) or None
        pos = sine_encoding_2d(real, self.cfg.d_model).flatten(1, 2).to(src.dtype)  # (B, HW, C)
        memory = self.encoder(src, mask=key_mask, pos=pos)  # (B, HW, C)
        query_pos = self.query_embed.weight.unsqueeze(0).expand(images.size(0), -1, -1)  # (B, Q, C)
        states = self.decoder.layer_outputs(torch.zeros_like(query_pos), memory=memory, memory_mask=key_mask,
                                            pos=query_pos, memory_pos=pos)
        hs = torch.stack(states)  # (M, B, Q, C), each through the final LayerNorm
        logits, boxes = self.class_head(hs), self.box_head(hs).sigmoid()  # (M, B, Q, K+1), (M, B, Q, 4)
        aux = [{"logits": logits[i], "boxes": boxes[i]} for i in range(hs.size(0) - 1)]
        return {"logits": logits[-1], "boxes": boxes[-1], "aux": aux}

    def outputs(self, pixel_values: Tensor, pixel_mask: Tensor | None = None,
                labels: list[dict[str, Tensor]] | None = None) -> ObjectDetectionOutput:
        """``model(pixel_values=..., labels=...)`` as ``DetrForObjectDetection`` answers it
        (:mod:`aiayn.models.outputs`).

        Args:
            pixel_values, pixel_mask: as :meth:`forward` takes them.
            labels: one dict per image: ``"class_labels"`` ``(n,)`` and ``"boxes"`` ``(n, 4)`` (cx, cy, w, h in
                [0, 1]); the loss is DETR's set loss (:class:`~aiayn.models.detr.criterion.SetCriterion` with the
                paper's weights), summed over the last layer and the auxiliary ones.
        """
        out = self(pixel_values, pixel_mask)
        loss = parts = None
        if labels is not None:
            from aiayn.models.detr.criterion import SetCriterion  # the loss lives apart from the model

            if len(labels) != pixel_values.size(0):
                raise ValueError(f"labels must hold one dict per image ({pixel_values.size(0)}), got {len(labels)}")
            if not all(isinstance(t, dict) and {"class_labels", "boxes"} <= t.keys() for t in labels):
                raise ValueError("labels: each image's dict needs 'class_labels' (n,) and 'boxes' (n, 4), as "
                                 "transformers' DETR takes them")
            targets = [{"labels": t["class_labels"], "boxes": t["boxes"]} for t in labels]
            losses = SetCriterion(self.cfg.num_classes).to(pixel_values.device)(out, targets)
            loss = losses.pop("loss")
            parts = {f"loss_{k}": v for k, v in losses.items()}  # transformers' names: loss_ce, loss_bbox_0, ...
        return ObjectDetectionOutput(loss=loss, loss_dict=parts, logits=out["logits"], pred_boxes=out["boxes"],
                                     auxiliary_outputs=[{"logits": a["logits"], "pred_boxes": a["boxes"]}
                                                        for a in out["aux"]])

    def _check(self, images: Tensor, pixel_mask: Tensor | None) -> None:
        c = self.cfg.in_channels
        if images.dim() != 4 or images.size(1) != c:
            raise ValueError(f"images must be (B, {c}, H, W) with {c} channels, got shape {tuple(images.shape)}")
        if not images.is_floating_point():
            raise ValueError(f"images must be floating point (normalised pixels), got {images.dtype}")
        if pixel_mask is not None:
            want = (images.size(0), *images.shape[-2:])
            if tuple(pixel_mask.shape) != want:
                raise ValueError(f"pixel_mask must be (B, H, W) = {want} to match images, got "
                                 f"{tuple(pixel_mask.shape)}")


__all__ = ["DETR", "MLP", "PRESETS", "DetrConfig", "feature_mask"]
