"""Generation from a language model: greedy, temperature, top-k and nucleus (top-p) sampling.

Prompts of different lengths are padded on the left, so every row's next token is in the last column:

    row 0:  .  .  The cat      ->  The cat sat ...
    row 1:  Once upon a time   ->  Once upon a time there ...

and the model gets an ``attention_mask`` over every position so padding is never attended to and
positions count real tokens only. The loop is :func:`aiayn.decoding.loops.tokens`, over the model's decode
session; this module holds the choice of a token and the language model's entries.

Shapes: B prompts, T longest prompt, N new tokens, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from aiayn.decoding.greedy import decode_with
from aiayn.decoding.loops import Ends, end_ids, evaluating, generated, tokens
from aiayn.decoding.settings import check
from aiayn.layers.embedding import check_ids

if TYPE_CHECKING:
    from aiayn.decoding.processing import Processing


def check_prompts(model: nn.Module, prompts: Sequence[Sequence[int]], name: str = "prompts") -> None:
    """Refuse empty prompts and ids outside the model's vocabulary (``cfg.vocab_size``, where it has one).

    Checked once, on the host lists, before any step: the embedding checks ids on the CPU only.
    """
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError(f"{name}: every prompt needs at least one token (start with the end-of-text token "
                         f"for none)")
    vocab = getattr(getattr(model, "cfg", None), "vocab_size", None)
    if vocab is None:
        return
    lo, hi = min(min(p) for p in prompts), max(max(p) for p in prompts)
    if lo < 0 or hi >= vocab:
        raise ValueError(f"{name} holds token id {lo if lo < 0 else hi}, outside the vocabulary [0, {vocab})")


def check_left_padded(attention_mask: Tensor | None) -> None:
    """Refuse an ``attention_mask`` ``(B, T)`` with a row that is not zeros then ones (padded on the right, or
    in the middle), or a row with no token at all."""
    if attention_mask is None:
        return
    real = attention_mask.bool()
    if bool((real[:, 1:] < real[:, :-1]).any()):
        raise ValueError("attention_mask: prompts must be padded on the left (zeros before the ones)")
    if not bool(real[:, -1].all()):
        raise ValueError("attention_mask: every prompt needs at least one token (a row is all zeros)")


def filter_logits(logits: Tensor, top_k: int | None = None, top_p: float | None = None,
                  typical_p: float | None = None) -> Tensor:
    """Set to ``-inf`` every logit outside the ``top_k`` largest, outside the nucleus (the smallest set of most
    likely tokens whose probabilities sum to at least ``top_p``, Holtzman et al., 2020) and outside the typical set
    (``typical_p``, Meister et al., 2022), in that order, as ``transformers`` applies them.

    ``(B, V)`` -> ``(B, V)``; at least one token always survives.
    """
    if top_k is not None:
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        kth = logits.topk(min(top_k, logits.size(-1)), dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        sorted_logits, order = logits.sort(dim=-1, descending=True)  # (B, V)
        probs = sorted_logits.softmax(-1)
        outside = probs.cumsum(-1) - probs >= top_p  # mass before this token already reaches top_p
        logits = logits.masked_fill(outside.scatter(-1, order, outside), float("-inf"))
    if typical_p is not None:
        logits = typical(logits, typical_p)
    return logits


def typical(logits: Tensor, mass: float) -> Tensor:
    """Locally typical sampling's filter (Meister et al., 2022): keep the tokens whose information ``-log p`` is
    closest to the distribution's entropy ``H``, fewest first, until their probabilities reach ``mass``; ``-inf``
    for the rest. ``(B, V)`` -> ``(B, V)``, at least one token kept (``transformers``' ``TypicalLogitsWarper``).

        H = -sum_v p_v log p_v,   distance_v = |-log p_v - H|
        kept: the tokens sorted by distance, up to and including the first whose cumulative probability reaches mass
    """
    if not 0.0 < mass < 1.0:
        raise ValueError(f"typical_p must be in (0, 1) to filter, got {mass}")
    logp = logits.log_softmax(-1)  # (B, V)
    entropy = -(logp * logp.exp()).nansum(-1, keepdim=True)  # (B, 1); -inf * 0 is nan, left out
    distance, order = (-logp - entropy).abs().sort(-1)  # (B, V) nearest the entropy first
    cumulative = logits.gather(-1, order).softmax(-1).cumsum(-1)
    last = (cumulative < mass).sum(-1, keepdim=True).clamp(max=logits.size(-1) - 1)  # (B, 1) the last one kept
    drop = distance > distance.gather(-1, last)  # (B, V) sorted; ties with the last are kept
    drop[:, 0] = False
    return logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))


def pick(logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
         generator: torch.Generator | None = None, typical_p: float | None = None) -> tuple[Tensor, Tensor]:
    """``(B, V)`` logits -> ``(scores (B, V), tokens (B,))``: the scores a token is drawn from (the logits divided
    by ``temperature``, ``-inf`` outside top-k, top-p and the typical set: what ``transformers`` calls the processed
    scores), and the token drawn; ``temperature=0`` takes the most likely token, the scores being the logits as
    they are."""
    check(temperature=temperature, top_k=top_k, top_p=top_p)
    if temperature == 0:
        return logits, logits.argmax(-1)
    scores = filter_logits(logits.float() / temperature, top_k, top_p, typical_p)
    return scores, torch.multinomial(scores.softmax(-1), 1, generator=generator)[:, 0]


def next_token(logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
               generator: torch.Generator | None = None, typical_p: float | None = None) -> Tensor:
    """``(B, V)`` logits -> ``(B,)`` token ids; ``temperature=0`` takes the most likely token."""
    return pick(logits, temperature, top_k, top_p, generator, typical_p)[1]


def left_padded(prompts: Sequence[Sequence[int]], device: torch.device) -> tuple[Tensor, Tensor | None]:
    """``prompts`` as one batch ``(B, T)`` padded on the left, and its mask ``(B, T)`` (``None``: no row padded)."""
    t = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), t, dtype=torch.long, device=device)
    real = torch.zeros(len(prompts), t, dtype=torch.bool, device=device)
    for i, p in enumerate(prompts):
        ids[i, t - len(p) :] = torch.as_tensor(list(p), dtype=torch.long)
        real[i, t - len(p) :] = True
    return ids, real if min(len(p) for p in prompts) < t else None


@torch.no_grad()
def stream(
    model: nn.Module,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    eos_id: Ends = None,
    use_cache: bool = True,
    processing: Processing | None = None,
    scores: list[Tensor] | None = None,
    compile: bool = False,
) -> Iterator[Tensor]:
    """Yield the next token of every prompt, ``(B,)``, one step at a time, until ``max_new_tokens`` or
    every row has produced ``eos_id`` (or one of several; a finished row keeps yielding the first). Whether
    every row has is read back from the device every :func:`~aiayn.decoding.loops.check_every` steps,
    so on an accelerator up to ``CHECK_EVERY - 1`` steps of end tokens may follow; without ``eos_id``
    nothing is read back.

    ``processing`` (repetition penalty, n-gram bans, a minimum length: :class:`~aiayn.decoding.processing.Processing`)
    changes the logits before the token is chosen; ``scores``, a list, receives each step's scores ``(B, V)``
    (:func:`pick`'s). ``compile``: decode over a static cache with a compiled step (the model's session; the
    same tokens).

    Raises (at the first ``next``):
        ValueError: ``max_new_tokens < 1``; an empty prompt, or an id outside ``model.cfg.vocab_size``;
            ``compile`` for a model it does not decode or without ``use_cache``.
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    check_prompts(model, prompts)
    check(temperature=temperature, top_k=top_k, top_p=top_p)
    ids, mask = left_padded(prompts, next(model.parameters()).device)
    eos = end_ids(eos_id)
    session: Any = model.session(use_cache=use_cache, compile=compile)  # type: ignore[operator]
    with evaluating(model):
        yield from tokens(session, ids, mask, max_new_tokens,
                          lambda logits: pick(logits, temperature, top_k, top_p, generator),
                          eos=eos, pad=eos[0] if eos else 0, processing=processing, scores=scores,
                          drawn=temperature > 0)


def sample(
    model: nn.Module,
    prompt: Tensor | Sequence[Sequence[int]],
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    eos_id: Ends = None,
    use_cache: bool = True,
    processing: Processing | None = None,
    scores: list[Tensor] | None = None,
    compile: bool = False,
) -> Tensor | list[list[int]]:
    """The prompt followed by up to ``max_new_tokens`` generated tokens.

    Args:
        prompt: ``(B, T)`` ids, or a list of id lists of different lengths.
        temperature: divides the logits; 0 is greedy decoding.
        top_k, top_p: keep only the ``top_k`` most likely tokens / the nucleus of mass ``top_p``.
        generator: a seeded ``torch.Generator`` makes sampling repeatable.
        eos_id: stop a row when it produces this token, or one of these tokens (kept in the output).
        use_cache: ``False`` recomputes every position each step (same result, slower).
        processing, scores, compile: as :func:`stream`'s (``scores`` cut to the steps returned).

    Returns:
        ``(B, T + n)`` for a tensor prompt (rows that stopped early are filled with ``eos_id``, the first of
        several), or one list per prompt, cut after its end token.

    Raises:
        ValueError: an empty prompt, or an id outside ``model.cfg.vocab_size``, before any step.
    """
    if isinstance(prompt, Tensor):
        check_ids(prompt, 0, "prompt", values=False)  # (B, T) integers; the range is checked on the lists
    rows = prompt.tolist() if isinstance(prompt, Tensor) else [list(p) for p in prompt]
    check_prompts(model, rows, "prompt")
    eos = end_ids(eos_id)
    new = generated(stream(model, rows, max_new_tokens, temperature, top_k, top_p, generator, eos_id, use_cache,
                           processing, scores, compile), eos, scores)  # (B, n)
    if isinstance(prompt, Tensor):
        return torch.cat([prompt, new.to(prompt.device, prompt.dtype)], dim=1)
    made = new.tolist()
    lengths = [next((i + 1 for i, tok in enumerate(n) if tok in eos), len(n)) for n in made]  # up to each end
    return [p + n[:length] for p, n, length in zip(rows, made, lengths)]


def sample_seq2seq(
    model: nn.Module,
    src: Tensor,
    max_len: int | None = None,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    processing: Processing | None = None,
    scores: list[Tensor] | None = None,
    compile: bool = False,
) -> Tensor:
    """Translate ``(B, S)`` source ids by drawing each next token (temperature, top-k, top-p) instead of
    taking the most likely one; ``temperature=0`` is :func:`~aiayn.decoding.greedy.greedy`. ``processing``,
    ``scores`` and ``compile`` as :func:`~aiayn.decoding.greedy.decode_with`'s.

    Returns:
        ``(B, L)`` ids after ``<s>``, as :func:`~aiayn.decoding.greedy.greedy` returns them.
    """
    check(temperature=temperature, top_k=top_k, top_p=top_p)
    return decode_with(model, src, lambda logits: pick(logits, temperature, top_k, top_p, generator),
                       max_len, use_cache, processing, scores, compile, drawn=temperature > 0)


__all__ = ["check_prompts", "filter_logits", "left_padded", "next_token", "pick", "sample", "sample_seq2seq", "stream"]
