"""Checkpoint averaging: the mean of the weights of several checkpoints of one run (section 6.1).

"For the base models, we used a single model obtained by averaging the last 5 checkpoints, which
were written at 10-minute intervals. For the big models, we averaged the last 20 checkpoints."

Every checkpoint must come from :func:`aiayn.save` with the same config, so that the files hold the
same tensors under the same names and shapes. Floating-point tensors are averaged in float64 and cast
back to their stored dtype; integer and bool tensors (counters, ids) are copied from the first file.
Tied weights are stored once in these files (the metadata names the aliases), so each is averaged
once and stays tied when the result is loaded.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from aiayn.io import atomic_write, digest
from aiayn.models.checkpoint import covered_config, weights_path


def _header(file: Path) -> tuple[dict[str, str], dict[str, tuple[str, tuple[int, ...]]]]:
    """The metadata of ``file`` and ``{name: (dtype, shape)}`` of its tensors, without reading them."""
    if not file.is_file():
        raise FileNotFoundError(f"no checkpoint at {file}")
    try:
        with safe_open(str(file), framework="pt") as f:
            meta = f.metadata() or {}
            tensors = {k: (f.get_slice(k).get_dtype(), tuple(f.get_slice(k).get_shape())) for k in f.keys()}
    except Exception as e:  # safetensors checks the header and every tensor's extent
        raise ValueError(f"{file} is not a readable safetensors checkpoint (truncated or corrupted?): {e}") from e
    if "aiayn_config" not in meta:
        raise ValueError(f"{file} holds no aiayn config in its metadata; was it written by aiayn.save?")
    return meta, tensors


def _check_compatible(files: list[Path]) -> dict[str, str]:
    """The first file's metadata, once every file is known to hold the same config and tensors."""
    first_meta, first_tensors = _header(files[0])
    first_cfg = json.loads(first_meta["aiayn_config"])
    for file in files[1:]:
        meta, tensors = _header(file)
        cfg = json.loads(meta["aiayn_config"])
        if cfg != first_cfg:
            diff = {k: (first_cfg.get(k), cfg.get(k)) for k in sorted(set(first_cfg) | set(cfg))
                    if first_cfg.get(k) != cfg.get(k)}
            raise ValueError(f"cannot average {files[0]} and {file}: their configs differ in {diff} (first, other)")
        if tensors.keys() != first_tensors.keys():
            missing = sorted(first_tensors.keys() - tensors.keys())
            extra = sorted(tensors.keys() - first_tensors.keys())
            raise ValueError(
                f"cannot average {files[0]} and {file}: different tensors; {file} lacks {missing} and adds {extra}"
            )
        differ = {k: (first_tensors[k], v) for k, v in tensors.items() if v != first_tensors[k]}
        if differ:
            raise ValueError(
                f"cannot average {files[0]} and {file}: tensors differ in (dtype, shape): {differ} (first, other)"
            )
    return first_meta


def average_checkpoints(paths: list[str | os.PathLike], out_path: str | os.PathLike) -> Path:
    """Write the element-wise mean of the checkpoints at ``paths`` to ``out_path``, atomically.

    Args:
        paths: checkpoints written by :func:`aiayn.save` from models of one config: ``.safetensors``
            files, or run folders holding ``model.safetensors``.
        out_path: a ``.safetensors`` file, or a folder that gets ``model.safetensors`` (as ``aiayn.save``).

    Returns:
        The file written; it keeps the first checkpoint's metadata (config, tied-weight aliases) and
        loads with :func:`aiayn.load`.

    Raises:
        ValueError: ``paths`` is empty, or the files differ in config, tensor names, dtypes or shapes
            (the message names the two files), or a file is not an aiayn checkpoint.
        FileNotFoundError: a checkpoint does not exist.
    """
    if isinstance(paths, (str, os.PathLike)):
        raise TypeError(f"paths must be a list of checkpoints, got the single path {str(paths)!r}")
    files = [weights_path(p) for p in paths]
    if not files:
        raise ValueError("average_checkpoints needs at least one checkpoint, got an empty list of paths")
    meta = _check_compatible(files)
    averaged: dict[str, torch.Tensor] = {}
    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(safe_open(str(f), framework="pt")) for f in files]
        for name in handles[0].keys():
            first = handles[0].get_tensor(name)
            if not first.is_floating_point():
                averaged[name] = first  # integer or bool: a count or an id, not a weight
                continue
            # One tensor at a time, so memory holds the result plus a single float64 sum.
            total = first.to(torch.float64, copy=True)
            for h in handles[1:]:
                total += h.get_tensor(name).to(torch.float64)
            averaged[name] = (total / len(handles)).to(first.dtype)
    if "aiayn_sha256" in meta:  # the digest describes the tensors in the file: the mean's own
        meta["aiayn_sha256"] = digest(averaged, covered_config(meta))
    return atomic_write(weights_path(out_path), lambda tmp: save_file(averaged, tmp, metadata=meta))
