"""Generation from a language model: greedy, temperature, top-k and nucleus (top-p) sampling.

Prompts of different lengths are padded on the left, so every row's next token is in the last column:

    row 0:  .  .  The cat      ->  The cat sat ...
    row 1:  Once upon a time   ->  Once upon a time there ...

and the model gets an ``attention_mask`` over every position so padding is never attended to and
positions count real tokens only. The key/value cache (the translation decoder's
:class:`~aiayn.layers.DecoderCache`) is allocated once for prompt + new tokens.

Shapes: B prompts, T longest prompt, N new tokens, V vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Protocol, cast

import torch
from torch import Tensor, nn

from aiayn.decoding.greedy import check_every, decode_with, ends, evaluating
from aiayn.decoding.processing import Processing
from aiayn.decoding.settings import check
from aiayn.decoding.static import StaticGPT, check_cache
from aiayn.layers.embedding import check_ids

if TYPE_CHECKING:
    from aiayn.layers.kv_cache import DecoderCache


Ends = int | Sequence[int] | None  # the token, or tokens, that end a row (Llama 3's chat models have three)


def end_ids(eos: Ends) -> tuple[int, ...]:
    """``eos`` as a tuple of ids: ``()`` for ``None``, ``(id,)`` for one id; the first is what pads a row."""
    if eos is None:
        return ()
    return tuple(int(e) for e in eos) if isinstance(eos, Sequence) else (int(eos),)


class CachingModel(Protocol):
    """What :func:`stream` calls on a model (a :class:`aiayn.models.GPT`), for the type checker."""

    lm_head: nn.Module

    def new_cache(self, max_len: int) -> DecoderCache: ...

    def features(self, ids: Tensor, attention_mask: Tensor | None = None,
                 cache: DecoderCache | None = None) -> Tensor: ...


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


def filter_logits(logits: Tensor, top_k: int | None = None, top_p: float | None = None) -> Tensor:
    """Set to ``-inf`` every logit outside the ``top_k`` largest and outside the nucleus: the smallest
    set of most likely tokens whose probabilities sum to at least ``top_p`` (Holtzman et al., 2020).

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
    return logits


def pick(logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
         generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """``(B, V)`` logits -> ``(scores (B, V), tokens (B,))``: the scores a token is drawn from (the logits divided
    by ``temperature``, ``-inf`` outside top-k and top-p: what ``transformers`` calls the processed scores), and
    the token drawn; ``temperature=0`` takes the most likely token, the scores being the logits as they are."""
    check(temperature=temperature, top_k=top_k, top_p=top_p)
    if temperature == 0:
        return logits, logits.argmax(-1)
    scores = filter_logits(logits.float() / temperature, top_k, top_p)
    return scores, torch.multinomial(scores.softmax(-1), 1, generator=generator)[:, 0]


def next_token(logits: Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
               generator: torch.Generator | None = None) -> Tensor:
    """``(B, V)`` logits -> ``(B,)`` token ids; ``temperature=0`` takes the most likely token."""
    return pick(logits, temperature, top_k, top_p, generator)[1]


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
    every row has is read back from the device every :func:`~aiayn.decoding.greedy.check_every` steps,
    so on an accelerator up to ``CHECK_EVERY - 1`` steps of end tokens may follow; without ``eos_id``
    nothing is read back.

    ``processing`` (repetition penalty, n-gram bans, a minimum length: :class:`~aiayn.decoding.processing.Processing`)
    changes the logits before the token is chosen; ``scores``, a list, receives each step's scores ``(B, V)``
    (:func:`pick`'s). ``compile``: decode over a static cache with a compiled step
    (:class:`~aiayn.decoding.static.StaticGPT`; the same tokens).

    Raises (at the first ``next``):
        ValueError: ``max_new_tokens < 1``; an empty prompt, or an id outside ``model.cfg.vocab_size``;
            ``compile`` for a model it does not decode or without ``use_cache``.
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    check_prompts(model, prompts)
    device = next(model.parameters()).device
    lengths = [len(p) for p in prompts]
    t, b = max(lengths), len(prompts)
    total = t + max_new_tokens
    ids = torch.zeros(b, total, dtype=torch.long, device=device)  # (B, T + N), prompts on the right of the first T
    real = torch.zeros(b, total, dtype=torch.bool, device=device)
    for i, p in enumerate(prompts):
        ids[i, t - len(p) : t] = torch.as_tensor(list(p), dtype=torch.long)
        real[i, t - len(p) :] = True  # the prompt and everything generated after it
    padded = min(lengths) < t
    lm = cast(CachingModel, model)
    made = lm.new_cache(total)  # refuses more positions than the model has, with the cache or without
    cache = made if use_cache else None
    done = torch.zeros(b, dtype=torch.bool, device=device)
    eos = end_ids(eos_id)
    every = check_every(device)
    check_cache(compile, use_cache)
    static = StaticGPT(model, real, compile=True) if compile else None
    with evaluating(model):
        for step in range(max_new_tokens):
            end = t + step  # positions filled so far
            begin = 0 if cache is None or step == 0 else end - 1
            if static is not None:
                logits = (static.prefill(ids[:, :t], real[:, :t] if padded else None) if step == 0
                          else static.step(ids[:, end - 1], end - 1))
            else:
                hidden = lm.features(ids[:, begin:end], attention_mask=real[:, :end] if padded else None,
                                     cache=cache)
                logits = lm.lm_head(hidden[:, -1])  # (B, V): the output layer on the last position, not the prompt
            if processing is not None and processing.active:
                logits = processing(logits, ids[:, :end], step, real[:, :end] if padded else None)
            chosen, nxt = pick(logits, temperature, top_k, top_p, generator)  # (B, V), (B,)
            if scores is not None:
                scores.append(chosen)
            if eos:
                nxt = nxt.masked_fill(done, eos[0])
                done |= ends(nxt, eos)
            ids[:, end] = nxt
            yield nxt
            if eos and (step + 1) % every == 0 and bool(done.all()):  # the one read back, every `every` steps
                break


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
    steps = list(stream(model, rows, max_new_tokens, temperature, top_k, top_p, generator, eos_id, use_cache,
                        processing, scores, compile))
    new = torch.stack(steps, dim=1).tolist()  # (B, n)
    eos = set(end_ids(eos_id))
    lengths = [next((i + 1 for i, tok in enumerate(n) if tok in eos), len(n)) for n in new]  # up to each end
    if scores is not None:  # the steps run past the last row's end are not returned
        del scores[max(lengths):]
    if isinstance(prompt, Tensor):  # the steps up to the last row's end (the stream may run a few past it)
        width = max(lengths)
        new = [n[:width] for n in new]
        return torch.cat([prompt, torch.tensor(new, dtype=prompt.dtype, device=prompt.device)], dim=1)
    return [p + n[:length] for p, n, length in zip(rows, new, lengths)]


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
                       max_len, use_cache, processing, scores, compile)


__all__ = ["CachingModel", "check_prompts", "filter_logits", "next_token", "pick", "sample", "sample_seq2seq", "stream"]
