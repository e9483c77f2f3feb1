"""Images sent over HTTP (the bytes of a PNG, JPEG, ...), read in memory: serving writes nothing to disk."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import torch
from torch import Tensor

from aiayn.serve.errors import bad


def decode(data: bytes, param: str) -> Any:
    """The RGB Pillow image of a file's bytes; a 400 naming ``param`` when Pillow cannot read it (not an image,
    cut short, or larger than Pillow's decompression-bomb limit)."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:  # verify first: a file cut short may still decode
            im.verify()
        with Image.open(io.BytesIO(data)) as im:
            return im.convert("RGB")
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise bad(param, f"is not an image Pillow can read (PNG, JPEG, ...): {e}") from None


def pixels(image: Any) -> Tensor:
    """``(3, H, W)`` uint8 of an RGB Pillow image."""
    return torch.from_numpy(np.array(image, dtype=np.uint8)).permute(2, 0, 1).contiguous()


@torch.no_grad()
def find_objects(detector: tuple[torch.nn.Module, list[str], int], image: Any,
                 threshold: float) -> list[dict[str, Any]]:
    """:func:`aiayn.pipelines.detect.find_objects` for an image in memory (a Pillow image) instead of a file:
    the same resizing (longer side to the run's image size, bilinear), model and post-processing."""
    from PIL import Image

    from aiayn.pipelines.detect import objects

    size = detector[2]
    resized = image
    if max(image.size) != size:
        scale = size / max(image.size)
        resized = image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))),
                               Image.Resampling.BILINEAR)
    return objects(detector, pixels(resized), (image.height, image.width), threshold)


__all__ = ["decode", "find_objects", "pixels"]
