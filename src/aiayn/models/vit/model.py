"""ViT (Dosovitskiy et al., 2021, "An Image is Worth 16x16 Words"): the Transformer's encoder on image patches.

    images (B, Cin, H, W) -> P x P patches, each linearly projected (one conv of kernel and stride P)
        -> [CLS] token prepended, learned position embeddings added, dropout             (eq. 1)
        -> N x pre-norm EncoderBlock (MSA and a GELU MLP, each after a LayerNorm)         (eqs. 2, 3)
        -> LayerNorm -> the [CLS] token -> Linear -> class logits (B, K)                  (eq. 4)

The blocks are the Transformer's own :class:`~aiayn.layers.EncoderBlock` with ``norm_first=True`` and a
final LayerNorm (section 3.1: "Layernorm (LN) is applied before every block"). At another resolution the
patch position embeddings are resized by bicubic interpolation, as section 3.2 ("Fine-tuning and higher
resolution") does and Hugging Face's ``interpolate_pos_encoding`` computes. The head is one linear layer
(the paper's fine-tuning head); ``num_classes=0`` leaves it out, and ``model(images)`` then returns the
pooled features.

Shapes: B batch, Cin image channels, H x W image, P patch side, N = (H/P)(W/P) patches, C d_model, K classes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from aiayn.layers import EncoderBlock, Stack
from aiayn.layers.feedforward import ACTIVATIONS
from aiayn.layers.vision import PatchEmbedding, check_images
from aiayn.models.config import check_choice, check_divisible, check_positive, check_probability
from aiayn.models.outputs import ModelOutput, image_outputs
from aiayn.models.pretrained import PretrainedMixin


@dataclass(frozen=True)
class ViTConfig:
    """Sizes of a ViT; defaults are ViT-Base/16 at 224 px with ImageNet's 1,000 classes (Table 1).

    ``num_classes=0`` builds the model without a head. ``layer_norm_eps`` is 1e-6, the reference (JAX)
    implementation's; Hugging Face's ViT configs say 1e-12, which the conversion keeps.
    """

    image_size: int = 224
    patch_size: int = 16
    in_channels: int = 3
    num_classes: int = 1000
    d_model: int = 768
    n_heads: int = 12
    n_layers: int = 12
    d_ff: int = 3072
    dropout: float = 0.0
    attention_dropout: float = 0.0
    activation: str = "gelu"
    layer_norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        check_positive(self, "image_size", "patch_size", "in_channels", "d_model", "n_heads", "n_layers", "d_ff")
        check_divisible(self, "d_model", "n_heads")
        check_divisible(self, "image_size", "patch_size")
        check_probability(self, "dropout", "attention_dropout")
        check_choice(self, "activation", tuple(ACTIVATIONS))
        if not isinstance(self.num_classes, int) or self.num_classes < 0:
            raise ValueError(f"num_classes={self.num_classes!r} must be a non-negative integer (0: no head)")

    @property
    def grid(self) -> int:
        """Patches per side at ``image_size``."""
        return self.image_size // self.patch_size


def _vit(d_model: int, n_layers: int, n_heads: int, d_ff: int) -> ViTConfig:
    return ViTConfig(d_model=d_model, n_layers=n_layers, n_heads=n_heads, d_ff=d_ff)


PRESETS = {
    # Table 1 of the paper, patch 16, 224 px, 1,000 classes: 86,567,656 and 304,326,632 parameters.
    "vit-b16": _vit(768, 12, 12, 3072),
    "vit-l16": _vit(1024, 24, 16, 4096),
    # For tests and the default image job on a laptop CPU: 28 px grey digits, 4 x 4 patches of 7 px.
    "vit-tiny": ViTConfig(image_size=28, patch_size=7, in_channels=1, num_classes=10, d_model=64, n_heads=4,
                          n_layers=4, d_ff=128),
}


def resize_positions(table: Tensor, grid: tuple[int, int]) -> Tensor:
    """Bicubic resize of a square ``(1, g*g, C)`` table of patch positions to ``(1, gh*gw, C)``."""
    g, c = round(table.size(1) ** 0.5), table.size(2)
    square = table.reshape(1, g, g, c).permute(0, 3, 1, 2)  # (1, C, g, g)
    square = F.interpolate(square, size=grid, mode="bicubic", align_corners=False)  # (1, C, gh, gw)
    return square.permute(0, 2, 3, 1).reshape(1, grid[0] * grid[1], c)


class ViT(PretrainedMixin, nn.Module):
    """Vision Transformer; ``forward(images)`` returns class logits ``(B, K)``."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        c = cfg.d_model
        self.patch_embed = PatchEmbedding(cfg.in_channels, c, cfg.patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, c))
        self.positions = nn.Parameter(torch.zeros(1, 1 + cfg.grid**2, c))  # [CLS] first, then patches row-major
        self.dropout = nn.Dropout(cfg.dropout)
        self.encoder = Stack(
            [EncoderBlock(c, cfg.n_heads, cfg.d_ff, cfg.dropout, cfg.attention_dropout, activation=cfg.activation,
                          norm_first=True, eps=cfg.layer_norm_eps) for _ in range(cfg.n_layers)],
            c, final_norm=True, eps=cfg.layer_norm_eps,
        )
        self.head = nn.Linear(c, cfg.num_classes) if cfg.num_classes else nn.Identity()
        self._init_weights()

    def _init_weights(self) -> None:
        # truncated N(0, 0.02) for matrices, the head among them (as timm trains from scratch; the paper's zero
        # head is for fine-tuning), zero biases and [CLS], unit LayerNorm gains. The patch projection keeps
        # PyTorch's conv initialisation (as timm), which puts patch embeddings near std 0.5, and the positions
        # start at that scale too, so where a patch lies counts as much as what it shows from the first update.
        for name, p in self.named_parameters():
            if name.startswith("patch_embed.proj"):
                continue
            if name == "positions":
                nn.init.trunc_normal_(p, std=0.5)
            elif name == "cls_token":
                nn.init.zeros_(p)
            elif p.dim() > 1:
                nn.init.trunc_normal_(p, std=0.02)
            else:
                nn.init.ones_(p) if "norm" in name and name.endswith("weight") else nn.init.zeros_(p)

    def forward_features(self, images: Tensor) -> Tensor:
        """The final normalised tokens ``(B, 1 + N, C)``, [CLS] first.

        Args:
            images: ``(B, in_channels, H, W)``, H and W multiples of ``patch_size``; at any size other than
                ``image_size`` x ``image_size`` the position embeddings are interpolated.
        """
        check_images(images, self.cfg.in_channels)
        h, w = images.shape[-2:]
        p = self.cfg.patch_size
        if h % p or w % p:
            raise ValueError(f"images are {h} x {w} pixels; ViT wants height and width multiples of "
                             f"patch_size={p} (e.g. {self.cfg.image_size} x {self.cfg.image_size})")
        x = self.patch_embed(images).flatten(1, 2)  # (B, N, C)
        positions: Tensor = self.positions
        if (h // p, w // p) != (self.cfg.grid, self.cfg.grid):
            positions = torch.cat([positions[:, :1], resize_positions(positions[:, 1:], (h // p, w // p))], dim=1)
        x = torch.cat([self.cls_token.expand(x.size(0), -1, -1), x], dim=1) + positions  # (B, 1 + N, C)
        return self.encoder(self.dropout(x))

    def pool(self, features: Tensor) -> Tensor:
        """``(B, 1 + N, C)`` -> ``(B, C)``: the [CLS] token (eq. 4)."""
        return features[:, 0]

    def forward(self, images: Tensor) -> Tensor:
        """Class logits ``(B, K)`` for ``(B, in_channels, H, W)`` images (pooled features ``(B, C)`` when
        ``num_classes=0``)."""
        return self.head(self.pool(self.forward_features(images)))

    def outputs(self, pixel_values: Tensor, labels: Tensor | None = None) -> ModelOutput:
        """``model(pixel_values=..., labels=...)`` as ``transformers``' image classifier (or, with ``num_classes=0``,
        its bare model) answers it: :func:`aiayn.models.outputs.image_outputs`."""
        return image_outputs(self, pixel_values, labels)


__all__ = ["PRESETS", "ViT", "ViTConfig", "resize_positions"]
