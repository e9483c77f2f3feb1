"""``transformers``' generation defaults, stated once here and importable without PyTorch (the command line builds
its ``--help`` from them before anything heavy is imported).

``model.generate`` (:mod:`aiayn.decoding.generate`) keeps ``transformers``' ``GenerationConfig`` defaults: greedy,
20 new tokens; the text-generation pipeline (:mod:`aiayn.pipelines.lm`, ``aiayn generate``) keeps those of
``transformers.pipeline("text-generation")`` (its ``_default_generation_config``): 256 new tokens drawn at
temperature 0.7 among the 50 most likely.

``aiayn serve`` (:class:`aiayn.serve.Settings`) batches with :data:`SERVING`'s limits. Its wait, 50 ms, was chosen
by ``benchmarks/serve_load.py`` (``benchmarks/results/serve_load.json``, 16 clients): with 10 ms a client that
resent a moment after the others missed the batch and waited for a whole one (translation p99 4.7x a lone
request's; 1.8x with 50 ms), and an idle server's lone request waits at most that long.
"""

from __future__ import annotations

from typing import Any

HF_NEW_TOKENS = 20  # what transformers' generate makes when given no length
HF_TOP_K = 50  # transformers' GenerationConfig.top_k

TEXT_GENERATION: dict[str, Any] = {
    "max_new_tokens": 256, "do_sample": True, "temperature": 0.7, "top_k": HF_TOP_K, "top_p": 1.0,
    "repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "min_new_tokens": 0,
}

# The dtypes a loaded model may be cast to (``dtype=``, ``--dtype``): float32 as saved, or half precision.
DTYPES = ("float32", "bfloat16", "float16")

SERVING: dict[str, Any] = {"max_batch": 16, "max_wait_ms": 50.0, "max_queue": 256, "max_inputs": 64,
                           "max_body": 8 * 2**20}

MAX_WAIT_MS = 10_000.0  # the longest --max-wait-ms: a lone request never waits more than this for others to join

__all__ = ["HF_NEW_TOKENS", "HF_TOP_K", "MAX_WAIT_MS", "SERVING", "TEXT_GENERATION"]
