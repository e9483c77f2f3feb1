"""Key tables' building blocks, both ways: Hugging Face weights -> ours (:func:`linear`, :func:`attention`,
:func:`fused`) and ours -> theirs (:func:`copy`, :func:`split_attention`, :func:`split_qkv`), each taken from a
:class:`Source` that records what was taken, so a conversion refuses weights it left behind; and
:func:`load_converted`, which loads the result with every key accounted for.

Every family's ``hf.py`` (``aiayn.models.<family>.hf``) writes its table with these; nothing here knows a family.
They sit in ``models``, below :mod:`aiayn.convert` (which reads Hugging Face folders and finds the family), so that
a family's key table and the conversion that asks for it import nothing of each other's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from itertools import zip_longest
from typing import Any, NoReturn, TypeVar

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
    the inverse of :func:`fused`."""
    for kind in ("weight", "bias"):
        for name, part in zip(theirs, src.take(f"{ours}.{kind}").chunk(3), strict=True):
            out[f"{name}.{kind}"] = part


def split_attention(src: Source, ours: str, theirs: str, out: dict[str, Tensor],
                    names: tuple[str, str, str] = ("q_proj", "k_proj", "v_proj"), out_proj: str | None = None) -> None:
    """Our ``ours.in_proj`` and ``ours.out_proj`` -> separate ``theirs.<names>`` and ``theirs.out_proj`` (or the
    full prefix ``out_proj``): the inverse of :func:`attention`."""
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


# --- loading what a table made ---

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


__all__ = ["Source", "attention", "copy", "fused", "hf_activation", "label_names", "linear", "load_converted",
           "our_weights", "refuse", "split_attention", "split_qkv"]
