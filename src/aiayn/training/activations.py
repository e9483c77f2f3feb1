"""Activation checkpointing: each transformer block keeps only its input, and recomputes the rest.

Training keeps every block's intermediate activations (the norms' inputs, queries, keys, values, the
feed-forward's hidden layer) until the backward pass reads them; for a deep model at a long context they,
not the weights, fill the memory. A checkpointed block keeps only its input and runs its forward again in
the backward pass to get the rest (Chen et al., 2016, "Training Deep Nets with Sublinear Memory Cost"):
the activations of one block at a time instead of all, for one more forward of the blocks per update.

    n = checkpoint_blocks(model)    # before fit; weights, their names and outputs are unchanged

    forward:   x -> [block 1] -> [block 2] -> ... -> loss        keeps x, h1, h2, ... only
    backward:  recompute block N's forward from h(N-1), then its backward; then block N-1 ...

Dropout and stochastic depth draw the same masks in the recomputation as in the forward pass
(``torch.utils.checkpoint`` restores the random state), so the gradients are those of the plain model.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


def checkpoint_blocks(model: nn.Module) -> int:
    """Make every transformer block of ``model`` recompute its activations in the backward pass.

    The blocks are :class:`~aiayn.layers.EncoderBlock`, :class:`~aiayn.layers.DecoderBlock` (every model
    built on them: Transformer, BART, GPT, BERT, ViT, DETR) and those a family's record names as its own
    (``Family.blocks``: Swin's :class:`~aiayn.models.swin.SwinBlock`).
    Each one's forward goes through ``torch.utils.checkpoint`` (non-reentrant) while it trains with
    gradients enabled; in eval mode, under ``torch.no_grad``, when it is given a key/value cache and while
    :func:`~aiayn.layers.record_attention` records, it runs as before. The module tree, the state dict's
    keys and every output stay as they are; calling it again changes nothing.

    Args:
        model: any module; its blocks are found wherever they are nested.

    Returns:
        How many blocks of ``model`` now recompute their activations (0: it has none of these blocks).
    """
    from aiayn.layers.blocks import DecoderBlock, EncoderBlock  # lazily: aiayn.training need not load every model
    from aiayn.models import FAMILIES

    blocks = (EncoderBlock, DecoderBlock, *(block for family in FAMILIES.values() for block in family.blocks))
    n = 0
    for module in model.modules():
        if isinstance(module, blocks):
            if not is_checkpointed(module):
                params = list(inspect.signature(type(module).forward).parameters)[1:]  # without self
                at = params.index("cache") if "cache" in params else None
                # an instance attribute, not a wrapping module: the parameters keep their names. A partial
                # of a module-level function, so that deepcopy and pickle carry it to the copy.
                vars(module)["forward"] = functools.partial(_forward, module, at)
            n += 1
    return n


def is_checkpointed(module: nn.Module) -> bool:
    """Whether :func:`checkpoint_blocks` made ``module`` recompute its activations."""
    forward = vars(module).get("forward")
    return isinstance(forward, functools.partial) and forward.func is _forward


def _forward(block: nn.Module, cache_at: int | None, *args: Any, **kwargs: Any) -> Any:
    """``block``'s own forward, through ``checkpoint`` when that saves memory and is safe.

    ``cache_at``: the position of the forward's ``cache`` argument (not counting ``self``), or ``None``.
    """
    from aiayn.layers import attention

    plain = functools.partial(type(block).forward, block)
    cache = kwargs.get("cache", args[cache_at] if cache_at is not None and len(args) > cache_at else None)
    # A cache is written in place, and a recording appends once per call: recomputing would do either twice.
    if not (block.training and torch.is_grad_enabled()) or cache is not None or attention._recorders:
        return plain(*args, **kwargs)
    return checkpoint(plain, *args, use_reentrant=False, **kwargs)


__all__ = ["checkpoint_blocks", "is_checkpointed"]
