"""The training state a run needs to continue exactly where it stopped, in one safetensors file.

    train_state.safetensors
      model/<name>          every weight once (tied weights are stored under their first name)
      optim/<i>/<key>       the optimizer's per-parameter tensors (Adam: step, exp_avg, exp_avg_sq)
      rng/torch             the CPU generator (dropout), as it is at the start of the next update
      rng/cuda, rng/mps     the generator of the device the model is on, when it is a GPU (dropout there)
      metadata              JSON: step, batches consumed, optimizer param groups and scalars,
                            scheduler state, fp16's loss scaler (scale, growth tracker; null when
                            none, as in files from before it was saved), and whatever the caller
                            keeps (history, validations)

One file, written atomically, so weights, optimizer and data position can never disagree after a
crash; safetensors, so loading never runs code from the file. Resuming from it reproduces the
uninterrupted run bit for bit on one device: the data order is replayed by skipping the batches
already consumed, and the generator state is restored after the model is built.

The file holds whole tensors even when training shards them over ranks (FSDP): saving gathers them
and rank 0 writes; loading gives each rank its shard. So a run saved under FSDP resumes in one
process, under DDP or under FSDP with another number of ranks, and the other way round.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor, nn

from aiayn.io import atomic_write, check_digest, digest
from aiayn.training import distributed
from aiayn.training.checkpoint import unique_tensors

STATE = "train_state.safetensors"
_META = "aiayn_train_state"


def save_train_state(
    path: str | os.PathLike,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any | None,
    step: int,
    batches: int,
    extra: dict[str, Any] | None = None,
    scaler: torch.amp.GradScaler | None = None,
) -> Path:
    """Write the state after ``step`` updates and ``batches`` batches, atomically.

    Under ``torchrun``, rank 0 writes; a model sharded by FSDP is gathered first, so then every rank
    must call it.

    Args:
        path: a file, or a run folder that gets ``train_state.safetensors``.
        extra: JSON-serialisable data to keep with it (history, validation records).
        scaler: fp16's loss scaler, whose scale and growth tracker are kept (a few numbers).
    """
    path = Path(path)
    file = path / STATE if path.is_dir() else path
    if not distributed.is_main() and not distributed.is_sharded(model):
        return file
    tensors = {f"model/{k}": v for k, v in unique_tensors(model).items()}
    opt = optimizer.state_dict()
    scalars: dict[str, dict[str, Any]] = {}
    for i, entry in opt["state"].items():
        for key, value in entry.items():
            if isinstance(value, Tensor):
                value = distributed.full(value)  # every rank takes part; rank 0 keeps it (below)
                if distributed.is_main():
                    tensors[f"optim/{i}/{key}"] = value.contiguous()
            else:
                scalars.setdefault(str(i), {})[key] = value
    if not distributed.is_main():
        return file
    tensors["rng/torch"] = torch.get_rng_state()
    accelerator = _accelerator(model)
    if accelerator is not None:  # dropout on a GPU draws from the device's own generator
        tensors[f"rng/{accelerator.type}"] = _device_rng(accelerator)
    meta = {
        "step": step,
        "batches": batches,
        "param_groups": opt["param_groups"],
        "optim_scalars": scalars,
        "scheduler": None if scheduler is None else scheduler.state_dict(),
        "scaler": scaler.state_dict() if scaler is not None and scaler.is_enabled() else None,
        "extra": extra or {},
    }
    metadata = {_META: json.dumps(meta), "aiayn_sha256": digest(tensors)}
    return atomic_write(file, lambda tmp: save_file(tensors, tmp, metadata=metadata))


def train_state_info(path: str | os.PathLike) -> dict[str, Any]:
    """``{"step", "batches", "extra"}`` of the state at ``path`` (a file or a run folder), without loading
    any tensor."""
    path = Path(path)
    file = path / STATE if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"no training state at {file}: nothing to resume (a run killed before its "
                                f"first save, every save_every updates, keeps none; Ctrl-C saves one); start it again")
    try:
        with safe_open(str(file), framework="pt") as f:
            meta = json.loads((f.metadata() or {})[_META])
        return {"step": meta["step"], "batches": meta["batches"], "extra": meta["extra"]}
    except Exception as e:  # safetensors' own error, a missing key, JSON that is not
        raise ValueError(f"{file} is not a readable training state (truncated or corrupted?): {e!r}") from e


def _accelerator(model: nn.Module) -> torch.device | None:
    """The CUDA or MPS device ``model`` is on, or ``None`` (the CPU, whose generator is always saved)."""
    p = next(model.parameters(), None)
    return p.device if p is not None and p.device.type in ("cuda", "mps") else None


def _device_rng(where: torch.device, state: Tensor | None = None) -> Tensor:
    """The generator state of CUDA device ``where`` or of MPS; with ``state``, set it first."""
    if state is not None:
        torch.cuda.set_rng_state(state, where) if where.type == "cuda" else torch.mps.set_rng_state(state)
    return torch.cuda.get_rng_state(where) if where.type == "cuda" else torch.mps.get_rng_state()


def load_train_state(
    path: str | os.PathLike, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any | None,
    scaler: torch.amp.GradScaler | None = None,
) -> dict[str, Any]:
    """Restore model, optimizer, scheduler, the torch generators (the CPU's; the GPU's the model is on, when
    saved from one) and ``scaler`` (when the file holds a
    scaler's state; when not, ``scaler`` stays as it is) from ``path``. A model sharded by FSDP takes its
    shard of each weight (every rank reads the file).

    Returns:
        ``{"step", "batches", "extra", "scaler"}``; ``scaler``: the saved scaler's state, or ``None`` when
        the run had none (fp32, bf16, or a file written before scalers were saved).

    Raises:
        FileNotFoundError: no state at ``path``.
        ValueError: the file is unreadable, or its weights do not fit ``model`` (the keys are named).
    """
    path = Path(path)
    file = path / STATE if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"no training state at {file}: nothing to resume (a run killed before its "
                                f"first save, every save_every updates, keeps none; Ctrl-C saves one); start it again")
    try:
        with safe_open(str(file), framework="pt") as f:
            metadata = f.metadata() or {}
            meta = json.loads(metadata[_META])
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:
        raise ValueError(f"{file} is not a readable training state (truncated or corrupted?): {e}") from e
    check_digest(file, tensors, metadata.get("aiayn_sha256"))  # before anything is loaded

    weights = {k[len("model/"):]: v for k, v in tensors.items() if k.startswith("model/")}
    expected = unique_tensors(model, whole=False)
    missing, unexpected = sorted(set(expected) - set(weights)), sorted(set(weights) - set(expected))
    wrong = [f"{k}: {tuple(weights[k].shape)} vs {tuple(v.shape)}" for k, v in expected.items()
             if k in weights and weights[k].shape != v.shape]
    if missing or unexpected or wrong:
        raise ValueError(f"{file} does not fit the model: missing {missing}, unexpected {unexpected}, "
                         f"misshapen {wrong}")
    with torch.no_grad():
        for k, v in expected.items():
            v.copy_(distributed.local(weights[k], v))

    params = [p for group in optimizer.param_groups for p in group["params"]]  # the optimizer's numbering
    state: dict[int, dict[str, Any]] = {}
    for k, v in tensors.items():
        if k.startswith("optim/"):
            _, i, key = k.split("/", 2)
            p = params[int(i)] if int(i) < len(params) else None  # None: load_state_dict names the mismatch
            if p is not None and v.shape == p.shape:  # Adam's moments: this rank's shard under FSDP
                v = distributed.local(v, p)
            state.setdefault(int(i), {})[key] = v
    for i, entry in meta["optim_scalars"].items():
        state.setdefault(int(i), {}).update(entry)
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
    if scheduler is not None and meta["scheduler"] is not None:
        scheduler.load_state_dict(meta["scheduler"])
    saved_scaler = meta.get("scaler")  # absent from older files: the scaler stays fresh
    if scaler is not None and saved_scaler is not None:
        scaler.load_state_dict(saved_scaler)
    torch.set_rng_state(tensors["rng/torch"])
    accelerator = _accelerator(model)
    if accelerator is not None and f"rng/{accelerator.type}" in tensors:  # saved on this kind of device
        _device_rng(accelerator, tensors[f"rng/{accelerator.type}"])
    return {"step": meta["step"], "batches": meta["batches"], "extra": meta["extra"], "scaler": saved_scaler}


__all__ = ["STATE", "load_train_state", "save_train_state", "train_state_info"]
