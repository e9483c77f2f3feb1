"""The old home of :mod:`aiayn.models.checkpoint` (reading and writing saved models), kept as an alias so that
``from aiayn.training.checkpoint import load, save`` still works. A saved model is read below training now: the
pipelines, the conversions and ``from_pretrained`` load one without importing training."""

from aiayn.models.checkpoint import (
    COVERS,
    WEIGHTS,
    covered_config,
    from_tensors,
    load,
    save,
    saved_config,
    tied_names,
    unique_tensors,
    weights_path,
)

__all__ = ["COVERS", "WEIGHTS", "covered_config", "from_tensors", "load", "save", "saved_config", "tied_names",
           "unique_tensors", "weights_path"]
