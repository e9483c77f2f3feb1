"""Loading a saved model for inference: on a device, or in int8 on the CPU (:mod:`aiayn.layers.int8`).

Every command and function that runs a saved model (translate, generate, evaluate, embed, classify, detect,
and :func:`aiayn.pipeline`) loads it through :func:`ready`, so ``device`` and ``quantize`` mean the same
everywhere.
"""

from __future__ import annotations

import os
from pathlib import Path
from shlex import quote
from typing import Any

import torch
from torch import nn

from aiayn.defaults import DTYPES as DTYPE_NAMES
from aiayn.models import checkpoint
from aiayn.models.checkpoint import weights_path
from aiayn.training import device as devices

QUANTIZE = (None, "int8")  # what `quantize` may be: float32 as saved, or int8 weights (CPU)
# what `dtype` may be: float32 as saved, or half precision (on a GPU: flash attention's kernels; on a CPU without
# bfloat16 units ~150x slower than float32, measured: the default stays as saved)
DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPE_NAMES}
DTYPE_TASKS = ("text-generation", "translation")  # those whose inputs are ids: images stay float32


def to_dtype(model: nn.Module, dtype: str | torch.dtype | None, quantize: str | None = None) -> nn.Module:
    """``model`` with its weights cast to ``dtype`` (a name of :data:`DTYPES` or a ``torch.dtype``), in place;
    ``None`` leaves it as saved.

    Raises:
        ValueError: another dtype, or a half precision asked for together with int8 weights.
    """
    if dtype is None:
        return model
    names = {v: k for k, v in DTYPES.items()}
    name = dtype if isinstance(dtype, str) else names.get(dtype)
    if name not in DTYPES:
        raise ValueError(f"dtype={dtype!r} must be one of {sorted(DTYPES)}")
    if quantize is not None and name != "float32":
        raise ValueError(f"dtype={name!r} with quantize={quantize!r}: int8 weights compute in float32")
    return model.to(DTYPES[name])


def ready(model: nn.Module, device: str | torch.device | None = None, quantize: str | None = None) -> nn.Module:
    """``model`` in eval mode on ``device`` (:func:`aiayn.training.device.resolve`; default a GPU if any), or,
    with ``quantize="int8"``, an int8 copy on the CPU (where ``device`` defaults to the CPU).

    Raises:
        ValueError: ``quantize`` is not one of :data:`QUANTIZE`; int8 asked for on another device than the
            CPU; ``device`` names no device of this machine.
    """
    if quantize not in QUANTIZE:
        raise ValueError(f"quantize={quantize!r} must be one of {QUANTIZE}")
    if quantize is None:
        return model.to(devices.resolve(device)).eval()
    where = devices.resolve(device or "cpu")
    if where.type != "cpu":
        raise ValueError(f"quantize={quantize!r} runs on the CPU (fbgemm's int8 kernels); got device={str(where)!r}")
    from aiayn.layers.int8 import quantize as to_int8

    return to_int8(model.to(where).float().eval())


def load_model(path: str | os.PathLike, device: str | torch.device | None = None,
               quantize: str | None = None, kinds: tuple[type, ...] = (), task: str = "") -> nn.Module:
    """The model saved at ``path`` (a run folder or a ``.safetensors`` file), made :func:`ready`.

    Args:
        kinds: the model classes a ``task`` run holds; another is refused by name (a GPT's weights copied into a
            translation run would fail deep inside decoding otherwise).
    """
    if Path(path).is_dir() and not weights_path(path).is_file():
        raise no_weights(path)
    model = checkpoint.load(path)
    if kinds and not isinstance(model, kinds):
        wanted = " or a ".join(k.__name__ for k in kinds)
        raise ValueError(f"{weights_path(path)} holds a {type(model).__name__}, but a {task} run's model is a "
                         f"{wanted}; are the weights of another run in this folder?")
    return ready(model, device, quantize)


def no_weights(run: str | os.PathLike, what: str = "a run folder written by `aiayn train`") -> FileNotFoundError:
    """The error for a folder without ``model.safetensors``, saying what happened: a run stopped before its first
    save wrote no weights; one stopped mid-run keeps them in its training state, and ``--resume`` finishes it; a
    folder without ``args.json`` may be no run at all (``what`` names what one would be)."""
    from aiayn.training.state import SHARDED, STATE

    run = Path(run)
    if not (run / "args.json").is_file():
        return FileNotFoundError(f"{run} holds no model.safetensors; is it {what}?")
    if (run / STATE).is_file() or (run / SHARDED).is_dir():
        return FileNotFoundError(f"{run} holds no model.safetensors: the run stopped before its end, and its weights "
                                 f"are in its training state; `aiayn train --resume {quote(str(run))}` finishes it "
                                 f"and writes them")
    return FileNotFoundError(f"{run} holds no model.safetensors: the run stopped before its first save, so no "
                             f"weights were written; train it again")


def check_tokenizer(tokenizer: Any, file: str | os.PathLike, vocab_size: int, model_ids: dict[str, int | None],
                    exact: bool) -> None:
    """Refuse a tokenizer that does not fit its model, naming ``file``: ids the model has no row for, or
    special tokens (``model_ids``: e.g. ``{"eos_id": 2}``) at other ids than the model's. ``exact``: the
    vocabularies must be the same size (a run aiayn trained: its model was built for its tokenizer); else
    the model may have more rows than the tokenizer has ids (a converted model whose table was padded).
    A tokenizer that disagrees would read and write other tokens than the model's: ``<unk>`` and a wrong
    perplexity, silently."""
    size = tokenizer.vocab_size
    if size > vocab_size or (exact and size != vocab_size):
        raise ValueError(f"{file} holds {size:,} tokens but the model's vocabulary has {vocab_size:,}: the tokenizer "
                         f"is not the one the model was trained with")
    for name, want in model_ids.items():
        have = getattr(tokenizer, name, None)
        if want is not None and have is not None and have != want:
            raise ValueError(f"{file} gives {name} {have} but the model's config says {want}: the tokenizer is not "
                             f"the one the model was trained with")


def special_ids(cfg: Any) -> dict[str, int | None]:
    """The special token ids a model's config fixes (those of ``pad_id``, ``eos_id``, ``cls_id``, ``sep_id``,
    ``mask_id`` it has), for :func:`check_tokenizer`. Not ``bos_id``: the token decoding starts with is the
    model's choice, not the tokenizer's (BART starts with ``</s>``, Marian with ``<pad>``)."""
    names = ("pad_id", "eos_id", "cls_id", "sep_id", "mask_id")
    return {name: getattr(cfg, name) for name in names if hasattr(cfg, name)}


__all__ = ["QUANTIZE", "check_tokenizer", "load_model", "no_weights", "ready", "special_ids"]
