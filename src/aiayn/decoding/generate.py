"""``generate`` with Hugging Face's argument names and meanings, on the decoders here.

    model.generate(input_ids, max_new_tokens=20)                        greedy
    model.generate(input_ids, do_sample=True, top_p=0.9)                sampling (top_k 50 unless given)
    model.generate(input_ids, num_beams=4, length_penalty=1.0)          beam search
    model.generate(input_ids, num_beams=4, num_return_sequences=4,      the 4 best, and their scores
                   return_dict_in_generate=True, output_scores=True)
    model.generate(input_ids, repetition_penalty=1.3, no_repeat_ngram_size=3, min_new_tokens=5)
    model.generate(input_ids, assistant_model=draft)                    speculative decoding (a small draft proposes)
    model.generate(input_ids, stop_strings=["\\n"], tokenizer=tok)       a row ends once its text holds a stop string
    model.generate(input_ids, streamer=TextStreamer(tok))               each token handed over as it is made

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

from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor, nn

from aiayn.decoding.beam import PENALTIES, search
from aiayn.decoding.config import GenerationConfig
from aiayn.decoding.loops import end_ids, ends, evaluating, generated, tokens
from aiayn.decoding.processing import Processing
from aiayn.decoding.sampling import check_left_padded, pick
from aiayn.decoding.settings import check_beams
from aiayn.decoding.speculative import speculative
from aiayn.decoding.stopping import StopStrings
from aiayn.defaults import HF_NEW_TOKENS, HF_TOP_K
from aiayn.layers.embedding import check_ids


@dataclass(frozen=True)
class GenerateOutput:
    """What ``generate(..., return_dict_in_generate=True)`` returns, as ``transformers``' ``GenerateOutput``s name
    it: ``sequences`` as ``generate`` returns them; with ``output_scores``, ``scores``, one ``(rows, V)`` tensor
    per new token (greedy decoding and sampling: the scores each token was chosen from, after the processing,
    temperature, top-k and top-p; ``None`` with beams), and ``sequences_scores`` ``(rows,)`` (beam search: each
    sequence's summed log-probability over its length penalty, the score it was ranked by; ``None`` otherwise).

    It behaves as ``transformers``' ``ModelOutput``: the fields that are not ``None`` are its ``keys()``, read by
    name or by place (``out["sequences"]``, ``out[0]``), in ``to_tuple()``, and iterated as a dict's keys."""

    sequences: Tensor
    scores: tuple[Tensor, ...] | None = None
    sequences_scores: Tensor | None = None

    def keys(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name) is not None]

    def values(self) -> list[Any]:
        return [getattr(self, k) for k in self.keys()]

    def items(self) -> list[tuple[str, Any]]:
        return [(k, getattr(self, k)) for k in self.keys()]

    def to_tuple(self) -> tuple[Any, ...]:
        return tuple(self.values())

    def __getitem__(self, key: str | int | slice) -> Any:
        if isinstance(key, str):
            if key not in self.keys():
                raise KeyError(key)
            return getattr(self, key)
        return self.to_tuple()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    def __len__(self) -> int:
        return len(self.keys())


