"""Loading a saved model for inference: on a device, or in int8 on the CPU (:mod:`aiayn.layers.int8`).

Every command and function that runs a saved model (translate, generate, evaluate, embed, classify, detect,
and :func:`aiayn.pipeline`) loads it through :func:`ready`, so ``device`` and ``quantize`` mean the same
everywhere.
"""

from __future__ import annotations

import os

import torch
from torch import nn

import aiayn
from aiayn.training import device as devices

QUANTIZE = (None, "int8")  # what `quantize` may be: float32 as saved, or int8 weights (CPU)


def ready(model: nn.Module, device: str | torch.device | None = None, quantize: str | None = None) -> nn.Module:
    """``model`` in eval mode on ``device`` (:func:`aiayn.training.device.resolve`; default a GPU if any), or,
    with ``quantize="int8"``, an int8 copy on the CPU (where ``device`` defaults to the CPU).

    Raises:
        ValueError: ``quantize`` is not one of :data:`QUANTIZE`; int8 asked for on another device than the
            CPU; ``device`` names no device of this machine.
    """
    if quantize not in QUANTIZE:
        raise ValueError(f"quantize={quantize!r} must be one of {QUANTIZE}")
    if quantize is None:
        return model.to(devices.resolve(device)).eval()
    where = devices.resolve(device or "cpu")
    if where.type != "cpu":
        raise ValueError(f"quantize={quantize!r} runs on the CPU (fbgemm's int8 kernels); got device={str(where)!r}")
    from aiayn.layers.int8 import quantize as to_int8

    return to_int8(model.to(where).float().eval())


def load_model(path: str | os.PathLike, device: str | torch.device | None = None,
               quantize: str | None = None) -> nn.Module:
    """The model saved at ``path`` (a run folder or a ``.safetensors`` file), made :func:`ready`."""
    return ready(aiayn.load(path), device, quantize)


__all__ = ["QUANTIZE", "load_model", "ready"]
