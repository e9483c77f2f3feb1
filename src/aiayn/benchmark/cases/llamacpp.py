"""The llama.cpp cases: the Llama-shaped 124M generating at batch 1 against llama.cpp on the same weights (the
GGUF its own converter makes from our exported folder: :mod:`aiayn.benchmark.peers.llamacpp`), CPU only.

    llama-124m-generate-llamacpp            ours eager, float32         llama.cpp f32
    llama-124m-generate-llamacpp-int8       ours int8 (fbgemm, eager)   llama.cpp q8_0
    llama-124m-generate-llamacpp-compiled   ours compiled, float32      ours eager, llama.cpp f32
    llama-124m-generate-llamacpp-int8-compiled  ours int8, compiled     ours eager int8, llama.cpp q8_0

At batch 1 a new token reads every weight once, so memory bandwidth bounds each side (``tokens/s <= bandwidth /
bytes read per token``); ``extra`` records each side's bytes per token, the bandwidth measured with a large copy
and the share of that bound each side reaches, beside the ratio. In f32 the ids must equal; in int8 and q8_0 they
are not required to (rounding differs), and each side's agreement with float32 is recorded (as the ``-ct2-int8``
cases do).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor, nn

from aiayn.benchmark.cases.common import millions, threads
from aiayn.benchmark.cases.ct2 import INT8_WORDS, against_ct2
from aiayn.benchmark.cases.generation import LLAMA_124M, llama_generation, weight_bytes_per_token
from aiayn.benchmark.harness import Case, Side, Target, Unavailable, memory_bandwidth
from aiayn.decoding import sample

TARGETS = {"float32": 0.8, "int8": 0.5}  # t_llama.cpp / t_ours, lower quartile: against f32, and ours int8 to q8_0


def llama_llamacpp(name: str, precision: str, quick: bool, device: torch.device, compile: bool = False) -> Case:
    """:func:`~aiayn.benchmark.cases.generation.llama_generation`'s work at batch 1 (16-token prompt, 256 new
    tokens) against ``llama_cpp.Llama`` on the same weights, greedy, no end token on either side."""
    from aiayn.benchmark.peers import llamacpp

    llamacpp.require()
    if device.type != "cpu":
        raise Unavailable(f"runs on the CPU only (llama-cpp-python's CPU build), not {device}")
    g = llama_generation(LLAMA_124M, 1, quick, device)
    prompt, new, t = g.prompt, g.new, g.prompt.size(1)
    outtype = "f32" if precision == "float32" else "q8_0"
    with tempfile.TemporaryDirectory() as folder:  # llama.cpp maps the file: it outlives its name
        generator = llamacpp.Generator(llamacpp.to_gguf(g.ours, Path(folder), outtype), torch.get_num_threads(),
                                       t + new)

    def generate(model: nn.Module, compiled: bool = False) -> Tensor:
        return cast(Tensor, sample(model, prompt, new, temperature=0, compile=compiled))[:, t:]  # (1, N)

    def run_llamacpp() -> Tensor:
        return generator.generate(prompt, new)

    peer = f"llama.cpp {outtype}"
    peers = [Side(peer, run_llamacpp, torch_memory=False)]
    f32 = weight_bytes_per_token(g.ours)
    read = {"aiayn": f32 if precision == "float32" else f32 // 4,  # int8 weights; the per-row scales are few
            peer: f32 if outtype == "f32" else round(f32 / 4 * llamacpp.Q8_0_BYTES_PER_WEIGHT)}
    bandwidth = memory_bandwidth(mib=16 if quick else 512, device=device)
    extra: dict[str, Any] = {"batch": 1, "prompt_tokens": t, "llama_cpp_python": llamacpp.version(),
                             "weight_bytes_per_token": read, "memory_bandwidth_bytes_per_s": bandwidth,
                             "ceiling_tokens_per_s": {k: bandwidth / v for k, v in read.items()}}
    words = "float32" if precision == "float32" else INT8_WORDS.replace("CTranslate2: int8 weights, compute type "
                                                                         "int8", "llama.cpp: q8_0")
    how = "over a static cache, the step compiled" if compile else "with our KV cache"
    what = (f"{'llama-tiny' if quick else 'Llama-shaped 124M'} ({millions(g.ours)} parameters, random weights) "
            f"greedy generation {how}, batch 1, {t}-token prompt, {new} new tokens, {words}, against "
            f"{'our eager decoding and ' if compile else ''}llama.cpp {outtype} (llama-cpp-python "
            f"{llamacpp.version()}, {threads()}; the GGUF made by llama.cpp's convert_hf_to_gguf.py from our "
            f"exported folder) on the same weights; no side has an end token")
    return against_ct2(name, what, precision, g.ours, generate, peers, (1, new), extra, compile,
                       Target(TARGETS[precision]))


def llama_124m_generate_llamacpp(quick: bool, device: torch.device) -> Case:
    return llama_llamacpp("llama-124m-generate-llamacpp", "float32", quick, device)


def llama_124m_generate_llamacpp_int8(quick: bool, device: torch.device) -> Case:
    return llama_llamacpp("llama-124m-generate-llamacpp-int8", "int8", quick, device)


def llama_124m_generate_llamacpp_compiled(quick: bool, device: torch.device) -> Case:
    return llama_llamacpp("llama-124m-generate-llamacpp-compiled", "float32", quick, device, compile=True)


def llama_124m_generate_llamacpp_int8_compiled(quick: bool, device: torch.device) -> Case:
    return llama_llamacpp("llama-124m-generate-llamacpp-int8-compiled", "int8", quick, device, compile=True)


__all__ = ["llama_124m_generate_llamacpp", "llama_124m_generate_llamacpp_compiled",
           "llama_124m_generate_llamacpp_int8", "llama_124m_generate_llamacpp_int8_compiled", "llama_llamacpp"]
