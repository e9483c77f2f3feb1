"""Key tables' building blocks, both ways: Hugging Face weights -> ours (:func:`linear`, :func:`attention`,
:func:`fused`) and ours -> theirs (:func:`copy`, :func:`split_attention`, :func:`split_qkv`), each taken from a
:class:`Source` that records what was taken, so a conversion refuses weights it left behind.

Every family's ``hf.py`` (``aiayn.models.<family>.hf``) writes its table with these; nothing here knows a family.
"""

from __future__ import annotations

from typing import Any, NoReturn

import torch
from torch import Tensor, nn


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


# --- Hugging Face -> ours ---

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


# --- ours -> Hugging Face ---

def our_weights(model: nn.Module, name: str) -> Source:
    """Our state dict as a :class:`Source`, so an export refuses weights of ours it leaves behind."""
    return Source(dict(model.state_dict()), name)


def copy(src: Source, theirs: str, ours: str, out: dict[str, Tensor], bias: bool = True) -> None:
    """``ours.weight`` (and ``.bias``) -> ``theirs.weight`` (and ``.bias``); also LayerNorm."""
    out[f"{theirs}.weight"] = src.take(f"{ours}.weight")
    if bias:
        out[f"{theirs}.bias"] = src.take(f"{ours}.bias")


def split_qkv(src: Source, ours: str, theirs: tuple[str, str, str], out: dict[str, Tensor]) -> None:
    """Our fused projection ``ours`` (``.weight`` and ``.bias``, rows q | k | v) -> the three ``theirs``:
    the inverse of :func:`aiayn.convert.common.fused`."""
    for kind in ("weight", "bias"):
        for name, part in zip(theirs, src.take(f"{ours}.{kind}").chunk(3), strict=True):
            out[f"{name}.{kind}"] = part


def split_attention(src: Source, ours: str, theirs: str, out: dict[str, Tensor],
                    names: tuple[str, str, str] = ("q_proj", "k_proj", "v_proj"), out_proj: str | None = None) -> None:
    """Our ``ours.in_proj`` and ``ours.out_proj`` -> separate ``theirs.<names>`` and ``theirs.out_proj`` (or the
    full prefix ``out_proj``): the inverse of :func:`aiayn.convert.common.attention`."""
    q, k, v = (f"{theirs}.{n}" for n in names)
    split_qkv(src, f"{ours}.in_proj", (q, k, v), out)
    copy(src, out_proj or f"{theirs}.out_proj", f"{ours}.out_proj", out)


def hf_activation(table: dict[str, str], activation: str, field: str = "activation") -> str:
    """The first Hugging Face name that ``table`` (Hugging Face name -> ours) maps to ``activation``."""
    for theirs, mine in table.items():
        if mine == activation:
            return theirs
    known = sorted(set(table.values()))
    raise ValueError(f"{field}={activation!r} has no Hugging Face equivalent here (known: {known})")


def label_names(n: int) -> dict[str, Any]:
    """``id2label`` / ``label2id`` for ``n`` classes, as ``PretrainedConfig(num_labels=n)`` writes them; none
    for 0 (a model without a head)."""
    if not n:
        return {}
    return {"id2label": {str(i): f"LABEL_{i}" for i in range(n)}, "label2id": {f"LABEL_{i}": i for i in range(n)}}


def refuse(field: str, value: Any, why: str) -> NoReturn:
    """Raise the ``ValueError`` every export raises for a config Hugging Face cannot express."""
    raise ValueError(f"{field}={value!r} cannot be exported to Hugging Face: {why}")


__all__ = ["Source", "attention", "copy", "fused", "hf_activation", "label_names", "linear", "our_weights", "refuse",
           "split_attention", "split_qkv"]
