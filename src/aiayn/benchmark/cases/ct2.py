"""The CTranslate2 cases: another case's work against CTranslate2's ``Generator`` or ``Translator`` (converted
from the Hugging Face peer: :mod:`aiayn.benchmark.peers.ct2`) on the same weights, at float32 also against the
Hugging Face peer, and in int8 (``-int8``) ours quantized (:func:`aiayn.layers.int8.quantize`) against CTranslate2's
int8 on the CPU.

    gpt2-generate-ct2[-int8]          gpt2-generate's work                 ctranslate2.Generator
    llama-124m-generate[-b16]-ct2     llama-124m-generate[-b16]'s work     ctranslate2.Generator
    decode-greedy-ct2[-int8]          decode-greedy's work                 ctranslate2.Translator
    decode-beam-ct2[-int8]            decode-beam's work, length penalty 0.6
    gpt2-generate-ct2[-int8]-compiled, decode-greedy-ct2[-int8]-compiled, decode-beam-ct2[-int8]-compiled
                                      the same, ours compiled              ours eager (as precise), the peers

CTranslate2 is optional (``pip install "aiayn[bench]"``): without it, or off the CPU, a case raises
:class:`~aiayn.benchmark.harness.Unavailable` and ``aiayn bench`` skips it, saying why. In int8 the tokens are not
required to equal (rounding differs); each side's share of tokens agreeing with float32 is recorded.

Shapes: B batch, N new tokens.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, cast

import torch
from torch import Tensor, nn

from aiayn.benchmark.cases.common import describe, millions, same, threads
from aiayn.benchmark.cases.decoding import decode, generate_marian, translation
from aiayn.benchmark.cases.generation import LLAMA_124M, generation, llama_generation
from aiayn.benchmark.harness import Case, Side, Target, Unavailable, count_flops
from aiayn.decoding import sample

CT2_LENGTH_PENALTY = 0.6  # section 6.1's alpha, as len ** alpha on every side (CTranslate2 has no GNMT penalty)
PARITY = Target(1.0)  # ours at least as fast as the engine
INT8_WORDS = ("in int8 (ours: aiayn.layers.int8.quantize, every Linear and token table, fbgemm's dynamic int8 "
              "products; CTranslate2: int8 weights, compute type int8)")


def _ct2(device: torch.device) -> Any:
    """:mod:`aiayn.benchmark.peers.ct2`, once CTranslate2 is known to be installed and the device is the CPU."""
    from aiayn.benchmark.peers import ct2

    ct2.require()
    if device.type != "cpu":
        raise Unavailable(f"runs on the CPU only (fbgemm's int8 kernels, CTranslate2's CPU build), not {device}")
    return ct2


def agreement(got: Tensor, expected: Tensor) -> float:
    """The share of positions where ``got`` and ``expected`` ``(B, N)`` hold the same id; 0 if their shapes
    differ."""
    return (got == expected).float().mean().item() if got.shape == expected.shape else 0.0


def agreeing_prefix(got: Tensor, expected: Tensor) -> float:
    """Tokens before the first difference between ``got`` and ``expected`` ``(B, N)``, the mean over rows; 0 if
    their shapes differ."""
    if got.shape != expected.shape:
        return 0.0
    return (got == expected).long().cumprod(dim=1).sum(dim=1).float().mean().item()  # (B,) leading run, averaged


def against_ct2(name: str, what: str, precision: str, model: nn.Module, ours: Callable[[nn.Module, bool], Tensor],
                peers: list[Side], unit_shape: tuple[int, int], extra: dict[str, Any], compile: bool = False,
                target: Target = PARITY) -> Case:
    """A case of ours against CTranslate2 (and, at float32, Hugging Face) at ``precision``.

    Args:
        model: ours at float32; at ``"int8"`` ours runs :func:`aiayn.layers.int8.quantize` of it.
        ours: decodes with a model, its step compiled or not, giving the new tokens ``(B, N)``; every peer's
            ``run`` gives them too.
        unit_shape: ``(B, N)``: every side must take every step.
        compile: ours decodes with its step compiled (the first call, the compile, timed into
            ``extra["first_call_s"]``), and ours eager, at the same precision, joins the peers.
        target: what ours should reach against every peer (t_peer / t_ours).

    At float32 every peer, ours eager too, must give ours' tokens. In int8 rounding may flip a close choice, and a
    sequence goes its own way from there, so no side's tokens are required to agree (ours eager's neither: an
    input that inductor's kernels round otherwise can move a step of the int8 rounding of the product after it):
    ``extra["agreement_with_float32"]`` holds each side's share of tokens equal to ours' at float32 (which the
    float32 case checks CTranslate2 reproduces), and ``extra["agreeing_prefix_with_float32"]`` how many tokens per
    sequence agree before the first difference. The FLOPs are counted on ours eager at float32 (PyTorch does not
    count the int8 products, and dynamo would skip a compiled frame run under the counter for good).
    """
    from aiayn.layers.int8 import quantize

    extra = {**extra, "precision": precision, "new_tokens": unit_shape[1]}
    reference: list[Tensor] = []
    flops = count_flops(lambda: reference.append(ours(model, False)))
    run = model if precision == "float32" else quantize(model)
    if compile:
        start = time.perf_counter()
        ours(run, True)
        extra["first_call_s"] = round(time.perf_counter() - start, 1)
        peers = [Side("aiayn eager", lambda: ours(run, False)), *peers]
    mine = ours(run, compile)
    outputs, checks = {"aiayn": mine}, {}
    for peer in peers:
        got = outputs[peer.name] = peer.run()
        if precision == "float32":
            check = same(f"generated ids, {unit_shape[1]} tokens per sequence on both sides", got, mine)
            check["ok"] = check["ok"] and got.shape == unit_shape
        else:
            check = {"what": f"int8: {unit_shape[1]} tokens per sequence on both sides, not required to equal "
                             f"(rounding differs); shares agreeing with float32 in extra",
                     "shape": list(got.shape), "agreement_with_ours": agreement(got, mine),
                     "ok": got.shape == unit_shape and mine.shape == unit_shape}
        checks[peer.name] = check
    if precision != "float32":
        extra["agreement_with_float32"] = {k: agreement(v, reference[0]) for k, v in outputs.items()}
        extra["agreeing_prefix_with_float32"] = {k: agreeing_prefix(v, reference[0]) for k, v in outputs.items()}
    return Case(name, what, [Side("aiayn", lambda: ours(run, compile)), *peers], units=unit_shape[0] * unit_shape[1],
                unit="tokens", checks=checks, target=target, flops=flops, extra=extra)


def gpt2_ct2(precision: str, quick: bool, device: torch.device, compile: bool = False) -> Case:
    """:func:`gpt2_generate`'s work against CTranslate2's ``Generator`` on the same weights (and at float32 also
    ``GPT2LMHeadModel.generate``). CTranslate2 gets ``end_token=[]``: no token ends its sequence, as ours has
    no ``eos_id`` and Hugging Face's config no end token, so every side takes every step and none changes a
    logit."""
    ct2 = _ct2(device)
    g = generation(quick, device)
    hf, prompt, new = g.hf, g.prompt, g.new
    eos = hf.config.eos_token_id
    vocab = ct2.Vocabulary(g.ours.cfg.vocab_size, {eos: "<|endoftext|>"}, bos=eos, eos=eos)
    generator = ct2.generator(hf, vocab, precision)
    start, t = vocab.tokens(prompt), prompt.size(1)
    mask = torch.ones_like(prompt)

    def generate(model: nn.Module, compiled: bool = False) -> Tensor:
        return cast(Tensor, sample(model, prompt, new, temperature=0, compile=compiled))[:, t:]  # (1, N)

    def run_hf() -> Tensor:
        return hf.generate(prompt, attention_mask=mask, max_new_tokens=new, do_sample=False)[:, t:]

    def run_ct2() -> Tensor:
        out = generator.generate_batch(start, max_length=new, include_prompt_in_result=False, end_token=[],
                                       beam_size=1)
        return torch.tensor([r.sequences_ids[0] for r in out])  # (1, N)

    peer = Side("ctranslate2.Generator", run_ct2, torch_memory=False)
    peers = [Side("GPT2LMHeadModel.generate", run_hf), peer] if precision == "float32" else [peer]
    against = " and ".join(p.name for p in peers)
    words = "float32" if precision == "float32" else INT8_WORDS
    extra: dict[str, Any] = {"prompt_tokens": t, "ctranslate2": ct2.version()}
    how = "over a static cache, the step compiled" if compile else "with the KV cache"
    what = (f"gpt2 ({millions(g.ours)} parameters, random weights) greedy generation {how}, batch 1, "
            f"{t}-token prompt, {new} new tokens, {words}, against {'our eager decoding, ' if compile else ''}"
            f"{against} (CTranslate2 {ct2.version()}, {threads()}) on the same weights; no side has an end token")
    name = "gpt2-generate-ct2" + ("" if precision == "float32" else "-int8") + ("-compiled" if compile else "")
    return against_ct2(name, what, precision, g.ours, generate, peers, (1, new), extra, compile)


def llama_ct2(batch: int, quick: bool, device: torch.device) -> Case:
    """:func:`llama_generate`'s work on the Llama-shaped 124M at float32 against CTranslate2's ``Generator``
    (converted from the ``LlamaForCausalLM``) and ``LlamaForCausalLM.generate``, with ``end_token=[]`` as in
    :func:`gpt2_ct2`."""
    ct2 = _ct2(device)
    g = llama_generation(LLAMA_124M, batch, quick, device)
    hf, prompt, new = g.hf, g.prompt, g.new
    eos = g.ours.cfg.eos_id
    vocab = ct2.Vocabulary(g.ours.cfg.vocab_size, {eos: "</s>"}, bos=eos, eos=eos)
    generator = ct2.generator(hf, vocab, "float32")
    start, t = vocab.tokens(prompt), prompt.size(1)
    mask = torch.ones_like(prompt)

    def run_ours(model: nn.Module, compiled: bool) -> Tensor:
        return cast(Tensor, sample(model, prompt, new, temperature=0, compile=compiled))[:, t:]  # (B, N)

    def run_hf() -> Tensor:
        return hf.generate(prompt, attention_mask=mask, max_new_tokens=new, do_sample=False)[:, t:]

    def run_ct2() -> Tensor:
        out = generator.generate_batch(start, max_length=new, include_prompt_in_result=False, end_token=[],
                                       beam_size=1)
        return torch.tensor([r.sequences_ids[0] for r in out])  # (B, N)

    peers = [Side("LlamaForCausalLM.generate", run_hf), Side("ctranslate2.Generator", run_ct2, torch_memory=False)]
    what = (f"{'llama-tiny' if quick else 'Llama-shaped 124M'} ({millions(g.ours)} parameters, random weights) "
            f"greedy generation with the KV cache, batch {batch}, {t}-token prompts, {new} new tokens, float32, "
            f"against LlamaForCausalLM.generate and ctranslate2.Generator (CTranslate2 {ct2.version()}, "
            f"{threads()}) on the same weights; no side has an end token")
    name = "llama-124m-generate" + ("" if batch == 1 else f"-b{batch}") + "-ct2"
    return against_ct2(name, what, "float32", g.ours, run_ours, peers, (batch, new),
                       {"batch": batch, "prompt_tokens": t, "ctranslate2": ct2.version()})


def llama_124m_generate_ct2(quick: bool, device: torch.device) -> Case:
    return llama_ct2(1, quick, device)


def llama_124m_generate_b16_ct2(quick: bool, device: torch.device) -> Case:
    return llama_ct2(16, quick, device)


def translation_ct2(name: str, beam: int, precision: str, quick: bool, device: torch.device,
                    compile: bool = False) -> Case:
    """:func:`translation_decoding`'s work against CTranslate2's ``Translator`` on the same weights (and at
    float32 also ``MarianMTModel.generate``); beam search ranks by ``logprob / len ** 0.6`` on every side (every
    hypothesis has ``N`` tokens, so the ranking is by log-prob whatever the penalty)."""
    ct2 = _ct2(device)
    tr = translation(quick, device)
    cfg, src, new = tr.cfg, tr.src, tr.new
    vocab = ct2.Vocabulary(cfg.tgt_vocab_size, {cfg.pad_id: "<pad>", cfg.bos_id: "<s>", cfg.eos_id: "</s>"},
                           bos=cfg.bos_id, eos=cfg.eos_id)
    translator = ct2.translator(tr.hf, vocab, precision)
    source = vocab.tokens(src)

    def translate(model: nn.Module, compiled: bool = False) -> Tensor:
        return decode(model, src, beam, new, CT2_LENGTH_PENALTY, compile=compiled)

    def run_hf() -> Tensor:
        return generate_marian(tr.hf, src, beam, new, CT2_LENGTH_PENALTY)

    def run_ct2() -> Tensor:
        out = translator.translate_batch(source, beam_size=beam, length_penalty=CT2_LENGTH_PENALTY,
                                         max_decoding_length=new)
        return vocab.ids([r.hypotheses[0] for r in out])  # (B, N)

    peer = Side("ctranslate2.Translator", run_ct2, torch_memory=False)
    peers = [Side("MarianMTModel.generate", run_hf), peer] if precision == "float32" else [peer]
    how = "greedy decoding" if beam == 1 else f"beam search (beam {beam}, length penalty {CT2_LENGTH_PENALTY})"
    against = " and ".join(p.name for p in peers)
    words = "float32" if precision == "float32" else INT8_WORDS
    extra: dict[str, Any] = {"config": dataclasses.asdict(tr.ours.cfg), "batch": src.size(0),
                             "source_length": src.size(1), "beam": beam, "ctranslate2": ct2.version()}
    cache = "over a static cache, the step compiled" if compile else "with our KV cache"
    what = (f"translation, {how} {cache}, {words}, against {'our eager decoding, ' if compile else ''}{against} "
            f"(CTranslate2 {ct2.version()}, {threads()}) on the same weights ({describe(cfg)}), batch {src.size(0)} "
            f"sources of {src.size(1)} tokens, {new} tokens generated per sentence (end of sentence blocked on every "
            f"side)")
    return against_ct2(name, what, precision, tr.ours, translate, peers, (src.size(0), new), extra, compile)


def gpt2_generate_ct2(quick: bool, device: torch.device) -> Case:
    return gpt2_ct2("float32", quick, device)


def gpt2_generate_ct2_int8(quick: bool, device: torch.device) -> Case:
    return gpt2_ct2("int8", quick, device)


def decode_greedy_ct2(quick: bool, device: torch.device) -> Case:
    return translation_ct2("decode-greedy-ct2", 1, "float32", quick, device)


def decode_greedy_ct2_int8(quick: bool, device: torch.device) -> Case:
    return translation_ct2("decode-greedy-ct2-int8", 1, "int8", quick, device)


def decode_beam_ct2(quick: bool, device: torch.device) -> Case:
    return translation_ct2("decode-beam-ct2", 4, "float32", quick, device)


def decode_beam_ct2_int8(quick: bool, device: torch.device) -> Case:
    return translation_ct2("decode-beam-ct2-int8", 4, "int8", quick, device)


def gpt2_generate_ct2_compiled(quick: bool, device: torch.device) -> Case:
    return gpt2_ct2("float32", quick, device, compile=True)


def decode_greedy_ct2_compiled(quick: bool, device: torch.device) -> Case:
    return translation_ct2("decode-greedy-ct2-compiled", 1, "float32", quick, device, compile=True)


def decode_beam_ct2_compiled(quick: bool, device: torch.device) -> Case:
    return translation_ct2("decode-beam-ct2-compiled", 4, "float32", quick, device, compile=True)


def gpt2_generate_ct2_int8_compiled(quick: bool, device: torch.device) -> Case:
    return gpt2_ct2("int8", quick, device, compile=True)


def decode_greedy_ct2_int8_compiled(quick: bool, device: torch.device) -> Case:
    return translation_ct2("decode-greedy-ct2-int8-compiled", 1, "int8", quick, device, compile=True)


def decode_beam_ct2_int8_compiled(quick: bool, device: torch.device) -> Case:
    return translation_ct2("decode-beam-ct2-int8-compiled", 4, "int8", quick, device, compile=True)


__all__ = ["CT2_LENGTH_PENALTY", "INT8_WORDS", "against_ct2", "agreeing_prefix", "agreement", "decode_beam_ct2",
           "decode_beam_ct2_compiled", "decode_beam_ct2_int8", "decode_beam_ct2_int8_compiled", "decode_greedy_ct2",
           "decode_greedy_ct2_compiled", "decode_greedy_ct2_int8", "decode_greedy_ct2_int8_compiled", "gpt2_ct2",
           "gpt2_generate_ct2", "gpt2_generate_ct2_compiled", "gpt2_generate_ct2_int8",
           "gpt2_generate_ct2_int8_compiled", "llama_124m_generate_b16_ct2", "llama_124m_generate_ct2", "llama_ct2",
           "translation_ct2"]
