"""ONNX graphs of the encoder-decoder Transformer (BART and Marian convert into it), GPT and ViT, and greedy
decoding of them through onnxruntime.

    Transformer  encoder_model.onnx, decoder_model.onnx (the first step: the memory in, every layer's
                 cross-attention keys and values out), decoder_with_past_model.onnx (every later step), in
                 Optimum's names (:mod:`aiayn.models.transformer.onnx`), config.json beside them, so that
                 optimum.onnxruntime.ORTModelForSeq2SeqLM.from_pretrained(folder) runs them
    GPT          model.onnx    input_ids (B, T), attention_mask (B, P + T), -> logits (B, T, V),
                 (Optimum's    position_ids (B, T), all int64;              present.i.key, present.i.value
                 shape)        past_key_values.i.key, .value (B, H, P, D)   (B, H, P + T, D)
                 config.json   the Hugging Face config (GPT2LMHeadModel's, LlamaForCausalLM's), so that
                               optimum.onnxruntime.ORTModelForCausalLM.from_pretrained(folder) runs the graph
    ViT          model.onnx    pixel_values (B, Cin, H, W)               -> logits (B, K)
    every one    onnx.json     each graph's inputs and outputs (dtype, shape), the config, the exporter

for every decoder layer i. The encoder-decoder's first step projects each decoder layer's cross-attention keys and
values once, as our cache does (:class:`~aiayn.layers.LayerCache`), so a later step never sees the memory itself.
The self-attention cache goes in and comes out as plain tensors, one step's ``present`` being the next step's
``past``:

    past_key_values.i.key (B, H, P, D) --append the T new keys--> present.i.key (B, H, P + T, D) --> the next past

A GPT's first step passes a past of length 0; one graph does the prompt and every later step. Masks are int64, 1 on
a real token (a source's: ``input_ids != pad_id``; GPT's ``attention_mask`` over every position so far, prompts
padded on the left), as Optimum passes them. B, S, T and P may be any size
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

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from aiayn.decoding.loops import generated, greedy_choice, tokens
from aiayn.layers.int8 import is_quantized
from aiayn.layers.session import Session
from aiayn.models import FAMILIES, config_to_dict, family_of
from aiayn.models.gpt.onnx import cache_names as gpt_cache_names
from aiayn.models.onnx import EXAMPLE, INSTALL, LayerPast, Past, cache_names, export_graph, require_export
from aiayn.models.transformer.onnx import cache_names as seq2seq_cache_names
from aiayn.version import __version__

FORMAT = "aiayn-onnx/1"
SPEC = "onnx.json"
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
    require_export()
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
        folder: what :func:`to_onnx` wrote for a Transformer (Optimum's three graphs,
            :mod:`aiayn.models.transformer.onnx`).
        threads: onnxruntime's threads inside an operation; default torch's.
    """

    def __init__(self, folder: str | os.PathLike, threads: int | None = None) -> None:
        self.spec = read_spec(folder, "transformer")
        self.cfg = self.spec["config"]
        graphs = self.spec["graphs"]
        self.encoder, self.decoder, self.decoder_with_past = (
            session(Path(folder) / graphs[k]["file"], threads) for k in ("encoder", "decoder", "decoder_with_past"))
        self.past = seq2seq_cache_names("past", self.cfg["n_decoder_layers"])

    def encode(self, src: np.ndarray) -> np.ndarray:
        """``(B, S)`` ids -> the memory ``(B, S, C)``."""
        mask = (src != self.cfg["pad_id"]).astype(np.int64)
        return self.encoder.run(None, {"input_ids": src, "attention_mask": mask})[0]

    def first(self, tgt: np.ndarray, src_mask: np.ndarray, memory: np.ndarray
              ) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray]]:
        """The first step: ``(B, T)`` target ids -> logits ``(B, T, V)``, the decoder's keys and values ``(B, H, T, D)``
        and every layer's cross-attention keys and values ``(B, H, S, D)``, each layer's key then value."""
        feed = {"input_ids": tgt, "encoder_attention_mask": src_mask.astype(np.int64), "encoder_hidden_states": memory}
        logits, *present = self.decoder.run(None, feed)
        own = [t for i, t in enumerate(present) if i % 4 < 2]  # per layer: decoder key, value; encoder key, value
        cross = [t for i, t in enumerate(present) if i % 4 >= 2]
        return logits, own, cross

    def step(self, tgt: np.ndarray, src_mask: np.ndarray, past: list[np.ndarray],
             cross: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        """A later step: ``(B, T)`` target ids at positions ``P ..`` -> logits ``(B, T, V)`` and the decoder's
        keys and values with them appended."""
        quads = [t for i in range(0, len(past), 2) for t in (past[i], past[i + 1], cross[i], cross[i + 1])]
        feed = {"input_ids": tgt, "encoder_attention_mask": src_mask.astype(np.int64), **dict(zip(self.past, quads))}
        logits, *present = self.decoder_with_past.run(None, feed)
        return logits, present

    def session(self) -> OnnxSeq2SeqSession:
        """A decode session over these graphs (:mod:`aiayn.layers.session`): what the decoding loops call."""
        return OnnxSeq2SeqSession(self)

    def greedy(self, src: Tensor | np.ndarray, max_len: int | None = None) -> Tensor:
        """Decode ``(B, S)`` source ids greedily, as :func:`aiayn.decoding.greedy` does (the same loop, over
        :meth:`session`): ``pad_id`` is never chosen, and a row that has produced ``</s>`` leaves the batch.

        Returns:
            ``(B, L)`` ids after ``<s>``, each row ending at its ``</s>`` and padded with ``pad_id`` after it.
        """
        src_ids = _ids(src, self.cfg["src_vocab_size"], "src")
        if max_len is None:  # S + 50 (section 6.1), no more than the graphs hold
            max_len = min(src_ids.shape[1] + 50, self.cfg["max_len"])
        longest = max(src_ids.shape[1], max_len)
        if longest > self.cfg["max_len"]:
            raise ValueError(f"{longest} positions exceed the {self.cfg['max_len']} the graphs hold (max_len)")
        eos = (self.cfg["eos_id"],)
        steps = tokens(self.session(), torch.from_numpy(src_ids), None, max_len, greedy_choice, eos=eos,
                       pad=self.cfg["pad_id"])
        return generated(steps, eos)


class OnnxSeq2SeqSession(Session):
    """An exported encoder-decoder's decode session: the prefill runs the encoder graph and the first step's (the
    start token, every layer's cross-attention keys and values); each step runs the graph with the past."""

    def __init__(self, runner: OnnxSeq2Seq) -> None:
        self.runner = runner
        self.never = (runner.cfg["pad_id"],)

    def prefill(self, ids: Tensor, mask: Tensor | None = None, *, new_tokens: int, repeat: int = 1) -> Tensor:
        src = ids.repeat_interleave(repeat, dim=0).numpy().astype(np.int64)  # (B, S)
        b = src.shape[0]
        self.mask = src != self.runner.cfg["pad_id"]  # (B, S)
        self.prefix = torch.full((b, 1), self.runner.cfg["bos_id"], dtype=torch.long)
        self.rows = b
        logits, self.past, self.cross = self.runner.first(self.prefix.numpy(), self.mask, self.runner.encode(src))
        return torch.from_numpy(logits[:, -1])  # (B, V)

    def step(self, tokens: Tensor) -> Tensor:
        logits, self.past = self.runner.step(tokens.numpy()[:, None], self.mask, self.past, self.cross)
        return torch.from_numpy(logits[:, -1])  # (B, V)

    def reorder(self, rows: Tensor) -> None:
        index = rows.numpy()
        self.past = [t[index] for t in self.past]

    def keep(self, rows: Tensor) -> None:
        self.reorder(rows)
        index = rows.numpy()
        self.mask, self.cross, self.rows = self.mask[index], [t[index] for t in self.cross], index.size


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
        self.past = gpt_cache_names("past", self.cfg["n_layers"])
        kv = self.cfg.get("n_kv_heads") or self.cfg["n_heads"]  # grouped-query attention caches fewer heads
        self.head = (kv, self.cfg["d_model"] // self.cfg["n_heads"])

    def step(self, ids: np.ndarray, attention_mask: np.ndarray,
             past: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        """``(B, T)`` new ids, the ``(B, P + T)`` mask of every position so far -> logits ``(B, T, V)`` and the
        cache with them appended. The positions are ``transformers``' (and Optimum's): the mask's running count
        less one, 1 on padding."""
        mask = attention_mask.astype(np.int64)
        positions = np.where(mask == 1, mask.cumsum(-1) - 1, 1)[:, -ids.shape[1]:]
        logits, *present = self.model.run(None, {"input_ids": ids, "attention_mask": mask,
                                                 "position_ids": positions, **dict(zip(self.past, past))})
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
        eos = () if eos_id is None else (eos_id,)
        steps = tokens(self.session(), torch.from_numpy(ids), torch.from_numpy(real), max_new_tokens, greedy_choice,
                       eos=eos, pad=eos[0] if eos else 0)
        return torch.cat([torch.from_numpy(ids), generated(steps, eos)], dim=1)

    def session(self) -> OnnxGPTSession:
        """A decode session over this graph (:mod:`aiayn.layers.session`): what the decoding loops call."""
        return OnnxGPTSession(self)


class OnnxGPTSession(Session):
    """An exported GPT's decode session: each call runs the graph on the new ids, the mask of every position so
    far and the past, which it returns with the new positions appended."""

    def __init__(self, runner: OnnxGPT) -> None:
        self.runner = runner

    def prefill(self, ids: Tensor, mask: Tensor | None = None, *, new_tokens: int, repeat: int = 1) -> Tensor:
        ids = ids.repeat_interleave(repeat, dim=0)
        b, (h, d) = ids.size(0), self.runner.head
        self.real = np.ones(tuple(ids.shape), bool) if mask is None else \
            mask.repeat_interleave(repeat, dim=0).numpy().astype(bool)
        self.past = [np.zeros((b, h, 0, d), np.float32)] * len(self.runner.past)
        self.prefix, self.rows = ids, b
        self.prefix_mask = None if self.real.all() else torch.from_numpy(self.real)
        logits, self.past = self.runner.step(ids.numpy().astype(np.int64), self.real, self.past)
        return torch.from_numpy(logits[:, -1])  # (B, V)

    def step(self, tokens: Tensor) -> Tensor:
        self.real = np.concatenate([self.real, np.ones((self.real.shape[0], 1), bool)], axis=1)
        logits, self.past = self.runner.step(tokens.numpy()[:, None], self.real, self.past)
        return torch.from_numpy(logits[:, -1])

    def reorder(self, rows: Tensor) -> None:
        index = rows.numpy()
        self.past = [t[index] for t in self.past]

    def keep(self, rows: Tensor) -> None:
        self.reorder(rows)
        self.real, self.rows = self.real[rows.numpy()], rows.numel()


__all__ = ["EXAMPLE", "FORMAT", "LayerPast", "OnnxGPT", "OnnxGPTSession", "OnnxSeq2Seq", "OnnxSeq2SeqSession", "Past",
           "cache_names", "export_graph", "read_spec", "session", "to_onnx"]
