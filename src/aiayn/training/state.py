"""The training state a run needs to continue exactly where it stopped.

One process, or DDP (every rank holds the whole model), writes one safetensors file:

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

A model sharded by FSDP writes a folder instead, through ``torch.distributed.checkpoint`` (DCP), so that
no rank ever holds the whole model or its Adam moments, and no rank reads more than it needs:

    train_state/
      shard-0000R-model-00001-of-00001.safetensors
                            what rank R-1 holds: its shard of every weight (model/<name>) and of Adam's
                            moments (optim/state.<name>.<key>), with each shard's offset in the whole
                            tensor (DCP's safetensors layout: no pickle is ever read)
      meta.json             step, batches, param groups, scheduler, scaler, extra, the generators, and
                            the SHA-256 of every shard file, checked before any tensor is loaded

The folder is written as ``.train_state.new/`` and renamed into place once every rank has written and
``meta.json`` is complete, so a crash leaves the previous state whole. Loading reshards: a state saved by
W ranks resumes under FSDP with any number of ranks, in one process (DCP without a process group) and
under DDP. The other way, a file saved without FSDP resumes under FSDP: each rank reads the file and
keeps its shard. A run keeps one state: saving either kind removes the other once the new one is in place.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any, cast

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor, nn

from aiayn.io import atomic_write, check_digest, digest, write_json
from aiayn.models.checkpoint import tied_names, unique_tensors
from aiayn.training import distributed

STATE = "train_state.safetensors"
SHARDED = "train_state"  # the folder a model sharded by FSDP saves its state into
META = "meta.json"  # in that folder: everything but the tensors, written last
_META = "aiayn_train_state"
_NOTHING = ("nothing to resume (a run killed before its first save, every save_every updates, keeps none; Ctrl-C "
            "saves one); start it again")


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

    Under ``torchrun``, rank 0 writes the file; a model sharded by FSDP is saved by every rank (each writes
    its own shards, see the module's docstring), so then every rank must call it.

    Args:
        path: a file, or a run folder that gets ``train_state.safetensors`` (sharded: ``train_state/``; a
            path that is not a run folder names the state folder itself).
        extra: JSON-serialisable data to keep with it (history, validation records).
        scaler: fp16's loss scaler, whose scale and growth tracker are kept (a few numbers).

    Returns:
        The file or folder written.
    """
    path = Path(path)
    if distributed.is_sharded(model):
        folder = path / SHARDED if path.is_dir() and not (path / META).is_file() else path
        return _save_sharded(folder, model, optimizer, scheduler, step, batches, extra, scaler)
    file = path / STATE if path.is_dir() else path
    if not distributed.is_main():
        return file
    tensors = {f"model/{k}": v for k, v in unique_tensors(model).items()}
    opt = optimizer.state_dict()
    scalars: dict[str, dict[str, Any]] = {}
    for i, entry in opt["state"].items():
        for key, value in entry.items():
            if isinstance(value, Tensor):
                tensors[f"optim/{i}/{key}"] = value.contiguous()
            else:
                scalars.setdefault(str(i), {})[key] = value
    tensors["rng/torch"] = torch.get_rng_state()
    accelerator = _accelerator(model)
    if accelerator is not None:  # dropout on a GPU draws from the device's own generator
        tensors[f"rng/{accelerator.type}"] = _device_rng(accelerator)
    meta = {
        "param_groups": opt["param_groups"],
        "optim_scalars": scalars,
        **_common(scheduler, step, batches, extra, scaler),
    }
    metadata = {_META: json.dumps(meta), "aiayn_sha256": digest(tensors)}
    atomic_write(file, lambda tmp: save_file(tensors, tmp, metadata=metadata))
    if file.name == STATE:  # the sharded state of a run that went on without FSDP is older now
        for old in (file.parent / SHARDED, _aside(file.parent / SHARDED, "old")):
            shutil.rmtree(old, ignore_errors=True)
    return file


