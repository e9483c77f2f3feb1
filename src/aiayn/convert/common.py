"""What every conversion shares: reading a Hugging Face model or folder, taking keys with checks,
and loading the result with every key accounted for (:func:`load_converted`, kept with the key tables'
helpers in :mod:`aiayn.models.keys`, which the families' ``hf.py`` import; named here too).

A conversion is a pure mapping from the source state dict to ours with an explicit key table. It
refuses missing, unexpected and misshapen keys, and names them; shapes are compared on a model built on the
meta device, so a config that claims sizes its weights do not have is refused before anything is allocated.
What comes from the folder is read defensively: a config without a key a converter needs is refused naming
the file and the key (:class:`HFConfig`), and a shard index may name only files inside the folder.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from aiayn.io import read_json
from aiayn.models.keys import load_converted

# what a model folder needs from the hub: its config, weights (one file or shards + index) and tokenizer files
HUB_FILES = ["*.json", "*.safetensors", "*.spm", "*.model", "*.txt"]
HUB_PICKLES = ["pytorch_model*.bin"]  # fetched only when the repository has no safetensors
_REPO_ID = re.compile(r"^[\w.-]+(/[\w.-]+)?$")


def hf_folder(source: str | os.PathLike, revision: str | None = None,
              cache_dir: str | os.PathLike | None = None) -> Path:
    """A local Hugging Face model folder: ``source`` itself when it is a folder, else the model id ``source``
    (``"gpt2"``, ``"org/name"``) fetched at ``revision`` through ``huggingface_hub`` into its cache
    (``cache_dir``, default ``$HF_HUB_CACHE``); offline (``HF_HUB_OFFLINE=1`` or no network) the cached copy.

    Raises:
        FileNotFoundError: no such folder, or a model id offline and not in the cache (the message says which).
    """
    path = Path(source)
    if path.is_dir():
        if revision is not None:
            raise ValueError(f"revision={revision!r} names a version of a hub model, but {path} is a local folder")
        return path
    name = str(source)
    if not _REPO_ID.match(name) or name.startswith((".", "/")):
        raise FileNotFoundError(f"{name} is neither a folder nor a Hugging Face model id (\"name\" or \"org/name\")")
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError as e:  # pragma: no cover - installed with tokenizers
        raise ImportError("fetching a model id needs huggingface_hub: pip install huggingface_hub") from e
    kwargs: dict[str, Any] = {"revision": revision, "cache_dir": cache_dir}
    try:
        folder = Path(snapshot_download(name, allow_patterns=HUB_FILES, **kwargs))
        if not any(folder.glob("*.safetensors")) and not (folder / "pytorch_model.bin").is_file():
            folder = Path(snapshot_download(name, allow_patterns=HUB_FILES + HUB_PICKLES, **kwargs))
    except LocalEntryNotFoundError as e:
        from huggingface_hub import constants

        cache = cache_dir or constants.HF_HUB_CACHE
        why = "HF_HUB_OFFLINE is set" if constants.HF_HUB_OFFLINE else "the hub could not be reached"
        raise FileNotFoundError(f"{name}{'' if revision is None else f' (revision {revision})'} is not in the Hugging "
                                f"Face cache {cache} and {why}: fetch it once online, or give a local folder") from e
    return folder


class HFConfig(dict[str, Any]):
    """A Hugging Face config (``config.json`` as a dict) that names its file when a conversion reads a key it
    lacks: ``hf["n_embd"]`` raises ``ValueError("FOLDER/config.json has no 'n_embd', which a gpt2 model needs")``,
    not a bare ``KeyError``. The converters read every config through it; its nested objects (DETR's
    ``backbone_config``) are HFConfigs too. ``.get`` and ``in`` work as on any dict.

    Args:
        data: the config.
        file: what to call it in messages (``FOLDER/config.json``, ``GPT2LMHeadModel's config``).
    """

    def __init__(self, data: Mapping[str, Any], file: str, model_type: str | None = None, within: str = "") -> None:
        super().__init__()
        self.file, self.within = file, within
        self.model_type = data.get("model_type") if model_type is None else model_type
        for key, value in data.items():
            nested = isinstance(value, Mapping)
            self[key] = HFConfig(value, file, self.model_type, f"{within}{key}.") if nested else value

    def __missing__(self, key: str) -> Any:
        where = f" in {self.within[:-1]}" if self.within else ""
        raise ValueError(f"{self.file} has no {key!r}{where}, which a {self.model_type} model needs")


def read_config(folder: Path) -> HFConfig:
    """``folder/config.json``, read through :class:`HFConfig`.

    Raises:
        FileNotFoundError: no config.json; ValueError: one that is not a JSON object (naming it).
    """
    file = folder / "config.json"
    if not file.is_file():
        raise FileNotFoundError(f"{folder} holds no config.json; expected a Hugging Face model folder")
    return HFConfig(read_json(file, "a Hugging Face config"), str(file))


def read_weights(folder: Path) -> dict[str, Tensor]:
    """Every tensor of a Hugging Face folder: ``model.safetensors``, its shards (``model.safetensors.index.json``),
    or ``pytorch_model.bin`` / its shards (read as weights only: loading never runs code from the file).

    Raises:
        ValueError: an index that is not JSON, has no ``weight_map`` of names to shard files, or names a shard
            outside the folder (see :func:`_shards`); a shard that lacks weights the index maps to it; a damaged
            safetensors file (named).
        FileNotFoundError: no weights, or a shard the index names is missing.
    """
    from safetensors.torch import load_file as read_safetensors

    def load_file(file: Path) -> dict[str, Tensor]:
        try:
            return read_safetensors(file)
        except Exception as e:  # safetensors' own SafetensorError (a truncated or damaged file) is not a ValueError
            if isinstance(e, OSError):
                raise
            raise ValueError(f"{file} is not a readable safetensors file (damaged or cut short?): {e}") from None

    def pickle(file: Path) -> dict[str, Tensor]:
        return torch.load(file, map_location="cpu", weights_only=True)

    for single, index, load in (("model.safetensors", "model.safetensors.index.json", load_file),
                                ("pytorch_model.bin", "pytorch_model.bin.index.json", pickle)):
        if (folder / single).is_file():
            return load(folder / single)
        if (folder / index).is_file():
            weight_map = read_json(folder / index, "a shard index").get("weight_map")
            if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
                raise ValueError(f"{folder}/{index} has no \"weight_map\" of weight names to shard file names")
            tensors: dict[str, Tensor] = {}
            for shard in _shards(folder, index, weight_map):
                tensors.update(load(shard))
            missing = sorted(set(weight_map) - set(tensors))
            if missing:
                raise ValueError(f"{folder}/{index} maps {missing[:5]} to shards that do not hold them")
            return tensors
    raise FileNotFoundError(f"{folder} holds neither model.safetensors nor pytorch_model.bin (nor their shards)")


def _shards(folder: Path, index: str, weight_map: dict[str, str]) -> list[Path]:
    """The shard files ``weight_map`` names, each confined to ``folder``: an index is data from wherever the
    folder came from, so ``../x`` or ``/etc/x`` must not make us read a file elsewhere. A symbolic link may lead
    only inside the folder, or, in the Hugging Face cache (``.../snapshots/REVISION``), to the cache's own
    ``blobs`` beside the snapshots, where its every file links."""
    root = folder.resolve()
    roots = [root, root.parent.parent / "blobs"] if root.parent.name == "snapshots" else [root]
    files = []
    for shard in sorted(set(weight_map.values())):
        path = Path(shard)
        if path.is_absolute() or ".." in path.parts or not path.parts:
            raise ValueError(f"{folder}/{index} names the shard {shard!r}, which is not a file name inside {folder}")
        if not any((folder / path).resolve().is_relative_to(r) for r in roots):
            raise ValueError(f"{folder}/{index} names the shard {shard!r}, a link to {(folder / path).resolve()}, "
                             f"outside {folder}")
        if not (folder / path).is_file():
            raise FileNotFoundError(f"{folder}/{index} names the shard {shard}, which is missing")
        files.append(folder / path)
    return files


def read_hf(source: Any, revision: str | None = None) -> tuple[HFConfig, dict[str, Tensor], str]:
    """``(config, state dict, name)`` of a ``transformers`` model, a local Hugging Face folder or a model id
    (see :func:`hf_folder`)."""
    if isinstance(source, (str, os.PathLike)):
        folder = hf_folder(source, revision)
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"{source} holds no config.json; expected a Hugging Face model folder")
        return read_config(folder), read_weights(folder), str(source)
    if revision is not None:
        raise ValueError("revision= applies to a model id, not to a transformers model object")
    if hasattr(getattr(source, "config", None), "to_dict") and hasattr(source, "state_dict"):  # not ours: a cfg
        config = source.config.to_dict()
        config["architectures"] = config.get("architectures") or [type(source).__name__]  # as save_pretrained does
        return HFConfig(config, f"{type(source).__name__}'s config"), dict(source.state_dict()), type(source).__name__
    raise TypeError(f"from_hf takes a transformers model, a folder path or a model id, got {type(source).__name__}")


__all__ = ["HUB_FILES", "HUB_PICKLES", "HFConfig", "hf_folder", "load_converted", "read_config", "read_hf",
           "read_weights"]
