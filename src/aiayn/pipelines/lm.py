"""Generating with a saved language model (an ``aiayn train lm`` run, a converted GPT-2 or Llama): whole texts
or a stream of pieces, cut at stop strings.

The arguments are ``transformers``' (``model.generate``'s names), and so are the defaults: those of its
``pipeline("text-generation")``, 256 new tokens drawn at temperature 0.7 among the 50 most likely
(:data:`DEFAULTS`; ``do_sample=False`` is greedy decoding). ``stop`` strings end a text and are cut from it, as
OpenAI's API does (``transformers``' ``stop_strings`` keep them).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from shlex import quote
from typing import Any, cast

import torch
from torch import Tensor

from aiayn.data import load_tokenizer
from aiayn.decoding import sample, stream
from aiayn.decoding.config import GenerationConfig
from aiayn.decoding.generate import generate as generate_ids
from aiayn.decoding.generate import sampling_options
from aiayn.decoding.processing import Processing
from aiayn.decoding.settings import SettingError, check
from aiayn.defaults import TEXT_GENERATION
from aiayn.models.gpt import GPT
from aiayn.models.transfo_xl import TransfoXL
from aiayn.pipelines.loading import check_tokenizer, load_model, no_weights, special_ids, to_dtype
from aiayn.training import device as devices

DEFAULTS = TEXT_GENERATION  # transformers' pipeline("text-generation") defaults (aiayn.defaults)
CHECKED = set(inspect.signature(check).parameters) - {"seed"}  # the settings checked with the shared words


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


class Text:
    """One continuation's text as its tokens come: handed out in whole characters, held back while its end could
    be the start of a stop string, and cut before the first stop string (as OpenAI's API cuts it).
    :func:`stream_text` and the server (:mod:`aiayn.serve`) both read their tokens through it."""

    def __init__(self, tok: Any, stop: list[str] | None = None) -> None:
        self.tok, self.stop = tok, [s for s in stop or [] if s]
        self.ids: list[int] = []
        self.text = self.shown = ""
        self.stopped = False

    def add(self, token: int) -> str:
        """Take one token; return the text that is now sure (possibly empty). After a stop string, ``stopped``."""
        self.ids.append(token)
        self.text, self.stopped = _cut(self.tok.decode(self.ids), self.stop)
        if self.text.endswith("\ufffd") and not self.stopped:  # half of a multi-byte character: wait for the rest
            return ""
        held = 0 if self.stopped else max((k for s in self.stop for k in range(1, min(len(s), len(self.text) + 1))
                                           if self.text.endswith(s[:k])), default=0)
        return self._show(self.text[: len(self.text) - held])

    def rest(self) -> str:
        """At the end without a stop string: what was held back, so the whole text is ``tok.decode(ids)`` (an
        unfinished character's bytes shown as U+FFFD, as ``tokenizers`` and transformers show them)."""
        return "" if self.stopped else self._show(self.text)

    def _show(self, ready: str) -> str:
        piece = ready[len(self.shown):] if len(ready) > len(self.shown) else ""
        self.shown = max(self.shown, ready, key=len)
        return piece


def load_lm_run(run: str | os.PathLike, *, device: str | torch.device | None = None, quantize: str | None = None):
    """``(model, tokenizer)`` of a language model's run folder (``aiayn train lm`` or ``aiayn convert``): a GPT
    (GPT-2, Llama) or a Transformer-XL.

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
    model = cast(GPT, load_model(run, device, quantize, kinds=(GPT, TransfoXL), task="language model"))
    tok = load_tokenizer(run / "tokenizer.json")
    check_tokenizer(tok, run / "tokenizer.json", model.cfg.vocab_size, special_ids(model.cfg),
                    exact=(run / "args.json").is_file())
    return model, tok


def generate(run: str | os.PathLike, prompt: str, *, device: str | torch.device | None = None,
             quantize: str | None = None, dtype: str | torch.dtype | None = None, **options: Any) -> Iterator[str]:
    """Yield the continuation of ``prompt`` piece by piece as the model makes it (for streaming), until
    ``max_new_tokens``, the end-of-text token or a ``stop`` string (not yielded).

    Args:
        options: :func:`stream_text`'s (``transformers``' names; the defaults of :data:`DEFAULTS`).
        device, quantize: as :func:`load_lm_run`'s (default: a GPU when there is one, else the CPU; float32).
        dtype: the weights' dtype (:func:`aiayn.pipelines.loading.to_dtype`; default as saved).
    """
    model, tok = load_lm_run(run, device=device, quantize=quantize)
    to_dtype(model, dtype, quantize)
    yield from stream_text(model, tok, prompt, **options)


def prompt_ids(tok, prompt: str, positions: int, new_tokens: int | None = None, *, field: str = "prompt",
               reader: str = "the model") -> list[int]:
    """The ids of ``prompt`` (the end-of-text token for an empty one), refused when they leave no room among
    ``positions`` (the model's, or fewer a server allows) for a new token, or for ``new_tokens`` of them
    (:func:`check_room`). The pipeline and the server check a prompt here, each naming its fields.

    Raises:
        SettingError: naming ``field`` or ``max_new_tokens``, the tokens and the positions.
    """
    ids = tok.encode(prompt) or ([tok.eos_id] if tok.eos_id is not None else [])
    if not ids:
        raise SettingError(field, "is empty and the tokenizer has no end-of-text token to start from")
    check_room(len(ids), positions, new_tokens, field=field, reader=reader)
    return ids


def check_room(n: int, positions: int, new_tokens: int | None = None, *, field: str = "prompt",
               reader: str = "the model") -> None:
    """Refuse a prompt of ``n`` tokens that leaves no room among ``positions`` for a new token, or for
    ``new_tokens``: never fewer tokens than asked without a word (``SettingError.name`` ``field`` or
    ``"max_new_tokens"``, which a door spells its own way)."""
    if n >= positions:
        raise SettingError(field, f"is {n} tokens; {reader} reads at most {positions} with the new ones")
    if new_tokens is not None and n + new_tokens > positions:
        raise SettingError("max_new_tokens", f"is {new_tokens}, but {field} is {n} tokens and {reader} reads "
                                             f"at most {positions} positions: at most {positions - n}")


def _prompt_ids(model, tok, prompt: str, max_new_tokens: int, asked: bool,
                max_length: int | None = None) -> tuple[list[int], int]:
    """The ids of ``prompt`` (:func:`prompt_ids`) and the new tokens to make: ``max_new_tokens`` when ``asked``,
    else ``max_length`` less the prompt where given (``transformers``' meaning: ``max_new_tokens`` wins when both
    are), else the default cut to the room the model has."""
    positions = reach(model)
    ids = prompt_ids(tok, prompt, positions)
    if max_length is not None and not asked:
        GenerationConfig(max_length=max_length)  # an integer >= 1, or refused by name
        if max_length <= len(ids):
            raise SettingError("max_length", f"is {max_length}, which counts the prompt's {len(ids)} tokens: no room "
                                             f"for a new one (pass max_new_tokens)")
        max_new_tokens, asked = max_length - len(ids), True
    if asked:
        check_room(len(ids), positions, max_new_tokens)
    return ids, min(max_new_tokens, positions - len(ids))


def reach(model) -> int:
    """The positions ``model`` reads, prompt and new tokens together: its ``max_len``; a model with a memory of
    the segments before (Transformer-XL) reads on without end (``sys.maxsize``)."""
    return getattr(model.cfg, "max_len", sys.maxsize)


def _checked(options: dict[str, Any], seed: int | None, **more: Any) -> dict[str, Any]:
    """``options`` over :data:`DEFAULTS`, the settings of :func:`aiayn.decoding.settings.check` checked there (the
    others by :class:`~aiayn.decoding.config.GenerationConfig`, in ``generate``)."""
    o = {**DEFAULTS, **options}
    check(**{k: v for k, v in o.items() if k in CHECKED}, seed=seed, **more)
    return o


def _seeded(model, seed: int | None) -> torch.Generator | None:
    """A generator on the model's device seeded with ``seed`` (a seed repeats its text on one device)."""
    return None if seed is None else torch.Generator(devices.of(model)).manual_seed(seed)


def continuations(model, tok, prompts: list[str], *, stop: list[str] | None = None, seed: int | None = None,
                  num_return_sequences: int | None = None, num_beams: int | None = None, compile: bool = False,
                  **options: Any) -> list[list[str]]:
    """The ``num_return_sequences`` continuations of each prompt (not the prompt), cut before the first stop
    string: greedy decoding and beam search run the prompts as one batch (left-padded); sampling draws each prompt
    on its own with a generator seeded with ``seed``, so a prompt's text does not depend on the others.

    Args:
        options: ``generate``'s, by ``transformers``' names: a ``generation_config``
            (:class:`~aiayn.decoding.config.GenerationConfig`: its values replace the defaults) and its fields, over
            :data:`DEFAULTS` (``max_new_tokens``, ``do_sample``, ``temperature``, ``top_k``, ``top_p``,
            ``repetition_penalty``, ``no_repeat_ngram_size``, ``min_new_tokens``); ``max_length`` counts the
            prompt and the new tokens, as ``generate`` counts it; ``length_penalty``, ``early_stopping``, ...
            go to beam search as there.
        compile: decoding over a static cache with a compiled step (:mod:`aiayn.layers.session`; the same
            text).

    Raises:
        TypeError: an option ``generate`` does not take (named).
    """
    config = options.pop("generation_config", None)
    if config is not None and not isinstance(config, GenerationConfig):
        raise TypeError(f"generation_config must be an aiayn.GenerationConfig, got {type(config).__name__}")
    asked = {"num_beams": num_beams, "num_return_sequences": num_return_sequences, **options}
    # a config replaces the pipeline's defaults where it has a value (as transformers' pipeline takes one); keywords
    # replace both
    chosen = {} if config is None else {**{k: getattr(config, k) for k in DEFAULTS}, **config.to_dict()}
    given = {**{k: v for k, v in chosen.items() if v is not None}, **{k: v for k, v in asked.items() if v is not None}}
    unknown = set(given) - {f.name for f in dataclasses.fields(GenerationConfig)}
    if unknown:
        raise TypeError(f"unknown generation options {sorted(unknown)}; they are generate's: the fields of "
                        f"aiayn.GenerationConfig, generation_config, and stop, seed")
    num_beams, num_return_sequences = given.pop("num_beams", 1), given.pop("num_return_sequences", 1)
    max_length = given.pop("max_length", None)
    o = _checked(given, seed, num_beams=num_beams, num_return_sequences=num_return_sequences)
    encoded = [_prompt_ids(model, tok, p, o["max_new_tokens"], "max_new_tokens" in given, max_length)
               for p in prompts]
    n = num_return_sequences
    settings = {"eos_token_id": tok.eos_id, **o, "num_return_sequences": n, "num_beams": num_beams,
                "compile": compile}
    del settings["max_new_tokens"]  # each prompt's room
    where = devices.of(model)
    if o["do_sample"]:  # one prompt at a time: each seeded alike
        rows = [(ids, cast(Tensor, generate_ids(model, torch.tensor([ids], device=where), **settings,
                                                generator=_seeded(model, seed), max_new_tokens=room)))
                for ids, room in encoded]
        made = [[r[len(ids):] for r in out.tolist()] for ids, out in rows]
    else:
        width = max(len(ids) for ids, _ in encoded)
        batch = torch.zeros(len(encoded), width, dtype=torch.long, device=where)
        mask = torch.zeros_like(batch)
        for i, (ids, _) in enumerate(encoded):
            batch[i, width - len(ids):], mask[i, width - len(ids):] = torch.tensor(ids), 1
        out = cast(Tensor, generate_ids(model, batch, attention_mask=mask, **settings,
                                        max_new_tokens=min(room for _, room in encoded))).tolist()
        made = [[r[width:] for r in out[i * n:(i + 1) * n]] for i in range(len(encoded))]
    ends = {tok.eos_id}
    return [[_cut(tok.decode(_until(r, ends)), [s for s in stop or [] if s])[0] for r in rows_] for rows_ in made]


def _until(ids: list[int], ends: set[int | None]) -> list[int]:
    """``ids`` up to (not including) the first end token."""
    return next((ids[:i] for i, t in enumerate(ids) if t in ends), ids)


def stream_text(model, tok, prompt: str, *, stop: list[str] | None = None, seed: int | None = None,
                compile: bool = False, **options: Any) -> Iterator[str]:
    """:func:`generate` with a loaded ``model`` and tokenizer ``tok``: the continuation of ``prompt``, piece by
    piece, whole characters only (``options``: those of :func:`continuations` but beams and several sequences)."""
    max_length = options.pop("max_length", None)
    unknown = set(options) - set(DEFAULTS)
    if unknown:
        raise TypeError(f"unknown generation options {sorted(unknown)}; streaming takes {sorted(DEFAULTS)}, "
                        f"max_length, stop, seed")
    o = _checked(options, seed)
    ids, room = _prompt_ids(model, tok, prompt, o["max_new_tokens"], "max_new_tokens" in options, max_length)
    processing = Processing(o["repetition_penalty"], o["no_repeat_ngram_size"], o["min_new_tokens"] or 0,
                            () if tok.eos_id is None else (tok.eos_id,))
    chosen = sampling_options(o["do_sample"], o["temperature"], o["top_k"], o["top_p"])
    text = Text(tok, stop)
    steps = stream(model, [ids], room, chosen["temperature"], chosen["top_k"], chosen["top_p"],
                   _seeded(model, seed), tok.eos_id, processing=processing, compile=compile)
    for nxt in steps:
        token = int(nxt[0])
        if token == tok.eos_id:
            break
        if piece := text.add(token):
            yield piece
        if text.stopped:
            return
    if rest := text.rest():  # the end, and no stop string came
        yield rest


__all__ = ["DEFAULTS", "Text", "check_room", "complete", "continuations", "generate", "load_lm_run", "prompt_ids",
           "stream_text"]