def _common(scheduler: Any | None, step: int, batches: int, extra: dict[str, Any] | None,
            scaler: torch.amp.GradScaler | None) -> dict[str, Any]:
    """What both kinds of state keep as JSON."""
    return {
        "step": step,
        "batches": batches,
        "scheduler": None if scheduler is None else scheduler.state_dict(),
        "scaler": scaler.state_dict() if scaler is not None and scaler.is_enabled() else None,
        "extra": extra or {},
    }


def _aside(folder: Path, what: str) -> Path:
    """``.train_state.new`` (being written) or ``.train_state.old`` (being replaced) beside ``folder``."""
    return folder.with_name(f".{folder.name}.{what}")


def _options() -> Any:
    """How model and optimizer states are taken and given back: the optimizer's keyed by weight name
    (``state.<name>.exp_avg``, ``param_groups.<name>.lr``) rather than by position, so that a state fits a
    model sharded another way."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(flatten_optimizer_state_dict=True)


def _state(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(tensors, scalars)``: the model's and optimizer's tensors (each rank's shards under FSDP, whole
    tensors otherwise) under ``model/`` and ``optim/``, and the optimizer's other values (param groups).
    An optimizer that has not stepped gets its state made (a step of zero gradients at rate 0) first."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    weights, optim = cast("tuple[dict[str, Any], dict[str, Any]]",
                          get_state_dict(model, optimizer, options=_options()))
    tied = tied_names(model)  # one tensor under two names: stored (and loaded in place) under its first
    tensors = {f"model/{k}": v for k, v in weights.items() if k not in tied}
    tensors |= {f"optim/{k}": v for k, v in optim.items() if isinstance(v, Tensor)}
    return tensors, {k: v for k, v in optim.items() if not isinstance(v, Tensor)}


def _save_sharded(folder: Path, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any | None,
                  step: int, batches: int, extra: dict[str, Any] | None, scaler: torch.amp.GradScaler | None) -> Path:
    """Every rank writes its shards into ``.NAME.new/`` (DCP), rank 0 adds ``meta.json`` and swaps it in."""
    from torch.distributed.checkpoint import HuggingFaceStorageWriter
    from torch.distributed.checkpoint import save as dcp_save

    new, old = _aside(folder, "new"), _aside(folder, "old")
    if distributed.is_main():
        _recover(folder)
        shutil.rmtree(new, ignore_errors=True)  # what a save killed midway left
        new.mkdir(parents=True)
    distributed.barrier()
    tensors, scalars = _state(model, optimizer)
    # safetensors files, one per rank, each shard with its offset in the whole tensor: DCP's default format
    # would keep its index as a pickle, which loading would run
    dcp_save(tensors, storage_writer=HuggingFaceStorageWriter(str(new), save_distributed=True))
    files = sorted(p.name for p in new.glob("*.safetensors"))  # every rank's are written when save returns
    mine = {name: _sha256(new / name) for name in files[distributed.rank()::distributed.world_size()]}
    sums = {name: h for part in distributed.all_gather(mine) for name, h in part.items()}
    if distributed.is_main():
        rng = {"torch": torch.get_rng_state()}
        accelerator = _accelerator(model)
        if accelerator is not None:
            rng[accelerator.type] = _device_rng(accelerator)
        write_json(new / META, {
            **_common(scheduler, step, batches, extra, scaler),
            "optim_scalars": scalars,
            "rng": {k: base64.b64encode(v.numpy().tobytes()).decode() for k, v in rng.items()},
            "files": sums,
            "world_size": distributed.world_size(),
        })
        if folder.exists():  # (two renames: a crash between them leaves the last state in .old, see _locate)
            os.replace(folder, old)
        os.replace(new, folder)
        _fsync_dir(folder.parent)
        shutil.rmtree(old, ignore_errors=True)
        if folder.name == SHARDED:  # the run's single-file state, from before it went on under FSDP, is older
            (folder.parent / STATE).unlink(missing_ok=True)
    distributed.barrier()
    return folder


def _recover(folder: Path) -> None:
    """Put back the last complete state that a crash between ``_save_sharded``'s two renames left aside."""
    old = _aside(folder, "old")
    if not (folder / META).is_file() and (old / META).is_file():
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(old, folder)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(file: Path) -> str:
    h = hashlib.sha256()
    with open(file, "rb") as f:
        while chunk := f.read(1 << 24):
            h.update(chunk)
    return h.hexdigest()


