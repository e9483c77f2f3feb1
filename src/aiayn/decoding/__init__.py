"""Decoding, written once against a model's decode session (:mod:`aiayn.layers.session`; ``model.session()``):
greedy decoding and sampling (:mod:`aiayn.decoding.loops`), beam search, speculative decoding; ``generate`` reads
one :class:`GenerationConfig` and picks the loop. No module here imports a model family."""

from aiayn.decoding.beam import beam_search, gnmt_penalty, length_power
from aiayn.decoding.config import GenerationConfig
from aiayn.decoding.greedy import greedy
from aiayn.decoding.sampling import filter_logits, next_token, sample, stream
from aiayn.decoding.speculative import speculative

__all__ = ["GenerationConfig", "beam_search", "filter_logits", "gnmt_penalty", "greedy", "length_power", "next_token",
           "sample", "speculative", "stream"]
