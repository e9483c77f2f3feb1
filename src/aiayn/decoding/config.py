"""One description of how to generate: ``transformers``' ``GenerationConfig``, with its names and defaults, checked
once (with the words and limits of :mod:`aiayn.decoding.settings`), and the decoding method it asks for
(:meth:`GenerationConfig.mode`, ``transformers``' ``get_generation_mode``).

    cfg = GenerationConfig(max_new_tokens=40, num_beams=4)
    model.generate(ids, generation_config=cfg)                  as transformers takes it
    model.generate(ids, generation_config=cfg, num_beams=2)     a keyword overrides the config's field

``generate``, the pipelines and the server build one from their inputs; a setting not supported is refused by name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from aiayn.decoding.settings import check
from aiayn.defaults import HF_TOP_K

MODES = ("greedy_search", "sample", "beam_search", "assisted_generation")  # transformers' GenerationMode values


@dataclass(frozen=True)
class GenerationConfig:
    """How to generate, as ``transformers``' ``GenerationConfig`` names it (version 5's defaults; 20 new tokens when
    neither length is given, ``top_k=50`` when sampling, ``length_penalty=1.0`` on ``len ** alpha`` and the
    ``early_stopping=False`` heuristic for beams).

    Args:
        max_new_tokens, max_length: the most new tokens; ``max_length`` counts the prompt (a language model) or
            the start token (an encoder-decoder) too. Neither: 20 new tokens, at most the model's positions.
        min_new_tokens, repetition_penalty, no_repeat_ngram_size: the logits processing
            (:mod:`aiayn.decoding.processing`; their defaults do nothing).
        do_sample, temperature, top_k, top_p, typical_p: draw each token (temperature first, then top-k, then
            top-p, then the typical set; ``typical_p=1.0`` keeps every token).
        num_beams, length_penalty, early_stopping: beam search (:mod:`aiayn.decoding.beam`).
        num_return_sequences: sequences per input (draws with ``do_sample``, the n best of the beams).
        eos_token_id, pad_token_id, decoder_start_token_id: ``None``: the model's own.
        stop_strings: a string, or several, that end a row once its text holds one ending in the row's last
            token (the token kept, as ``transformers``' ``StopStringCriteria``); ``generate`` needs the
            ``tokenizer`` to read the text.
        use_cache: keep keys and values between steps (``False``: recompute; the same tokens).
        output_scores, return_dict_in_generate: what ``generate`` returns
            (:class:`~aiayn.decoding.generate.GenerateOutput`).
        num_assistant_tokens: the draft's proposals per pass in speculative decoding.

    Raises:
        ValueError: a value outside its range, or settings that do not go together (named).
    """

    max_new_tokens: int | None = None
    max_length: int | None = None
    min_new_tokens: int | None = None
    do_sample: bool = False
    num_beams: int = 1
    temperature: float = 1.0
    top_k: int | None = HF_TOP_K
    top_p: float = 1.0
    typical_p: float = 1.0
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    num_return_sequences: int = 1
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None
    decoder_start_token_id: int | None = None
    stop_strings: str | list[str] | None = None
    use_cache: bool = True
    output_scores: bool = False
    return_dict_in_generate: bool = False
    num_assistant_tokens: int = 20

    def __post_init__(self) -> None:
        check(do_sample=self.do_sample, temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
              num_beams=self.num_beams, max_new_tokens=self.max_new_tokens,
              num_return_sequences=self.num_return_sequences, repetition_penalty=self.repetition_penalty,
              length_penalty=self.length_penalty, no_repeat_ngram_size=self.no_repeat_ngram_size,
              min_new_tokens=self.min_new_tokens)
        if self.max_length is not None and (isinstance(self.max_length, bool) or not isinstance(self.max_length, int)
                                            or self.max_length < 1):
            raise ValueError(f"max_length must be an integer >= 1, got {self.max_length!r}")
        if self.num_return_sequences > 1 and not self.do_sample and self.num_return_sequences > self.num_beams:
            raise ValueError(f"num_return_sequences={self.num_return_sequences} needs do_sample=True or num_beams "
                             f">= it (greedy decoding gives one sequence per input), got num_beams={self.num_beams}")
        if isinstance(self.typical_p, bool) or not isinstance(self.typical_p, (int, float)) \
                or not 0.0 < self.typical_p <= 1.0:
            raise ValueError(f"typical_p must be in (0, 1] (1.0 keeps every token), got {self.typical_p!r}")
        if self.stop_strings is not None:
            stops = [self.stop_strings] if isinstance(self.stop_strings, str) else self.stop_strings
            if not isinstance(stops, (list, tuple)) or not stops or not all(isinstance(t, str) and t for t in stops):
                raise ValueError(f"stop_strings must be a non-empty string or a list of them, got "
                                 f"{self.stop_strings!r}")
            if self.num_beams > 1:
                raise ValueError("stop_strings end rows of greedy decoding or sampling; with num_beams > 1 they are "
                                 "not supported")
        if self.do_sample and self.num_beams > 1:
            raise ValueError("do_sample=True with num_beams > 1 (beam sampling) is not supported")
        if not (self.early_stopping is True or self.early_stopping is False or self.early_stopping == "never"):
            raise ValueError(f"early_stopping={self.early_stopping!r} must be True, False or 'never'")
        if isinstance(self.num_assistant_tokens, bool) or not isinstance(self.num_assistant_tokens, int) \
                or self.num_assistant_tokens < 1:
            raise ValueError(f"num_assistant_tokens must be >= 1 (the draft's proposals per pass), got "
                             f"{self.num_assistant_tokens!r}")

    def mode(self, assistant: bool = False) -> str:
        """The decoding method these settings ask for, one of :data:`MODES` (``assistant``: a draft model was
        given)."""
        if assistant:
            return "assisted_generation"
        if self.num_beams > 1:
            return "beam_search"
        return "sample" if self.do_sample else "greedy_search"

    def update(self, **overrides: Any) -> GenerationConfig:
        """A copy with ``overrides`` (checked again).

        Raises:
            TypeError: a name that is not a field (``transformers`` has more; those are not supported here).
        """
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise TypeError(f"generate() does not support {', '.join(unknown)}; it takes "
                            f"{', '.join(f.name for f in dataclasses.fields(self))}, generation_config, generator, "
                            f"compile, assistant_model, tokenizer, streamer")
        return dataclasses.replace(self, **overrides) if overrides else self

    def to_dict(self) -> dict[str, Any]:
        """The fields that differ from the defaults (what ``transformers`` writes to ``generation_config.json``)."""
        default = GenerationConfig()
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if getattr(self, f.name) != getattr(default, f.name)}


__all__ = ["MODES", "GenerationConfig"]
