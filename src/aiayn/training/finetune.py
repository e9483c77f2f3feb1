"""Fine-tuning: a model started from another's weights, with its lower layers frozen or trained more slowly.

    source = finetune.source("runs/mlm-reviews")        # a run folder, a Hugging Face folder or a model id
    model = aiayn.build(dataclasses.replace(source.cfg, head="classification", num_labels=2))
    loaded = finetune.transfer(source, model)           # names and shapes that match; new heads keep their init
    finetune.freeze(model, 1)                           # the embeddings and the first block do not train
    optimizer = finetune.body_rate(optimizer, loaded, 0.1)   # the loaded weights learn at a tenth of the rate

BERT's section 4 fine-tunes every weight at once; ULMFiT and much later practice freeze the lowest layers or
give the pre-trained body a lower rate than the new head. Both are here as settings of every recipe
(``--init-from``, ``--freeze``, ``--body-lr``).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import nn

from aiayn.models.checkpoint import load


def source(path: str | os.PathLike, revision: str | None = None) -> nn.Module:
    """The model to start from: an aiayn run folder or checkpoint, or a Hugging Face folder or model id
    (through :func:`aiayn.from_hf`)."""
    p = Path(path)
    if p.suffix == ".safetensors" or ((p / "model.safetensors").is_file() and not (p / "config.json").is_file()):
        return load(p)
    from aiayn.convert import from_hf

    return from_hf(path, revision)


def folder_of(path: str | os.PathLike, revision: str | None = None) -> Path:
    """The local folder of ``path`` (a run folder, a checkpoint's folder, a Hugging Face folder or a model id):
    where its tokenizer is."""
    p = Path(path)
    if p.suffix == ".safetensors":
        return p.parent
    from aiayn.convert import hf_folder

    return hf_folder(path, revision)


def transfer(source: nn.Module | dict[str, torch.Tensor], target: nn.Module, name: str = "the source") -> list[str]:
    """Copy every weight of ``source`` whose name ``target`` also has into ``target``; the target's other weights
    (a new head) keep their initialisation and the source's others (a pre-training head) are left.

    Returns:
        The names loaded, in the target's order.

    Raises:
        ValueError: another kind of model, a weight both have with different shapes (naming it and both
            shapes), or no weight in common.
    """
    if isinstance(source, nn.Module) and type(source) is not type(target):
        raise ValueError(f"init_from: {name} holds a {type(source).__name__}; this task trains a "
                         f"{type(target).__name__}")
    state = source.state_dict() if isinstance(source, nn.Module) else source
    ours = target.state_dict()
    wrong = [f"{k}: {tuple(state[k].shape)} in {name}, {tuple(v.shape)} here" for k, v in ours.items()
             if k in state and state[k].shape != v.shape]
    if wrong:
        raise ValueError(f"init_from: weights of the same name differ in shape (the model's config must match "
                         f"{name}'s; --set only what does not change a shape): {wrong[:5]}")
    loaded = [k for k in ours if k in state]
    if not loaded:
        raise ValueError(f"init_from: {name} has no weight named as this model's ({type(target).__name__}); "
                         f"it is another kind of model")
    target.load_state_dict({k: state[k] for k in loaded}, strict=False)
    return loaded


def blocks(model: nn.Module) -> list[tuple[str, nn.ModuleList]]:
    """``(name, blocks)`` of every stack of blocks in ``model`` (its ``layers`` lists), lowest first."""
    return [(name, m) for name, m in model.named_modules() if isinstance(m, nn.ModuleList) and name.endswith("layers")]


def freeze(model: nn.Module, layers: int) -> list[str]:
    """Stop the embeddings and the first ``layers`` blocks of each stack from training (``layers=-1``: every
    block); returns the parameter names frozen."""
    if layers == 0:
        return []
    prefixes = [name for name, m in model.named_modules() if name and "embed" in name.split(".")[-1]]
    for name, stack in blocks(model):
        n = len(stack) if layers < 0 else min(layers, len(stack))
        prefixes += [f"{name}.{i}" for i in range(n)]
    frozen = []
    for name, p in model.named_parameters():
        if any(name == q or name.startswith(q + ".") for q in prefixes):
            p.requires_grad_(False)
            frozen.append(name)
    return frozen


def body_rate(optimizer: torch.optim.Optimizer, model: nn.Module, body: list[str],
              factor: float) -> torch.optim.Optimizer:
    """``optimizer`` over ``model``'s trainable weights only, each of its parameter groups split in two: the
    ``body`` weights (the loaded ones) at ``factor`` times the group's rate, the rest (new heads) at the rate.
    Frozen weights are left out. Call it before the first update and before the scheduler is made."""
    body_ids = {id(p) for n, p in model.named_parameters() if n in set(body)}
    groups = []
    for group in optimizer.param_groups:
        options = {k: v for k, v in group.items() if k != "params"}
        params = [p for p in group["params"] if p.requires_grad]
        for part, scale in (([p for p in params if id(p) in body_ids], factor),
                            ([p for p in params if id(p) not in body_ids], 1.0)):
            if part:
                groups.append({**options, "params": part, "lr": options["lr"] * scale})
    optimizer.param_groups = []  # before the first update the optimizer holds no state to keep
    for group in groups:
        optimizer.add_param_group(group)
    return optimizer


__all__ = ["blocks", "body_rate", "folder_of", "freeze", "source", "transfer"]
