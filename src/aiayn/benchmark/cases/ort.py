"""The onnxruntime cases: another case's greedy work against the same model exported to ONNX
(:mod:`aiayn.convert.onnx`) and decoded greedily through onnxruntime (:mod:`aiayn.benchmark.peers.ort`).

    decode-greedy-ort    decode-greedy's work    ours in ONNX (OnnxSeq2Seq), onnxruntime
    gpt2-generate-ort    gpt2-generate's work    ours in ONNX (OnnxGPT), onnxruntime
    decode-greedy-ort-compiled, gpt2-generate-ort-compiled
                         the same, ours compiled (:mod:`aiayn.layers.session`), against ours eager too

onnxruntime is optional, as CTranslate2 is (``pip install "aiayn[bench]"``): without it, or off the CPU, a case
raises :class:`~aiayn.benchmark.harness.Unavailable` and ``aiayn bench`` skips it, saying why.

Shapes: B batch, N new tokens.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import Tensor

from aiayn.benchmark.cases.common import describe, millions, same, threads
from aiayn.benchmark.cases.decoding import translation
from aiayn.benchmark.cases.generation import generation
from aiayn.benchmark.harness import Case, Side, Target, Unavailable, count_flops
from aiayn.decoding import greedy, sample


def _ort(device: torch.device) -> Any:
    """:mod:`aiayn.benchmark.peers.ort`, once onnxruntime and the exporter are known to be installed and the device
    is the CPU."""
    from aiayn.benchmark.peers import ort

    ort.require()
    if device.type != "cpu":
        raise Unavailable(f"runs on the CPU only (onnxruntime's CPU execution provider), not {device}")
    return ort


def _opset(peer: Any) -> int:
    return next(iter(peer.spec["graphs"].values()))["opset"]


def _ort_words(ort: Any, peer: Any) -> str:
    """How the onnxruntime side runs, for a case's ``what``."""
    return (f"exported to ONNX (aiayn.convert.onnx: torch.onnx.export(dynamo=True), opset {_opset(peer)}) and "
            f"decoded greedily through onnxruntime {ort.version()} (CPU execution provider, {threads()}; a Python "
            f"loop around one session run per step, the cache going in and out of each run as past/present tensors)")


def _sides(name: str, ours: Callable[[bool], Tensor], peer: Side, compile: bool, extra: dict[str, Any]
           ) -> tuple[str, list[Side], float | None]:
    """A case's name, sides and FLOPs: ours then ``peer``; compiled, ours compiled (its first call, the compile,
    timed into ``extra``), then ours eager, then ``peer``, the FLOPs counted on the eager side (dynamo skips a
    compiled frame run under the FLOP counter for good)."""
    if not compile:
        return name, [Side("aiayn", lambda: ours(False)), peer], None
    start = time.perf_counter()
    ours(True)
    extra["first_call_s"] = round(time.perf_counter() - start, 1)
    sides = [Side("aiayn", lambda: ours(True)), Side("aiayn eager", lambda: ours(False)), peer]
    return f"{name}-compiled", sides, count_flops(lambda: ours(False))


