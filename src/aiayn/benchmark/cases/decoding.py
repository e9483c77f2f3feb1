"""The decoding cases: translating a batch with our KV cache against ``MarianMTModel.generate`` on the same
weights (ours converted from Marian's with ``aiayn.from_hf``).

    decode-greedy   greedy decoding, 16 sources of 24 tokens, 64 new tokens each
    decode-beam     beam search (beam 4), the same work

:func:`translation`, :func:`decode` and :func:`generate_marian` are also the work of the ``decode-*-ct2`` and
``decode-greedy-ort`` cases (:mod:`~aiayn.benchmark.cases.ct2`, :mod:`~aiayn.benchmark.cases.ort`).

Shapes: B batch, S source length, N new tokens.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor, nn

from aiayn.benchmark.cases.common import describe, same, small_transformer
from aiayn.benchmark.harness import Case, Side, Target
from aiayn.benchmark.peers.hf import marian
from aiayn.convert import from_hf
from aiayn.decoding import beam_search, greedy
from aiayn.models.transformer import Transformer, TransformerConfig


@dataclass
class Translation:
    """The decoding cases' work: a Marian-shaped model with random weights, ours converted from it, the sources
    ``src`` ``(B, S)`` (no padding) and ``new`` tokens to generate per sentence."""

    cfg: TransformerConfig
    hf: Any  # MarianMTModel: .generate
    ours: Transformer
    src: Tensor
    new: int


def translation(quick: bool, device: torch.device) -> Translation:
    """:func:`small_transformer` as a ``MarianMTModel`` whose ``</s>`` and padding have a logits bias of -10^4,
    so no side ever ends a sentence and every side makes exactly ``new`` tokens with no logits processor; 16
    sources of 24 tokens, 64 new tokens (quick: 3 x 6, 6)."""
    cfg = small_transformer(quick)
    batch, length, new = (3, 6, 6) if quick else (16, 24, 64)
    torch.manual_seed(0)
    hf: Any = marian(cfg, final_bias={cfg.eos_id: -1e4, cfg.pad_id: -1e4}).eval()
    ours = cast(Transformer, from_hf(hf).eval())
    src = torch.randint(3, cfg.src_vocab_size, (batch, length))  # (B, S)
    return Translation(cfg, hf.to(device), ours.to(device), src.to(device), new)


def decode(model: nn.Module, src: Tensor, beam: int, new: int, length_penalty: float, compile: bool = False) -> Tensor:
    """Ours: ``new`` tokens per sentence ``(B, N)``, greedy for ``beam=1``, else beam search ranking by
    ``logprob / len ** length_penalty`` (Hugging Face's and CTranslate2's normalisation); ``compile``: over the
    static cache, the step compiled (:mod:`aiayn.layers.session`)."""
    if beam == 1:
        return greedy(model, src, max_len=new, compile=compile)
    ids = beam_search(model, src, beam=beam, length_penalty=length_penalty, max_len=new, normalize="length",
                      compile=compile)
    return cast(Tensor, ids)  # the tokens alone: no return_scores


def generate_marian(hf: Any, src: Tensor, beam: int, new: int, length_penalty: float) -> Tensor:
    """``MarianMTModel.generate``: ``new`` tokens per sentence ``(B, N)``, without the start token."""
    beams = {} if beam == 1 else {"num_beams": beam, "length_penalty": length_penalty}
    out = hf.generate(input_ids=src, attention_mask=torch.ones_like(src), do_sample=False, max_new_tokens=new,
                      **beams)
    return out[:, 1:]


def translation_decoding(name: str, beam: int, quick: bool, device: torch.device) -> Case:
    """Decode a batch with our cache against ``MarianMTModel.generate`` on the same weights.

    Both must run the same number of steps: the shared weights give ``</s>`` (and padding) a logits bias of
    -10^4, so neither ever ends a sentence and both produce exactly ``N`` tokens per sentence (no extra
    logits processors on either side). With every hypothesis the same length, beam search ranks by log-prob
    on both sides, whatever the length penalty.
    """
    t = translation(quick, device)
    cfg, (batch, length), new = t.cfg, t.src.shape, t.new

    def run_ours() -> Tensor:
        return decode(t.ours, t.src, beam, new, length_penalty=1.0)

    def run_hf() -> Tensor:
        return generate_marian(t.hf, t.src, beam, new, length_penalty=1.0)

    got, expected = run_ours(), run_hf()
    check = same(f"generated ids, {new} tokens per sentence on both sides", got, expected)
    check["ok"] = check["ok"] and got.shape == (batch, new)
    how = "greedy decoding" if beam == 1 else f"beam search (beam {beam})"
    what = (f"translation, {how} with our KV cache against MarianMTModel.generate on the same weights "
            f"({describe(cfg)}), batch {batch} sources of {length} tokens, {new} tokens generated per sentence "
            f"(end of sentence blocked on both sides)")
    target = Target(1.5)
    return Case(name, what, [Side("aiayn", run_ours), Side("MarianMTModel.generate", run_hf)], units=batch * new,
                unit="tokens", checks={"MarianMTModel.generate": check}, target=target,
                extra={"config": dataclasses.asdict(t.ours.cfg), "batch": batch, "source_length": length,
                       "new_tokens": new, "beam": beam})


def decode_greedy(quick: bool, device: torch.device) -> Case:
    return translation_decoding("decode-greedy", 1, quick, device)


def decode_beam(quick: bool, device: torch.device) -> Case:
    return translation_decoding("decode-beam", 4, quick, device)


__all__ = ["Translation", "decode", "decode_beam", "decode_greedy", "generate_marian", "translation",
           "translation_decoding"]
