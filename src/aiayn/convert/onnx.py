"""ONNX graphs of the encoder-decoder Transformer (BART and Marian convert into it), GPT and ViT, and greedy
decoding of them through onnxruntime.

    Transformer  encoder.onnx  src_ids (B, S)                            -> memory (B, S, C),
                                                                            cross_key.i, cross_value.i (B, H, S, D)
                 decoder.onnx  tgt_ids (B, T), src_mask (B, S),          -> logits (B, T, V),
                               past_key.i, past_value.i (B, H, P, D),       present_key.i, present_value.i
                               cross_key.i, cross_value.i (B, H, S, D)      (B, H, P + T, D)
    GPT          model.onnx    input_ids (B, T), attention_mask (B, P + T), -> logits (B, T, V),
                               past_key.i, past_value.i (B, H, P, D)        present_key.i, present_value.i
    ViT          model.onnx    pixel_values (B, Cin, H, W)               -> logits (B, K)
    every one    onnx.json     each graph's inputs and outputs (dtype, shape), the config, the exporter

for every decoder layer i. The encoder projects each decoder layer's cross-attention keys and values once, as
our cache does (:class:`~aiayn.layers.LayerCache`), so a decoder step never sees the memory itself. The
self-attention cache goes in and comes out as plain tensors, one step's ``present`` being the next step's
``past``:

    past_key.i (B, H, P, D) --append the T new keys--> present_key.i (B, H, P + T, D) --> past_key.i of the next step

A first step passes a past of length 0; one graph does the prompt (or the start token) and every later step.
``src_mask`` is ``src_ids != pad_id`` (True = a real token) and GPT's ``attention_mask`` marks real tokens over
every position so far, prompts padded on the left, as the models' own arguments do. B, S, T and P may be any size
in a graph, but positions are those of the model: a decoder graph holds ``max_len`` of them (our sinusoidal table
grows past it; a graph cannot), and ViT's H and W are the config's ``image_size``.

The graphs come from ``torch.onnx.export(dynamo=True)`` (``torch.export``, then onnxscript's translation) of
small wrappers that call the model's own modules with a cache that concatenates (:class:`Past`). The model is
traced as a copy on the meta device, shapes without data: on the CPU our layers read a few values back to the
host (the range of the ids, whether an attention row has nothing to attend to), which a graph cannot; on any
other device they take the path an accelerator takes, which never reads back (empty rows are always fixed up).
The real weights are then written into the graph. :data:`aiayn.layers.fast.ENABLED` is off while tracing, as its
paths choose by sizes that the graph leaves open.

Shapes: B batch, S source length, T new positions, P positions already cached, C d_model, H heads, D head dim,
V vocabulary, K classes.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn

from aiayn import __version__
from aiayn.layers import fast
from aiayn.layers.int8 import is_quantized
from aiayn.models import FAMILIES, config_to_dict, family_of

if TYPE_CHECKING:
    pass

FORMAT = "aiayn-onnx/1"
SPEC = "onnx.json"
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


def _require_export() -> None:
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


def to_onnx(model: nn.Module, folder: str | os.PathLike, opset: int | None = None) -> Path:
    """Write ``model``'s ONNX graphs and ``onnx.json``, which describes them, into ``folder``.

    Args:
        model: a model of a family with an ONNX export (its ``onnx.py``): the
            :class:`~aiayn.models.transformer.Transformer` (BART and Marian included), a
            :class:`~aiayn.models.gpt.GPT` language model or a :class:`~aiayn.models.vit.ViT`, at float32 (not
            :func:`~aiayn.layers.int8.quantize`'d); it is left as it was.
        folder: made if needed; ``encoder.onnx`` and ``decoder.onnx`` (Transformer) or ``model.onnx`` (GPT, ViT)
            and ``onnx.json`` are written into it.
        opset: the ONNX opset; ``None`` takes the exporter's default.

    Returns:
        ``folder``, as a :class:`~pathlib.Path`. :class:`OnnxSeq2Seq` and :class:`OnnxGPT` decode from it.

    Raises:
        ValueError: a family without an ONNX export, or a quantized model.
        ImportError: onnx or onnxscript is not installed (the message says how to install them).
    """
    cfg = getattr(model, "cfg", None)
    try:
        family = family_of(cfg)
    except TypeError:  # not one of our models
        family = None
    if family is None or family.onnx is None:
        having = ", ".join(f.model.__name__ for f in FAMILIES.values() if f.onnx is not None)
        raise ValueError(f"ONNX export takes a {having} (the families with an ONNX export); got a "
                         f"{type(model).__name__}")
    if is_quantized(model):
        raise ValueError("ONNX export takes the float32 model, not a quantized one (aiayn.layers.int8.quantize)")
    _require_export()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    exporter = family.module("onnx")
    graphs = exporter.export(model, folder, opset)
    spec = {"format": FORMAT, "family": family.name, "config": config_to_dict(cfg), "graphs": graphs,
            "exporter": f"torch.onnx.export(dynamo=True), torch {torch.__version__}", "aiayn": __version__,
            **getattr(exporter, "SPEC", {})}
    (folder / SPEC).write_text(json.dumps(spec, indent=2) + "\n")
    return folder


# --- onnxruntime ------------------------------------------------------------------------------------------------

def session(path: str | os.PathLike, threads: int | None = None) -> Any:
    """An ``onnxruntime.InferenceSession`` of the graph at ``path`` on the CPU, with ``threads`` threads inside an
    operation (default: torch's, so both run alike) and one across operations."""
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise ImportError(f"running ONNX graphs needs onnxruntime, an optional dependency: {INSTALL}") from e
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or torch.get_num_threads()
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def read_spec(folder: str | os.PathLike, family: str) -> dict[str, Any]:
    """``folder/onnx.json``, refused unless it describes a ``family`` model."""
    path = Path(folder) / SPEC
    if not path.is_file():
        raise FileNotFoundError(f"{folder} holds no {SPEC}; write one with aiayn.convert.onnx.to_onnx")
    spec = json.loads(path.read_text())
    if spec.get("format") != FORMAT or spec.get("family") != family:
        raise ValueError(f"{path} describes a {spec.get('family')!r} model ({spec.get('format')}); expected "
                         f"{family!r} ({FORMAT})")
    return spec


def _ids(x: Tensor | np.ndarray, vocab_size: int, name: str) -> np.ndarray:
    """``x`` as ``(B, T)`` int64 ids within ``[0, vocab_size)``, or a ``ValueError`` naming ``name``."""
    ids = x.cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)
    if ids.ndim != 2 or ids.size == 0 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"{name} must be non-empty (batch, length) integer ids, got {ids.dtype} {ids.shape}")
    if ids.min() < 0 or ids.max() >= vocab_size:
        bad = ids.min() if ids.min() < 0 else ids.max()
        raise ValueError(f"{name} holds token id {bad}, outside the vocabulary [0, {vocab_size})")
    return ids.astype(np.int64, copy=False)


