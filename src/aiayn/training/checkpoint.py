"""Checkpoints: safetensors weights with the config in the file's metadata, written atomically.

Written through :func:`aiayn.io.atomic_write`, so a crash leaves the old file or the new one, never
half of either. Weights load through safetensors only, which never runs code from the file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from safetensors import safe_open
from safetensors.torch import load_model, save_model
from torch import nn

from aiayn.io import atomic_write

WEIGHTS = "model.safetensors"


def weights_path(path: str | os.PathLike) -> Path:
    """``path`` itself for a ``.safetensors`` file, else ``path/model.safetensors`` (a run folder)."""
    path = Path(path)
    return path if path.suffix == ".safetensors" and not path.is_dir() else path / WEIGHTS


def save(model: nn.Module, path: str | os.PathLike, metadata: dict[str, str] | None = None) -> Path:
    """Save ``model``'s weights and config to ``path`` (a ``.safetensors`` file, or a folder that gets
    ``model.safetensors``), atomically. Tied weights are stored once."""
    from aiayn.models import config_to_dict

    meta = {"format": "pt", "aiayn_config": json.dumps(config_to_dict(model.cfg)), **(metadata or {})}
    return atomic_write(weights_path(path), lambda tmp: save_model(model, tmp, metadata=meta))


def load(path: str | os.PathLike, device: str = "cpu") -> nn.Module:
    """The model saved at ``path`` (file or run folder), rebuilt from its stored config."""
    from aiayn.models import build, config_from_dict

    file = weights_path(path)
    if not file.is_file():
        raise FileNotFoundError(f"no checkpoint at {file}")
    try:
        with safe_open(str(file), framework="pt") as f:
            meta = f.metadata() or {}
    except Exception as e:  # safetensors checks the header and every tensor's extent
        raise ValueError(f"{file} is not a readable safetensors checkpoint (truncated or corrupted?): {e}") from e
    if "aiayn_config" not in meta:
        raise ValueError(f"{file} holds no aiayn config in its metadata; was it written by aiayn.save?")
    model = build(config_from_dict(json.loads(meta["aiayn_config"])))
    missing, unexpected = load_model(model, str(file), strict=False, device=device)
    if missing or unexpected:
        raise ValueError(f"{file} does not match its config: missing keys {missing}, unexpected keys {unexpected}")
    return model.to(device)