@torch.no_grad()
def generate(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor | None = None,
    *,
    generation_config: GenerationConfig | None = None,
    generator: torch.Generator | None = None,
    compile: bool = False,
    assistant_model: nn.Module | None = None,
    tokenizer: Any = None,
    streamer: Any = None,
    **overrides: Any,
) -> Tensor | GenerateOutput:
    """Generate as ``transformers``' ``model.generate`` does, with its arguments.

    Args:
        input_ids: ``(B, T)``: a language model's prompts or an encoder-decoder's sources.
        attention_mask: ``(B, T)``, 1 for real tokens. A language model's prompts are padded on the left;
            an encoder-decoder's padding is its ``pad_id`` (the mask, if given, must say the same).
        generation_config: a :class:`~aiayn.decoding.config.GenerationConfig` (default: its defaults, which
            are ``transformers``'); ``overrides``, its fields by name, replace the config's (``max_new_tokens``,
            ``do_sample``, ``num_beams``, ``top_p``, ...). Rows ``i * n`` to ``i * n + n - 1`` of the result are
            input ``i``'s with ``num_return_sequences=n``. ``eos_token_id`` and ``decoder_start_token_id`` must
            be the model's own (its config's); a language model may take another ``eos_token_id``, or a list of
            ids that each end a row (its default: its ``eos_id`` and ``stop_ids``, as Llama 3's chat models list
            three). ``pad_token_id`` fills a row after its end (default: the first end token).
        generator: a seeded ``torch.Generator`` for sampling (not a ``transformers`` argument; without
            it, sampling draws from torch's global generator, as ``transformers`` does).
        compile: decode over a static cache, the one-token step through ``torch.compile`` (the model's
            decode session; greedy, sampling and beam search, language models and encoder-decoders): the same
            tokens; the first call of a batch size and length waits for the compiler. Needs ``use_cache``; a
            sliding window's cache is a ring of its W columns.
        assistant_model: speculative decoding (:mod:`aiayn.decoding.speculative`): the draft, a smaller language
            model of the same tokenizer, proposes ``num_assistant_tokens`` tokens and the model checks them in
            one pass; greedy gives the same tokens, sampling the model's distribution. A language model's greedy
            decoding or sampling, without the logits processing, scores or compile.
        tokenizer: the model's tokenizer (``decode(ids)``), which ``stop_strings`` reads the text with.
        streamer: an object with ``put(ids)`` and ``end()``, as ``transformers``' ``TextStreamer`` and
            ``TextIteratorStreamer``: given the prompt (an encoder-decoder's start tokens) ``(B, T)``, then each
            step's tokens ``(rows,)`` (a finished row's being padding), on the CPU, then ``end()``. Greedy
            decoding or sampling.

    Returns:
        ``(B, T + n)`` for a language model (the prompt, then ``n <= N`` new tokens), ``(B, 1 + n)`` for an
        encoder-decoder (the start token, then the new tokens); ``B * num_return_sequences`` rows when asked for
        several; a :class:`GenerateOutput` of them with ``return_dict_in_generate``.

    Raises:
        TypeError: an argument ``transformers`` has that is not supported here (named).
        ValueError: a bad value (named), or ids that are not ``(B, T)`` integers of the vocabulary.
    """
    config = (generation_config or GenerationConfig()).update(**overrides)
    cfg: Any = getattr(model, "cfg", None)
    if not callable(getattr(model, "session", None)) or cfg is None:
        raise ValueError(f"a {type(model).__name__} does not generate text (a GPT, Transformer or BART does)")
    seq2seq = bool(getattr(cfg, "is_encoder_decoder", False))
    check_beams(config.num_beams, cfg.tgt_vocab_size if seq2seq else cfg.vocab_size)
    check_ids(input_ids, 0, "input_ids", values=False)
    mode = config.mode(assistant_model is not None)
    if assistant_model is not None:
        _check_assisted(seq2seq, config, compile, streamer)
    if streamer is not None and mode == "beam_search":
        raise ValueError("streamer hands over one token per row and step; it cannot be used with num_beams > 1 "
                         "(as in transformers)")
    if streamer is not None and not (callable(getattr(streamer, "put", None)) and callable(getattr(streamer, "end",
                                                                                                      None))):
        raise TypeError(f"streamer must have put(ids) and end() (transformers' TextStreamer does), got "
                        f"{type(streamer).__name__}")
    stop = StopStrings(tokenizer, config.stop_strings) if config.stop_strings is not None else None
    if seq2seq:
        eos, pad, new_tokens = _seq2seq_ends(cfg, config, input_ids, attention_mask)
        attention_mask = None  # the padding is read from the ids
    else:
        eos, pad, new_tokens = _lm_ends(cfg, config, input_ids, attention_mask)
    processing = Processing(config.repetition_penalty, config.no_repeat_ngram_size, config.min_new_tokens or 0, eos)
    scores: list[Tensor] | None = [] if config.return_dict_in_generate and config.output_scores \
        and mode != "beam_search" else None
    sums = None
    with evaluating(model):
        if mode == "assisted_generation":
            new = _assisted(model, assistant_model, input_ids, attention_mask, new_tokens, eos, pad, config,
                            generator)
            starts = input_ids
        else:
            session: Any = model.session(use_cache=config.use_cache, compile=compile,  # type: ignore[operator]
                                         beams=mode == "beam_search")
            if mode == "beam_search":
                new, sums = search(session, input_ids, attention_mask, config.num_beams, eos, pad, new_tokens,
                                   config.length_penalty, PENALTIES["length"], config.early_stopping, processing,
                                   config.num_return_sequences, compile)
                starts = session.prefix[:: config.num_beams]  # (B, P) one per input
            else:
                repeat = config.num_return_sequences if config.do_sample else 1  # each input drawn from n times
                options = sampling_options(config.do_sample, config.temperature, config.top_k, config.top_p,
                                           config.typical_p)
                steps = tokens(session, input_ids, attention_mask, new_tokens,
                               lambda logits: pick(logits, generator=generator, **options), eos=eos,
                               pad=pad, repeat=repeat, processing=processing, scores=scores, drawn=config.do_sample,
                               stop=stop)
                if streamer is not None:
                    streamer.put((torch.full((input_ids.size(0), 1), cfg.bos_id) if seq2seq else input_ids).cpu())
                    steps = _streamed(steps, streamer)
                new = generated(steps, eos, scores)
                starts = session.prefix[::repeat]
    rows = new.size(0) // starts.size(0)  # n-best and draws: each input's rows together
    sequences = torch.cat([starts.repeat_interleave(rows, dim=0), _pad_after(new, eos, pad)], dim=1)
    if not config.return_dict_in_generate:
        return sequences
    ranked = None
    if config.output_scores and sums is not None:  # each sequence's score as beam search ranked it
        lengths = _lengths(new, eos)
        ranked = sums / torch.tensor([PENALTIES["length"](n, config.length_penalty) for n in lengths.tolist()],
                                     device=sums.device)
    return GenerateOutput(sequences, None if scores is None else tuple(scores), ranked)


