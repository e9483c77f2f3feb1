"""The GPT family's Hugging Face conversions both ways: GPT-2 (:mod:`aiayn.models.gpt.gpt2`) and Llama or Mistral
(:mod:`aiayn.models.gpt.llama`), each with its own key table.

    model_type "gpt2"               -> gpt2.convert         our GPT with no Llama switch -> gpt2.export
    model_type "llama", "mistral"   -> llama.convert        any Llama switch on         -> llama.export

The Llama switches (:mod:`aiayn.models.gpt.model`'s docstring) are rotary positions, RMSNorm, a gated
feed-forward, grouped heads, no biases and a sliding window (``LLAMA_SWITCHES``); :func:`is_llama` decides.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from aiayn.layers.feedforward import GATED
from aiayn.models.gpt import gpt2, llama
from aiayn.models.gpt.model import GPT, LLAMA_SWITCHES, GPTConfig
from aiayn.models.keys import refuse


def is_llama(cfg: GPTConfig) -> bool:
    """Whether any of Llama's switches is on: the model is then a Llama (or Mistral), not a GPT-2."""
    plain = GPTConfig()
    return cfg.activation in GATED or any(getattr(cfg, f) != getattr(plain, f) for f in LLAMA_SWITCHES)


def convert(hf: dict[str, Any], tensors: dict[str, Tensor], name: str = "GPT") -> GPT:
    """Our :class:`GPT` computing what the GPT-2, Llama or Mistral (by its ``model_type``) computes."""
    return (gpt2 if hf.get("model_type") == "gpt2" else llama).convert(hf, tensors, name)


def export(model: GPT) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """A GPT with any of Llama's switches on goes to Llama (Mistral with a window), else to GPT-2."""
    cfg = model.cfg
    if not is_llama(cfg):
        return gpt2.export(model)
    if cfg.head != "lm":
        refuse("head", cfg.head, "only a GPT-2 (no Llama switch on) exports with a classification head, as "
                                 "GPT2ForSequenceClassification")
    return llama.export(model)


__all__ = ["convert", "export", "is_llama"]
