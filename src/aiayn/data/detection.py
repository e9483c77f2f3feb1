r"""Object-detection data: coloured shapes the package draws itself, and Pascal VOC folders (BCCD).

A sample is ``(image, target)``: ``image`` ``(3, H, W)`` uint8, ``target`` ``{"labels": (n,) int64,
"boxes": (n, 4) float32}`` with boxes as DETR wants them, (cx, cy, w, h) relative to the image's size
(Carion et al., 2020, section 3.1), so resizing an image leaves its targets unchanged.

Synthetic shapes: on a dark, noisy canvas, 1 to ``max_objects`` shapes (square, disc, triangle, cross) of
random size, apart from each other; each box is the tight box of the shape's own pixels. Each class has its
own colour (red, green, blue, yellow, its brightness and tint jittered), so a small CNN trained from scratch
tells the classes apart within minutes and DETR's slow start is spent on the set prediction itself;
``class_colours=False`` colours every shape at random, leaving the shape alone to tell (a harder task).

    +----------------------------+
    |   ##         /\            |      classes: 0 square, 1 disc, 2 triangle, 3 cross
    |   ##        /__\     +     |
    |                     +++    |
    |        (o)           +     |
    +----------------------------+

Pascal VOC: ``Annotations/*.xml`` and ``JPEGImages/*.jpg``, splits in ``ImageSets/Main/<split>.txt``.
VOC corners are 1-based pixel indices, inclusive: the box covers ``[xmin - 1, xmax]`` in continuous
coordinates. Boxes without area (BCCD has two, ``xmin == xmax`` and ``ymin == ymax``) are annotation
errors: they are dropped and counted, since their generalised IoU is undefined.

Shapes: B batch, n objects, H x W pixels.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor

from aiayn.data.images import open_image

SHAPES = ("square", "disc", "triangle", "cross")
COLOURS = np.array([[230, 60, 60], [60, 200, 70], [70, 100, 240], [230, 210, 50]], dtype=np.float32)  # by class
# ImageNet's channel statistics, as DETR normalises its input (and any image model pre-trained on it).
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)

Target = dict[str, Tensor]
Sample = tuple[Tensor, Target]


def _shape_mask(kind: int, h: int, w: int) -> np.ndarray:
    """``(h, w)`` bool pixels of shape ``kind`` filling an ``h x w`` box."""
    y = ((np.arange(h) + 0.5) / h)[:, None]  # (h, 1) in (0, 1)
    x = ((np.arange(w) + 0.5) / w)[None, :]  # (1, w)
    if kind == 0:  # square (a rectangle, in general)
        return np.ones((h, w), dtype=bool)
    if kind == 1:  # disc (an ellipse)
        return (x - 0.5) ** 2 + (y - 0.5) ** 2 <= 0.25
    if kind == 2:  # triangle, apex up
        return np.abs(x - 0.5) <= y / 2
    return (np.abs(x - 0.5) <= 1 / 6) | (np.abs(y - 0.5) <= 1 / 6)  # cross, bars a third wide


def draw_shapes(rng: np.random.Generator, size: int = 128, max_objects: int = 3, min_side: int = 16,
                max_side: int = 40, class_colours: bool = True) -> Sample:
    """One synthetic image ``(3, size, size)`` uint8 and its target.

    Drawn with numpy, single-threaded: tiny tensor operations on a busy CPU are slower in torch's
    thread pool than the whole image is in numpy.

    Args:
        rng: the source of randomness (a seeded ``numpy.random.Generator`` makes the image repeatable).
        size: canvas side in pixels.
        max_objects: at most this many shapes (at least one).
        min_side, max_side: range of a shape's width and height in pixels.
        class_colours: each class in its own colour (jittered); ``False``: every shape in a random bright colour.
    """
    if not 0 < min_side <= max_side < size:
        raise ValueError(f"need 0 < min_side ({min_side}) <= max_side ({max_side}) < size ({size})")
    background = rng.random(3, dtype=np.float32) * 64  # (3,) a dark colour, 0-255 scale
    noise = (rng.random((3, size, size), dtype=np.float32) - 0.5) * 35  # uniform, std 10: cheaper than normal
    image = np.clip(background[:, None, None] + noise, 0, 255)  # (3, H, W)
    wanted = int(rng.integers(1, max_objects + 1))
    labels: list[int] = []
    corners: list[tuple[np.integer, np.integer, np.integer, np.integer]] = []  # x0, y0, x1, y1 in pixels
    for _ in range(50 * wanted):  # rejection sampling: shapes keep a 2-pixel gap
        if len(labels) == wanted:
            break
        h, w = (int(v) for v in rng.integers(min_side, max_side + 1, 2))
        y0, x0 = int(rng.integers(0, size - h + 1)), int(rng.integers(0, size - w + 1))
        if any(x0 < bx1 + 2 and bx0 < x0 + w + 2 and y0 < by1 + 2 and by0 < y0 + h + 2
               for bx0, by0, bx1, by1 in corners):
            continue
        kind = int(rng.integers(len(SHAPES)))
        mask = _shape_mask(kind, h, w)  # (h, w)
        if class_colours:  # the class's colour, 75% to 110% as bright, each channel moved by up to 25
            colour = COLOURS[kind] * rng.uniform(0.75, 1.1) + rng.uniform(-25, 25, 3).astype(np.float32)
        else:  # bright, so every shape stands out
            colour = 128 + 127 * rng.random(3, dtype=np.float32)
        image[:, y0 : y0 + h, x0 : x0 + w][:, mask] = colour[:, None]
        rows, cols = np.flatnonzero(mask.any(1)), np.flatnonzero(mask.any(0))  # the tight box of its pixels
        corners.append((x0 + cols[0], y0 + rows[0], x0 + cols[-1] + 1, y0 + rows[-1] + 1))
        labels.append(kind)
    boxes = torch.tensor(np.array(corners, dtype=np.float32).reshape(-1, 4)) / size  # (n, 4) x0, y0, x1, y1
    pixels = torch.from_numpy(image.round().astype(np.uint8))  # (3, H, W)
    return pixels, {"labels": torch.tensor(labels, dtype=torch.int64), "boxes": _xyxy_to_cxcywh(boxes)}


def synthetic_shapes(n: int, seed: int, size: int = 128, max_objects: int = 3, **kwargs: Any) -> list[Sample]:
    """``n`` synthetic samples, the same for the same arguments (image ``i`` from the generator ``(seed, i)``);
    ``kwargs`` go to :func:`draw_shapes`."""
    return [draw_shapes(np.random.default_rng([seed, i]), size, max_objects, **kwargs) for i in range(n)]


def shape_batches(batch_size: int, seed: int, size: int = 128, max_objects: int = 3, start: int = 0,
                  **kwargs: Any):
    """Endless batches (lists of samples) of fresh synthetic images; batch ``k`` is drawn from ``(seed, k)``, so
    a resumed run (``start``) sees the batches an uninterrupted one would."""
    k = start
    while True:
        rng = np.random.default_rng([seed, 1 << 20, k])  # never the generator of a synthetic_shapes image
        yield [draw_shapes(rng, size, max_objects, **kwargs) for _ in range(batch_size)]
        k += 1


def _xyxy_to_cxcywh(boxes: Tensor) -> Tensor:
    x0, y0, x1, y1 = boxes.unbind(-1)
    return torch.stack([(x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0], dim=-1)


def _text(element: ET.Element, path: str) -> str:
    """``element.findtext(path)``: the VOC fields read here are always there (a missing one fails as it
    always has, on ``None``)."""
    return cast(str, element.findtext(path))


def voc_root(folder: str | os.PathLike) -> Path:
    """The VOC folder (holding ``Annotations/``) at ``folder`` or in its one subfolder (``bccd/BCCD``)."""
    folder = Path(folder)
    if (folder / "Annotations").is_dir():
        return folder
    inner = [d for d in folder.iterdir() if (d / "Annotations").is_dir()] if folder.is_dir() else []
    if len(inner) != 1:
        raise FileNotFoundError(f"{folder} is not a Pascal VOC folder (no Annotations/ in it or in one subfolder)")
    return inner[0]


def voc_classes(folder: str | os.PathLike) -> list[str]:
    """The sorted class names of every annotation of a VOC folder (BCCD: Platelets, RBC, WBC)."""
    root = voc_root(folder)
    names = {_text(o, "name").strip() for f in (root / "Annotations").glob("*.xml")
             for o in ET.parse(f).getroot().iter("object")}
    return sorted(names)


def read_voc_annotation(file: str | os.PathLike, classes: list[str]) -> tuple[Target, tuple[int, int], int]:
    """``(target, (height, width), dropped)`` of one VOC XML file; ``dropped`` counts boxes without area (also
    those wholly outside the image)."""
    root = ET.parse(file).getroot()
    width, height = int(_text(root, "size/width")), int(_text(root, "size/height"))
    if width <= 0 or height <= 0:
        raise ValueError(f"{file}: size {width} x {height} must be positive (boxes are scaled by it)")
    labels, corners, dropped = [], [], 0
    for obj in root.iter("object"):
        name = _text(obj, "name").strip()
        if name not in classes:
            raise ValueError(f"{file}: class {name!r} is not one of {classes}")
        x0, y0, x1, y1 = (float(_text(obj, f"bndbox/{k}")) for k in ("xmin", "ymin", "xmax", "ymax"))
        if x1 <= x0 or y1 <= y0:  # no area: an annotation error (BCCD_00338, _00343)
            dropped += 1
            continue
        x0, y0, x1, y1 = max(x0 - 1, 0), max(y0 - 1, 0), min(x1, width), min(y1, height)  # 1-based, inclusive
        if x1 <= x0 or y1 <= y0:  # wholly outside the image: nothing of it is left
            dropped += 1
            continue
        labels.append(classes.index(name))
        corners.append((x0 / width, y0 / height, x1 / width, y1 / height))
    boxes = torch.tensor(corners, dtype=torch.float32).view(-1, 4)
    return ({"labels": torch.tensor(labels, dtype=torch.int64), "boxes": _xyxy_to_cxcywh(boxes)},
            (height, width), dropped)


def load_image(path: str | os.PathLike, max_size: int | None = None) -> Tensor:
    """An RGB image file as ``(3, H, W)`` uint8, its longer side resized to ``max_size`` if given."""
    from PIL import Image

    img = open_image(path)
    if max_size is not None and max(img.size) != max_size:
        scale = max_size / max(img.size)
        img = img.resize((max(1, round(img.width * scale)), max(1, round(img.height * scale))),
                         Image.Resampling.BILINEAR)
    return torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8).view(img.height, img.width, 3).permute(
        2, 0, 1).contiguous()


def read_voc(folder: str | os.PathLike, split: str = "train", max_size: int | None = 256,
             classes: list[str] | None = None) -> tuple[list[Sample], list[str], int]:
    """The images and targets of one split of a VOC folder.

    Args:
        folder: the VOC folder, or a folder with it as its one subfolder (``../shared/data/bccd``).
        split: a file of ``ImageSets/Main`` (``train``, ``val``, ``test``, ``trainval``).
        max_size: images are resized so their longer side is this (``None``: keep the size).
        classes: class names in label order; default: :func:`voc_classes`.

    Returns:
        ``(samples, classes, dropped)``: ``dropped`` counts boxes without area, left out.
    """
    root = voc_root(folder)
    split_file = root / "ImageSets" / "Main" / f"{split}.txt"
    if not split_file.is_file():
        raise FileNotFoundError(f"no split {split!r} in {root}: {split_file} is missing")
    classes = classes or voc_classes(root)
    samples, dropped = [], 0
    for image_id in split_file.read_text().split():
        target, _, d = read_voc_annotation(root / "Annotations" / f"{image_id}.xml", classes)
        samples.append((load_image(root / "JPEGImages" / f"{image_id}.jpg", max_size), target))
        dropped += d
    return samples, classes, dropped


def hflip(sample: Sample) -> Sample:
    """The sample mirrored left to right (boxes too)."""
    image, target = sample
    boxes = target["boxes"].clone()
    boxes[:, 0] = 1 - boxes[:, 0]
    return image.flip(-1), {**target, "boxes": boxes}


def collate(samples: list[Sample]) -> tuple[Tensor, Tensor, list[Target]]:
    """Normalised images padded (bottom, right) to the largest of the batch, and which pixels are real.

    Returns:
        ``images`` ``(B, 3, H, W)`` float32 normalised with ImageNet's mean and std, zero in the padding;
        ``pixel_mask`` ``(B, H, W)`` bool, ``True`` on real pixels; the targets.
    """
    h = max(img.shape[1] for img, _ in samples)
    w = max(img.shape[2] for img, _ in samples)
    pixels = np.zeros((len(samples), 3, h, w), dtype=np.uint8)  # numpy: no thread pool for small copies
    mask = np.zeros((len(samples), h, w), dtype=bool)
    for i, (img, _) in enumerate(samples):
        pixels[i, :, : img.shape[1], : img.shape[2]] = img.numpy()
        mask[i, : img.shape[1], : img.shape[2]] = True
    mean, std = torch.tensor(MEAN)[:, None, None], torch.tensor(STD)[:, None, None]
    pixel_mask = torch.from_numpy(mask)  # (B, H, W)
    images = ((torch.from_numpy(pixels).float() / 255 - mean) / std) * pixel_mask[:, None]  # (B, 3, H, W)
    return images, pixel_mask, [t for _, t in samples]


__all__ = [
    "COLOURS",
    "MEAN",
    "SHAPES",
    "STD",
    "collate",
    "draw_shapes",
    "hflip",
    "load_image",
    "read_voc",
    "read_voc_annotation",
    "shape_batches",
    "synthetic_shapes",
    "voc_classes",
    "voc_root",
]