def sampling_options(do_sample: bool, temperature: float, top_k: int | None, top_p: float,
                     typical_p: float = 1.0) -> dict[str, Any]:
    """``transformers``' sampling arguments as the samplers here take them (:func:`aiayn.decoding.sampling.pick`):
    ``temperature`` 0 for greedy decoding, ``None`` for a top-k, top-p or typical_p that keeps every token.

    The values were checked by :func:`aiayn.decoding.settings.check` (every caller does it first).
    """
    if not do_sample:
        return {"temperature": 0.0, "top_k": None, "top_p": None, "typical_p": None}
    return {"temperature": temperature, "top_k": top_k or None, "top_p": top_p if top_p < 1.0 else None,
            "typical_p": typical_p if typical_p < 1.0 else None}


def _streamed(steps: Iterator[Tensor], streamer: Any) -> Iterator[Tensor]:
    """``steps``, each handed to ``streamer.put`` (on the CPU) as it is made, and ``streamer.end()`` after the last
    (also when decoding fails, so a reader waiting on a ``TextIteratorStreamer`` is not left waiting)."""
    try:
        for token in steps:
            streamer.put(token.cpu())
            yield token
    finally:
        streamer.end()


def _seq2seq_ends(cfg: Any, config: GenerationConfig, src: Tensor,
                  attention_mask: Tensor | None) -> tuple[tuple[int, ...], int, int]:
    """An encoder-decoder's end tokens, padding and new tokens, its own ids checked against the config's."""
    if config.eos_token_id is not None and end_ids(config.eos_token_id) != (cfg.eos_id,):
        raise ValueError(f"eos_token_id={config.eos_token_id}: this model's is {cfg.eos_id} (its config's), its only "
                         f"end")
    if config.decoder_start_token_id is not None and config.decoder_start_token_id != cfg.bos_id:
        raise ValueError(f"decoder_start_token_id={config.decoder_start_token_id}: this model's is {cfg.bos_id} (its "
                         f"config's)")
    if attention_mask is not None and not torch.equal(attention_mask.bool(), src != cfg.pad_id):
        raise ValueError(f"attention_mask must mark exactly the tokens that are not padding (pad_id {cfg.pad_id}): "
                         f"an encoder-decoder here masks its padding by id")
    vocab = cfg.src_vocab_size
    check_ids(src, vocab, "src", values=True)
    new_tokens = _budget(config.max_new_tokens, config.max_length, 1)
    if cfg.positional == "learned" and new_tokens > cfg.max_len:
        raise ValueError(f"max_len={new_tokens} target tokens (generate: max_new_tokens) exceed the decoder's "
                         f"{cfg.max_len} learned positions")
    pad = cfg.pad_id if config.pad_token_id is None else config.pad_token_id
    return (cfg.eos_id,), pad, new_tokens


