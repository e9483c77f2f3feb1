"""Classifying images with a saved ViT or Swin (a run of ours, or a converted one): files or tensors in [0, 1],
made ready for the model, answered with the most likely classes.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from aiayn.data.images import normalise, open_image
from aiayn.models.swin import Swin
from aiayn.models.vit import ViT
from aiayn.pipelines.loading import load_model
from aiayn.training import device as devices


@torch.no_grad()
def predict(model: torch.nn.Module, images: Tensor, batch_size: int = 500) -> Tensor:
    """Logits ``(N, K)`` of uint8 images ``(N, C, H, W)``, in eval mode; each batch runs on ``model``'s device, the
    logits come back to the CPU (beside the labels)."""
    model.eval()
    where = devices.of(model)
    return torch.cat([model(normalise(devices.move(images[i : i + batch_size], where))).cpu()
                      for i in range(0, len(images), batch_size)])


def read_image_file(path: str | os.PathLike) -> Tensor:
    """``(C, H, W)`` floats in [0, 1] from a PNG/JPEG (or any format Pillow reads) or a ``.npy`` array
    (``(H, W)``, ``(C, H, W)`` or ``(H, W, C)``; uint8, or floats in [0, 1] or [0, 255])."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no image at {path}")
    if path.suffix.lower() == ".npy":
        try:
            array = np.load(path, allow_pickle=False)
        except (ValueError, EOFError, OSError) as e:  # not an array file, truncated, or an object array
            raise ValueError(f"{path} is not a readable .npy array of pixels: {e}") from e
        if array.dtype.kind not in "biuf":
            raise ValueError(f"{path} holds an array of {array.dtype}; wanted numbers (uint8 or floats)")
    else:
        array = np.asarray(open_image(path, rgba=True))[..., :3]
    x = torch.from_numpy(np.array(array))  # a writable copy
    if x.is_floating_point() and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{path} holds NaN or infinite pixels; wanted finite values")
    if x.dim() == 2:
        x = x[None]
    elif x.dim() == 3 and x.shape[0] not in (1, 3) and x.shape[-1] in (1, 3, 4):
        x = x[..., :3].permute(2, 0, 1)  # (H, W, C) -> (C, H, W)
    if x.dim() != 3 or x.shape[0] not in (1, 3):
        raise ValueError(f"{path}: an image array of shape {tuple(array.shape)}; wanted (H, W), (C, H, W) or (H, W, C)")
    check_pixels(x, str(path))
    if x.dtype == torch.uint8 or x.float().max() > 1.0:
        return x.float() / 255
    return x.float()


def check_pixels(image: Tensor, name: str = "image") -> None:
    """Refuse a ``(C, H, W)`` image without a pixel (a zero height or width), which would reach a mean of
    nothing."""
    if image.dim() != 3 or min(image.shape) == 0:
        raise ValueError(f"{name} is an image of shape {tuple(image.shape)}; wanted (C, H, W) with at least one "
                         f"pixel")


def prepare(image: Tensor, in_channels: int, size: int, invert: bool | None = None) -> Tensor:
    """A ``(C, H, W)`` image in [0, 1] made ready for a model of ``in_channels`` and ``image_size`` ``size``:
    channels averaged or repeated, resized (bilinear, antialiased), and, for grey images, inverted when its
    border is light (``invert=None``; the training digits are light on dark, as MNIST)."""
    check_pixels(image)
    if image.size(0) != in_channels:
        image = image.mean(0, keepdim=True) if in_channels == 1 else image[:1].expand(in_channels, -1, -1)
    if invert is None:
        border = torch.cat([image[:, 0], image[:, -1], image[:, :, 0], image[:, :, -1]], dim=-1)
        invert = in_channels == 1 and float(border.mean()) > 0.5
    if invert:
        image = 1 - image
    if tuple(image.shape[1:]) != (size, size):
        image = F.interpolate(image[None], size=(size, size), mode="bilinear", antialias=True,
                              align_corners=False)[0]
    return image.clamp(0, 1)


