"""Greedy decoding of an encoder-decoder: at each step take the most probable next token (the paper's section 6.1
decodes with beams: :mod:`aiayn.decoding.beam`).

The loop is :func:`aiayn.decoding.loops.tokens`, over the model's decode session (``model.session()``); this module
holds what an encoder-decoder's entry checks: the source ids and the most target tokens.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor, nn

from aiayn.decoding.loops import Choose, generated, greedy_choice, in_eval_mode, tokens
from aiayn.layers.embedding import check_ids

if TYPE_CHECKING:
    from aiayn.decoding.processing import Processing


def check_src(model: nn.Module, src: Tensor) -> None:
    """Refuse source ids that are not ``(B, S)`` integers within the model's source vocabulary
    (``cfg.src_vocab_size``, where the model has one).

    Called once at the entry of a decoding call: the range costs one read back from the device there,
    whereas the embedding, run every step, checks it on the CPU only (on an accelerator a bad id would
    otherwise surface as a device-side assert in the lookup).
    """
    vocab = getattr(getattr(model, "cfg", None), "src_vocab_size", None)
    check_ids(src, vocab if vocab is not None else 0, "src", values=vocab is not None)


def target_len(model: nn.Module, src: Tensor, max_len: int | None) -> int:
    """The most target tokens to decode: ``max_len``, by default ``S + 50`` (section 6.1) but no more than a
    decoder with learned positions has (BART's); an explicit ``max_len`` beyond those is refused now, not at
    whichever step reaches it."""
    cfg: Any = getattr(model, "cfg", None)
    learned = cfg.max_len if getattr(cfg, "positional", None) == "learned" else None
    if max_len is None:
        return src.size(1) + 50 if learned is None else min(src.size(1) + 50, learned)
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    if learned is not None and max_len > learned:
        raise ValueError(f"max_len={max_len} target tokens (generate: max_new_tokens) exceed the decoder's {learned} "
                         f"learned positions")
    return max_len


@torch.no_grad()
def greedy(model: nn.Module, src: Tensor, max_len: int | None = None, use_cache: bool = True,
           compile: bool = False) -> Tensor:
    """Decode ``(B, S)`` source ids greedily.

    Args:
        max_len: most tokens to produce; default ``S + 50`` (section 6.1), at most the decoder's learned
            positions where it has them.
        use_cache: reuse keys/values of earlier steps; ``False`` recomputes the whole prefix each step
            (same result, slower).
        compile: decode over a static cache, the one-token step through ``torch.compile``
            (the model's session, ``static``): the same tokens; the first call of a batch size
            and length waits for the compiler.

    Returns:
        ``(B, L)`` ids after ``<s>``, each row ending at its ``</s>`` and padded with ``pad_id`` after it.

    Raises:
        ValueError: ``src`` not ``(B, S)``, or holding an id outside the source vocabulary.
    """
    return decode_with(model, src, greedy_choice, max_len, use_cache, compile=compile)


@torch.no_grad()
@in_eval_mode
def decode_with(model: nn.Module, src: Tensor, choose: Choose, max_len: int | None = None, use_cache: bool = True,
                processing: Processing | None = None, scores: list[Tensor] | None = None,
                compile: bool = False, drawn: bool = False) -> Tensor:
    """Decode token by token, ``choose`` giving the scores ``(A, V)`` and the next token ``(A,)`` from the logits
    ``(A, V)`` of the rows still decoding (padding already excluded; ``processing`` applied first): argmax is
    :func:`greedy`, a draw is :func:`~aiayn.decoding.sampling.sample_seq2seq`. ``scores``, a list, receives each
    step's scores ``(B, V)``. ``compile``: the steps over a static cache, compiled (the model's session).
    ``drawn``: ``choose`` draws at random (:func:`aiayn.decoding.loops.tokens`)."""
    check_src(model, src)
    cfg: Any = cast(Any, model).cfg
    max_len = target_len(model, src, max_len)
    session = model.session(use_cache=use_cache, compile=compile)  # type: ignore[operator]
    steps = tokens(session, src, None, max_len, choose, eos=(cfg.eos_id,), pad=cfg.pad_id, processing=processing,
                   scores=scores, drawn=drawn)
    return generated(steps, (cfg.eos_id,), scores)