def _lm_ends(cfg: Any, config: GenerationConfig, input_ids: Tensor,
             attention_mask: Tensor | None) -> tuple[tuple[int, ...], int, int]:
    """A language model's end tokens, padding and new tokens."""
    if config.decoder_start_token_id is not None:
        raise ValueError("decoder_start_token_id is for encoder-decoders; a language model continues its prompt")
    new_tokens = _budget(config.max_new_tokens, config.max_length, input_ids.size(1))
    positions = getattr(cfg, "max_len", None)  # None: no last position (Transformer-XL's relative positions)
    if config.max_new_tokens is None and config.max_length is None and positions is not None:
        new_tokens = max(1, min(new_tokens, positions - input_ids.size(1)))  # the default stops at the last one
    own = () if cfg.eos_id is None else (cfg.eos_id, *getattr(cfg, "stop_ids", ()))  # None: no end token
    eos = end_ids(own if config.eos_token_id is None else config.eos_token_id)
    if config.eos_token_id is not None and not eos:
        raise ValueError(f"eos_token_id={config.eos_token_id!r}: give an id, or a list of at least one")
    pad = (eos[0] if eos else 0) if config.pad_token_id is None else config.pad_token_id  # (no end: none padded)
    if attention_mask is not None and tuple(attention_mask.shape) != tuple(input_ids.shape):
        raise ValueError(f"attention_mask must be shaped as input_ids {tuple(input_ids.shape)}, got "
                         f"{tuple(attention_mask.shape)}")
    check_left_padded(attention_mask)
    if input_ids.numel():
        lo, hi = int(input_ids.min()), int(input_ids.max())
        if lo < 0 or hi >= cfg.vocab_size:
            raise ValueError(f"input_ids holds token id {lo if lo < 0 else hi}, outside the vocabulary [0, "
                             f"{cfg.vocab_size})")
    return eos, pad, new_tokens


def _assisted(model: nn.Module, draft: Any, input_ids: Tensor, attention_mask: Tensor | None, new_tokens: int,
              eos: tuple[int, ...], pad: int, config: GenerationConfig, generator: torch.Generator | None) -> Tensor:
    """Speculative decoding's new tokens ``(B, n)``, each row decoded on its own (its padding dropped)."""
    real = torch.ones_like(input_ids, dtype=torch.bool) if attention_mask is None else attention_mask.bool()
    rows = [ids[keep].tolist() for ids, keep in zip(input_ids, real)]
    options = sampling_options(config.do_sample, config.temperature, config.top_k, config.top_p)
    del options["typical_p"]  # (refused with a draft)
    made, _ = speculative(model, draft, rows, new_tokens, config.num_assistant_tokens, eos_id=eos,
                          generator=generator, **options)
    new = torch.full((len(rows), max(len(m) for m in made)), pad, dtype=torch.long, device=input_ids.device)
    for i, m in enumerate(made):
        new[i, : len(m)] = torch.as_tensor(m, dtype=torch.long)
    return new


def _check_assisted(seq2seq: bool, config: GenerationConfig, compile: bool, streamer: Any) -> None:
    """Refuse, by name, what speculative decoding does not run with."""
    if seq2seq:
        raise ValueError("assistant_model drafts for a language model; an encoder-decoder decodes without one")
    processing = Processing(config.repetition_penalty, config.no_repeat_ngram_size, config.min_new_tokens or 0, ())
    for name, given in (("num_beams > 1", config.num_beams > 1), ("compile=True", compile),
                        ("typical_p", config.typical_p < 1.0), ("stop_strings", config.stop_strings is not None),
                        ("streamer", streamer is not None),
                        ("output_scores", config.output_scores and config.return_dict_in_generate),
                        ("repetition_penalty, no_repeat_ngram_size or min_new_tokens", processing.active)):
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


__all__ = ["HF_NEW_TOKENS", "HF_TOP_K", "GenerateOutput", "GenerationConfig", "generate", "sampling_options"]
