"""Checkpoints: safetensors weights with the config in the file's metadata, written atomically
(:func:`aiayn.save`, :func:`aiayn.load`).

Written through :func:`aiayn.io.atomic_write`, so a crash leaves the old file or the new one, never
half of either. Weights load through safetensors only, which never runs code from the file, and are
checked against the SHA-256 digest of the stored tensors kept in the file's metadata before any of
them goes into a model. Tied weights (one tensor under two names) are stored once.

A saved model is the model's own business, so it is read and written here, below training, the pipelines and
the conversions that all load one. Under ``torchrun`` rank 0 alone writes, and a model sharded by FSDP is gathered
one tensor at a time first; those two questions are put to ``torch.distributed`` itself, as
:mod:`aiayn.training.distributed` puts them, so that nothing here imports training.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor, nn

from aiayn.io import atomic_write, check_digest, digest

WEIGHTS = "model.safetensors"


def weights_path(path: str | os.PathLike) -> Path:
    """``path`` itself for a ``.safetensors`` file, else ``path/model.safetensors`` (a run folder)."""
    path = Path(path)
    return path if path.suffix == ".safetensors" and not path.is_dir() else path / WEIGHTS


def tied_names(model: nn.Module) -> set[str]:
    """The second and later names of weights shared by several modules (an embedding tied to a head)."""
    first = {name for name, _ in model.named_parameters()}
    return {name for name, _ in model.named_parameters(remove_duplicate=False)} - first


def unique_tensors(model: nn.Module, whole: bool = True) -> dict[str, Tensor]:
    """The state dict with each weight once: a tied weight under its first name only.

    A model sharded by FSDP is gathered one tensor at a time from every rank (all of them must call
    this), and rank 0 alone keeps the whole tensors: the other ranks get an empty dict, so no process but
    one ever holds the whole model. ``whole=False`` gives the model's own tensors, shards as they are
    (their ``shape`` is still the whole one), to load into.
    """
    tied = tied_names(model)
    own = {name: t.detach() for name, t in model.state_dict().items() if name not in tied}
    if not whole:
        return own
    keep = _rank() == 0 or not _sharded(model)
    out = {}
    for name, t in own.items():
        t = _whole(t)
        if keep:
            out[name] = t.contiguous()
    return out


def _rank() -> int:
    """This process's rank in the group ``torchrun`` started (0 without one): rank 0 writes."""
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _sharded(model: nn.Module) -> bool:
    """``model`` is split over the ranks by FSDP's ``fully_shard``."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def _whole(t: Tensor) -> Tensor:
    """The whole of a tensor, gathered from every rank's shard if it is one (every rank calls it for the same
    tensors, in the same order), on the CPU; any other tensor as it is."""
    from torch.distributed.tensor import DTensor

    return t.full_tensor().cpu() if isinstance(t, DTensor) else t


def save(model: nn.Module, path: str | os.PathLike, metadata: dict[str, str] | None = None) -> Path:
    """Save ``model``'s weights and config to ``path`` (a ``.safetensors`` file, or a folder that gets
    ``model.safetensors``), atomically. Tied weights are stored once.

    Under ``torchrun``, rank 0 writes; a model sharded by FSDP is gathered first, so then every rank
    must call it.
    """
    from aiayn.layers.int8 import is_quantized
    from aiayn.models.registry import config_to_dict

    if is_quantized(model):  # its packed int8 weights are not parameters: the file could not be loaded back
        raise ValueError("save takes the float32 model, not a quantized one (quantize again after aiayn.load)")
    tensors = unique_tensors(model)
    if _rank() != 0:
        return weights_path(path)
    config = json.dumps(config_to_dict(model.cfg))
    meta = {"format": "pt", "aiayn_config": config, "aiayn_sha256": digest(tensors, config),
            "aiayn_digest_of": COVERS, **(metadata or {})}
    return atomic_write(weights_path(path), lambda tmp: save_file(tensors, tmp, metadata=meta))


COVERS = "tensors+config"  # what a checkpoint's digest covers (files from before it: the tensors only)


def covered_config(meta: dict[str, str]) -> str | None:
    """The stored config, where the file's digest covers it too (``None``: a file whose digest covers only its
    tensors, written before configs were covered)."""
    return meta.get("aiayn_config") if meta.get("aiayn_digest_of") == COVERS else None


def load(path: str | os.PathLike, device: str = "cpu") -> nn.Module:
    """The model saved at ``path`` (file or run folder), rebuilt from its stored config.

    Raises:
        FileNotFoundError: no checkpoint there.
        ValueError: the file is truncated or corrupted (its digest does not match), or its tensors do
            not fit its config (the keys are named).
    """
    file, meta, tensors = _read(path, tensors=True)
    if "aiayn_digest_of" in meta and "aiayn_sha256" not in meta:  # a file of this format always holds it
        raise ValueError(f"{file} is corrupted: it says its digest covers its {meta['aiayn_digest_of']} but holds "
                         f"no aiayn_sha256 to check them against; it was not loaded")
    check_digest(file, tensors, meta.get("aiayn_sha256"), covered_config(meta))
    bad = [k for k, t in tensors.items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:  # a run that diverged: every output would be NaN, or fail deep inside decoding
        raise ValueError(f"{file} holds NaN or infinite weights ({', '.join(bad[:3])}"
                         f"{f' and {len(bad) - 3} more' if len(bad) > 3 else ''}); it was not loaded")
    model = from_tensors(_config(meta, file), tensors, str(file)).to(device)
    folder = file.parent
    if any((folder / name).is_file() for name in ("tokenizer.json", "src_tokenizer.json")):
        model.run_folder = folder  # type: ignore[assignment]  # save_pretrained writes its tokenizer beside the weights
    return model


def saved_config(path: str | os.PathLike) -> Any:
    """The config stored with the checkpoint at ``path`` (file or run folder), read without its tensors.

    Raises:
        FileNotFoundError: no checkpoint there.
        ValueError: the file is not an aiayn checkpoint.
    """
    file, meta, _ = _read(path, tensors=False)
    return _config(meta, file)


def _read(path: str | os.PathLike, tensors: bool) -> tuple[Path, dict[str, str], dict[str, Tensor]]:
    """``(file, metadata, tensors)`` of an aiayn checkpoint (no tensors read unless ``tensors``)."""
    file = weights_path(path)
    if not file.is_file():
        raise FileNotFoundError(f"no checkpoint at {file}")
    try:
        with safe_open(str(file), framework="pt") as f:  # checks the header and every tensor's extent
            meta = f.metadata() or {}
            stored = {k: f.get_tensor(k) for k in f.keys()} if tensors else {}
    except Exception as e:
        raise ValueError(f"{file} is not a readable safetensors checkpoint (truncated or corrupted?): {e}") from e
    if "aiayn_config" not in meta:
        raise ValueError(f"{file} holds no aiayn config in its metadata; was it written by aiayn.save?")
    return file, meta, stored


def _config(meta: dict[str, str], file: Path) -> Any:
    from aiayn.models.registry import config_from_dict

    try:
        return config_from_dict(json.loads(meta["aiayn_config"]))
    except (ValueError, TypeError, KeyError) as e:  # JSON that is not, a family or field that is not aiayn's
        raise ValueError(f"{file}: its stored aiayn config cannot be read: {e}") from e


def from_tensors(cfg: Any, tensors: dict[str, Tensor], source: str = "the tensors") -> nn.Module:
    """The model ``cfg`` describes, with ``tensors`` (as :func:`unique_tensors` gives them) as its weights.

    Raises:
        ValueError: the tensors do not fit the config (missing, unexpected and misshapen keys named).
    """
    from aiayn.models.registry import build

    model = build(cfg)
    expected = model.state_dict()
    unexpected = sorted(set(tensors) - set(expected))
    wrong = [f"{k}: {tuple(tensors[k].shape)}, wanted {tuple(expected[k].shape)}" for k in tensors
             if k in expected and tensors[k].shape != expected[k].shape]
    loaded = {expected[k].data_ptr() for k in tensors if k in expected}
    missing = sorted(k for k, v in expected.items() if k not in tensors and v.data_ptr() not in loaded)  # not tied
    if missing or unexpected or wrong:
        raise ValueError(f"{source} does not match its config: missing keys {missing}, unexpected keys {unexpected}, "
                         f"misshapen {wrong}")
    model.load_state_dict(tensors, strict=False)
    return model


__all__ = ["COVERS", "WEIGHTS", "covered_config", "from_tensors", "load", "save", "saved_config", "tied_names",
           "unique_tensors", "weights_path"]
