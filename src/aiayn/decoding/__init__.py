"""Decoding: model-independent. Translation through ``encode`` / ``decode`` / ``new_cache``; language
models through ``model(ids, attention_mask, cache)`` / ``new_cache``."""

from aiayn.decoding.beam import beam_search, gnmt_penalty, length_power
from aiayn.decoding.greedy import greedy
from aiayn.decoding.sampling import filter_logits, next_token, sample, stream
from aiayn.decoding.speculative import speculative

__all__ = ["beam_search", "filter_logits", "gnmt_penalty", "greedy", "length_power", "next_token", "sample",
           "speculative", "stream"]
