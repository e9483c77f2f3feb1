"""The old home of :mod:`aiayn.pipelines` (``aiayn.pipeline``, ``Pipeline``, ``tldr``, ``tokenizer``), kept as an
alias so ``from aiayn.inference import ...`` still works."""

from aiayn.pipelines.base import TLDR, Pipeline, pipeline, tldr, tokenizer

__all__ = ["TLDR", "Pipeline", "pipeline", "tldr", "tokenizer"]
