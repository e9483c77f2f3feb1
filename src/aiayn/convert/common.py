"""What every conversion shares: reading a Hugging Face model or folder, taking keys with checks,
and loading the result with every key accounted for.

A conversion is a pure mapping from the source state dict to ours with an explicit key table. It
refuses missing, unexpected and misshapen keys, and names them.
"""

from __future__ import annotations

import json
import os
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


def read_hf(source: Any) -> tuple[dict[str, Any], dict[str, Tensor], str]:
    """``(config dict, state dict, name)`` of a ``transformers`` model or a local Hugging Face folder
    (``config.json`` with ``model.safetensors`` or ``pytorch_model.bin``)."""
    if isinstance(source, (str, os.PathLike)):
        folder = Path(source)
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"{folder} holds no config.json; expected a Hugging Face model folder")
        config = json.loads((folder / "config.json").read_text())
        if (folder / "model.safetensors").is_file():
            from safetensors.torch import load_file

            tensors = load_file(folder / "model.safetensors")
        elif (folder / "pytorch_model.bin").is_file():  # weights only: loading never runs code from the file
            tensors = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
        else:
            raise FileNotFoundError(f"{folder} holds neither model.safetensors nor pytorch_model.bin")
        return config, tensors, str(folder)
    if hasattr(source, "config") and hasattr(source, "state_dict"):
        return source.config.to_dict(), dict(source.state_dict()), type(source).__name__
    raise TypeError(f"from_hf takes a transformers model or a folder path, got {type(source).__name__}")


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
