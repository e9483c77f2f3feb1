"""The generation cases: greedy generation with our KV cache against Hugging Face's ``generate`` on the same
weights, no side stopping early.

    gpt2-generate               gpt2 (124M), batch 1                       against GPT2LMHeadModel.generate
    llama-tiny-generate         llama-tiny, batch 1                        against LlamaForCausalLM.generate
    llama-tiny-generate-b16     the same, batch 16
    llama-124m-generate         Llama-shaped 124M (:data:`LLAMA_124M`), batch 1
    llama-124m-generate-b16     the same, batch 16
    gpt2-generate-compiled      gpt2-generate's work, ours compiled        against ours eager and GPT2LMHeadModel
                                                                           .generate, static cache, compiled forward
    llama-124m-generate-b16-compiled  llama-124m-generate-b16's, the same  the same with LlamaForCausalLM
    llama-tiny-generate-compiled, llama-tiny-generate-b16-compiled          the same for llama-tiny

GPT-2's ours is converted from the Hugging Face model with ``aiayn.from_hf``; the Llama cases go the other way:
ours is exported with :func:`aiayn.convert.to_hf.to_hf` and Hugging Face loads the folder. :func:`generation` and
:func:`llama_generation` are also the work of the ``-ct2`` and ``-ort`` generation cases.

Shapes: B batch, T prompt length, N new tokens.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor

from aiayn.benchmark.cases.common import millions, same
from aiayn.benchmark.harness import Case, Side, Target, count_flops, memory_bandwidth
from aiayn.benchmark.peers.hf import gpt2_hf
from aiayn.convert import from_hf
from aiayn.decoding import sample
from aiayn.layers.positional import LearnedPositionalEmbedding
from aiayn.models.gpt import GPT, PRESETS, GPTConfig


@dataclass
class Generation:
    """The generation cases' work: a Hugging Face model (``GPT2LMHeadModel``, ``LlamaForCausalLM``) with random
    weights and no end token in its generation config, ours with the same weights, a ``(B, T)`` prompt and ``new``
    tokens to generate."""

    hf: Any  # GPT2LMHeadModel or LlamaForCausalLM: .generate
    ours: GPT
    prompt: Tensor
    new: int


def generation(quick: bool, device: torch.device) -> Generation:
    """:func:`gpt2_hf` with neither an end token nor a padding token to generate with, so it takes every step
    with no logits processor added, as ours given no ``eos_id``; a 16-token prompt, 256 new tokens (quick: 4, 8)."""
    prompt_len, new = (4, 8) if quick else (16, 256)
    hf: Any = gpt2_hf(quick).eval()
    hf.generation_config.eos_token_id = None
    hf.generation_config.pad_token_id = None
    ours = cast(GPT, from_hf(hf).eval())
    prompt = torch.randint(0, ours.cfg.vocab_size, (1, prompt_len), generator=torch.Generator().manual_seed(0))
    return Generation(hf.to(device), ours.to(device), prompt.to(device), new)


def weight_bytes_per_token(model: GPT) -> int:
    """Bytes of weights one new token reads at batch 1: every parameter once (a tied table once), except the
    tables of which one row is read: the learned positions, and the token table when the output is untied."""
    weights = {id(p): p for p in model.parameters()}
    read = sum(p.numel() * p.element_size() for p in weights.values())
    if isinstance(model.embed.positions, LearnedPositionalEmbedding):  # GPT-2's table
        read -= model.embed.positions.weight.nbytes
    if not model.cfg.tie_output:
        read -= model.embed.tokens.weight.nbytes
    return read


def generate_case(name: str, what: str, g: Generation, peer: str, target: Target, quick: bool,
                  device: torch.device) -> Case:
    """Greedy generation with the KV cache, ours against ``g.hf.generate`` on the same weights; neither stops
    early (ours is given no ``eos_id``, Hugging Face's generation config none either). At batch 1 each new
    token reads every weight once, so memory bandwidth bounds the speed:

        best tokens/s = bandwidth / bytes of weights read per token   (:func:`weight_bytes_per_token`)

    and that ceiling is recorded, the bandwidth measured with a large copy."""
    hf, ours, prompt, new = g.hf, g.ours, g.prompt, g.new
    batch, prompt_len = prompt.shape
    mask = torch.ones_like(prompt)

    def run_ours() -> Tensor:
        return cast(Tensor, sample(ours, prompt, new, temperature=0))  # a tensor prompt gives a tensor

    def run_hf() -> Tensor:
        return hf.generate(prompt, attention_mask=mask, max_new_tokens=new, do_sample=False)

    got, expected = run_ours(), run_hf()
    check = same(f"prompts + {new} generated ids, batch {batch}", got, expected)
    check["ok"] = check["ok"] and got.shape == (batch, prompt_len + new)
    extra: dict[str, Any] = {"batch": batch, "prompt_tokens": prompt_len, "new_tokens": new}
    if batch == 1:
        read = weight_bytes_per_token(ours)
        bandwidth = memory_bandwidth(mib=16 if quick else 512, device=device)
        extra.update(weight_bytes_per_token=read, memory_bandwidth_bytes_per_s=bandwidth,
                     ceiling_tokens_per_s=bandwidth / read)
    return Case(name, what, [Side("aiayn", run_ours), Side(peer, run_hf)], units=batch * new, unit="tokens",
                checks={peer: check}, target=target, extra=extra)


def gpt2_generate(quick: bool, device: torch.device) -> Case:
    """Greedy generation with the KV cache, batch 1, against ``GPT2LMHeadModel.generate`` on the same weights
    (:func:`generate_case`)."""
    g = generation(quick, device)
    what = (f"gpt2 ({millions(g.ours)} parameters, random weights) greedy generation with the KV cache, batch 1, "
            f"{g.prompt.size(1)}-token prompt, {g.new} new tokens, against GPT2LMHeadModel.generate on the same "
            f"weights")
    return generate_case("gpt2-generate", what, g, "GPT2LMHeadModel.generate", Target(1.3), quick, device)


# --- Llama ---------------------------------------------------------------------------------------------------

# GPT-2 small's sizes with Llama's switches: 4 kv heads, SwiGLU's d_ff 2048 (about 8/3 d_model), Llama 2's
# vocabulary; 124,668,672 parameters (the untied output included)
LLAMA_124M = dataclasses.replace(PRESETS["llama-tiny"], vocab_size=32000, max_len=1024, d_model=768, n_layers=12,
                                 n_heads=12, n_kv_heads=4, d_ff=2048)


def llama_generation(cfg: GPTConfig, batch: int, quick: bool, device: torch.device) -> Generation:
    """Our GPT of ``cfg`` (quick: ``llama-tiny``) with random weights, and the ``LlamaForCausalLM`` that
    Hugging Face loads from its :func:`~aiayn.convert.to_hf.to_hf` folder, with neither an end token nor a
    padding token to generate with (as :func:`generation`); ``batch`` prompts of 16 tokens, 256 new tokens at
    batch 1 (as many as fit in ``max_len``) and 64 at batch 16 (quick: 4, 8)."""
    import transformers

    from aiayn.convert.to_hf import to_hf

    prompt_len, new = (4, 8) if quick else (16, 256 if batch == 1 else 64)
    torch.manual_seed(0)
    ours = GPT(PRESETS["llama-tiny"] if quick else cfg).eval()
    new = min(new, ours.cfg.max_len - prompt_len)  # llama-tiny's 256 positions: 240 new tokens
    with tempfile.TemporaryDirectory() as folder:
        to_hf(ours, folder)
        hf: Any = transformers.LlamaForCausalLM.from_pretrained(folder).eval()
    hf.generation_config.eos_token_id = None
    hf.generation_config.pad_token_id = None
    prompt = torch.randint(0, ours.cfg.vocab_size, (batch, prompt_len), generator=torch.Generator().manual_seed(0))
    return Generation(hf.to(device), ours.to(device), prompt.to(device), new)


def llama_generate(name: str, label: str, cfg: GPTConfig, batch: int, quick: bool, device: torch.device) -> Case:
    """Greedy generation with the KV cache, ``batch`` same-length prompts, against ``LlamaForCausalLM.generate``
    on the same weights (:func:`generate_case`)."""
    g = llama_generation(cfg, batch, quick, device)
    what = (f"{'llama-tiny' if quick else label} ({millions(g.ours)} parameters, random weights) greedy "
            f"generation with the KV cache, batch {batch}, {g.prompt.size(1)}-token prompts, {g.new} new tokens, "
            f"against LlamaForCausalLM.generate on the same weights (exported with to_hf); no side has an end token")
    return generate_case(name, what, g, "LlamaForCausalLM.generate", Target(1.0), quick, device)


def llama_tiny_generate(quick: bool, device: torch.device) -> Case:
    return llama_generate("llama-tiny-generate", "llama-tiny", PRESETS["llama-tiny"], 1, quick, device)


def llama_tiny_generate_b16(quick: bool, device: torch.device) -> Case:
    return llama_generate("llama-tiny-generate-b16", "llama-tiny", PRESETS["llama-tiny"], 16, quick, device)


def llama_124m_generate(quick: bool, device: torch.device) -> Case:
    return llama_generate("llama-124m-generate", "Llama-shaped 124M", LLAMA_124M, 1, quick, device)


def llama_124m_generate_b16(quick: bool, device: torch.device) -> Case:
    return llama_generate("llama-124m-generate-b16", "Llama-shaped 124M", LLAMA_124M, 16, quick, device)


def compiled_case(name: str, what: str, g: Generation, peer: str, quick: bool) -> Case:
    """Greedy generation over our static cache with the step compiled (:mod:`aiayn.layers.session`) against
    our eager decoding and ``g.hf.generate`` with Hugging Face's static cache and its forward compiled (its
    ``compile_config``, asked for on every device: the fair compiled peer). The compile times (each side's
    first call) are recorded; the harness's warm-up pays them before any round is timed."""
    import transformers

    hf, ours, prompt, new = g.hf, g.ours, g.prompt, g.new
    batch, prompt_len = prompt.shape
    mask = torch.ones_like(prompt)
    hf.generation_config.cache_implementation = "static"
    hf.generation_config.compile_config = transformers.CompileConfig()
    hf.generation_config.compile_config._compile_all_devices = True

    def run_ours() -> Tensor:
        return cast(Tensor, sample(ours, prompt, new, temperature=0, compile=True))

    def run_eager() -> Tensor:
        return cast(Tensor, sample(ours, prompt, new, temperature=0))

    def run_hf() -> Tensor:
        return hf.generate(prompt, attention_mask=mask, max_new_tokens=new, do_sample=False)

    start = time.perf_counter()
    got = run_ours()
    compiled_s = time.perf_counter() - start
    start = time.perf_counter()
    expected = run_hf()
    hf_compiled_s = time.perf_counter() - start
    eager = run_eager()
    checks = {"aiayn eager": same(f"prompts + {new} generated ids, batch {batch}", got, eager),
              peer: same(f"prompts + {new} generated ids, batch {batch}", got, expected)}
    extra: dict[str, Any] = {"batch": batch, "prompt_tokens": prompt_len, "new_tokens": new,
                             "first_call_s": {"aiayn": round(compiled_s, 1), peer: round(hf_compiled_s, 1)}}
    # FLOPs counted on the eager side: under FlopCounterMode (a dispatch mode) dynamo runs a compiled frame
    # eagerly and skips its code for good, so every timed round of the compiled side would then be eager
    return Case(name, what, [Side("aiayn", run_ours), Side("aiayn eager", run_eager), Side(peer, run_hf)],
                units=batch * new, unit="tokens", checks=checks, target=Target(1.2), extra=extra,
                flops=count_flops(run_eager))


