"""Finding objects with a saved DETR run: boxes in the image's pixels above a threshold, drawn into a picture.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, cast

import torch

from aiayn.data.detection import collate, load_image
from aiayn.io import atomic_write
from aiayn.models.detr.model import DETR
from aiayn.models.detr.postprocess import postprocess
from aiayn.pipelines.loading import load_model, no_weights
from aiayn.training import device as devices
from aiayn.training.session import read_args


def collate_on(samples: list, where: torch.device | str) -> tuple[torch.Tensor, torch.Tensor | None, list]:
    """:func:`collated`'s ``(images, pixel mask or None, targets)``, on the device ``where``."""
    return devices.move(collated(samples), where)


def collated(samples: list) -> tuple[torch.Tensor, torch.Tensor | None, list]:
    """A training batch as the model reads it, made on the CPU before it moves: ``(images, pixel mask,
    targets)``, the mask ``None`` when every pixel is real (decided here, where reading it costs no stall)."""
    images, mask, targets = collate(samples)
    return images, None if bool(mask.all()) else mask, targets


def detect(run: str | os.PathLike, image_path: str | os.PathLike, threshold: float = 0.7,
           out: str | os.PathLike | None = None, verbose: bool = True, *,
           device: str | torch.device | None = None, quantize: str | None = None) -> dict[str, Any]:
    """Detect objects in one image with a trained run; print them and draw them.

    Args:
        run: a run folder of :func:`train_detr` (``model.safetensors``, ``args.json``, ``classes.json``).
        image_path: any image Pillow reads.
        threshold: keep detections whose class probability is above this.
        out: the picture to write; default ``<run>/detections/<image name>.png``.
        device, quantize: where the model runs, and ``"int8"`` for int8 weights on the CPU
            (:func:`aiayn.pipelines.loading.ready`; default: a GPU if any, float32).

    Returns:
        ``{"detections": [{"label", "name", "score", "box": [x0, y0, x1, y1] in the image's pixels}], "image"}``.

    Raises:
        ValueError: ``device`` names no device of this machine, a bad ``quantize``, or ``threshold`` is
            outside [0, 1).
    """
    if not 0 <= threshold < 1:
        raise ValueError(f"threshold={threshold} must be in [0, 1)")
    detector = load_detector(run, device=device, quantize=quantize)
    detections = find_objects(detector, image_path, threshold)
    out = Path(out) if out is not None else Path(run) / "detections" / f"{Path(image_path).stem}.png"
    _draw(load_image(image_path), detections, out)
    if verbose:
        for d in detections:
            print(f"{d['name']:<12} {d['score']:.3f}  box {d['box']}")
        print(f"{len(detections)} detection(s) above {threshold}; drawn in {out}")
    return {"detections": detections, "image": out}


def load_detector(run: str | os.PathLike, *, device: str | torch.device | None = None,
                  quantize: str | None = None) -> tuple[torch.nn.Module, list[str], int]:
    """``(model, class names, image size)`` of a detection run folder, the model made
    :func:`~aiayn.pipelines.loading.ready` on ``device`` (or in int8)."""
    run = Path(run)
    if not (run / "model.safetensors").is_file():
        raise no_weights(run, "a run folder of `aiayn train --task detect`")
    model = load_model(run, device, quantize, kinds=(DETR,), task="detection")
    return model, json.loads((run / "classes.json").read_text()), read_args(run).get("image_size", 128)


@torch.no_grad()
def find_objects(detector: tuple[torch.nn.Module, list[str], int], image_path: str | os.PathLike,
                 threshold: float = 0.7) -> list[dict[str, Any]]:
    """The objects of one image whose class probability is above ``threshold``, most likely first, with a
    loaded :func:`load_detector`: ``[{"label", "name", "score", "box": [x0, y0, x1, y1] in pixels}]``."""
    original = load_image(image_path)  # (3, H, W) uint8
    return objects(detector, load_image(image_path, detector[2]), cast("tuple[int, int]", tuple(original.shape[1:])),
                   threshold)


def objects(detector: tuple[torch.nn.Module, list[str], int], resized: torch.Tensor, size: tuple[int, int],
            threshold: float) -> list[dict[str, Any]]:
    """What :func:`find_objects` finds, from the image already resized for the model (``resized`` ``(3, h, w)``,
    its longer side the run's image size) and the original's ``size`` ``(H, W)``, which the boxes are in (a
    file's image, or a server's in memory)."""
    model, classes, _ = detector
    images, _, _ = collate_on([(resized, {})], devices.of(model))
    found = devices.move(postprocess(model(images), sizes=[size])[0], "cpu")
    keep = found["scores"] > threshold
    detections = [{"label": int(label), "name": classes[int(label)], "score": round(float(score), 4),
                   "box": [round(float(v), 1) for v in box]}
                  for label, score, box in zip(found["labels"][keep], found["scores"][keep], found["boxes"][keep])]
    return sorted(detections, key=lambda d: -d["score"])


def _draw(image: torch.Tensor, detections: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    h, w = image.shape[1:]
    fig, ax = plt.subplots(figsize=(6, 6 * h / w))
    ax.imshow(image.permute(1, 2, 0).numpy())
    colours = plt.get_cmap("tab10")
    for d in detections:
        x0, y0, x1, y1 = d["box"]
        c = colours(d["label"] % 10)
        ax.add_patch(plt.Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False, color=c, lw=2))
        ax.text(x0, y0, f"{d['name']} {d['score']:.2f}", color="white", fontsize=8, va="bottom",
                bbox={"facecolor": c, "alpha": 0.8, "pad": 1, "lw": 0})
    ax.axis("off")
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format=path.suffix.lstrip(".") or "png", dpi=100))
    plt.close(fig)


__all__ = ["collate_on", "collated", "detect", "find_objects", "load_detector", "objects"]
