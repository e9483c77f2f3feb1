"""Speculative decoding (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding";
Chen et al. 2023, "Accelerating Large Language Model Decoding with Speculative Sampling"): what ``transformers``
runs for ``generate(..., assistant_model=draft)``.

A small draft model proposes K tokens, one step each; the model scores all of them in one forward pass over
K + 1 positions (its choice after each proposal's prefix, and after the last proposal), keeps the longest prefix
it agrees with and adds one token of its own. Each pass of the large model so makes between 1 and K + 1 tokens:

    so far             ... The cat
    draft proposes             sat   on    a     mat       K = 4 cheap steps
    model, one pass        ->  sat   on    the   red   .   its choice after each prefix
    kept                       sat   on    the             2 accepted, then the model's own token

Greedy (``temperature=0``): a proposal is accepted when it is the model's most likely token, so the tokens are
plain greedy decoding's, token for token. Sampling (Leviathan et al., section 2.3 and Algorithm 1): proposal x,
drawn from the draft's q, is accepted with probability min(1, p(x) / q(x)); at the first rejection the token is
drawn from normalize(max(p - q, 0)) instead, and when all K are accepted one more is drawn from p after them.
Every token is then distributed as the model's own (their Appendix A.1), temperature, top-k and top-p applied
to p and q alike.

Each model keeps a key/value cache of a prefix of the sequence in its decode session (``model.session()``, which
feeds several tokens at once with ``extend`` and forgets positions with ``crop``) and is fed what it lacks; the
positions of the rejected proposals are cropped from both:

    model:  cache = everything but the last token    fed: the last token + K proposals      (K + 1 positions)
    draft:  cache = the same, or one token less      fed: the missing tokens, then its proposals one at a time
            (when all K were accepted, the last proposal was never fed to it)

Rows are decoded one after another, each at batch 1 (``transformers`` allows assisted generation at batch 1 only):
rows accept different numbers of tokens per pass.

Shapes: K proposals in this pass (at most ``num_assistant_tokens``), V vocabulary, C channels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import Tensor, nn

from aiayn.decoding.loops import Ends, end_ids, evaluating
from aiayn.decoding.sampling import check_prompts, filter_logits
from aiayn.decoding.settings import check


@dataclass
class SpeculativeStats:
    """What a :func:`speculative` call did: ``proposed`` draft tokens, of which the model ``accepted`` some, in
    ``passes`` forward passes of the model that made ``tokens`` tokens (those after an end token not counted)."""

    proposed: int = 0
    accepted: int = 0
    passes: int = 0
    tokens: int = 0

    @property
    def acceptance_rate(self) -> float:
        """``accepted / proposed``; NaN when nothing was proposed."""
        return self.accepted / self.proposed if self.proposed else math.nan

    @property
    def tokens_per_pass(self) -> float:
        """Tokens made per forward pass of the model (1 for plain decoding); NaN before any pass."""
        return self.tokens / self.passes if self.passes else math.nan


def probabilities(logits: Tensor, temperature: float, top_k: int | None, top_p: float | None) -> Tensor:
    """``(K, V)`` logits -> ``(K, V)`` the probabilities a token is drawn from: divided by ``temperature``, then
    top-k and top-p (:func:`~aiayn.decoding.sampling.pick`'s scores, softmaxed)."""
    return filter_logits(logits.float() / temperature, top_k, top_p).softmax(-1)


def propose(draft: Any, seq: Tensor, n: int, k: int, temperature: float, top_k: int | None, top_p: float | None,
            generator: torch.Generator | None) -> tuple[Tensor, Tensor | None]:
    """``k`` tokens the draft's session ``draft`` proposes after ``seq[:n]``, one step each: ``(K,)`` ids, and the
    ``(K, V)`` probabilities they were drawn from (``None`` for greedy, where each is the draft's most likely
    token)."""
    tokens, probs = [], []
    fed = seq[draft.filled : n]  # what the draft's cache lacks: usually the last token, two after a full accept
    for _ in range(k):
        logits = draft.extend(fed[None])[:, -1]  # (1, V)
        if temperature == 0:
            token = logits.argmax(-1)  # (1,)
        else:
            q = probabilities(logits, temperature, top_k, top_p)  # (1, V)
            token = torch.multinomial(q, 1, generator=generator)[:, 0]  # (1,)
            probs.append(q[0])
        tokens.append(token)
        fed = token
    proposals = torch.cat(tokens) if tokens else seq.new_empty(0)  # (K,)
    return proposals, torch.stack(probs) if probs else None


def verify(logits: Tensor, proposals: Tensor, q: Tensor | None, temperature: float, top_k: int | None,
           top_p: float | None, generator: torch.Generator | None) -> tuple[int, Tensor]:
    """How many of the ``(K,)`` proposals the model accepts, and the token it adds after them (``()``).

    Args:
        logits: ``(K + 1, V)``, the model's after each proposal's prefix and after the last proposal.
        q: ``(K, V)``, the draft's probabilities the proposals were drawn from (``None`` for greedy).
    """
    k = proposals.numel()
    if temperature == 0:
        best = logits.argmax(-1)  # (K + 1,)
        accepted = int((best[:k] == proposals).long().cumprod(0).sum())  # the agreeing prefix
        return accepted, best[accepted]
    p = probabilities(logits, temperature, top_k, top_p)  # (K + 1, V)
    accepted = 0
    if k:
        assert q is not None  # drawn with temperature > 0
        rows = torch.arange(k, device=p.device)
        ratio = p[rows, proposals] / q[rows, proposals]  # (K,); q > 0 where a proposal was drawn
        u = torch.rand(k, generator=generator, device=p.device)
        accepted = int((u < ratio).long().cumprod(0).sum())  # each kept with probability min(1, p / q), in order
    if accepted == k:
        dist = p[k]  # all accepted (or none proposed): one more token from the model
    else:  # the first rejection: from what p holds beyond q (never all zero unless by rounding: then p)
        assert q is not None
        rest = (p[accepted] - q[accepted]).clamp(min=0)  # (V,)
        dist = torch.where(rest.sum() > 0, rest, p[accepted])
    return accepted, torch.multinomial(dist, 1, generator=generator)[0]


def vocab_size(net: nn.Module) -> int:
    """``net.cfg.vocab_size``."""
    return int(cast(Any, net).cfg.vocab_size)


def check_pair(model: nn.Module, draft: nn.Module) -> None:
    """Refuse a draft of another vocabulary size or device, and either model with a sliding window."""
    for name, net in (("model", model), ("draft", draft)):
        window = getattr(getattr(net, "cfg", None), "attention_window", None)
        if window is not None:
            raise ValueError(f"{name} has a sliding window (attention_window={window}): its rolling cache cannot "
                             f"drop rejected proposals; speculative decoding refuses it")
    sizes = [vocab_size(net) for net in (model, draft)]
    if sizes[0] != sizes[1]:
        raise ValueError(f"draft has a vocabulary of {sizes[1]} tokens, the model {sizes[0]}: the draft must share "
                         f"the model's tokenizer")
    where = [next(net.parameters()).device for net in (model, draft)]
    if where[0] != where[1]:
        raise ValueError(f"draft is on {where[1]}, the model on {where[0]}: put both on one device")


def decode_row(model: nn.Module, draft: nn.Module, prompt: Sequence[int], max_new_tokens: int, k: int,
               temperature: float, top_k: int | None, top_p: float | None, generator: torch.Generator | None,
               eos: tuple[int, ...], stats: SpeculativeStats, device: torch.device) -> list[int]:
    """The new tokens of one prompt (see the module's docstring), counting into ``stats``."""
    total = len(prompt) + max_new_tokens
    seq = torch.zeros(total, dtype=torch.long, device=device)  # (prompt + N,) the prompt, then what is made
    seq[: len(prompt)] = torch.as_tensor(list(prompt), dtype=torch.long)
    big: Any = model.session()  # type: ignore[operator]
    small: Any = draft.session()  # type: ignore[operator]
    big.reserve(total)
    try:
        small.reserve(total)
    except ValueError as e:
        raise ValueError(f"draft: {e}") from None
    n = len(prompt)  # tokens in seq
    while n < total:
        k_now = min(k, total - n - 1)  # a pass makes up to k_now + 1 tokens: never past max_new_tokens
        proposals, q = propose(small, seq, n, k_now, temperature, top_k, top_p, generator)  # (K,)
        fed = torch.cat([seq[big.filled : n], proposals])  # the last token (the prompt at first), then K
        logits = big.extend(fed[None], last=k_now + 1)[0]  # (K + 1, V)
        accepted, token = verify(logits, proposals, q, temperature, top_k, top_p, generator)
        seq[n : n + accepted] = proposals[:accepted]
        seq[n + accepted] = token
        big.crop(n + accepted)  # everything kept but the token just added
        small.crop(min(small.filled, n + accepted))
        made = seq[n : n + accepted + 1].tolist()
        stats.proposed += k_now
        stats.accepted += accepted
        stats.passes += 1
        end = next((i + 1 for i, tok in enumerate(made) if tok in eos), None)
        stats.tokens += len(made) if end is None else end
        if end is not None:
            return seq[len(prompt) : n + end].tolist()
        n += len(made)
    return seq[len(prompt) :].tolist()


@torch.no_grad()
def speculative(
    model: nn.Module,
    draft: nn.Module,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    num_assistant_tokens: int = 5,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    eos_id: Ends = None,
) -> tuple[list[list[int]], SpeculativeStats]:
    """Decode ``model`` with ``draft`` proposing ``num_assistant_tokens`` tokens a pass (``transformers``'
    ``generate(..., assistant_model=draft)``): greedy gives :func:`~aiayn.decoding.sampling.sample`'s greedy
    tokens, sampling tokens distributed as the model's.

    Args:
        model, draft: language models (:class:`aiayn.models.GPT`) of the same tokenizer, the draft a smaller
            one; both are run in eval mode, then put back in the mode they were in.
        prompts: one list of ids per row, of any lengths; each row is decoded on its own, at batch 1.
        max_new_tokens: the most tokens made per row (never more, whatever the passes accept).
        num_assistant_tokens: K, the tokens the draft proposes per pass of the model.
        temperature: divides the logits of both models; 0 is greedy decoding.
        top_k, top_p: keep only the ``top_k`` most likely tokens / the nucleus of mass ``top_p``, in both.
        generator: a seeded ``torch.Generator`` makes sampling repeatable.
        eos_id: a row stops after this token, or one of these tokens (kept in its output).

    Returns:
        ``(new, stats)``: each row's new tokens (without the prompt, up to and including an end token), and
        the :class:`SpeculativeStats` of all rows.

    Raises:
        ValueError: ``max_new_tokens`` or ``num_assistant_tokens`` below 1; a negative ``temperature``; an empty
            prompt or an id outside the vocabulary; a draft of another vocabulary size (a different tokenizer
            of the same size cannot be told apart) or device; a model with a sliding window; more positions
            than either model has.
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if num_assistant_tokens < 1:
        raise ValueError(f"num_assistant_tokens must be >= 1 (the draft's proposals per pass), got "
                         f"{num_assistant_tokens}")
    check(temperature=temperature, top_k=top_k, top_p=top_p)
    check_pair(model, draft)
    check_prompts(model, prompts)
    eos, stats, device = end_ids(eos_id), SpeculativeStats(), next(model.parameters()).device
    with evaluating(model), evaluating(draft):
        new = [decode_row(model, draft, p, max_new_tokens, num_assistant_tokens, temperature, top_k, top_p, generator,
                          eos, stats, device) for p in prompts]
    return new, stats


__all__ = ["SpeculativeStats", "speculative"]
