"""Decoding: model-independent, through ``encode`` / ``decode`` / ``new_cache``."""

from aiayn.decoding.beam import beam_search, gnmt_penalty
from aiayn.decoding.greedy import greedy

__all__ = ["beam_search", "gnmt_penalty", "greedy"]
