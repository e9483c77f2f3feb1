"""The CNN backbone of DETR (Carion et al., 2020, section 3.2, "Backbone"): a ResNet (He et al., 2016).

    image (B, 3, H0, W0)
      -> stem: 7x7 conv stride 2, BN, ReLU, 3x3 max-pool stride 2         (B, stem, H0/4, W0/4)
      -> stage 1 .. n: blocks, the first of stages 2 .. n with stride 2     (B, widths[-1], H0/32, W0/32) for n = 4
    basic block       3x3 -> 3x3                     (ResNet-18/34)
    bottleneck block  1x1 -> 3x3 (stride here) -> 1x1, width/4 inside   (ResNet-50/101, torchvision's "v1.5")
    each block:       relu(branch(x) + shortcut(x)), shortcut a 1x1 conv + BN when the shape changes

DETR keeps the backbone's batch-norm statistics and affine parameters fixed ("frozen BatchNorm"): with
a few images per GPU, batch statistics would be noise. Here they are buffers, not parameters, so they
are neither trained nor counted, as in DETR and Hugging Face's port.

Training from scratch (no ImageNet weights here), a frozen identity BatchNorm cannot tame the variance
that adds up along the residual path, so the last convolution of every residual branch starts at zero
(as Goyal et al. 2017 zero the last BN gain, and Fixup, Zhang et al. 2019): every block starts as the
identity and the network as a shallow one.

Shapes: B batch, C channels, H x W a feature map.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class FrozenBatchNorm2d(nn.Module):
    """``y = (x - running_mean) / sqrt(running_var + eps) * weight + bias``, all four fixed buffers."""

    weight: Tensor
    bias: Tensor
    running_mean: Tensor
    running_var: Tensor

    def __init__(self, channels: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.register_buffer("weight", torch.ones(channels))
        self.register_buffer("bias", torch.zeros(channels))
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.ones(channels))

    def forward(self, x: Tensor) -> Tensor:  # (B, C, H, W) -> (B, C, H, W)
        scale = self.weight * (self.running_var + self.eps).rsqrt()  # (C,)
        shift = self.bias - self.running_mean * scale
        return x * scale[:, None, None] + shift[:, None, None]


def _conv(c_in: int, c_out: int, k: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(c_in, c_out, k, stride=stride, padding=k // 2, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convolutions (ResNet-18/34)."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv(c_in, c_out, 3, stride), FrozenBatchNorm2d(c_out)
        self.conv2, self.bn2 = _conv(c_out, c_out, 3), FrozenBatchNorm2d(c_out)
        self.downsample = _shortcut(c_in, c_out, stride)

    def forward(self, x: Tensor) -> Tensor:  # (B, C_in, H, W) -> (B, C_out, H / stride, W / stride)
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + (x if self.downsample is None else self.downsample(x)))


class Bottleneck(nn.Module):
    """1x1 down to ``c_out / 4``, 3x3 (with the stride), 1x1 up to ``c_out`` (ResNet-50/101)."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1) -> None:
        super().__init__()
        mid = c_out // 4
        self.conv1, self.bn1 = _conv(c_in, mid, 1), FrozenBatchNorm2d(mid)
        self.conv2, self.bn2 = _conv(mid, mid, 3, stride), FrozenBatchNorm2d(mid)
        self.conv3, self.bn3 = _conv(mid, c_out, 1), FrozenBatchNorm2d(c_out)
        self.downsample = _shortcut(c_in, c_out, stride)

    def forward(self, x: Tensor) -> Tensor:  # (B, C_in, H, W) -> (B, C_out, H / stride, W / stride)
        h = F.relu(self.bn1(self.conv1(x)))
        h = F.relu(self.bn2(self.conv2(h)))
        h = self.bn3(self.conv3(h))
        return F.relu(h + (x if self.downsample is None else self.downsample(x)))


def _shortcut(c_in: int, c_out: int, stride: int) -> nn.Sequential | None:
    if c_in == c_out and stride == 1:
        return None
    return nn.Sequential(_conv(c_in, c_out, 1, stride), FrozenBatchNorm2d(c_out))


BLOCKS = {"basic": BasicBlock, "bottleneck": Bottleneck}


class ResNet(nn.Module):
    """A ResNet without its classifier: ``(B, C_in, H0, W0)`` -> ``(B, widths[-1], H0 / stride, W0 / stride)``.

    Args:
        in_channels: image channels.
        stem: channels of the 7x7 stem.
        widths: output channels of each stage (ResNet-50: 256, 512, 1024, 2048).
        depths: blocks per stage (ResNet-50: 3, 4, 6, 3; ResNet-18: 2, 2, 2, 2).
        block: ``"basic"`` or ``"bottleneck"``.
        frozen_stages: the stem and this many first stages get ``requires_grad=False`` (DETR freezes the
            stem and stage 1 of its ImageNet ResNet: 1); 0 freezes the stem alone, -1 nothing.
    """

    def __init__(self, in_channels: int, stem: int, widths: tuple[int, ...], depths: tuple[int, ...],
                 block: str, frozen_stages: int = -1) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv(in_channels, stem, 7, 2), FrozenBatchNorm2d(stem)
        make = BLOCKS[block]
        stages, c_in = [], stem
        for i, (width, depth) in enumerate(zip(widths, depths)):
            stride = 1 if i == 0 else 2
            stages.append(nn.Sequential(*(make(c_in if j == 0 else width, width, stride if j == 0 else 1)
                                          for j in range(depth))))
            c_in = width
        self.stages = nn.ModuleList(stages)
        self.stride = 4 * 2 ** (len(widths) - 1)
        self.out_channels = widths[-1]
        self._init_weights()
        frozen = [] if frozen_stages < 0 else [self.conv1, *self.stages[:frozen_stages]]
        for module in frozen:
            module.requires_grad_(False)

    def _init_weights(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        for m in self.modules():
            if isinstance(m, (BasicBlock, Bottleneck)):  # every residual branch starts at zero (module docstring)
                nn.init.zeros_((m.conv3 if isinstance(m, Bottleneck) else m.conv2).weight)

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(self.bn1(self.conv1(x)))  # (B, stem, H0/2, W0/2)
        x = F.max_pool2d(x, kernel_size=3, stride=2, padding=1)  # (B, stem, H0/4, W0/4)
        for stage in self.stages:
            x = stage(x)
        return x  # (B, widths[-1], H0/stride, W0/stride)


__all__ = ["BLOCKS", "BasicBlock", "Bottleneck", "FrozenBatchNorm2d", "ResNet"]
