"""What every conversion shares: reading a Hugging Face model or folder, taking keys with checks,
and loading the result with every key accounted for.

A conversion is a pure mapping from the source state dict to ours with an explicit key table. It
refuses missing, unexpected and misshapen keys, and names them; shapes are compared on a model built on the
meta device, so a config that claims sizes its weights do not have is refused before anything is allocated.
What comes from the folder is read defensively: a config without a key a converter needs is refused naming
the file and the key (:class:`HFConfig`), and a shard index may name only files inside the folder.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping
from itertools import zip_longest
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

from aiayn.convert.keys import Source
from aiayn.io import read_json

ModuleT = TypeVar("ModuleT", bound=nn.Module)


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
    if hasattr(source, "config") and hasattr(source, "state_dict"):
        config = source.config.to_dict()
        config["architectures"] = config.get("architectures") or [type(source).__name__]  # as save_pretrained does
        return HFConfig(config, f"{type(source).__name__}'s config"), dict(source.state_dict()), type(source).__name__
    raise TypeError(f"from_hf takes a transformers model, a folder path or a model id, got {type(source).__name__}")


def load_converted(build: Callable[[Any], ModuleT], cfg: Any, weights: dict[str, Tensor], src: Source,
                   hf: Mapping[str, Any]) -> ModuleT:
    """``build(cfg)`` with ``weights`` (our key names) loaded; every key of the model must be given, no more.

    The model is built first on the meta device, which allocates nothing, and its shapes compared with the
    weights': a config whose sizes disagree with the weight file (``vocab_size`` 10M beside a 100-row table) is
    refused before a model of its size is allocated.

    Args:
        build: the model class; cfg: its config, made from ``hf``.
        weights: our keys -> tensors, taken from ``src``.
        src: the source weights (for their name and the keys a misshapen weight came from).
        hf: the Hugging Face config (for the fields behind a wanted size).

    Raises:
        ValueError: naming the missing, unexpected and misshapen keys; for a misshapen one, the source key it
            was taken from and the config fields whose value is the size it wanted.
    """
    with torch.device("meta"):
        expected = {k: v.shape for k, v in build(cfg).state_dict().items()}
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    wrong = [k for k, shape in expected.items() if k in weights and weights[k].shape != shape]
    if missing or unexpected or wrong:
        shapes = [f"{k}: {tuple(weights[k].shape)}, wanted {tuple(expected[k])}" for k in wrong[:5]]
        more = f" and {len(wrong) - 5} more" if len(wrong) > 5 else ""  # a wrong width misshapes every layer
        raise ValueError(f"converting {src.name}: missing {missing}, unexpected {unexpected}, misshapen {shapes}"
                         f"{more}{_misshapen_why(wrong, weights, expected, src, hf)}")
    bad = [k for k, v in weights.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:  # every output would be NaN (a blank attention page, a failure deep inside generate)
        raise ValueError(f"converting {src.name}: NaN or infinite weights in {', '.join(bad[:3])}"
                         f"{f' and {len(bad) - 3} more' if len(bad) > 3 else ''}; nothing was loaded")
    model = build(cfg)
    dtypes = {k: v.dtype for k, v in model.state_dict().items()}
    model.load_state_dict({k: v.to(dtypes[k]) for k, v in weights.items()})
    return model.eval()


def _misshapen_why(wrong: list[str], weights: dict[str, Tensor], expected: dict[str, torch.Size], src: Source,
                   hf: Mapping[str, Any]) -> str:
    """Where the first misshapen weight came from (the source key whose tensor it is, or is the transpose of),
    and which config fields hold the sizes the misshapen weights wanted: ``"; their transformer.wte.weight is
    (100, 32) where FOLDER/config.json wants (10000000, 32), from its vocab_size=10000000"``."""
    sizes = {w for k in wrong for g, w in zip_longest(weights[k].shape, expected[k]) if g != w and w is not None}
    fields = [f"{field}={value}" for field, value in _sizes(hf) if value in sizes]
    first = weights[wrong[0]]
    origin = {t.data_ptr(): k for k, t in src.tensors.items() if t.numel()}
    theirs = origin.get(first.data_ptr()) if first.numel() else None
    why = f"their {theirs}" if theirs else f"our {wrong[0]}"
    why += f" is {tuple(first.shape)} where {getattr(hf, 'file', 'the config')} wants {tuple(expected[wrong[0]])}"
    return f"; {why}, from its {', '.join(fields)}" if fields else f"; {why}"


def _sizes(hf: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, int]]:
    """``(field, value)`` of every integer of ``hf`` that can be a size (nested objects and lists too; not token
    ids or label tables)."""
    for key, value in hf.items():
        if key.endswith(("_id", "_ids")) or key in ("id2label", "label2id"):
            continue
        if isinstance(value, Mapping):
            yield from _sizes(value, f"{prefix}{key}.")
        elif isinstance(value, (list, tuple)):
            yield from ((f"{prefix}{key}[{i}]", v) for i, v in enumerate(value)
                        if isinstance(v, int) and not isinstance(v, bool))
        elif isinstance(value, int) and not isinstance(value, bool):
            yield f"{prefix}{key}", value