class OnnxSeq2Seq:
    """An exported encoder-decoder run by onnxruntime: ``OnnxSeq2Seq(folder).greedy(src)``.

    Args:
        folder: what :func:`to_onnx` wrote for a Transformer.
        threads: onnxruntime's threads inside an operation; default torch's.
    """

    def __init__(self, folder: str | os.PathLike, threads: int | None = None) -> None:
        self.spec = read_spec(folder, "transformer")
        self.cfg = self.spec["config"]
        graphs = self.spec["graphs"]
        self.encoder = session(Path(folder) / graphs["encoder"]["file"], threads)
        self.decoder = session(Path(folder) / graphs["decoder"]["file"], threads)
        n = self.cfg["n_decoder_layers"]
        self.past, self.cross = cache_names("past", n), cache_names("cross", n)
        self.head = (self.cfg["n_heads"], self.cfg["d_model"] // self.cfg["n_heads"])

    def encode(self, src: np.ndarray) -> list[np.ndarray]:
        """``(B, S)`` ids -> every decoder layer's cross-attention keys and values ``(B, H, S, D)``, in the order
        of the decoder's ``cross_*`` inputs."""
        return self.encoder.run(self.cross, {"src_ids": src})

    def step(self, tgt: np.ndarray, src_mask: np.ndarray, past: list[np.ndarray],
             cross: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        """``(B, T)`` target ids at positions ``P ..`` -> logits ``(B, T, V)`` and the cache with them appended."""
        feed = {"tgt_ids": tgt, "src_mask": src_mask, **dict(zip(self.past, past)), **dict(zip(self.cross, cross))}
        logits, *present = self.decoder.run(None, feed)
        return logits, present

    def greedy(self, src: Tensor | np.ndarray, max_len: int | None = None) -> Tensor:
        """Decode ``(B, S)`` source ids greedily, as :func:`aiayn.decoding.greedy` does: ``pad_id`` is never chosen,
        and a row that has produced ``</s>`` leaves the batch.

        Returns:
            ``(B, L)`` ids after ``<s>``, each row ending at its ``</s>`` and padded with ``pad_id`` after it.
        """
        src_ids = _ids(src, self.cfg["src_vocab_size"], "src")
        pad, bos, eos = self.cfg["pad_id"], self.cfg["bos_id"], self.cfg["eos_id"]
        b = src_ids.shape[0]
        if max_len is None:  # S + 50 (section 6.1), no more than the graphs hold
            max_len = min(src_ids.shape[1] + 50, self.cfg["max_len"])
        longest = max(src_ids.shape[1], max_len)
        if longest > self.cfg["max_len"]:
            raise ValueError(f"{longest} positions exceed the {self.cfg['max_len']} the graphs hold (max_len)")
        cross = self.encode(src_ids)
        mask = src_ids != pad  # (A, S)
        past = [np.zeros((b, self.head[0], 0, self.head[1]), np.float32)] * len(self.past)  # (B, H, 0, D)
        out = np.full((b, max_len), pad, np.int64)
        alive = np.arange(b)  # (A,) the rows still decoding
        tgt = np.full((b, 1), bos, np.int64)
        steps = 0
        for steps in range(1, max_len + 1):
            logits, past = self.step(tgt, mask, past, cross)
            scores = logits[:, -1]  # (A, V)
            scores[:, pad] = -np.inf  # padding is never an output
            nxt = scores.argmax(-1)  # (A,)
            out[alive, steps - 1] = nxt
            ended = nxt == eos
            if ended.any():
                keep = np.flatnonzero(~ended)  # (A',)
                if keep.size == 0:
                    break
                alive, nxt, mask = alive[keep], nxt[keep], mask[keep]
                past, cross = [t[keep] for t in past], [t[keep] for t in cross]
            tgt = nxt[:, None]
        return torch.tensor(out[:, :steps])


class OnnxGPT:
    """An exported GPT run by onnxruntime: ``OnnxGPT(folder).generate(prompt, max_new_tokens=20)``.

    Args:
        folder: what :func:`to_onnx` wrote for a GPT.
        threads: onnxruntime's threads inside an operation; default torch's.
    """

    def __init__(self, folder: str | os.PathLike, threads: int | None = None) -> None:
        self.spec = read_spec(folder, "gpt")
        self.cfg = self.spec["config"]
        self.model = session(Path(folder) / self.spec["graphs"]["model"]["file"], threads)
        self.past = cache_names("past", self.cfg["n_layers"])
        kv = self.cfg.get("n_kv_heads") or self.cfg["n_heads"]  # grouped-query attention caches fewer heads
        self.head = (kv, self.cfg["d_model"] // self.cfg["n_heads"])

    def step(self, ids: np.ndarray, attention_mask: np.ndarray,
             past: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        """``(B, T)`` new ids, the ``(B, P + T)`` mask of every position so far -> logits ``(B, T, V)`` and the
        cache with them appended."""
        logits, *present = self.model.run(None, {"input_ids": ids, "attention_mask": attention_mask,
                                                 **dict(zip(self.past, past))})
        return logits, present

    def generate(self, prompt: Tensor | np.ndarray, attention_mask: Tensor | np.ndarray | None = None,
                 max_new_tokens: int = 20, eos_id: int | None = None) -> Tensor:
        """Greedy generation, as :func:`aiayn.decoding.sample` with ``temperature=0`` does it.

        Args:
            prompt: ``(B, T)`` ids, padded on the left where rows differ in length.
            attention_mask: ``(B, T)``, 1 (True) for real tokens; default all.
            max_new_tokens: N.
            eos_id: stop a row when it produces this token; finished rows are filled with it, and generation
                stops when every row has finished. ``None``: every row takes every step.

        Returns:
            ``(B, T + n)``: the prompt, then ``n <= N`` new tokens.
        """
        ids = _ids(prompt, self.cfg["vocab_size"], "prompt")
        b, t = ids.shape
        real = np.ones((b, t), bool) if attention_mask is None else (
            attention_mask.cpu().numpy() if isinstance(attention_mask, Tensor) else np.asarray(attention_mask)
        ).astype(bool)
        if real.shape != ids.shape:
            raise ValueError(f"attention_mask must be shaped as the prompt {ids.shape}, got {real.shape}")
        if (real[:, 1:] < real[:, :-1]).any():
            raise ValueError("attention_mask: prompts must be padded on the left (zeros before the ones)")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if t + max_new_tokens > self.cfg["max_len"]:
            raise ValueError(f"{t + max_new_tokens} positions exceed the model's {self.cfg['max_len']} learned "
                             f"positions (max_len)")
        past = [np.zeros((b, self.head[0], 0, self.head[1]), np.float32)] * len(self.past)
        done = np.zeros(b, bool)
        new: list[np.ndarray] = []
        step_ids, one = ids, np.ones((b, 1), bool)
        for _ in range(max_new_tokens):
            logits, past = self.step(step_ids, real, past)
            nxt = logits[:, -1].argmax(-1)  # (B,)
            if eos_id is not None:
                nxt[done] = eos_id
                done |= nxt == eos_id
            new.append(nxt)
            if done.all():
                break
            step_ids, real = nxt[:, None], np.concatenate([real, one], axis=1)
        return torch.tensor(np.concatenate([ids, np.stack(new, axis=1)], axis=1))


__all__ = ["EXAMPLE", "FORMAT", "LayerPast", "OnnxGPT", "OnnxSeq2Seq", "Past", "cache_names", "export_graph",
           "read_spec", "session", "to_onnx"]
