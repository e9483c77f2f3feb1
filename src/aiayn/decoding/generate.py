"""``generate`` with Hugging Face's argument names and meanings, on the decoders here.

    model.generate(input_ids, max_new_tokens=20)                        greedy
    model.generate(input_ids, do_sample=True, top_p=0.9)                sampling (top_k 50 unless given)
    model.generate(input_ids, num_beams=4, length_penalty=1.0)          beam search
    model.generate(input_ids, num_beams=4, num_return_sequences=4,      the 4 best, and their scores
                   return_dict_in_generate=True, output_scores=True)
    model.generate(input_ids, repetition_penalty=1.3, no_repeat_ngram_size=3, min_new_tokens=5)
    model.generate(input_ids, assistant_model=draft)                    speculative decoding (a small draft proposes)

The same call runs a language model (GPT: ``input_ids`` is the prompt, padded on the left with
``attention_mask``; the result is the prompt followed by the new tokens) and an encoder-decoder
(the Transformer, BART, Marian: ``input_ids`` is the source; the result starts with the decoder's start
token), as ``transformers`` does. Defaults are ``transformers``' own (version 5): 20 new tokens when
neither length is given, ``top_k=50`` when sampling, ``length_penalty=1.0`` on ``len ** alpha`` and the
``early_stopping=False`` heuristic for beams. Rows that end early are padded with ``pad_token_id`` (a
language model without one pads with ``eos_token_id``, as ``transformers`` does). An argument that is not
supported is refused by name, never ignored.

Where ``transformers`` differs: without ``attention_mask`` it guesses one from ``pad_token_id`` tokens in the prompt
(here no mask means no padding: pass the mask); with beams it pads finished rows with the first end token when
``pad_token_id`` is 0 (it reads 0 as unset); and an encoder-decoder here never emits its padding token, which
``transformers`` matches when given ``bad_words_ids=[[pad]]`` (Marian's generation config sets it, BART's does not).

Shapes: B batch, T prompt (or source) length, N new tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from aiayn.decoding.beam import PENALTIES, beam_search, beam_search_lm
from aiayn.decoding.greedy import decode_with
from aiayn.decoding.processing import Processing
from aiayn.decoding.sampling import check_left_padded, end_ids, ends, pick, sample, sample_seq2seq
from aiayn.decoding.settings import check, check_beams
from aiayn.decoding.speculative import speculative
from aiayn.defaults import HF_NEW_TOKENS, HF_TOP_K
from aiayn.layers.embedding import check_ids


@dataclass(frozen=True)
class GenerateOutput:
    """What ``generate(..., return_dict_in_generate=True)`` returns, as ``transformers``' ``GenerateOutput``s name
    it: ``sequences`` as ``generate`` returns them; with ``output_scores``, ``scores``, one ``(rows, V)`` tensor
    per new token (greedy decoding and sampling: the scores each token was chosen from, after the processing,
    temperature, top-k and top-p; ``None`` with beams), and ``sequences_scores`` ``(rows,)`` (beam search: each
    sequence's summed log-probability over its length penalty, the score it was ranked by; ``None`` otherwise)."""

    sequences: Tensor
    scores: tuple[Tensor, ...] | None = None
    sequences_scores: Tensor | None = None


@torch.no_grad()
def generate(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    *,
    max_new_tokens: int | None = None,
    max_length: int | None = None,
    do_sample: bool = False,
    num_beams: int = 1,
    temperature: float = 1.0,
    top_k: int | None = HF_TOP_K,
    top_p: float = 1.0,
    length_penalty: float = 1.0,
    early_stopping: bool | str = False,
    eos_token_id: int | list[int] | None = None,
    pad_token_id: int | None = None,
    decoder_start_token_id: int | None = None,
    num_return_sequences: int = 1,
    repetition_penalty: float = 1.0,
    no_repeat_ngram_size: int = 0,
    min_new_tokens: int | None = None,
    return_dict_in_generate: bool = False,
    output_scores: bool = False,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
    compile: bool = False,
    assistant_model: nn.Module | None = None,
    num_assistant_tokens: int = 5,
    **unsupported: Any,
) -> Tensor | GenerateOutput:
    """Generate as ``transformers``' ``model.generate`` does, with its arguments.

    Args:
        input_ids: ``(B, T)``: a language model's prompts or an encoder-decoder's sources.
        attention_mask: ``(B, T)``, 1 for real tokens. A language model's prompts are padded on the left;
            an encoder-decoder's padding is its ``pad_id`` (the mask, if given, must say the same).
        max_new_tokens, max_length: most new tokens; ``max_length`` counts the prompt (a language model)
            or the start token (an encoder-decoder) too.
        do_sample, temperature, top_k, top_p: draw each token (temperature first, then top-k, then top-p).
        num_beams, length_penalty, early_stopping: beam search (:func:`~aiayn.decoding.beam_search`).
        num_return_sequences: how many sequences each input gives: with ``do_sample``, that many draws; with
            beams, the ``n <= num_beams`` best hypotheses, best first. Rows ``i * n`` to ``i * n + n - 1`` of the
            result are input ``i``'s (as ``transformers`` orders them).
        repetition_penalty, no_repeat_ngram_size, min_new_tokens: the logits processing of
            :mod:`aiayn.decoding.processing` (``transformers``' processors of those names; their defaults do
            nothing). Padding is not read as tokens there, where ``transformers`` reads it.
        return_dict_in_generate, output_scores: return a :class:`GenerateOutput` (with ``scores`` and
            ``sequences_scores`` when ``output_scores``) instead of the ids alone.
        eos_token_id, decoder_start_token_id: must be the model's own (its config's); ``eos_token_id``
            may be set for a language model whose config has another, or a list of ids that each end a row
            (a language model's default: its ``eos_id`` and ``stop_ids``, as Llama 3's chat models list three).
        pad_token_id: what fills a row after its end (default: the first end token).
        generator: a seeded ``torch.Generator`` for sampling (not a ``transformers`` argument; without
            it, sampling draws from torch's global generator, as ``transformers`` does).
        compile: decode over a static cache, the one-token step through ``torch.compile``
            (:mod:`aiayn.decoding.static`; greedy, sampling and beam search, language models and
            encoder-decoders): the same tokens; the first call of a batch size and length waits for the
            compiler. Needs ``use_cache``; a sliding window's cache is a ring of its W columns.
        assistant_model, num_assistant_tokens: speculative decoding (:mod:`aiayn.decoding.speculative`): the
            draft, a smaller language model of the same tokenizer, proposes ``num_assistant_tokens`` tokens and
            the model checks them in one pass; greedy gives the same tokens, sampling the model's distribution.
            A language model's greedy decoding or sampling, without the logits processing, scores or compile.

    Returns:
        ``(B, T + n)`` for a language model (the prompt, then ``n <= N`` new tokens), ``(B, 1 + n)`` for an
        encoder-decoder (the start token, then the new tokens); ``B * num_return_sequences`` rows when asked for
        several; a :class:`GenerateOutput` of them with ``return_dict_in_generate``.

    Raises:
        TypeError: an argument ``transformers`` has that is not supported here (named).
        ValueError: a bad value (named), or ids that are not ``(B, T)`` integers of the vocabulary.
    """
    if unsupported:
        raise TypeError(f"generate() does not support {', '.join(sorted(unsupported))}; it takes max_new_tokens, "
                        f"max_length, do_sample, num_beams, temperature, top_k, top_p, length_penalty, "
                        f"early_stopping, num_return_sequences, repetition_penalty, no_repeat_ngram_size, "
                        f"min_new_tokens, return_dict_in_generate, output_scores, eos_token_id, pad_token_id, "
                        f"decoder_start_token_id, use_cache, generator, compile, assistant_model, "
                        f"num_assistant_tokens")
    check(do_sample=do_sample, temperature=temperature, top_k=top_k, top_p=top_p, num_beams=num_beams,
          max_new_tokens=max_new_tokens, num_return_sequences=num_return_sequences,
          repetition_penalty=repetition_penalty, length_penalty=length_penalty,
          no_repeat_ngram_size=no_repeat_ngram_size, min_new_tokens=min_new_tokens)
    cfg_vocab = getattr(getattr(model, "cfg", None), "tgt_vocab_size", None) or getattr(
        getattr(model, "cfg", None), "vocab_size", None)
    check_beams(num_beams, cfg_vocab)
    if num_return_sequences > 1 and not do_sample and num_return_sequences > num_beams:  # as transformers
        raise ValueError(f"num_return_sequences={num_return_sequences} needs do_sample=True or num_beams >= it "
                         f"(greedy decoding gives one sequence per input), got num_beams={num_beams}")
    if do_sample and num_beams > 1:
        raise ValueError("do_sample=True with num_beams > 1 (beam sampling) is not supported")
    check_ids(input_ids, 0, "input_ids", values=False)
    if assistant_model is not None:
        _check_assisted(model, num_beams, compile, output_scores and return_dict_in_generate,
                        Processing(repetition_penalty, no_repeat_ngram_size, min_new_tokens or 0, ()).active)
    if do_sample and num_return_sequences > 1:  # each input drawn from that many times, its rows together
        input_ids = input_ids.repeat_interleave(num_return_sequences, dim=0)
        if attention_mask is not None:
            attention_mask = attention_mask.repeat_interleave(num_return_sequences, dim=0)
    cfg: Any = getattr(model, "cfg", None)
    sampling = {**sampling_options(do_sample, temperature, top_k, top_p), "generator": generator}
    scores: list[Tensor] | None = [] if return_dict_in_generate and output_scores and num_beams == 1 else None
    search = {"num_beams": num_beams, "length_penalty": length_penalty, "early_stopping": early_stopping,
              "num_return_sequences": 1 if do_sample else num_return_sequences, "use_cache": use_cache,
              "compile": compile, "assistant": assistant_model, "num_assistant_tokens": num_assistant_tokens}
    if hasattr(model, "encode"):
        if eos_token_id is not None and end_ids(eos_token_id) != (cfg.eos_id,):  # one id, or a list of it alone
            raise ValueError(f"eos_token_id={eos_token_id}: this model's is {cfg.eos_id} (its config's), its only "
                             f"end")
        if decoder_start_token_id is not None and decoder_start_token_id != cfg.bos_id:
            raise ValueError(f"decoder_start_token_id={decoder_start_token_id}: this model's is {cfg.bos_id} (its "
                             f"config's)")
        processing = Processing(repetition_penalty, no_repeat_ngram_size, min_new_tokens or 0, (cfg.eos_id,))
        ids, sums = _seq2seq(model, cfg, input_ids, attention_mask, _budget(max_new_tokens, max_length, 1), sampling,
                             processing, scores, search)
        first = torch.full((ids.size(0), 1), cfg.bos_id, dtype=torch.long, device=ids.device)
        eos: tuple[int, ...] = (cfg.eos_id,)
        pad = cfg.pad_id if pad_token_id is None else pad_token_id
        sequences = torch.cat([first, _pad_after(ids, eos, pad)], dim=1)
    else:
        if not hasattr(model, "new_cache"):
            raise ValueError(f"a {type(model).__name__} does not generate text (a GPT, Transformer or BART does)")
        if decoder_start_token_id is not None:
            raise ValueError("decoder_start_token_id is for encoder-decoders; a language model continues its prompt")
        budget = _budget(max_new_tokens, max_length, input_ids.size(1))
        if max_new_tokens is None and max_length is None:  # the default stops at the last position, as transformers'
            budget = max(1, min(budget, cfg.max_len - input_ids.size(1)))
        own = () if cfg.eos_id is None else (cfg.eos_id, *getattr(cfg, "stop_ids", ()))  # None: no end token
        eos = end_ids(own if eos_token_id is None else eos_token_id)
        if eos_token_id is not None and not eos:
            raise ValueError(f"eos_token_id={eos_token_id!r}: give an id, or a list of at least one")
        pad = (eos[0] if eos else 0) if pad_token_id is None else pad_token_id  # (no end: no row is padded)
        if attention_mask is not None and tuple(attention_mask.shape) != tuple(input_ids.shape):
            raise ValueError(f"attention_mask must be shaped as input_ids {tuple(input_ids.shape)}, got "
                             f"{tuple(attention_mask.shape)}")
        processing = Processing(repetition_penalty, no_repeat_ngram_size, min_new_tokens or 0, eos)
        new, sums = _language_model(model, input_ids, attention_mask, budget, eos, pad, sampling, processing,
                                    scores, search)
        rows = new.size(0) // input_ids.size(0)  # n-best: each prompt's rows together
        sequences = torch.cat([input_ids.repeat_interleave(rows, dim=0), _pad_after(new, eos, pad)], dim=1)
    if not return_dict_in_generate:
        return sequences
    ranked = None
    if output_scores and sums is not None:  # each sequence's score as beam search ranked it
        made = sequences.size(1) - (1 if hasattr(model, "encode") else input_ids.size(1))
        lengths = _lengths(sequences[:, sequences.size(1) - made :], eos)
        ranked = sums / torch.tensor([PENALTIES["length"](n, length_penalty) for n in lengths.tolist()],
                                     device=sums.device)
    return GenerateOutput(sequences, None if scores is None else tuple(scores), ranked)


def sampling_options(do_sample: bool, temperature: float, top_k: int | None, top_p: float) -> dict[str, Any]:
    """``transformers``' sampling arguments as the samplers here take them (:func:`aiayn.decoding.sampling.pick`):
    ``temperature`` 0 for greedy decoding, ``None`` for a top-k or top-p that keeps every token.

    The values were checked by :func:`aiayn.decoding.settings.check` (every caller does it first).
    """
    if not do_sample:
        return {"temperature": 0.0, "top_k": None, "top_p": None}
    return {"temperature": temperature, "top_k": top_k or None, "top_p": top_p if top_p < 1.0 else None}


def _language_model(model: nn.Module, input_ids: Tensor, attention_mask: Tensor | None, budget: int,
                    eos: tuple[int, ...], pad: int, sampling: dict[str, Any], processing: Processing,
                    scores: list[Tensor] | None, search: dict[str, Any]) -> tuple[Tensor, Tensor | None]:
    """A language model's new tokens ``(rows, n)`` and, with beams, their summed log-probabilities."""
    if search["num_beams"] > 1:
        new, sums = beam_search_lm(model, input_ids, budget, search["num_beams"], search["length_penalty"], eos,
                                   attention_mask, search["use_cache"], return_scores=True,
                                   early_stopping=search["early_stopping"],
                                   num_return_sequences=search["num_return_sequences"], processing=processing,
                                   compile=search["compile"])
        return new, sums
    check_left_padded(attention_mask)
    real = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    rows = [ids[keep].tolist() for ids, keep in zip(input_ids, real)]
    if search["assistant"] is not None:
        made, _ = speculative(model, search["assistant"], rows, budget, search["num_assistant_tokens"], eos_id=eos,
                              **sampling)
        out: Tensor | list[list[int]] = [r + m for r, m in zip(rows, made)]
    else:
        out = sample(model, rows, budget, eos_id=eos, use_cache=search["use_cache"], processing=processing,
                     scores=scores, compile=search["compile"], **sampling)
    assert isinstance(out, list)  # lists in, lists out
    width = max(len(o) - len(r) for o, r in zip(out, rows))
    new = torch.full((len(rows), width), pad, dtype=torch.long, device=input_ids.device)
    for i, (o, r) in enumerate(zip(out, rows)):
        new[i, : len(o) - len(r)] = torch.as_tensor(o[len(r):], dtype=torch.long)
    return new, None


def _seq2seq(model: nn.Module, cfg: Any, src: Tensor, attention_mask: Tensor | None, budget: int,
             sampling: dict[str, Any], processing: Processing, scores: list[Tensor] | None,
             search: dict[str, Any]) -> tuple[Tensor, Tensor | None]:
    """An encoder-decoder's new tokens ``(rows, n)`` (after the start token) and, with beams, their summed
    log-probabilities."""
    if attention_mask is not None and not torch.equal(attention_mask.bool(), src != cfg.pad_id):
        raise ValueError(f"attention_mask must mark exactly the tokens that are not padding (pad_id {cfg.pad_id}): "
                         f"an encoder-decoder here masks its padding by id")
    if search["num_beams"] > 1:
        ids, sums = beam_search(model, src, search["num_beams"], search["length_penalty"], budget,
                                search["use_cache"], return_scores=True, normalize="length",
                                early_stopping=search["early_stopping"],
                                num_return_sequences=search["num_return_sequences"], processing=processing,
                                compile=search["compile"])
        return ids, sums
    if sampling["temperature"] > 0:
        return sample_seq2seq(model, src, budget, use_cache=search["use_cache"], processing=processing,
                              scores=scores, compile=search["compile"], **sampling), None
    return decode_with(model, src, lambda logits: pick(logits, 0.0), budget, search["use_cache"], processing,
                       scores, search["compile"]), None


def _check_assisted(model: nn.Module, num_beams: int, compile: bool, scores: bool, processing: bool) -> None:
    """Refuse, by name, what speculative decoding does not run with."""
    if hasattr(model, "encode"):
        raise ValueError("assistant_model drafts for a language model; an encoder-decoder decodes without one")
    for name, given in (("num_beams > 1", num_beams > 1), ("compile=True", compile), ("output_scores", scores),
                        ("repetition_penalty, no_repeat_ngram_size or min_new_tokens", processing)):
        if given:
            raise ValueError(f"assistant_model (speculative decoding) does not run with {name}")


def _lengths(new: Tensor, eos: tuple[int, ...]) -> Tensor:
    """``(rows,)`` tokens each row of ``new`` ``(rows, n)`` made: up to its first end token, which counts."""
    if not eos:
        return torch.full((new.size(0),), new.size(1), device=new.device)
    is_eos = ends(new, eos)
    first = is_eos.long().argmax(1) + 1
    return torch.where(is_eos.any(1), first, torch.full_like(first, new.size(1)))


def _budget(max_new_tokens: int | None, max_length: int | None, counted: int) -> int:
    """New tokens allowed: ``max_new_tokens``, else ``max_length`` less the ``counted`` tokens it includes."""
    if max_new_tokens is not None:
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        return max_new_tokens
    if max_length is None:
        return HF_NEW_TOKENS
    length = max_length
    if length <= counted:
        raise ValueError(f"max_length={length} leaves no room after the {counted} input tokens it counts; "
                         f"pass max_new_tokens")
    return length - counted


def _pad_after(ids: Tensor, eos: tuple[int, ...], pad: int) -> Tensor:
    """``(B, N)`` ids with every position after a row's first end token (any of ``eos``) set to ``pad``."""
    if not eos:
        return ids
    is_eos = ends(ids, eos).long()
    return ids.masked_fill(is_eos.cumsum(1) - is_eos > 0, pad)


__all__ = ["HF_NEW_TOKENS", "HF_TOP_K", "GenerateOutput", "generate", "sampling_options"]