def classify(run: str | os.PathLike, image_paths: list[str | os.PathLike], top: int = 3,
             invert: bool | None = None, *, device: str | torch.device | None = None,
             quantize: str | None = None) -> list[dict[str, Any]]:
    """The ``top`` most likely classes of each image under the model of a run folder (or checkpoint).

    Args:
        run: a run folder written by :func:`train_image` (or a ``.safetensors`` checkpoint of a ViT or Swin).
        image_paths: PNG/JPEG files or ``.npy`` arrays.
        top: how many classes to give per image.
        invert: invert grey images (``None``: when their border is light).
        device, quantize: where the model runs, and ``"int8"`` for int8 weights on the CPU
            (:func:`aiayn.pipelines.loading.ready`; default: a GPU if any, float32).

    Returns:
        One ``{"path", "label", "score", "top": [{"class", "probability"}, ...]}`` per image, most likely first
        (``label``, ``score``: the first of ``top``).

    Raises:
        ValueError: ``device`` names no device of this machine, a bad ``quantize``, or the run holds no
            classifier.
    """
    model = load_model(run, device, quantize, kinds=(ViT, Swin), task="image classification")
    images = [read_image_file(p) for p in image_paths]
    found = classify_images(model, images, top, invert, run, pixel_norm(run))
    return [{"path": str(path), **r} for path, r in zip(image_paths, found)]


def pixel_norm(run: str | os.PathLike) -> tuple[list[float], list[float]] | None:
    """``(mean, std)`` per channel that a model converted from Hugging Face normalises its [0, 1] images with
    (the ``preprocessor_config.json`` that ``aiayn convert`` keeps: ImageNet's for Swin and DeiT), or ``None``:
    a run of ours, whose images are scaled to [-1, 1] (:func:`aiayn.data.images.normalise`)."""
    file = Path(run) / "preprocessor_config.json"
    if not file.is_file():
        return None
    config = json.loads(file.read_text())
    if not config.get("do_normalize", True) or "image_mean" not in config:
        return None
    return list(config["image_mean"]), list(config["image_std"])


@torch.no_grad()
def classify_images(model: torch.nn.Module, images: list[Tensor], top: int = 3, invert: bool | None = None,
                    source: str | os.PathLike = "the model",
                    norm: tuple[list[float], list[float]] | None = None) -> list[dict[str, Any]]:
    """:func:`classify` with a loaded model and images ``(C, H, W)`` in [0, 1] (:func:`read_image_file`):
    one ``{"label", "score", "top": [{"class", "probability"}, ...]}`` per image (``label`` and ``score``: the most
    likely class and its probability, as ``transformers``' pipelines name them). ``norm``: a converted model's
    ``(mean, std)`` (:func:`pixel_norm`); ``None``: [-1, 1], as our recipe trains."""
    cfg: Any = model.cfg  # any model's config: checked below to be a classifier's
    if not hasattr(cfg, "in_channels"):
        raise ValueError(f"{source} holds a {type(cfg).__name__} model; classify wants a ViT or Swin run")
    if not cfg.num_classes:
        raise ValueError(f"{source} holds a model without a head (num_classes=0); it gives features, not classes")
    if not images:
        return []
    batch = torch.stack([prepare(image, cfg.in_channels, cfg.image_size, invert) for image in images])
    batch = devices.move(batch, devices.of(model))
    if norm is None:
        batch = normalise(batch)
    else:
        mean, std = (batch.new_tensor(v)[:, None, None] for v in norm)  # (C, 1, 1)
        batch = (batch - mean) / std
    probs = model(batch).softmax(-1)  # (N, K)
    p, idx = probs.topk(min(top, cfg.num_classes), dim=-1)
    found = [[{"class": int(c), "probability": round(float(q), 4)} for c, q in zip(ci, pi)]
             for ci, pi in zip(idx.tolist(), p.tolist())]
    return [{"label": top[0]["class"], "score": top[0]["probability"], "top": top} for top in found]


__all__ = ["classify", "classify_images", "pixel_norm", "predict", "prepare", "read_image_file"]
