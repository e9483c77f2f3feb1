"""What the case modules share: the translation sizes, the words that describe a model, and the checks that ours
computes what a peer computes."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor, nn

from aiayn.analysis import count_parameters
from aiayn.models import preset
from aiayn.models.transformer import TransformerConfig

TOLERANCE = 1e-4  # on logits, absolute and relative (float32, a few layers)


def small_transformer(quick: bool = False) -> TransformerConfig:
    """``transformer-base`` shrunk to d_model 256, d_ff 1024, 4 heads, 3+3 layers, vocabulary 8,000."""
    if quick:
        return preset("transformer-base", src_vocab_size=300, tgt_vocab_size=300, d_model=32, d_ff=64,
                      n_heads=4, n_encoder_layers=1, n_decoder_layers=1, max_len=64)
    return preset("transformer-base", src_vocab_size=8000, tgt_vocab_size=8000, d_model=256, d_ff=1024,
                  n_heads=4, n_encoder_layers=3, n_decoder_layers=3)


def base_transformer(quick: bool = False) -> TransformerConfig:
    """``transformer-base`` (Table 3) with a vocabulary of 8,000."""
    if quick:
        return dataclasses.replace(small_transformer(True), d_model=48, d_ff=96, n_encoder_layers=2,
                                   n_decoder_layers=2)
    return preset("transformer-base", src_vocab_size=8000, tgt_vocab_size=8000)


def millions(model: nn.Module) -> str:
    """The parameter count of ``model`` in millions, for a case's ``what``: ``"7.6M"``."""
    return f"{count_parameters(model) / 1e6:.3g}M"


def describe(cfg: TransformerConfig) -> str:
    """The sizes of a translation model, for a case's ``what``."""
    return (f"d_model {cfg.d_model}, d_ff {cfg.d_ff}, {cfg.n_heads} heads, {cfg.n_encoder_layers}+"
            f"{cfg.n_decoder_layers} layers, vocabulary {cfg.src_vocab_size:,}")


def threads() -> str:
    """The threads every side runs on (torch's, CTranslate2's ``intra_threads``, onnxruntime's intra-op)."""
    n = torch.get_num_threads()
    return f"{n} thread" + ("s" if n != 1 else "")


def close(what: str, got: Tensor, expected: Tensor, tol: float = TOLERANCE) -> dict[str, Any]:
    """Did ``got`` match ``expected`` within ``tol`` (absolute and relative)?"""
    same_shape = got.shape == expected.shape
    diff = (got - expected).abs().max().item() if same_shape else float("inf")
    ok = same_shape and torch.allclose(got, expected, atol=tol, rtol=tol)
    return {"what": what, "max_abs_diff": diff, "tolerance": tol, "ok": bool(ok)}


def same(what: str, got: Tensor, expected: Tensor) -> dict[str, Any]:
    """Are ``got`` and ``expected`` the same ids?"""
    ok = got.shape == expected.shape and torch.equal(got, expected)
    return {"what": what, "shape": list(got.shape), "ok": bool(ok)}


__all__ = ["TOLERANCE", "base_transformer", "close", "describe", "millions", "same", "small_transformer", "threads"]
