"""The old home of :mod:`aiayn.pipelines.loading`, kept as an alias."""

from aiayn.pipelines.loading import QUANTIZE, check_tokenizer, load_model, no_weights, ready, special_ids

__all__ = ["QUANTIZE", "check_tokenizer", "load_model", "no_weights", "ready", "special_ids"]
