"""The old home of :mod:`aiayn.models.keys` (the key tables' building blocks, both ways), kept as an alias so
that ``from aiayn.convert.keys import Source, linear`` still works. The helpers sit in ``models`` now, below the
conversion: a family's ``hf.py`` writes its table with them without importing :mod:`aiayn.convert`."""

from aiayn.models.keys import (
    Source,
    attention,
    copy,
    fused,
    hf_activation,
    label_names,
    linear,
    our_weights,
    refuse,
    split_attention,
    split_qkv,
)

__all__ = ["Source", "attention", "copy", "fused", "hf_activation", "label_names", "linear", "our_weights", "refuse",
           "split_attention", "split_qkv"]