def _locate(path: Path) -> Path:
    """The state at ``path``: a state file or folder itself, or the newest (by step) of those in a run folder.

    Raises:
        FileNotFoundError: none there.
    """
    if path.is_file() or (path / META).is_file():
        return path
    if not path.is_dir():
        raise FileNotFoundError(f"no training state at {path}: {_NOTHING}")
    found = [p for p in (path / STATE, path / SHARDED) if p.is_file() or (p / META).is_file()]
    old = _aside(path / SHARDED, "old")
    if path / SHARDED not in found and (old / META).is_file():  # a crash while the folder was swapped
        found.append(old)
    if not found:
        raise FileNotFoundError(f"no training state at {path / STATE}: {_NOTHING}")

    def step(p: Path) -> float:
        try:
            return _read_meta(p)["step"]
        except ValueError:  # an unreadable one is taken, to be refused by name
            return float("inf")

    return max(found, key=step)


def _read_meta(where: Path) -> dict[str, Any]:
    """The JSON part of the state file or folder ``where``."""
    try:
        if where.is_dir():
            meta = json.loads((where / META).read_text(encoding="utf-8"))
        else:
            with safe_open(str(where), framework="pt") as f:
                meta = json.loads((f.metadata() or {})[_META])
        missing = [k for k in ("step", "batches", "extra") if k not in meta]  # what every state holds
        if missing:
            raise KeyError(f"no {missing} in its metadata")
        return meta
    except Exception as e:  # safetensors' own error, a missing key, JSON that is not
        raise ValueError(f"{where} is not a readable training state (truncated or corrupted?): {e!r}") from e


