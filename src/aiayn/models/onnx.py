"""What a family's ``onnx.py`` needs to export its graphs (:mod:`aiayn.convert.onnx` drives the export and runs
the graphs): the cache as plain tensors inside a traced graph, the names of its inputs and outputs, and the tracing
itself (on the meta device, the real weights written in after).

Shapes: B batch, H heads, P past positions, T new positions, S source positions, D head dim.
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from aiayn.layers import fast

INSTALL = 'pip install "aiayn[export]"'
# example sizes to trace with: torch.export fixes sizes 0 and 1, and gives equal sizes one symbol
EXAMPLE = {"batch": 2, "new": 3, "past": 5, "src_len": 7}


# --- the cache as plain tensors ---------------------------------------------------------------------------------

class LayerPast:
    """One decoder layer's cache inside a graph, answering what :class:`~aiayn.layers.LayerCache` answers: the
    past keys/values with the new ones appended (concatenated, not written into a buffer), and the
    cross-attention keys/values given."""

    def __init__(self, k: Tensor, v: Tensor, cross: tuple[Tensor, Tensor] | None = None) -> None:
        self.k, self.v, self.cross = k, v, cross  # (B, H, P, D) each; cross (B, H, S, D) each

    @property
    def self_attn(self) -> LayerPast:
        return self

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """``(B, H, T, D)`` new keys/values -> everything so far, ``(B, H, P + T, D)``."""
        self.k, self.v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
        return self.k, self.v

    def cross_kv(self, attn: nn.Module, memory: Tensor | None) -> tuple[Tensor, Tensor]:
        assert self.cross is not None  # the seq2seq decoder passes them
        return self.cross


class Past(list):
    """The layers' :class:`LayerPast`, standing in for :class:`~aiayn.layers.DecoderCache`."""

    def __init__(self, past: list[tuple[Tensor, Tensor]], cross: list[tuple[Tensor, Tensor]] | None = None) -> None:
        super().__init__(LayerPast(k, v, None if cross is None else cross[i]) for i, (k, v) in enumerate(past))

    @property
    def length(self) -> Any:  # P, a symbolic size while tracing
        return self[0].k.size(2)

    def first_visible(self, t: int) -> int:  # the graph's past is every position so far: nothing rolls
        return 0

    def present(self) -> list[tuple[Tensor, Tensor]]:
        return [(layer.k, layer.v) for layer in self]


# --- export -----------------------------------------------------------------------------------------------------

def cache_names(kind: str, layers: int) -> list[str]:
    """``[kind_key.0, kind_value.0, kind_key.1, ...]``, in the order the graphs take and give them."""
    return [f"{kind}_{part}.{i}" for i in range(layers) for part in ("key", "value")]


def _on_meta(model: nn.Module) -> nn.Module:
    """A copy of ``model`` in eval mode whose parameters and buffers are shapes on the meta device: no weight is
    copied, and shared (tied) ones stay shared."""
    memo: dict[int, Any] = {}
    for t in (*model.parameters(), *model.buffers()):
        meta = torch.empty_like(t, device="meta")
        memo[id(t)] = nn.Parameter(meta, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else meta
    return copy.deepcopy(model, memo).eval()


@contextlib.contextmanager
def _plain_paths() -> Iterator[None]:
    """:data:`aiayn.layers.fast.ENABLED` off for the duration: the fast paths branch on sizes."""
    before = fast.ENABLED
    fast.ENABLED = False
    try:
        yield
    finally:
        fast.ENABLED = before


def require_export() -> None:
    for name in ("onnx", "onnxscript"):
        try:
            __import__(name)
        except ImportError as e:
            raise ImportError(f"ONNX export needs {name}, an optional dependency: {INSTALL}") from e


def export_graph(wrapper: type[nn.Module], model: nn.Module, args: tuple, names: tuple[list[str], list[str]],
            shapes: dict[str, list[int | str]], path: Path, opset: int | None) -> dict[str, Any]:
    """Trace ``wrapper(model)`` on the meta device, write the real weights in and save the graph to ``path``.

    Args:
        args: example inputs on the meta device, as the wrapper takes them (lists of pairs for caches).
        names: the graph's input and output names, in the wrapper's order (pairs flattened).
        shapes: each input's and output's shape, sizes named where they vary.

    Returns:
        The graph's description: its file, inputs and outputs (dtype and shape), opset.
    """
    import onnx_ir as ir  # onnxscript's

    inputs, outputs = names

    def dims(name: str) -> dict[int, str]:
        return {i: s for i, s in enumerate(shapes[name]) if isinstance(s, str)}

    by_name = iter(inputs)
    dynamic = tuple([tuple(dims(next(by_name)) for _ in pair) for pair in arg] if isinstance(arg, list)
                    else dims(next(by_name)) for arg in args)
    traced = wrapper(_on_meta(model)).eval()
    with _plain_paths(), torch.no_grad(), warnings.catch_warnings():
        # the exporter's own notes: a size named on several inputs ("batch") is named once; a deprecation inside
        # torch.export's tree handling
        warnings.filterwarnings("ignore", message="# The axis name")
        warnings.filterwarnings("ignore", message=".*LeafSpec.*", category=FutureWarning)
        program = torch.onnx.export(traced, args, dynamo=True, dynamic_shapes=dynamic, input_names=inputs,
                                    output_names=outputs, opset_version=opset, optimize=False, verbose=False)
    assert program is not None  # dynamo=True always gives the program
    weights = {f"model.{name}": t.detach().cpu() for name, t in (*model.named_parameters(remove_duplicate=False),
                                                             *model.named_buffers(remove_duplicate=False))}
    needed = set(program.model.graph.initializers)
    missing = sorted(needed - set(weights))
    if missing:
        raise RuntimeError(f"the traced graph holds tensors that are not the model's weights: {missing}")
    program.apply_weights({name: weights[name] for name in needed})
    program.optimize()  # constant folding and the like, now that the weights are real
    graph = program.model.graph
    for value in (*graph.inputs, *graph.outputs):  # one name per size ("new + past", not also "past + new")
        value.shape = ir.Shape(shapes[str(value.name)])
    program.save(path)
    dtypes = {t.name: str(t.dtype.numpy()) for t in (*graph.inputs, *graph.outputs) if t.dtype is not None}
    described = {name: {"dtype": dtypes[name], "shape": shapes[name]} for name in inputs + outputs}
    return {"file": path.name, "inputs": {n: described[n] for n in inputs},
            "outputs": {n: described[n] for n in outputs}, "opset": program.model.opset_imports.get("", None)}


__all__ = ["EXAMPLE", "INSTALL", "LayerPast", "Past", "cache_names", "export_graph", "require_export"]