def decode_greedy_ort(quick: bool, device: torch.device, compile: bool = False) -> Case:
    """:func:`translation_decoding`'s greedy work against the same model exported to ONNX and decoded greedily
    through onnxruntime (:class:`~aiayn.convert.onnx.OnnxSeq2Seq`): the same steps, ``pad_id`` never chosen, rows
    leaving the batch at ``</s>`` (which the case's logits bias keeps from ever coming)."""
    ort = _ort(device)
    tr = translation(quick, device)
    cfg, src, new = tr.cfg, tr.src, tr.new
    peer = ort.seq2seq(tr.ours)

    def run_ours(compiled: bool) -> Tensor:
        return greedy(tr.ours, src, max_len=new, compile=compiled)

    def run_ort() -> Tensor:
        return peer.greedy(src, max_len=new)

    got, expected = run_ort(), run_ours(False)
    check = same(f"generated ids, {new} tokens per sentence on both sides", got, expected)
    check["ok"] = check["ok"] and got.shape == (src.size(0), new)
    extra = {"config": dataclasses.asdict(tr.ours.cfg), "batch": src.size(0), "source_length": src.size(1),
             "new_tokens": new, "onnxruntime": ort.version(), "opset": _opset(peer),
             "exporter": peer.spec["exporter"]}
    name, sides, flops = _sides("decode-greedy-ort", run_ours, Side("onnxruntime", run_ort, torch_memory=False),
                                compile, extra)
    checks = {"onnxruntime": check}
    if compile:
        checks["aiayn eager"] = same(f"generated ids, {new} tokens per sentence", run_ours(True), expected)
    how = "over a static cache, the step compiled" if compile else "with our KV cache"
    what = (f"translation, greedy decoding {how}, float32, against {'our eager decoding and ' if compile else ''}"
            f"the same weights ({describe(cfg)}) {_ort_words(ort, peer)}, batch {src.size(0)} sources of "
            f"{src.size(1)} tokens, {new} tokens generated per sentence (end of sentence blocked on both sides)")
    return Case(name, what, sides, units=src.size(0) * new, unit="tokens", checks=checks, target=Target(1.0),
                flops=flops, extra=extra)


def gpt2_generate_ort(quick: bool, device: torch.device, compile: bool = False) -> Case:
    """:func:`gpt2_generate`'s work against the same model exported to ONNX and generating greedily through
    onnxruntime (:class:`~aiayn.convert.onnx.OnnxGPT`): one graph runs the prompt (on an empty past) and every
    step after it. No side has an end token, so both take every step."""
    ort = _ort(device)
    g = generation(quick, device)
    ours, prompt, new = g.ours, g.prompt, g.new
    t = prompt.size(1)
    peer = ort.gpt(ours)

    def run_ours(compiled: bool) -> Tensor:
        return cast(Tensor, sample(ours, prompt, new, temperature=0, compile=compiled))[:, t:]  # (1, N)

    def run_ort() -> Tensor:
        return peer.generate(prompt, max_new_tokens=new)[:, t:]  # (1, N)

    got, expected = run_ort(), run_ours(False)
    check = same(f"generated ids, {new} tokens on both sides", got, expected)
    check["ok"] = check["ok"] and got.shape == (1, new)
    extra = {"prompt_tokens": t, "new_tokens": new, "onnxruntime": ort.version(), "opset": _opset(peer),
             "exporter": peer.spec["exporter"]}
    name, sides, flops = _sides("gpt2-generate-ort", run_ours, Side("onnxruntime", run_ort, torch_memory=False),
                                compile, extra)
    checks = {"onnxruntime": check}
    if compile:
        checks["aiayn eager"] = same(f"generated ids, {new} tokens", run_ours(True), expected)
    how = "over a static cache, the step compiled" if compile else "with the KV cache"
    what = (f"gpt2 ({millions(ours)} parameters, random weights) greedy generation {how}, batch 1, {t}-token "
            f"prompt, {new} new tokens, float32, against {'our eager decoding and ' if compile else ''}the same "
            f"weights {_ort_words(ort, peer)}; no side has an end token")
    return Case(name, what, sides, units=new, unit="tokens", checks=checks, target=Target(1.0), flops=flops,
                extra=extra)


def decode_greedy_ort_compiled(quick: bool, device: torch.device) -> Case:
    return decode_greedy_ort(quick, device, compile=True)


def gpt2_generate_ort_compiled(quick: bool, device: torch.device) -> Case:
    return gpt2_generate_ort(quick, device, compile=True)


__all__ = ["decode_greedy_ort", "decode_greedy_ort_compiled", "gpt2_generate_ort", "gpt2_generate_ort_compiled"]