def train_state_info(path: str | os.PathLike) -> dict[str, Any]:
    """``{"step", "batches", "extra"}`` of the state at ``path`` (a file, a sharded state's folder or a run
    folder), without loading any tensor."""
    meta = _read_meta(_locate(Path(path)))
    return {"step": meta["step"], "batches": meta["batches"], "extra": meta["extra"]}


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
    saved from one) and ``scaler`` (when the state holds a scaler's state; when not, ``scaler`` stays as it
    is) from ``path``: a state file, a sharded state's folder, or a run folder (its newest state).

    A model sharded by FSDP takes its shard of each weight: from a sharded state, each rank reads only the
    parts of the shard files it needs (saved with any number of ranks); from a file, each rank reads the
    file. A model that is not sharded reads a sharded state whole, in one process too.

    Returns:
        ``{"step", "batches", "extra", "scaler"}``; ``scaler``: the saved scaler's state, or ``None`` when
        the run had none (fp32, bf16, or a file written before scalers were saved).

    Raises:
        FileNotFoundError: no state at ``path``.
        ValueError: the state is unreadable or corrupted (a shard file's SHA-256 differs), or its weights or
            optimizer do not fit ``model`` and ``optimizer`` (the keys are named).
    """
    where = _locate(Path(path))
    meta, rng = (_load_sharded if where.is_dir() else _load_file)(where, model, optimizer)
    if scheduler is not None and meta["scheduler"] is not None:
        scheduler.load_state_dict(meta["scheduler"])
    saved_scaler = meta.get("scaler")  # absent from older files: the scaler stays fresh
    if scaler is not None and saved_scaler is not None:
        scaler.load_state_dict(saved_scaler)
    torch.set_rng_state(rng["torch"])
    accelerator = _accelerator(model)
    if accelerator is not None and accelerator.type in rng:  # saved on this kind of device
        _device_rng(accelerator, rng[accelerator.type])
    return {"step": meta["step"], "batches": meta["batches"], "extra": meta["extra"], "scaler": saved_scaler}


def _load_file(file: Path, model: nn.Module, optimizer: torch.optim.Optimizer
               ) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """Load ``train_state.safetensors`` into model and optimizer; ``(its JSON, its generator states)``."""
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
    return meta, {k[len("rng/"):]: v for k, v in tensors.items() if k.startswith("rng/")}


def _load_sharded(folder: Path, model: nn.Module, optimizer: torch.optim.Optimizer
                  ) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """Load a sharded state (``train_state/``) into model and optimizer, sharded any way or not at all (one
    process: DCP without a process group); ``(its JSON, its generator states)``."""
    from torch.distributed.checkpoint import HuggingFaceStorageReader
    from torch.distributed.checkpoint import load as dcp_load
    from torch.distributed.checkpoint.state_dict import set_state_dict

    meta = _read_meta(folder)
    _check_files(folder, meta.get("files"))  # before anything is loaded
    try:
        stored = HuggingFaceStorageReader(str(folder)).read_metadata().state_dict_metadata
    except Exception as e:
        raise ValueError(f"{folder} holds an unreadable shard file (truncated or corrupted?): {e}") from e
    tensors, scalars = _state(model, optimizer)
    missing, unexpected = sorted(set(tensors) - set(stored)), sorted(set(stored) - set(tensors))
    sizes = {k: tuple(getattr(m, "size", ())) for k, m in stored.items()}  # (every item is a tensor's)
    wrong = [f"{k}: {sizes[k]} vs {tuple(v.shape)}" for k, v in tensors.items()
             if k in sizes and sizes[k] != tuple(v.shape)]
    other = sorted(set(scalars) ^ set(meta["optim_scalars"]))
    if missing or unexpected or wrong or other:
        raise ValueError(f"{folder} does not fit the model and optimizer: missing {missing}, unexpected "
                         f"{unexpected}, misshapen {wrong}, settings not shared {other}")
    with warnings.catch_warnings():  # one process: DCP says it loads without a process group, as asked
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        dcp_load(tensors, storage_reader=HuggingFaceStorageReader(str(folder)), no_dist=not distributed.active())
    weights: dict[str, Any] = {k[len("model/"):]: v for k, v in tensors.items() if k.startswith("model/")}
    named = dict(model.named_parameters(remove_duplicate=False))
    first = {id(p): n for n, p in reversed(list(named.items()))}  # a tied weight's first name
    weights |= {n: weights[first[id(named[n])]] for n in tied_names(model)}
    optim: dict[str, Any] = {k[len("optim/"):]: v for k, v in tensors.items() if k.startswith("optim/")}
    set_state_dict(model, optimizer, model_state_dict=weights, optim_state_dict={**optim, **meta["optim_scalars"]},
                   options=_options())
    rng = {k: torch.frombuffer(bytearray(base64.b64decode(v)), dtype=torch.uint8) for k, v in meta["rng"].items()}
    return meta, rng


def _check_files(folder: Path, sums: dict[str, str] | None) -> None:
    """Refuse a sharded state whose shard files are not those ``meta.json`` lists, byte for byte. The ranks
    share the hashing (every file is read once), and all of them learn the result."""
    present = sorted(p.name for p in folder.glob("*.safetensors"))
    if sums is None or sorted(sums) != present:
        raise ValueError(f"{folder} holds the shard files {present}, but its {META} lists "
                         f"{sorted(sums or {})}: it is incomplete or mixed with another state; it was not loaded")
    mine = [n for n in present[distributed.rank()::distributed.world_size()] if _sha256(folder / n) != sums[n]]
    bad = sorted(n for part in distributed.all_gather(mine) for n in part)
    if bad:
        raise ValueError(f"{folder}: {', '.join(bad)} do not match the SHA-256 kept in {META} (truncated or "
                         f"corrupted?); it was not loaded")


__all__ = ["META", "SHARDED", "STATE", "load_train_state", "save_train_state", "train_state_info"]
