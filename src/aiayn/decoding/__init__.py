"""Decoding: model-independent, through ``encode`` / ``decode`` / ``new_cache``."""

from aiayn.decoding.greedy import greedy

__all__ = ["greedy"]
