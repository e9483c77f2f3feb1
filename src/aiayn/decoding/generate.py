"""``generate`` with Hugging Face's argument names and meanings, on the decoders here.

    model.generate(input_ids, max_new_tokens=20)                        greedy
    model.generate(input_ids, do_sample=True, top_p=0.9)                sampling (top_k 50 unless given)
    model.generate(input_ids, num_beams=4, length_penalty=1.0)          beam search

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

from typing import Any

import torch
from torch import Tensor, nn

from aiayn.decoding.beam import beam_search, beam_search_lm
from aiayn.decoding.greedy import greedy
from aiayn.decoding.sampling import check_left_padded, end_ids, ends, sample, sample_seq2seq
from aiayn.layers.embedding import check_ids

HF_NEW_TOKENS = 20  # what transformers generates when given no length
HF_TOP_K = 50  # transformers' GenerationConfig.top_k


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
    use_cache: bool = True,
    generator: torch.Generator | None = None,
    **unsupported: Any,
) -> Tensor:
    """Generate as ``transformers``' ``model.generate`` does, with its arguments.

    Args:
        input_ids: ``(B, T)``: a language model's prompts or an encoder-decoder's sources.
        attention_mask: ``(B, T)``, 1 for real tokens. A language model's prompts are padded on the left;
            an encoder-decoder's padding is its ``pad_id`` (the mask, if given, must say the same).
        max_new_tokens, max_length: most new tokens; ``max_length`` counts the prompt (a language model)
            or the start token (an encoder-decoder) too.
        do_sample, temperature, top_k, top_p: draw each token (temperature first, then top-k, then top-p).
        num_beams, length_penalty, early_stopping: beam search (:func:`~aiayn.decoding.beam_search`).
        num_return_sequences: with ``do_sample``, how many sequences each input draws: rows ``i * n`` to
            ``i * n + n - 1`` of the result are input ``i``'s (as ``transformers`` orders them).
        eos_token_id, decoder_start_token_id: must be the model's own (its config's); ``eos_token_id``
            may be set for a language model whose config has another, or a list of ids that each end a row
            (a language model's default: its ``eos_id`` and ``stop_ids``, as Llama 3's chat models list three).
        pad_token_id: what fills a row after its end (default: the first end token).
        generator: a seeded ``torch.Generator`` for sampling (not a ``transformers`` argument; without
            it, sampling draws from torch's global generator, as ``transformers`` does).

    Returns:
        ``(B, T + n)`` for a language model (the prompt, then ``n <= N`` new tokens), ``(B, 1 + n)`` for an
        encoder-decoder (the start token, then the new tokens); ``B * num_return_sequences`` rows when sampling
        several.

    Raises:
        TypeError: an argument ``transformers`` has that is not supported here (named).
        ValueError: a bad value (named), or ids that are not ``(B, T)`` integers of the vocabulary.
    """
    if unsupported:
        raise TypeError(f"generate() does not support {', '.join(sorted(unsupported))}; it takes max_new_tokens, "
                        f"max_length, do_sample, num_beams, temperature, top_k, top_p, length_penalty, "
                        f"early_stopping, num_return_sequences, eos_token_id, pad_token_id, "
                        f"decoder_start_token_id, use_cache, generator")
    if num_return_sequences < 1:
        raise ValueError(f"num_return_sequences must be >= 1, got {num_return_sequences}")
    if num_return_sequences > 1 and not do_sample:  # as transformers: one search gives one answer per input here
        raise ValueError(f"num_return_sequences={num_return_sequences} needs do_sample=True (greedy decoding and "
                         f"beam search give one sequence per input here)")
    if num_beams < 1:
        raise ValueError(f"num_beams must be >= 1, got {num_beams}")
    if do_sample and num_beams > 1:
        raise ValueError("do_sample=True with num_beams > 1 (beam sampling) is not supported")
    if do_sample and temperature <= 0:
        raise ValueError(f"temperature must be > 0 when sampling, got {temperature}")
    if do_sample and not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1] when sampling, got {top_p}")
    check_ids(input_ids, 0, "input_ids", values=False)
    if num_return_sequences > 1:  # each input drawn from that many times, its rows together (transformers' order)
        input_ids = input_ids.repeat_interleave(num_return_sequences, dim=0)
        if attention_mask is not None:
            attention_mask = attention_mask.repeat_interleave(num_return_sequences, dim=0)
    cfg: Any = getattr(model, "cfg", None)
    sampling: dict[str, Any] | None = None
    if do_sample:
        sampling = {"temperature": temperature, "top_k": top_k or None, "top_p": top_p if top_p < 1.0 else None,
                    "generator": generator}
    if hasattr(model, "encode"):
        return _seq2seq(model, cfg, input_ids, attention_mask, _budget(max_new_tokens, max_length, 1), sampling,
                        num_beams, length_penalty, early_stopping, eos_token_id, pad_token_id,
                        decoder_start_token_id, use_cache)
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
    if num_beams > 1:
        new = beam_search_lm(model, input_ids, budget, num_beams, length_penalty, eos, attention_mask, use_cache,
                             early_stopping=early_stopping)
        assert isinstance(new, Tensor)  # no return_scores
    else:
        check_left_padded(attention_mask)
        real = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
        rows = [ids[keep].tolist() for ids, keep in zip(input_ids, real)]
        options: dict[str, Any] = sampling or {"temperature": 0.0}
        out = sample(model, rows, budget, eos_id=eos, use_cache=use_cache, **options)
        assert isinstance(out, list)  # lists in, lists out
        width = max(len(o) - len(r) for o, r in zip(out, rows))
        new = torch.full((len(rows), width), pad, dtype=torch.long, device=input_ids.device)
        for i, (o, r) in enumerate(zip(out, rows)):
            new[i, : len(o) - len(r)] = torch.as_tensor(o[len(r):], dtype=torch.long)
    return torch.cat([input_ids, _pad_after(new, eos, pad)], dim=1)


def _seq2seq(model: nn.Module, cfg: Any, src: Tensor, attention_mask: Tensor | None, budget: int,
             sampling: dict[str, Any] | None, num_beams: int, length_penalty: float, early_stopping: bool | str,
             eos_token_id: int | list[int] | None, pad_token_id: int | None, start: int | None,
             use_cache: bool) -> Tensor:
    if eos_token_id is not None and end_ids(eos_token_id) != (cfg.eos_id,):  # one id, or a list of it alone
        raise ValueError(f"eos_token_id={eos_token_id}: this model's is {cfg.eos_id} (its config's), its only end")
    if start is not None and start != cfg.bos_id:
        raise ValueError(f"decoder_start_token_id={start}: this model's is {cfg.bos_id} (its config's)")
    if attention_mask is not None and not torch.equal(attention_mask.bool(), src != cfg.pad_id):
        raise ValueError(f"attention_mask must mark exactly the tokens that are not padding (pad_id {cfg.pad_id}): "
                         f"an encoder-decoder here masks its padding by id")
    if num_beams > 1:
        ids = beam_search(model, src, num_beams, length_penalty, budget, use_cache, normalize="length",
                          early_stopping=early_stopping)
        assert isinstance(ids, Tensor)  # no return_scores
    elif sampling is not None:
        ids = sample_seq2seq(model, src, budget, use_cache=use_cache, **sampling)
    else:
        ids = greedy(model, src, budget, use_cache)
    first = torch.full((src.size(0), 1), cfg.bos_id, dtype=torch.long, device=src.device)
    pad = cfg.pad_id if pad_token_id is None else pad_token_id
    return torch.cat([first, _pad_after(ids, (cfg.eos_id,), pad)], dim=1)


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


__all__ = ["HF_NEW_TOKENS", "HF_TOP_K", "generate"]
