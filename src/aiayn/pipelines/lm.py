"""Generating with a saved language model (an ``aiayn train lm`` run, a converted GPT-2 or Llama): whole texts
or a stream of pieces, cut at stop strings.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from shlex import quote
from typing import Any, cast

import torch

from aiayn.data import load_tokenizer
from aiayn.decoding import sample, stream
from aiayn.models.gpt import GPT
from aiayn.pipelines.loading import check_tokenizer, load_model, no_weights, special_ids
from aiayn.training import device as devices


def complete(model, tok, prompts: list[str], max_new_tokens: int, stop: list[str] | None = None,
             **sampling: Any) -> list[str]:
    """The text each prompt continues with (prompt not included), cut before the first stop string."""
    ids = sample(model, [tok.encode(p) for p in prompts], max_new_tokens, eos_id=tok.eos_id,
                 **{"temperature": 0.0, **sampling})
    out = []
    for p, row in zip(prompts, ids):
        text = tok.decode(row[len(tok.encode(p)):])
        out.append(_cut(text, stop or [])[0])
    return out


def _cut(text: str, stop: list[str]) -> tuple[str, bool]:
    """``text`` up to its first stop string, and whether one was found."""
    hits = [text.index(s) for s in stop if s and s in text]
    return (text[: min(hits)], True) if hits else (text, False)


def _may_begin_stop(text: str, stop: list[str]) -> int:
    """How many characters at the end of ``text`` could be the start of a stop string: they wait until the next
    pieces tell whether it is one (and is cut) or not (and is shown)."""
    return max((k for s in stop for k in range(1, min(len(s), len(text) + 1)) if text.endswith(s[:k])), default=0)


def load_lm_run(run: str | os.PathLike, *, device: str | torch.device | None = None, quantize: str | None = None):
    """``(model, tokenizer)`` of a language model's run folder (``aiayn train lm`` or ``aiayn convert``).

    Args:
        device, quantize: where the model goes, and ``"int8"`` for int8 weights on the CPU
            (:func:`aiayn.pipelines.loading.ready`; default: a GPU if any, float32).

    Raises:
        ValueError: ``device`` names no device of this machine, or a bad ``quantize``.
    """
    run = Path(run)
    if not (run / "model.safetensors").is_file():
        raise no_weights(run)
    if (run / "src_tokenizer.json").is_file():
        raise ValueError(f"{run} is a translation run: use `aiayn translate --run {quote(str(run))}`")
    if not (run / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{run} holds no tokenizer.json")
    model = cast(GPT, load_model(run, device, quantize, kinds=(GPT,), task="language model"))
    tok = load_tokenizer(run / "tokenizer.json")
    check_tokenizer(tok, run / "tokenizer.json", model.cfg.vocab_size, special_ids(model.cfg),
                    exact=(run / "args.json").is_file())
    return model, tok


def generate(
    run: str | os.PathLike,
    prompt: str,
    max_new_tokens: int = 200,
    temperature: float = 0.8,
    top_k: int | None = None,
    top_p: float | None = None,
    stop: list[str] | None = None,
    seed: int | None = None,
    *,
    device: str | torch.device | None = None,
    quantize: str | None = None,
) -> Iterator[str]:
    """Yield the continuation of ``prompt`` piece by piece as the model makes it (for streaming), until
    ``max_new_tokens``, the end-of-text token or a ``stop`` string (not yielded).

    Args:
        temperature: divides the logits; 0 is greedy decoding.
        seed: seeds the sampling (a generator on the model's device: a seed repeats its text on one device).
        device, quantize: as :func:`load_lm_run`'s (default: a GPU when there is one, else the CPU; float32).
    """
    model, tok = load_lm_run(run, device=device, quantize=quantize)
    yield from stream_text(model, tok, prompt, max_new_tokens, temperature, top_k, top_p, stop, seed)


def stream_text(model, tok, prompt: str, max_new_tokens: int = 200, temperature: float = 0.8,
                top_k: int | None = None, top_p: float | None = None, stop: list[str] | None = None,
                seed: int | None = None) -> Iterator[str]:
    """:func:`generate` with a loaded ``model`` and tokenizer ``tok``: the continuation of ``prompt``, piece by
    piece, whole characters only."""
    ids = tok.encode(prompt) or ([tok.eos_id] if tok.eos_id is not None else [])
    if not ids:
        raise ValueError("the prompt is empty and the tokenizer has no end-of-text token to start from")
    room = model.cfg.max_len - len(ids)
    if room < 1:
        raise ValueError(f"the prompt is {len(ids)} tokens; the model reads at most {model.cfg.max_len}")
    gen = None if seed is None else torch.Generator(devices.of(model)).manual_seed(seed)
    stop = [s for s in stop or [] if s]
    new: list[int] = []
    shown = text = ""
    stopped = False
    for nxt in stream(model, [ids], min(max_new_tokens, room), temperature, top_k, top_p, gen, tok.eos_id):
        token = int(nxt[0])
        if token == tok.eos_id:
            break
        new.append(token)
        text, stopped = _cut(tok.decode(new), stop)
        if text.endswith("\ufffd") and not stopped:  # half of a multi-byte character: wait for the rest
            continue
        ready = text if stopped else text[: len(text) - _may_begin_stop(text, stop)]
        if len(ready) > len(shown):
            yield ready[len(shown):]
            shown = ready
        if stopped:
            break
    rest = "" if stopped else text.removesuffix("\ufffd")[len(shown):]  # the end, and no stop string came
    if rest:
        yield rest


__all__ = ["complete", "generate", "load_lm_run", "stream_text"]
