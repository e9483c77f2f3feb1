"""Where a model runs: naming a device, and moving what it reads there.

    device = resolve("auto")          # cuda (cuda:LOCAL_RANK under torchrun), else mps, else cpu
                                      # ($AIAYN_DEVICE, when set, says what auto means: the tests set cpu)
    model.to(device)
    batch = move(batch, device)       # tensors inside tuples, lists and dicts; the rest as it is

``move`` copies from pinned CPU memory with ``non_blocking=True`` when the target is a GPU, so the copy
overlaps the work already queued; on the CPU it returns the same objects (no copy).
"""

from __future__ import annotations

import os
import re
from typing import Any, TypeVar

import torch

T = TypeVar("T")
SPECS = "auto, cpu, cuda, cuda:N or mps"
_SPEC = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def check(spec: str) -> str:
    """``spec`` if it names a device this module knows (without asking the machine for it), else ValueError."""
    if not isinstance(spec, str) or not _SPEC.match(spec.strip().lower()):
        raise ValueError(f"device={spec!r} must be one of {SPECS}")
    return spec


def resolve(spec: str | torch.device | None = "auto") -> torch.device:
    """The device ``spec`` names; ``"auto"`` (or ``None``) takes a GPU when there is one, or the device the
    environment variable ``AIAYN_DEVICE`` names. Under ``torchrun`` ``"auto"`` and ``"cuda"`` mean this rank's
    GPU, ``cuda:LOCAL_RANK``, and ``"cuda:N"`` is refused for any other N.

    Raises:
        ValueError: ``spec`` is not one of auto, cpu, cuda, cuda:N, mps, or names a device this machine lacks, or
            under ``torchrun`` (``WORLD_SIZE`` > 1) a GPU other than ``cuda:LOCAL_RANK``.
    """
    if isinstance(spec, torch.device):
        spec = str(spec)
    spec = "auto" if spec is None else str(spec).strip().lower()
    if not _SPEC.match(spec):
        raise ValueError(f"device={spec!r} must be one of {SPECS}")
    if spec == "auto" and os.environ.get("AIAYN_DEVICE", "auto").strip().lower() != "auto":
        spec = os.environ["AIAYN_DEVICE"].strip().lower()
        if not _SPEC.match(spec):
            raise ValueError(f"AIAYN_DEVICE={spec!r} must be one of {SPECS}")
    if spec == "auto":
        if torch.cuda.is_available():
            spec = "cuda"
        elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            spec = "mps"
        else:
            spec = "cpu"
    if spec.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(f"device={spec!r}: this machine has no CUDA GPU that PyTorch can use (try cpu)")
        local = os.environ.get("LOCAL_RANK")
        if spec == "cuda":
            spec = f"cuda:{int(local if local is not None else torch.cuda.current_device())}"
        index = int(spec.split(":")[1])
        if local is not None and int(os.environ.get("WORLD_SIZE", "1")) > 1 and index != int(local):
            # every rank would take the one GPU named (and NCCL refuses two ranks on one device)
            raise ValueError(f"device={spec!r} under torchrun: each rank trains on its own GPU, cuda:LOCAL_RANK "
                             f"(this rank's is cuda:{int(local)}); give device='cuda' (--device cuda) or 'auto'")
        if index >= torch.cuda.device_count():
            raise ValueError(f"device={spec!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s)")
    if spec == "mps" and not (getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()):
        raise ValueError("device='mps': Metal is not available on this machine (try cpu)")
    return torch.device(spec)


def move(obj: T, device: torch.device | str) -> T:
    """``obj`` with every tensor in it (nested in tuples, lists and dicts) on ``device``; other values as they
    are. CPU tensors bound for a GPU are pinned and copied without blocking."""
    device = torch.device(device)
    gpu = device.type == "cuda"

    def go(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            if x.device == device:
                return x
            if gpu and x.device.type == "cpu":
                return x.pin_memory().to(device, non_blocking=True)
            return x.to(device)
        if isinstance(x, tuple):
            return type(x)(*map(go, x)) if hasattr(x, "_fields") else tuple(map(go, x))  # namedtuples too
        if isinstance(x, list):
            return [go(v) for v in x]
        if isinstance(x, dict):
            return {k: go(v) for k, v in x.items()}
        return x

    return go(obj)


def of(model: torch.nn.Module) -> torch.device:
    """The device of ``model``'s first parameter (or buffer); the CPU for a module with neither."""
    for p in model.parameters():
        return p.device
    for b in model.buffers():
        return b.device
    return torch.device("cpu")