def gpt2_generate_compiled(quick: bool, device: torch.device) -> Case:
    g = generation(quick, device)
    what = (f"gpt2 ({millions(g.ours)} parameters, random weights) greedy generation over a static cache, the step "
            f"compiled, batch 1, {g.prompt.size(1)}-token prompt, {g.new} new tokens, against our eager decoding "
            f"and GPT2LMHeadModel.generate with its static cache and compiled forward, on the same weights")
    return compiled_case("gpt2-generate-compiled", what, g, "GPT2LMHeadModel static+compiled", quick)


def llama_tiny_generate_compiled(quick: bool, device: torch.device) -> Case:
    return _llama_compiled("llama-tiny-generate-compiled", "llama-tiny", PRESETS["llama-tiny"], 1, quick, device)


def llama_tiny_generate_b16_compiled(quick: bool, device: torch.device) -> Case:
    return _llama_compiled("llama-tiny-generate-b16-compiled", "llama-tiny", PRESETS["llama-tiny"], 16, quick, device)


def _llama_compiled(name: str, label: str, cfg: GPTConfig, batch: int, quick: bool, device: torch.device) -> Case:
    g = llama_generation(cfg, batch, quick, device)
    what = (f"{'llama-tiny' if quick else label} ({millions(g.ours)} parameters, random weights) greedy generation "
            f"over a static cache, the step compiled, batch {batch}, {g.prompt.size(1)}-token prompts, {g.new} new "
            f"tokens, against our eager decoding and LlamaForCausalLM.generate with its static cache and compiled "
            f"forward, on the same weights")
    return compiled_case(name, what, g, "LlamaForCausalLM static+compiled", quick)


def llama_124m_generate_b16_compiled(quick: bool, device: torch.device) -> Case:
    return _llama_compiled("llama-124m-generate-b16-compiled", "Llama-shaped 124M", LLAMA_124M, 16, quick, device)


__all__ = ["LLAMA_124M", "Generation", "compiled_case", "generate_case", "generation", "gpt2_generate",
           "gpt2_generate_compiled", "llama_124m_generate", "llama_124m_generate_b16",
           "llama_124m_generate_b16_compiled", "llama_generate", "llama_generation", "llama_tiny_generate",
           "llama_tiny_generate_b16", "llama_tiny_generate_b16_compiled", "llama_tiny_generate_compiled",
           "weight_bytes_per_token"]
