"""What every conversion shares: reading a Hugging Face model or folder, taking keys with checks,
and loading the result with every key accounted for.

A conversion is a pure mapping from the source state dict to ours with an explicit key table. It
refuses missing, unexpected and misshapen keys, and names them.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

ModuleT = TypeVar("ModuleT", bound=nn.Module)


class Source:
    """A source state dict that records which keys a conversion took, so leftovers can be refused."""

    def __init__(self, tensors: dict[str, Tensor], name: str) -> None:
        self.tensors, self.name = tensors, name
        self.taken: set[str] = set()

    def __contains__(self, key: str) -> bool:
        return key in self.tensors

    def take(self, key: str) -> Tensor:
        if key not in self.tensors:
            raise ValueError(f"{self.name} has no weight {key!r} (missing key)")
        self.taken.add(key)
        return self.tensors[key]

    def alias(self, key: str, value: Tensor) -> None:
        """Take ``key`` if present; it must hold ``value`` (a tied weight stored twice)."""
        if key in self.tensors and not torch.equal(self.take(key), value):
            raise ValueError(f"{self.name}: {key!r} should be tied to a weight it differs from")

    def check_all_taken(self, ignore: tuple[str, ...] = ()) -> None:
        left = sorted(k for k in self.tensors if k not in self.taken and not k.endswith(ignore))
        if left:
            raise ValueError(f"{self.name} has weights the conversion does not use (unexpected keys): {left}")


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


def read_weights(folder: Path) -> dict[str, Tensor]:
    """Every tensor of a Hugging Face folder: ``model.safetensors``, its shards (``model.safetensors.index.json``),
    or ``pytorch_model.bin`` / its shards (read as weights only: loading never runs code from the file)."""
    from safetensors.torch import load_file

    def pickle(file: Path) -> dict[str, Tensor]:
        return torch.load(file, map_location="cpu", weights_only=True)

    for single, index, load in (("model.safetensors", "model.safetensors.index.json", load_file),
                                ("pytorch_model.bin", "pytorch_model.bin.index.json", pickle)):
        if (folder / single).is_file():
            return load(folder / single)
        if (folder / index).is_file():
            weight_map = json.loads((folder / index).read_text())["weight_map"]
            tensors: dict[str, Tensor] = {}
            for shard in sorted(set(weight_map.values())):
                if not (folder / shard).is_file():
                    raise FileNotFoundError(f"{folder}/{index} names the shard {shard}, which is missing")
                tensors.update(load(folder / shard))
            missing = sorted(set(weight_map) - set(tensors))
            if missing:
                raise ValueError(f"{folder}/{index} maps {missing[:5]} to shards that do not hold them")
            return tensors
    raise FileNotFoundError(f"{folder} holds neither model.safetensors nor pytorch_model.bin (nor their shards)")


def read_hf(source: Any, revision: str | None = None) -> tuple[dict[str, Any], dict[str, Tensor], str]:
    """``(config dict, state dict, name)`` of a ``transformers`` model, a local Hugging Face folder or a model id
    (see :func:`hf_folder`)."""
    if isinstance(source, (str, os.PathLike)):
        folder = hf_folder(source, revision)
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"{source} holds no config.json; expected a Hugging Face model folder")
        return json.loads((folder / "config.json").read_text()), read_weights(folder), str(source)
    if revision is not None:
        raise ValueError("revision= applies to a model id, not to a transformers model object")
    if hasattr(source, "config") and hasattr(source, "state_dict"):
        config = source.config.to_dict()
        config["architectures"] = config.get("architectures") or [type(source).__name__]  # as save_pretrained does
        return config, dict(source.state_dict()), type(source).__name__
    raise TypeError(f"from_hf takes a transformers model, a folder path or a model id, got {type(source).__name__}")


def load_converted(model: ModuleT, weights: dict[str, Tensor], name: str) -> ModuleT:
    """Load ``weights`` (our key names) into ``model``; every key of the model must be given, no more."""
    expected = model.state_dict()
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    wrong = [f"{k}: {tuple(weights[k].shape)}, wanted {tuple(v.shape)}" for k, v in expected.items()
             if k in weights and weights[k].shape != v.shape]
    if missing or unexpected or wrong:
        raise ValueError(f"converting {name}: missing {missing}, unexpected {unexpected}, misshapen {wrong}")
    model.load_state_dict({k: v.to(expected[k].dtype) for k, v in weights.items()})
    return model.eval()


def fused(*parts: Tensor) -> Tensor:
    """Separate q, k, v projections stacked into one ``in_proj`` (rows q, then k, then v)."""
    return torch.cat(parts, dim=0)


def linear(src: Source, ours: str, theirs: str, out: dict[str, Tensor], bias: bool = True) -> None:
    """``theirs.weight`` (and ``.bias``) -> ``ours.weight`` (and ``.bias``); also LayerNorm."""
    out[f"{ours}.weight"] = src.take(f"{theirs}.weight")
    if bias:
        out[f"{ours}.bias"] = src.take(f"{theirs}.bias")


def attention(src: Source, ours: str, theirs: str, out: dict[str, Tensor],
              names: tuple[str, str, str] = ("q_proj", "k_proj", "v_proj"), out_proj: str | None = None) -> None:
    """Separate q/k/v projections ``theirs.<names>`` and the output projection (``theirs.out_proj``, or
    the full prefix ``out_proj``) -> our fused ``in_proj`` and ``out_proj``."""
    q, k, v = (f"{theirs}.{n}" for n in names)
    out[f"{ours}.in_proj.weight"] = fused(*(src.take(f"{p}.weight") for p in (q, k, v)))
    out[f"{ours}.in_proj.bias"] = fused(*(src.take(f"{p}.bias") for p in (q, k, v)))
    linear(src, f"{ours}.out_proj", out_proj or f"{theirs}.out_proj", out)


def gpt_ends(hf: dict[str, Any]) -> dict[str, Any]:
    """Our ``eos_id`` and ``stop_ids`` for a decoder's ``eos_token_id``: one id, a list (Llama 3.1's chat models
    list three; the first is ``eos_id``), or none (no end token: generation runs to its length, as transformers')."""
    eos = hf.get("eos_token_id")
    ids = list(eos) if isinstance(eos, list) else [] if eos is None else [eos]
    return {"eos_id": ids[0] if ids else None, "stop_ids": tuple(ids[1:])}


def hf_ends(cfg: Any) -> int | list[int] | None:
    """A decoder config's ``eos_token_id`` for our ``eos_id`` and ``stop_ids`` (the inverse of :func:`gpt_ends`)."""
    return [cfg.eos_id, *cfg.stop_ids] if cfg.stop_ids else cfg.eos_id
